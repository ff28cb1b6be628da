//! Certificates herdsman obtains itself, end to end against Pebble (Let's Encrypt's test CA),
//! started here: issued over HTTP-01 and over TLS-ALPN-01, served (chaining to Pebble's issuing
//! root, fetched from its management port), renewed before expiry with a connection open across
//! the swap, kept across a reload that moves the state directory and served again by a second
//! herdsman on the new one without a new order, ordered anew when a reload adds a name, and
//! left to the one process that holds the state directory's lock. herdsman runs as the binary,
//! as an operator runs it.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rustls::pki_types::CertificateDer;
use rustls::ClientConfig;

/// The name the certificates are for; Pebble's DNS resolves every name to 127.0.0.1.
const NAME: &str = "acme.herdsman.test";

/// A herdsman config: a cleartext listener on `http_port`, a TLS one on `tls_port` whose only
/// certificate comes from `pebble` by `challenge`, state kept in `state_dir`, an admin API.
fn config(
    pebble: &Pebble,
    challenge: &str,
    http_port: u16,
    tls_port: u16,
    admin: SocketAddr,
    state_dir: &Path,
    backend: SocketAddr,
) -> std::path::PathBuf {
    write_temp(
        "acme.toml",
        &format!(
            r#"workers = 1

[[listener]]
name = "web"
bind = "127.0.0.1:{http_port}"
pool = "app"

[[listener]]
name = "secure"
bind = "127.0.0.1:{tls_port}"
pool = "app"
[listener.tls]
acme = {{ directory = "{}", contact = ["mailto:ops@herdsman.test"], names = ["{NAME}"], challenge = "{challenge}", directory_ca = "{}" }}

[tls]
acme_state_dir = "{}"

[admin]
bind = "{admin}"

[[pool]]
name = "app"
servers = [{{ name = "a", addr = "{backend}" }}]
"#,
            pebble.directory,
            pebble.directory_ca().display(),
            state_dir.display()
        ),
    )
}

/// The certificate a fresh handshake for [`NAME`] is served, verified against Pebble's root,
/// once one is (within `timeout`).
fn served(
    addr: SocketAddr,
    client: &Arc<ClientConfig>,
    timeout: Duration,
) -> Option<CertificateDer<'static>> {
    let mut found = None;
    eventually(timeout, || {
        found = TlsConn::try_connect(addr, NAME, client)
            .ok()
            .map(|connection| connection.server_certificate());
        found.is_some()
    });
    found
}

/// The first certificate herdsman serves for [`NAME`], within 60 s; else the failure with both
/// logs.
fn first_certificate(
    addr: SocketAddr,
    client: &Arc<ClientConfig>,
    herdsman_log: &Path,
    pebble: &Pebble,
) -> CertificateDer<'static> {
    served(addr, client, Duration::from_secs(60)).unwrap_or_else(|| {
        panic!(
            "no certificate from Pebble within 60 s; herdsman's log:\n{}\npebble's log:\n{}",
            std::fs::read_to_string(herdsman_log).unwrap_or_default(),
            pebble.log()
        )
    })
}

/// `POST /api/reload`, which must succeed.
fn reload(admin: SocketAddr) {
    let request = b"POST /api/reload HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    let response = Conn::connect(admin).roundtrip(request);
    assert_eq!(
        response.status(),
        200,
        "{:?}",
        String::from_utf8_lossy(&response.body)
    );
}

fn request() -> Vec<u8> {
    get_request_to(NAME, "/", "")
}

/// Pebble, a backend, and a herdsman config for both (not started).
struct Site {
    pebble: Pebble,
    _backend: Mock,
    state_dir: std::path::PathBuf,
    admin: SocketAddr,
    path: std::path::PathBuf,
    tls_addr: SocketAddr,
    client: Arc<ClientConfig>,
}

impl Site {
    /// Certificates by `challenge` from a Pebble issuing them for `validity`.
    fn new(tag: &str, challenge: &str, validity: Duration) -> Site {
        let (http_port, tls_port) = (free_port(), free_port());
        let pebble = Pebble::start(tag, http_port, tls_port, validity);
        let backend = Mock::named("app");
        let state_dir = fresh_temp_dir(&format!("acme-{tag}-state"));
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let path = config(
            &pebble,
            challenge,
            http_port,
            tls_port,
            admin,
            &state_dir,
            backend.addr,
        );
        let client = pebble.client_config();
        Site {
            pebble,
            _backend: backend,
            state_dir,
            admin,
            path,
            tls_addr: format!("127.0.0.1:{tls_port}").parse().unwrap(),
            client,
        }
    }
}

