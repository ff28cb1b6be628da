//! gRPC through herdsman with a real client and server (Python's grpcio, `tests/grpc/peer.py`):
//! the client speaks h2c to herdsman's listener, herdsman speaks h2c to the server (a pool with
//! `protocol = "h2c"`), and unary, server-streaming and bidirectional calls, an error status and
//! a deadline all come out as they would without herdsman in between. grpcio must be installed
//! (`scripts/test` installs it).

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

fn peer() -> Command {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/grpc/peer.py");
    let mut command = Command::new("python3");
    command.arg(script);
    command
}

#[test]
fn grpcio_calls_of_every_kind_pass_through_herdsman_as_they_would_without_it() {
    let mut server = peer()
        .arg("server")
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs (scripts/test installs grpcio)");
    let mut port = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut port)
        .unwrap();
    let _server = ChildGuard(server);
    let port: u16 = port
        .trim()
        .parse()
        .expect("the gRPC server's port (is grpcio installed?)");
    let proxy = Proxy::start(&format!(
        "workers = 1\n\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:0\"\npool = \"grpc\"\n\
         h2c = true\n\n[[pool]]\nname = \"grpc\"\nprotocol = \"h2c\"\n\
         servers = [{{ name = \"a\", addr = \"127.0.0.1:{port}\" }}]\n"
    ));
    let mut client = peer()
        .arg("client")
        .arg(proxy.addr.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while client.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the gRPC client hung"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = client.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "unary ok b'echo:hello'",
            "server-stream ok [b'part0:x', b'part1:x', b'part2:x']",
            "bidi ok [b'bidi:one', b'bidi:two', b'bidi:three']",
            "error error NOT_FOUND no such thing",
        ],
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The server takes 2 s; the client's deadline of 0.3 s ends the call, as without herdsman.
    let deadline = lines.get(4).copied().unwrap_or_default();
    assert!(
        deadline.starts_with("deadline error DEADLINE_EXCEEDED"),
        "{deadline}"
    );
    let took: f64 = deadline.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(took < 1.5, "the deadline call took {took} s");
}
