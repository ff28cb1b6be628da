//! The cache's disk tier (`[cache.disk]`) with the herdsman binary: what it stored survives a
//! crash (`kill -9`) and a binary upgrade, a byte flipped in a stored file is caught and the
//! object fetched again (never served), and the files keep to their budget.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;

/// A server whose answers are fresh for ten minutes, with `size` bytes of body after a line
/// that counts its requests (so a client can tell a stored answer from a new one).
fn counting_server(size: usize) -> (Mock, Arc<Mutex<usize>>) {
    let count = Arc::new(Mutex::new(0usize));
    let seen = Arc::clone(&count);
    let mock = Mock::start(move |exchange| {
        let n = {
            let mut count = seen.lock().unwrap();
            *count += 1;
            *count
        };
        let mut body = format!("made {n}\n").into_bytes();
        body.resize(body.len() + size, b'.');
        exchange.respond(200, &[("Cache-Control", "max-age=600")], &body)?;
        Ok(Flow::KeepAlive)
    });
    (mock, count)
}

/// The binary's config and where it listens.
struct Setting {
    path: PathBuf,
    web: SocketAddr,
    admin: SocketAddr,
}

fn setting(backend: &Mock, dir: &Path, disk_size: &str) -> Setting {
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = format!(
        "workers = 2\nshutdown_grace = \"1s\"\n\n[cache]\nmemory = \"16MiB\"\n\n[cache.disk]\n\
         path = {:?}\nsize = {disk_size:?}\n\n[[listener]]\nname = \"web\"\nbind = \"{web}\"\n\
         pool = \"app\"\n\n[admin]\nbind = \"{admin}\"\n\n[[pool]]\nname = \"app\"\n\
         servers = [{{ name = \"a\", addr = \"{}\" }}]\n\n[pool.cache]\n",
        dir.display().to_string(),
        backend.addr
    );
    Setting {
        path: write_temp("cache-disk.toml", &config),
        web,
        admin,
    }
}

/// Starts the binary, and waits until it has indexed the `files` it finds in its folder (the
/// index is built in the background: until then a file is a miss).
fn start(setting: &Setting, files: u64) -> ChildGuard {
    let process = run_binary_with(&setting.path);
    assert!(wait_listening(setting.web, Duration::from_secs(10)));
    for signal in [libc::SIGHUP, libc::SIGUSR2] {
        assert!(wait_pid_catches(
            process.0.id(),
            signal,
            Duration::from_secs(10)
        ));
    }
    assert!(
        eventually(Duration::from_secs(10), || {
            metric(setting.admin, "herdsman_cache_disk_objects") == Some(files)
        }),
        "{files} files indexed"
    );
    process
}

/// The first line of `path`'s body, from `web`.
fn first_line(web: SocketAddr, path: &str) -> String {
    let response = Conn::connect(web).roundtrip(&get_request(path, "Connection: close\r\n"));
    assert_eq!(response.status(), 200);
    response
        .body_text()
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The cache's files in `dir` (not the temporary ones).
fn files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|listing| {
            listing
                .flatten()
                .map(|item| item.path())
                .filter(|path| path.extension().is_none())
                .collect()
        })
        .unwrap_or_default()
}

fn kill(process: &mut ChildGuard) {
    process.signal(libc::SIGKILL);
    process.wait_timeout(Duration::from_secs(10));
}

/// A metric's value from the admin API.
fn metric(admin: SocketAddr, name: &str) -> Option<u64> {
    let text = Conn::connect(admin)
        .roundtrip(&admin_get_request("/metrics"))
        .body_text();
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .and_then(|value| value.trim().parse().ok())
}

#[test]
fn what_was_stored_survives_a_crash_and_a_binary_upgrade() {
    let (server, count) = counting_server(20_000);
    let dir = fresh_temp_dir("cache-disk-restart");
    let setting = setting(&server, &dir, "64MiB");
    let mut process = start(&setting, 0);
    assert_eq!(first_line(setting.web, "/page"), "made 1");
    assert!(
        eventually(Duration::from_secs(5), || files(&dir).len() == 1),
        "written to disk"
    );
    kill(&mut process);

    let process = start(&setting, 1);
    assert_eq!(
        first_line(setting.web, "/page"),
        "made 1",
        "after a kill -9, read back from the disk"
    );
    assert_eq!(*count.lock().unwrap(), 1);
    assert_eq!(
        metric(setting.admin, "herdsman_cache_disk_reads_total"),
        Some(1)
    );

    // A binary upgrade: the new process starts with an empty memory and reads the disk.
    assert_eq!(first_line(setting.web, "/other"), "made 2");
    assert!(eventually(Duration::from_secs(5), || files(&dir).len() == 2));
    process.signal(libc::SIGUSR2);
    let successor = successor_of(setting.admin, u64::from(process.0.id()));
    assert_eq!(
        serving_pid(setting.admin),
        Some(successor.0 as u64),
        "the new process serves"
    );
    assert!(eventually(Duration::from_secs(10), || {
        metric(setting.admin, "herdsman_cache_disk_objects") == Some(2)
    }));
    for path in ["/page", "/other"] {
        let line = first_line(setting.web, path);
        assert!(line == "made 1" || line == "made 2", "{path}: {line}");
    }
    assert_eq!(
        *count.lock().unwrap(),
        2,
        "neither went to the server again"
    );
    assert_eq!(
        metric(setting.admin, "herdsman_cache_disk_reads_total"),
        Some(2)
    );
    drop(successor);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_flipped_byte_on_disk_is_caught_and_the_object_fetched_again() {
    let (server, count) = counting_server(50_000);
    let dir = fresh_temp_dir("cache-disk-flip");
    let setting = setting(&server, &dir, "64MiB");
    let mut process = start(&setting, 0);
    assert_eq!(first_line(setting.web, "/flip"), "made 1");
    assert!(eventually(Duration::from_secs(5), || files(&dir).len() == 1));
    kill(&mut process);
    let file = files(&dir).pop().unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();

    let _process = start(&setting, 1);
    assert_eq!(
        first_line(setting.web, "/flip"),
        "made 2",
        "never served: fetched again"
    );
    assert_eq!(*count.lock().unwrap(), 2);
    assert_eq!(
        metric(setting.admin, "herdsman_cache_disk_corrupt_total"),
        Some(1)
    );
    // The new answer is stored in its place, whole.
    assert!(eventually(Duration::from_secs(5), || {
        std::fs::read(&file).is_ok_and(|now| now.len() == bytes.len() && now != bytes)
    }));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_files_keep_to_their_budget() {
    let (server, _) = counting_server(8 * 1024);
    let dir = fresh_temp_dir("cache-disk-budget");
    let setting = setting(&server, &dir, "1MiB");
    let _process = start(&setting, 0);
    let mut conn = Conn::connect(setting.web);
    for n in 0..300 {
        assert_eq!(
            conn.roundtrip(&get_request(&format!("/o/{n}"), ""))
                .status(),
            200
        );
    }
    let on_disk = || -> u64 {
        files(&dir)
            .iter()
            .filter_map(|path| std::fs::metadata(path).ok())
            .map(|meta| meta.len())
            .sum()
    };
    assert!(
        eventually(Duration::from_secs(5), || {
            metric(setting.admin, "herdsman_cache_disk_writes_total") == Some(300)
        }),
        "every object written"
    );
    let held = on_disk();
    assert!(
        held <= 1 << 20,
        "{held} bytes on disk, over the 1 MiB budget"
    );
    assert!(held > 1 << 19, "{held} bytes: the budget is used");
    let _ = std::fs::remove_dir_all(dir);
}