#[test]
fn http01_issues_a_certificate_kept_across_a_reload_and_a_restart_and_reorders_for_new_names() {
    let site = Site::new("http01", "http-01", Duration::from_secs(3600));
    let Site {
        pebble,
        state_dir,
        admin,
        path,
        tls_addr,
        client,
        ..
    } = &site;
    let (admin, tls_addr) = (*admin, *tls_addr);

    let first_log = state_dir.with_extension("first.log");
    let first = run_binary_logged(path, &[], &first_log);
    let issued = first_certificate(tls_addr, client, &first_log, pebble);
    assert_eq!(pebble.orders(), 1, "one order");
    // Served over HTTPS to a client trusting only Pebble's root, and proxied.
    let mut connection = TlsConn::try_connect(tls_addr, NAME, client).unwrap();
    let response = connection.roundtrip(&request());
    assert_eq!(response.status(), 200);
    assert_eq!(response.body, b"app");
    // Kept in the state directory, the key private.
    let stored = std::fs::read_dir(state_dir.join("certificates"))
        .unwrap()
        .count();
    assert_eq!(stored, 1);
    // The admin API says ACME manages it, and when it renews (planned just after it is
    // installed).
    let mut text = String::new();
    eventually(Duration::from_secs(10), || {
        let listing = Conn::connect(admin).roundtrip(&admin_get_request("/api/certificates"));
        text = String::from_utf8_lossy(&listing.body).to_string();
        text.contains("\"renews_at\":\"20")
    });
    assert!(
        text.contains("\"acme\":true") && text.contains(NAME),
        "{text}"
    );
    assert!(text.contains("\"renews_at\":\"20"), "{text}");
    // The metrics: when it renews (in the future), no failure.
    let metrics = Conn::connect(admin).roundtrip(&admin_get_request("/metrics"));
    let metrics = String::from_utf8_lossy(&metrics.body).to_string();
    let sample = |family: &str| {
        let line = metrics
            .lines()
            .find(|line| line.starts_with(family) && line.contains("listener=\"secure\""));
        line.and_then(|line| line.rsplit(' ').next()?.parse::<i64>().ok())
    };
    assert!(
        sample("herdsman_acme_renewal_seconds{").is_some_and(|s| s > 0),
        "{metrics}"
    );
    assert_eq!(
        sample("herdsman_acme_renewal_failures_total{"),
        Some(0),
        "{metrics}"
    );
    // So does `herdsman ctl certs`.
    let (code, listed) = run_binary(&["ctl", "--admin", &admin.to_string(), "certs"]);
    assert_eq!(code, Some(0), "{listed}");
    let row = listed
        .lines()
        .find(|line| line.contains(NAME))
        .unwrap_or("");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells.first(), Some(&"secure"), "{listed}");
    assert_eq!(cells[cells.len() - 2], "yes", "{listed}");
    assert!(cells[cells.len() - 1].starts_with("20"), "{listed}");
    // A reload that changes the acme settings (the contact) keeps the certificate serving and
    // orders nothing: the names and the CA are the same. It moves the state directory too: the
    // account and the certificate are copied into the new one, so that the restart below, on
    // the new one, orders nothing either.
    let moved_dir = state_dir.with_extension("moved");
    let _ = std::fs::remove_dir_all(&moved_dir);
    let before = std::fs::read_to_string(path).unwrap();
    let after = before.replace("mailto:ops@", "mailto:admin@").replace(
        &format!("acme_state_dir = \"{}\"", state_dir.display()),
        &format!("acme_state_dir = \"{}\"", moved_dir.display()),
    );
    assert_ne!(after.matches(&*moved_dir.to_string_lossy()).count(), 0);
    std::fs::write(path, after).unwrap();
    reload(admin);
    let copied = |folder: &str| {
        std::fs::read_dir(moved_dir.join(folder)).map_or(0, |entries| entries.count())
    };
    assert!(
        eventually(Duration::from_secs(5), || copied("certificates") == 1
            && copied("accounts") == 1),
        "the moved state directory has {} certificate(s) and {} account(s)",
        copied("certificates"),
        copied("accounts")
    );
    // The admin API names the files in the new directory.
    let chain_moved = eventually(Duration::from_secs(5), || {
        let listing = Conn::connect(admin).roundtrip(&admin_get_request("/api/certificates"));
        let json: serde_json::Value = serde_json::from_slice(&listing.body).unwrap();
        json["certificates"][0]["chain"]
            .as_str()
            .is_some_and(|chain| chain.starts_with(&*moved_dir.to_string_lossy()))
    });
    assert!(chain_moved, "/api/certificates still names the old files");
    assert_eq!(
        connection.roundtrip(&request()).status(),
        200,
        "kept across the reload"
    );
    let after_reload = served(tls_addr, client, Duration::from_secs(5));
    assert_eq!(after_reload.as_ref(), Some(&issued));
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(pebble.orders(), 1, "no new order after a reload");
    drop(connection);
    drop(first);

    // A restart on the moved state directory serves the stored certificate; Pebble takes no order.
    let second = run_binary_logged(path, &[], &state_dir.with_extension("second.log"));
    let again = served(tls_addr, client, Duration::from_secs(20)).expect("served after a restart");
    assert_eq!(again, issued, "the stored certificate, not a new one");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(pebble.orders(), 1, "no new order after the restart");
    // A reload that adds a name: a certificate for both is ordered and served, no restart.
    let text = std::fs::read_to_string(path).unwrap();
    let www = format!("www.{NAME}");
    let names = format!("names = [\"{NAME}\", \"{www}\"]");
    std::fs::write(path, text.replace(&format!("names = [\"{NAME}\"]"), &names)).unwrap();
    reload(admin);
    let both = eventually(Duration::from_secs(30), || {
        TlsConn::try_connect(tls_addr, &www, client).is_ok()
    });
    assert!(
        both,
        "no certificate for {www} after the reload; herdsman's log:\n{}",
        std::fs::read_to_string(state_dir.with_extension("second.log")).unwrap_or_default()
    );
    assert_ne!(
        served(tls_addr, client, Duration::from_secs(5)),
        Some(issued)
    );
    assert_eq!(pebble.orders(), 2);
    drop(second);
}

