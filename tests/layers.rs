//! The layering rule of ARCHITECTURE.md, checked on the source: imports run one way, from the
//! process down to the bytes, and on the data path only `transport/` names a socket type.
//! Run alone with `cargo test --test layers`; a failure names the file, the line and the rule.

use std::fs;
use std::path::{Path, PathBuf};

/// Each room of the data path and the rooms it may import (`crate::<room>`), space-separated. A
/// room not listed here (the process, the admin API, the command-line clients) sits above them all.
const MAY_IMPORT: &[(&str, &str)] = &[
    // The ACME thread: control plane, it follows the registry's config and writes what the
    // handshakes read into `config::acme`.
    ("acme", "upstream config stats"),
    // Discovery (DNS, Consul): control plane too, it publishes the servers it finds through the
    // registry.
    ("discovery", "upstream config stats"),
    (
        "worker",
        "session intake proxy cache compress upstream http1 http2 transport access_log config stats",
    ),
    (
        "session",
        "proxy cache compress upstream http1 http2 transport access_log config stats",
    ),
    ("intake", "transport config stats"),
    (
        "proxy",
        "cache compress rate_limit upstream rules http1 http2 transport access_log config stats",
    ),
    // The operator's rules (conditions): the exchange asks them; they read heads with http1.
    ("rules", "http1 transport config stats"),
    // The cache sits beside the exchange, which alone consults it; it reads heads with http1.
    ("cache", "http1 transport config stats"),
    // Rate limits sit beside the exchange too, which alone asks them; they read heads with http1.
    ("rate_limit", "http1 transport config stats"),
    // Compression sits beside the exchange too, which alone calls it.
    ("compress", "http1 transport config stats"),
    ("http2", "http1 transport config stats"),
    ("upstream", "intake http1 transport config stats"),
    ("access_log", "http1 config stats"),
    ("http1", "transport config stats"),
    ("transport", "config stats"),
    ("config", "stats"),
    ("stats", "config"),
];

/// Rooms of the data path, where no socket type is named: `transport/` owns them.
const NO_SOCKET_TYPES: &str =
    "worker intake session proxy cache compress rate_limit upstream rules http1 http2 access_log config stats";

/// What naming a socket type looks like.
const SOCKET_TYPES: &[&str] = &[
    "TcpStream",
    "TcpListener",
    "UdpSocket",
    "UnixStream",
    "UnixListener",
    "socket2::",
];

/// The files of room `room`: `src/<room>.rs` or everything under `src/<room>/`.
fn files_of(room: &str) -> Vec<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let single = src.join(format!("{room}.rs"));
    if single.is_file() {
        files.push(single);
    }
    let mut folders = vec![src.join(room)];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The code lines of a file with their numbers, up to its unit tests (`#[cfg(test)]` over a
/// `mod … {`: they may set up sockets of their own) and without comments.
fn code_lines(path: &Path) -> Vec<(usize, String)> {
    let text = fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let tests_start = (0..lines.len())
        .find(|&i| {
            lines[i].trim().starts_with("#[cfg(")
                && lines[i].contains("test")
                && lines
                    .get(i + 1)
                    .is_some_and(|next| next.starts_with("mod ") && next.ends_with('{'))
        })
        .unwrap_or(lines.len());
    lines[..tests_start]
        .iter()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .map(|(index, line)| (index + 1, line.to_string()))
        .collect()
}

/// The rooms a line names as `crate::<room>`, and those in a `use crate::{a, b::c}` group.
fn rooms_named(line: &str) -> Vec<String> {
    let mut named = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or("");
            for part in group.split(',') {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                named.push(name);
            }
        } else {
            named.push(
                rest.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect(),
            );
        }
    }
    named.retain(|name| !name.is_empty());
    named
}

#[test]
fn imports_run_from_the_process_down_to_the_bytes() {
    let mut broken = Vec::new();
    for (room, allowed) in MAY_IMPORT {
        let allowed: Vec<&str> = allowed.split_whitespace().collect();
        let files = files_of(room);
        assert!(!files.is_empty(), "no files for the room {room}");
        for file in files {
            for (number, line) in code_lines(&file) {
                for named in rooms_named(&line) {
                    let upward = named != *room
                        && !allowed.contains(&named.as_str())
                        // Names outside the rooms (the crate's root re-exports, e.g.
                        // `crate::Config`) are the root's, which every room may use.
                        && is_room(&named);
                    if upward {
                        broken.push(format!(
                            "{}:{number}: {room} imports {named}, which it may not ({room} may import: {})",
                            file.display(),
                            allowed.join(", ")
                        ));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "\n{}", broken.join("\n"));
}

#[test]
fn on_the_data_path_only_transport_names_a_socket_type() {
    let mut broken = Vec::new();
    for room in NO_SOCKET_TYPES.split_whitespace() {
        for file in files_of(room) {
            for (number, line) in code_lines(&file) {
                for socket_type in SOCKET_TYPES {
                    if line.contains(socket_type) {
                        broken.push(format!(
                            "{}:{number}: {room} names {socket_type}; only transport/ may",
                            file.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "\n{}", broken.join("\n"));
}

#[test]
fn the_rule_sees_an_upward_import() {
    // The check itself: what it reads out of the lines it meets.
    assert_eq!(rooms_named("use crate::worker::WorkerContext;"), ["worker"]);
    assert_eq!(
        rooms_named("use crate::{proxy::Client, transport::Stream};"),
        ["proxy", "transport"]
    );
    assert_eq!(
        rooms_named("let x = crate::upstream::choice::choose(a, crate::http1::b);"),
        ["upstream", "http1"]
    );
}

/// Whether `name` is a module of the crate's root (a room above the data path, say).
fn is_room(name: &str) -> bool {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    src.join(name).is_dir() || src.join(format!("{name}.rs")).is_file()
}
