//! TLS session tickets across processes, with the herdsman binary: a binary upgrade hands its
//! ticket keys to the new process (a client resumes across it), and two instances sharing a
//! `[tls] ticket_key_file` resume each other's sessions, which two with generated keys cannot.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::*;

/// The herdsman binary with one TLS listener serving `cert` in front of `backend`, an admin API,
/// and `top` keys at the top of its file.
struct TlsBinary {
    process: ChildGuard,
    web: SocketAddr,
    admin: SocketAddr,
}

impl TlsBinary {
    fn start(backend: &Mock, cert: &CertFiles, top: &str) -> TlsBinary {
        let (web, admin): (SocketAddr, SocketAddr) = (
            format!("127.0.0.1:{}", free_port()).parse().unwrap(),
            format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        );
        let text = format!(
            "workers = 2\n{top}\n[[listener]]\nname = \"web\"\nbind = \"{web}\"\npool = \"app\"\n{}\n\
             [admin]\nbind = \"{admin}\"\n\n\
             [[pool]]\nname = \"app\"\nservers = [{{ name = \"a\", addr = \"{}\" }}]\n",
            tls_table(&[cert], ""),
            backend.addr
        );
        let process = run_binary_with(&write_temp("tls-binary.toml", &text));
        assert!(wait_listening(web, Duration::from_secs(10)), "{text}");
        assert!(wait_pid_catches(
            process.0.id(),
            libc::SIGUSR2,
            Duration::from_secs(10)
        ));
        TlsBinary {
            process,
            web,
            admin,
        }
    }
}

/// A request on a new TLS connection with `config` (which keeps sessions): whether it resumed.
fn resumed(addr: SocketAddr, config: &std::sync::Arc<rustls::ClientConfig>) -> bool {
    let mut conn = TlsConn::try_connect(addr, "app.test", config).unwrap();
    let response = conn.roundtrip(b"GET / HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n");
    assert_eq!(response.status(), 200);
    conn.resumed()
}

#[test]
fn a_client_resumes_its_session_across_a_binary_upgrade() {
    let backend = Mock::named("a");
    let cert = CertFiles::issue("tickets-upgrade", &["app.test"]);
    let old = TlsBinary::start(&backend, &cert, "");
    let config = client_config();
    assert!(!resumed(old.web, &config));
    assert!(
        resumed(old.web, &config),
        "no resumption before the upgrade"
    );
    old.process.signal(libc::SIGUSR2);
    let new = successor_of(old.admin, u64::from(old.process.0.id()));
    assert_ne!(new.0 as u32, old.process.0.id());
    // The new process serves new connections (the old one stopped accepting once it did); its
    // keys are the old one's, so the ticket from before opens.
    assert!(
        resumed(old.web, &config),
        "the session was not resumed after the upgrade"
    );
    new.signal(libc::SIGTERM);
}

#[test]
fn instances_sharing_a_ticket_key_file_resume_each_others_sessions() {
    let backend = Mock::named("a");
    let cert = CertFiles::issue("tickets-shared", &["app.test"]);
    let dir = fresh_temp_dir("ticket-key-file");
    let key_file = dir.join("ticket.key");
    let status = std::process::Command::new("openssl")
        .args(["rand", "-out"])
        .arg(&key_file)
        .arg("48")
        .status()
        .unwrap();
    assert!(status.success());
    let shared = format!("[tls]\nticket_key_file = \"{}\"\n", key_file.display());
    let (one, two) = (
        TlsBinary::start(&backend, &cert, &shared),
        TlsBinary::start(&backend, &cert, &shared),
    );
    let config = client_config();
    assert!(!resumed(one.web, &config));
    assert!(
        resumed(two.web, &config),
        "the other instance did not open the ticket"
    );

    // Without the file, each instance has keys of its own.
    let (three, four) = (
        TlsBinary::start(&backend, &cert, ""),
        TlsBinary::start(&backend, &cert, ""),
    );
    let config = client_config();
    assert!(!resumed(three.web, &config));
    assert!(!resumed(four.web, &config), "generated keys were shared");
    assert!(Path::new(&key_file).exists());
    let _ = (one.admin, two.admin, three.admin, four.admin);
}