#[test]
fn tls_alpn01_issues_and_renews_with_no_connection_dropped() {
    // Valid for 30 s: renewed two thirds in, after some 20 s.
    let site = Site::new("tls-alpn01", "tls-alpn-01", Duration::from_secs(30));
    let Site {
        pebble,
        state_dir,
        path,
        tls_addr,
        client,
        ..
    } = &site;
    let tls_addr = *tls_addr;
    let log = state_dir.with_extension("log");
    let _herdsman = run_binary_logged(path, &[], &log);

    let issued = first_certificate(tls_addr, client, &log, pebble);
    let mut kept = TlsConn::try_connect(tls_addr, NAME, client).unwrap();
    assert_eq!(kept.roundtrip(&request()).status(), 200);
    // Renewed: a new handshake is served another certificate, within the first one's life.
    let mut renewed = None;
    eventually(Duration::from_secs(45), || {
        renewed = served(tls_addr, client, Duration::from_secs(1)).filter(|c| *c != issued);
        renewed.is_some()
    });
    assert!(
        renewed.is_some(),
        "not renewed within 45 s; herdsman's log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(pebble.orders() >= 2);
    // The connection opened before the swap goes on.
    assert_eq!(kept.roundtrip(&request()).status(), 200);
}

#[test]
fn a_process_waits_while_another_orders_and_serves_what_that_one_stored() {
    use std::os::fd::AsRawFd;
    let site = Site::new("lock", "tls-alpn-01", Duration::from_secs(3600));
    // The other process: a herdsman with a state directory of its own obtains a certificate.
    let other_state = fresh_temp_dir("acme-lock-other-state");
    let text = std::fs::read_to_string(&site.path).unwrap();
    let other_path = write_temp(
        "acme-other.toml",
        &text.replace(
            &site.state_dir.display().to_string(),
            &other_state.display().to_string(),
        ),
    );
    let other_log = other_state.with_extension("log");
    let other = run_binary_logged(&other_path, &[], &other_log);
    let obtained = first_certificate(site.tls_addr, &site.client, &other_log, &site.pebble);
    drop(other);
    assert_eq!(site.pebble.orders(), 1);

    // This process finds the shared state directory's lock held (a flock, as herdsman's is):
    // it orders nothing.
    let lock = std::fs::File::create(site.state_dir.join("lock")).unwrap();
    // SAFETY: flock on a descriptor this test owns.
    let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(locked, 0);
    let log = site.state_dir.with_extension("log");
    let _herdsman = run_binary_logged(&site.path, &[], &log);
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(site.pebble.orders(), 1, "no order while the lock is held");
    let herdsman_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        herdsman_log.contains("another process is ordering"),
        "{herdsman_log}"
    );
    // The holder stores its certificate and lets go: this process serves it, ordering none.
    let stored = other_state.join("certificates");
    let shared = site.state_dir.join("certificates");
    for folder in std::fs::read_dir(&stored).unwrap() {
        let folder = folder.unwrap();
        std::fs::create_dir_all(shared.join(folder.file_name())).unwrap();
        for file in ["key.pem", "chain.pem"] {
            std::fs::copy(
                folder.path().join(file),
                shared.join(folder.file_name()).join(file),
            )
            .unwrap();
        }
    }
    drop(lock);
    let mut picked_up = None;
    eventually(Duration::from_secs(10), || {
        picked_up = served(site.tls_addr, &site.client, Duration::from_millis(200));
        picked_up.is_some()
    });
    assert_eq!(
        picked_up.as_ref(),
        Some(&obtained),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(site.pebble.orders(), 1, "still the one order");
}
