//! Pebble, Let's Encrypt's test CA (Debian's `pebble`), started by a test: its ACME directory on
//! an unused port over HTTPS with a certificate from the tests' CA, names resolved to 127.0.0.1
//! by `pebble-challtestsrv`'s DNS, its validator pointed at the herdsman listeners under test,
//! its log kept (to count the orders it took), and both processes killed when dropped.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::ClientConfig;

use super::binary::{fresh_temp_dir, wait_listening, ChildGuard};
use super::mock::free_port;
use super::raw::get_request_to;
use super::tls::{client_config, client_config_trusting, test_ca, CertFiles, TlsConn};

/// A running Pebble.
pub struct Pebble {
    /// The ACME directory's URL.
    pub directory: String,
    management: SocketAddr,
    log: PathBuf,
    _pebble: ChildGuard,
    _dns: ChildGuard,
}

impl Pebble {
    /// Starts Pebble (and its DNS), whose validator connects to 127.0.0.1:`http_port` for
    /// HTTP-01 and 127.0.0.1:`tls_port` for TLS-ALPN-01, issuing certificates valid for
    /// `validity`. Panics, saying what to install, when Pebble is missing.
    ///
    /// Its ports are chosen free a moment before Pebble binds them, so another test's connection
    /// may take one in between (CI saw `bind: address already in use`): then it starts again on
    /// other ports, up to three times.
    pub fn start(tag: &str, http_port: u16, tls_port: u16, validity: Duration) -> Pebble {
        for program in ["pebble", "pebble-challtestsrv"] {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {program}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|status| status.success());
            assert!(
                found,
                "{program} is not installed: `apt-get install pebble` (bench/scripts/install-peers.sh does)"
            );
        }
        let mut attempts = 0;
        loop {
            attempts += 1;
            match Pebble::try_start(tag, http_port, tls_port, validity) {
                Ok(pebble) => return pebble,
                Err(log) if attempts < 3 && log.contains("address already in use") => continue,
                Err(log) => panic!("pebble did not start listening; its log:\n{log}"),
            }
        }
    }

    /// One start on freshly chosen ports; the logs when either process did not listen.
    fn try_start(
        tag: &str,
        http_port: u16,
        tls_port: u16,
        validity: Duration,
    ) -> Result<Pebble, String> {
        let dir = fresh_temp_dir(&format!("pebble-{tag}"));
        let https = CertFiles::issue(&format!("pebble-{tag}"), &["127.0.0.1", "localhost"]);
        let (listen, management, dns) = (free_port(), free_port(), free_port());
        let config = format!(
            r#"{{"pebble": {{
  "listenAddress": "127.0.0.1:{listen}",
  "managementListenAddress": "127.0.0.1:{management}",
  "certificate": "{}",
  "privateKey": "{}",
  "httpPort": {http_port},
  "tlsPort": {tls_port},
  "ocspResponderURL": "",
  "externalAccountBindingRequired": false,
  "certificateValidityPeriod": {}
}}}}"#,
            https.chain.display(),
            https.key.display(),
            validity.as_secs()
        );
        let config_file = dir.join("pebble-config.json");
        std::fs::write(&config_file, config).unwrap();
        let dns_log = std::fs::File::create(dir.join("challtestsrv.log")).unwrap();
        let dns_child = Command::new("pebble-challtestsrv")
            .args([
                "-dns01",
                &format!("127.0.0.1:{dns}"),
                "-http01",
                "",
                "-https01",
                "",
                "-tlsalpn01",
                "",
                "-management",
                &format!("127.0.0.1:{}", free_port()),
                "-defaultIPv4",
                "127.0.0.1",
                "-defaultIPv6",
                "",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::from(dns_log.try_clone().unwrap()))
            .stderr(Stdio::from(dns_log))
            .spawn()
            .expect("start pebble-challtestsrv");
        let mut dns_guard = ChildGuard(dns_child);
        let log = dir.join("pebble.log");
        let log_file = std::fs::File::create(&log).unwrap();
        let pebble = Command::new("pebble")
            .args([
                "-config",
                config_file.to_str().unwrap(),
                "-dnsserver",
                &format!("127.0.0.1:{dns}"),
            ])
            // No random sleep before validating; no nonce refused at random.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_file.try_clone().unwrap()))
            .stderr(Stdio::from(log_file))
            .spawn()
            .expect("start pebble");
        let pebble_guard = ChildGuard(pebble);
        let listen_addr: SocketAddr = format!("127.0.0.1:{listen}").parse().unwrap();
        let management: SocketAddr = format!("127.0.0.1:{management}").parse().unwrap();
        let listening = wait_listening(listen_addr, Duration::from_secs(10))
            && wait_listening(management, Duration::from_secs(10));
        // challtestsrv has no port to wait on that tells more than its staying up does.
        let dns_alive = dns_guard.0.try_wait().unwrap().is_none();
        if !listening || !dns_alive {
            return Err(format!(
                "{}\n--- pebble-challtestsrv:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default(),
                std::fs::read_to_string(dir.join("challtestsrv.log")).unwrap_or_default()
            ));
        }
        Ok(Pebble {
            directory: format!("https://127.0.0.1:{listen}/dir"),
            management,
            log,
            _pebble: pebble_guard,
            _dns: dns_guard,
        })
    }

    /// The CA file herdsman trusts for the directory's HTTPS (`directory_ca`).
    pub fn directory_ca(&self) -> PathBuf {
        test_ca().pem_file.clone()
    }

    /// The root Pebble issues under (made anew at each start), from its management port.
    pub fn issuing_root(&self) -> CertificateDer<'static> {
        let mut connection = TlsConn::try_connect(self.management, "127.0.0.1", &client_config())
            .expect("TLS to pebble's management port");
        let request = get_request_to("127.0.0.1", "/roots/0", "Connection: close\r\n");
        let response = connection.roundtrip(&request);
        CertificateDer::from_pem_slice(&response.body).expect("a PEM root from /roots/0")
    }

    /// A client config that trusts only Pebble's issuing root.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        client_config_trusting(self.issuing_root())
    }

    /// How many orders Pebble has taken (new-order requests in its log).
    pub fn orders(&self) -> usize {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines()
            .filter(|line| line.contains("/order-plz"))
            .count()
    }

    /// Pebble's log so far, for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}
