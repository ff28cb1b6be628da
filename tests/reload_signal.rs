//! SIGHUP reloads the config file of a running `herdsman run`: a valid change applies, a broken
//! file is refused and the running config keeps serving; `shutdown_grace` and `hard_stop_after`
//! changed by a reload bound the next stop and upgrade; a route that can never match is logged
//! at start and at each reload.

mod common;
mod long_lived;

use std::time::Duration;

use common::*;
use long_lived::{assert_cut_short, OUTLIVES_ANY_BOUND};

/// Which mock answered each of `n` requests (each on a new connection).
fn answers(addr: std::net::SocketAddr, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let mut conn = Conn::connect(addr);
            let response = conn.roundtrip(&get_request(&format!("/{i}"), "Connection: close\r\n"));
            assert_eq!(response.status(), 200);
            response.body_text()
        })
        .collect()
}

#[test]
fn sighup_applies_a_valid_file_and_refuses_a_broken_one() {
    let (a, b) = (Mock::named("a"), Mock::named("b"));
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = |b_weight: u32| {
        format!(
            "workers = 2\n[[listener]]\nname = \"web\"\nbind = \"{addr}\"\npool = \"app\"\n\
             [[pool]]\nname = \"app\"\nservers = [\n  {{ name = \"a\", addr = \"{}\" }},\n  \
             {{ name = \"b\", addr = \"{}\", weight = {b_weight} }},\n]\n",
            a.addr, b.addr
        )
    };
    let path = write_temp("sighup.toml", &config(1));
    let child = run_binary_with(&path);
    assert!(wait_listening(addr, Duration::from_secs(10)));
    let first = answers(addr, 4);
    assert!(first.contains(&"b".to_string()), "{first:?}");

    std::fs::write(&path, config(0)).unwrap();
    child.signal(libc::SIGHUP);
    assert!(
        eventually(Duration::from_secs(5), || answers(addr, 4)
            .iter()
            .all(|s| s == "a")),
        "weight 0 for b did not apply"
    );

    std::fs::write(&path, config(1).replace("weight = 1", "weight = -1")).unwrap();
    child.signal(libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(300));
    let after = answers(addr, 6);
    assert!(
        after.iter().all(|s| s == "a"),
        "the refused file changed something: {after:?}"
    );
}

#[test]
fn a_reload_applies_shutdown_grace_and_hard_stop_after_to_the_next_stop() {
    let backend = long_lived::backend(OUTLIVES_ANY_BOUND);
    let long = "shutdown_grace = \"30s\"";

    // shutdown_grace: 30 s at start, 1 s after the reload; the SIGTERM after it takes 1 s.
    let mut stopped = Binary::start(&backend, long);
    stopped.reload(|text| text.replace(long, "shutdown_grace = \"1s\""));
    assert_cut_short(&mut stopped, "shutdown_grace = 1s by reload", |binary| {
        binary.process.signal(libc::SIGTERM)
    });

    // hard_stop_after: none at start, 1 s after the reload; the upgrade after it drains 1 s.
    let mut old = Binary::start(&backend, long);
    old.reload(|text| text.replace(long, &format!("{long}\nhard_stop_after = \"1s\"")));
    let new = assert_cut_short(&mut old, "hard_stop_after = 1s by reload", Binary::upgrade);
    new.signal(libc::SIGTERM);
}

#[test]
fn a_route_that_can_never_match_is_logged_at_start_and_at_each_reload() {
    let app = Mock::named("app");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = |shadowed_prefix: &str| {
        format!(
            "workers = 1\n[[listener]]\nname = \"web\"\nbind = \"{addr}\"\npool = \"app\"\n\
             [[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{}\" }}]\n\
             [[route]]\npath_prefix = \"/api/\"\npool = \"app\"\n\
             [[route]]\nhost = \"x.example.com\"\npath_prefix = \"{shadowed_prefix}\"\npool = \"app\"\n",
            app.addr
        )
    };
    let path = write_temp("shadowed.toml", &config("/api/v1/"));
    let log = path.with_extension("log");
    let child = run_binary_logged(&path, &[], &log);
    assert!(wait_listening(addr, Duration::from_secs(10)));
    // Lines 9 and 12: the two [[route]]s.
    let warning = "line 12: route[1] (host x.example.com, path /api/v1/*) can never match: \
                   route[0] on line 9 (any host, path /api/*)";
    let logged = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        eventually(Duration::from_secs(5), || logged().matches(warning).count()
            == 1),
        "not logged once at start:\n{}",
        logged()
    );
    // It still serves: a warning is not an error.
    assert_eq!(answers(addr, 1), ["app"]);

    child.signal(libc::SIGHUP);
    assert!(
        eventually(Duration::from_secs(5), || logged().matches(warning).count()
            == 2),
        "not logged again at the reload:\n{}",
        logged()
    );
    // Once the route can match, a reload says nothing of it.
    std::fs::write(&path, config("/v1/")).unwrap();
    child.signal(libc::SIGHUP);
    assert!(eventually(Duration::from_secs(5), || logged()
        .matches("config reloaded")
        .count()
        == 2));
    assert_eq!(
        logged().matches("can never match").count(),
        2,
        "{}",
        logged()
    );
    // Fifteen shadowed routes: ten are logged, the rest counted.
    let many: String = (0..15)
        .map(|i| {
            format!(
                "[[route]]\nhost = \"h{i}.example.com\"\npath_prefix = \"/api/\"\npool = \"app\"\n"
            )
        })
        .collect();
    std::fs::write(&path, format!("{}{many}", config("/v1/"))).unwrap();
    child.signal(libc::SIGHUP);
    assert!(
        eventually(Duration::from_secs(5), || logged()
            .contains("… and 5 more warnings: `herdsman check` lists them all")),
        "{}",
        logged()
    );
    assert_eq!(logged().matches("can never match").count(), 12);
}
