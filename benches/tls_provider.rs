//! Which crypto provider herdsman's TLS runs on (issue 16): `cargo bench --bench tls_provider`
//! prints the server's CPU time per TLS operation with rustls on aws-lc-rs and on ring, the two
//! providers rustls ships:
//!
//! - a full TLS 1.3 handshake with an ECDSA P-256 certificate, and with an RSA-2048 one (X25519 key
//!   exchange, the providers' default suites);
//! - a resumed TLS 1.3 handshake (a ticket from an earlier one; each full handshake's client keeps
//!   none, and each resumed one is checked to have resumed);
//! - sealing 1 MiB of response into records (AES-256-GCM, rustls's first TLS 1.3 suite).
//!
//! A third column mixes them: aws-lc-rs's key exchange and keys with ring's cipher suites.
//!
//! Client and server run in one thread and talk through memory, so no socket or kernel time is
//! counted; only the server's calls are inside the clock (the thread's CPU time), as a proxy's
//! handshakes are what it pays. Each figure is the median of 15 rounds, the providers taking
//! turns within each round.

use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};

const ROUNDS: usize = 15;

/// A provider's name in the table, and how to make it.
type Provider = (&'static str, fn() -> CryptoProvider);
const HANDSHAKES: usize = 200;
const BULK_BYTES: usize = 1 << 20;

fn main() {
    let providers: [Provider; 3] = [
        ("aws-lc-rs", rustls::crypto::aws_lc_rs::default_provider),
        ("ring", rustls::crypto::ring::default_provider),
        ("mixed", mixed_provider),
    ];
    let ecdsa = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let rsa = rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap();
    let keys = [("ECDSA P-256", &ecdsa), ("RSA-2048", &rsa)];
    // (measure, provider) → CPU ns per operation, one figure per round.
    let mut figures: Vec<(String, &str, Vec<f64>)> = Vec::new();
    let mut record = |measure: String, provider: &'static str, ns: f64| match figures
        .iter_mut()
        .find(|(m, p, _)| *m == measure && *p == provider)
    {
        Some((_, _, values)) => values.push(ns),
        None => figures.push((measure, provider, vec![ns])),
    };
    for round in 0..ROUNDS {
        for turn in 0..providers.len() {
            let (name, provider) = providers[(turn + round) % providers.len()];
            let provider = Arc::new(provider());
            for (key_name, key) in keys {
                let (server, client) = configs(&provider, key);
                let mut fresh = (*client).clone();
                fresh.resumption = rustls::client::Resumption::disabled();
                let fresh = Arc::new(fresh);
                let full = per_operation(HANDSHAKES, || {
                    let (client, _) = handshake(&server, &fresh);
                    assert!(!resumed(&client));
                });
                record(format!("full handshake, {key_name}"), name, full);
                if key_name == "ECDSA P-256" {
                    // The first handshake leaves tickets in the client's cache; each after it
                    // resumes, and is given new ones.
                    handshake(&server, &client);
                    let resumed = per_operation(HANDSHAKES, || {
                        let (client, _) = handshake(&server, &client);
                        assert!(resumed(&client));
                    });
                    record("resumed handshake".into(), name, resumed);
                    let bulk = bulk_ns(&server, &client);
                    record("seal 1 MiB (AES-256-GCM)".into(), name, bulk);
                }
            }
        }
    }
    println!("# The server's CPU per TLS operation, rustls 0.23\n");
    println!(
        "Median of {ROUNDS} rounds ({HANDSHAKES} handshakes a figure), thread CPU time of the \
         server's calls only, µs per operation.\n"
    );
    println!(
        "| operation | aws-lc-rs | ring | mixed | ring ÷ aws-lc-rs | mixed ÷ aws-lc-rs |\n\
         |---|---:|---:|---:|---:|---:|"
    );
    let measures: Vec<String> = {
        let mut seen: Vec<String> = Vec::new();
        for (m, _, _) in &figures {
            if !seen.contains(m) {
                seen.push(m.clone());
            }
        }
        seen
    };
    for measure in measures {
        let median_of = |provider: &str| {
            figures
                .iter()
                .find(|(m, p, _)| *m == measure && *p == provider)
                .map(|(_, _, values)| median(values))
                .unwrap_or(f64::NAN)
        };
        let (aws, ring, mixed) = (
            median_of("aws-lc-rs"),
            median_of("ring"),
            median_of("mixed"),
        );
        println!(
            "| {measure} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} |",
            aws / 1e3,
            ring / 1e3,
            mixed / 1e3,
            ring / aws,
            mixed / aws
        );
    }
}

/// aws-lc-rs's key exchange, signatures and randomness with ring's cipher suites (record
/// protection and the handshake's hashes): each part from the provider that measured cheaper.
fn mixed_provider() -> CryptoProvider {
    CryptoProvider {
        cipher_suites: rustls::crypto::ring::default_provider().cipher_suites,
        ..rustls::crypto::aws_lc_rs::default_provider()
    }
}

/// A server config serving a self-signed certificate for "bench.test" made with `key`, and a
/// client config trusting it, both on `provider`, TLS 1.3 only.
fn configs(
    provider: &Arc<CryptoProvider>,
    key: &rcgen::KeyPair,
) -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    let params = rcgen::CertificateParams::new(vec!["bench.test".to_string()]).unwrap();
    let cert = params.self_signed(key).unwrap();
    let der = CertificateDer::from(cert.der().to_vec());
    let key_der = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
    let server = ServerConfig::builder_with_provider(Arc::clone(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der.clone()], key_der)
        .unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(der).unwrap();
    let client = ClientConfig::builder_with_provider(Arc::clone(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}

thread_local! {
    /// The thread CPU time counted as the server's since it was last taken.
    static SERVER_CPU: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

fn thread_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Runs `f`, counting its thread CPU time as the server's.
fn server_side<R>(f: impl FnOnce() -> R) -> R {
    let start = thread_cpu();
    let result = f();
    let spent = thread_cpu() - start;
    SERVER_CPU.with(|total| total.set(total.get() + spent));
    result
}

fn take_server_cpu() -> Duration {
    SERVER_CPU.with(|total| total.replace(Duration::ZERO))
}

/// The server's CPU ns per call of `operation`, over `count` calls.
fn per_operation(count: usize, mut operation: impl FnMut()) -> f64 {
    take_server_cpu();
    for _ in 0..count {
        operation();
    }
    take_server_cpu().as_nanos() as f64 / count as f64
}

/// One whole handshake between a new client and a new server connection, and the server's
/// tickets read by the client.
fn handshake(
    server: &Arc<ServerConfig>,
    client: &Arc<ClientConfig>,
) -> (ClientConnection, ServerConnection) {
    let name = ServerName::try_from("bench.test").unwrap();
    let mut client = ClientConnection::new(Arc::clone(client), name).unwrap();
    let mut server = server_side(|| ServerConnection::new(Arc::clone(server)).unwrap());
    while client.is_handshaking() || server.is_handshaking() {
        move_bytes_to_server(&mut client, &mut server);
        move_bytes_to_client(&mut server, &mut client);
    }
    // The tickets TLS 1.3 sends after the handshake.
    move_bytes_to_client(&mut server, &mut client);
    (client, server)
}

/// Whether the client's handshake resumed a session (a pre-shared key, TLS 1.3).
fn resumed(client: &ClientConnection) -> bool {
    client.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
}

fn move_bytes_to_server(client: &mut ClientConnection, server: &mut ServerConnection) {
    let mut bytes = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut bytes).unwrap();
    }
    if bytes.is_empty() {
        return;
    }
    server_side(|| {
        let mut slice = bytes.as_slice();
        while !slice.is_empty() {
            server.read_tls(&mut slice).unwrap();
            server.process_new_packets().unwrap();
        }
    });
}

fn move_bytes_to_client(server: &mut ServerConnection, client: &mut ClientConnection) {
    let bytes = server_side(|| {
        let mut bytes = Vec::new();
        while server.wants_write() {
            server.write_tls(&mut bytes).unwrap();
        }
        bytes
    });
    let mut slice = bytes.as_slice();
    while !slice.is_empty() {
        client.read_tls(&mut slice).unwrap();
        client.process_new_packets().unwrap();
    }
}

/// The server's CPU ns to seal `BULK_BYTES` of plaintext into records and write them out.
fn bulk_ns(server: &Arc<ServerConfig>, client: &Arc<ClientConfig>) -> f64 {
    let (_client, mut server) = handshake(server, client);
    let body = vec![0x5a_u8; 16 * 1024];
    let mut sink = Vec::with_capacity(BULK_BYTES + BULK_BYTES / 16);
    take_server_cpu();
    server_side(|| {
        use std::io::Write;
        let mut left = BULK_BYTES;
        while left > 0 {
            let n = left.min(body.len());
            server.writer().write_all(&body[..n]).unwrap();
            while server.wants_write() {
                server.write_tls(&mut sink).unwrap();
            }
            left -= n;
            sink.clear();
        }
    });
    take_server_cpu().as_nanos() as f64
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}
