//! A TLS listener's settings as the config check builds them: its certificates (loaded and
//! indexed by `certificates.rs`), the oldest protocol version it accepts, and the rustls server
//! config every handshake on it starts from — built once per config, shared by every worker, on
//! the crypto provider chosen by measurement and with session resumption state that outlives
//! the config (so a reload does not cost clients their sessions).

use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::server::{ServerSessionMemoryCache, StoresServerSessions};
use rustls::ServerConfig;

use super::acme::{AcmeResolver, AcmeSettings, ALPN_ACME_TLS};
use super::certificates::{Certificate, CertificateStore};
use super::ticket_keys::TicketKeys;

/// The protocols a TLS connection's HTTP runs on, offered by ALPN: HTTP/2 (unless the listener's
/// `http2` is false), then HTTP/1.1.
pub const ALPN_H2: &[u8] = b"h2";
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// TLS 1.2 sessions kept for resumption by session id, over every listener: about 200 bytes each
/// in rustls's cache.
const SESSION_CACHE_ENTRIES: usize = 20_000;

/// The oldest TLS version a listener accepts. Never older than 1.2: 1.0 and 1.1 are deprecated
/// (RFC 8996), and rustls does not speak them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

impl TlsVersion {
    /// The word the config uses for it.
    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "1.2",
            TlsVersion::Tls13 => "1.3",
        }
    }
}

/// Whether a TLS listener's clients must present a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// The handshake fails without one that verifies.
    Required,
    /// Clients without one are served; one that is presented must verify.
    Optional,
}

/// `client_ca` and `client_auth`: the CAs a client certificate must chain to, loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientCertificates {
    /// The file they were read from (for listings and errors).
    pub ca_file: std::path::PathBuf,
    pub roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    pub auth: ClientAuth,
}

/// A listener's `[listener.tls]`, checked, its certificates loaded.
#[derive(Debug, Clone)]
pub struct ListenerTls {
    pub certificates: Arc<CertificateStore>,
    pub min_version: TlsVersion,
    /// Client certificates (mTLS), when the listener asks for them.
    pub clients: Option<ClientCertificates>,
    /// What each handshake on the listener starts from.
    pub server_config: Arc<ServerConfig>,
    /// `hsts`: the whole `Strict-Transport-Security` line (CRLF included) added to every
    /// response on the listener; empty when not set.
    pub hsts_line: Box<[u8]>,
    /// `acme`: a certificate herdsman obtains and renews itself, served beside `certificates`.
    pub acme: Option<AcmeSettings>,
    /// The listener's `http2`: ALPN offers `h2` before `http/1.1`.
    pub http2: bool,
}

impl ListenerTls {
    /// The application protocols its handshakes agree to, comma-separated, as ALPN names them
    /// (ACME's validation protocol aside: no HTTP runs on it).
    pub fn alpn_spoken(&self) -> String {
        let spoken: Vec<String> = self
            .server_config
            .alpn_protocols
            .iter()
            .filter(|protocol| protocol.as_slice() != ALPN_ACME_TLS)
            .map(|protocol| String::from_utf8_lossy(protocol).into_owned())
            .collect();
        spoken.join(",")
    }

    /// What the listener's TLS is, on one line, for `herdsman check` and the `listening` log
    /// line: the oldest version, the ALPN protocols offered, each certificate's names and expiry
    /// (as `ctl certs` shows them), ACME's names and challenge, client certificates.
    pub fn describe(&self, now: SystemTime) -> String {
        let mut parts = vec![format!(
            "TLS {}+  ALPN {}",
            self.min_version.name(),
            self.alpn_spoken()
        )];
        for certificate in self.certificates.certificates() {
            parts.push(format!("certificate {}", certificate.describe(now)));
        }
        if let Some(acme) = &self.acme {
            let held = match acme.managed.current() {
                Some(certificate) => format!(", holding {}", certificate.describe(now)),
                None => ", not obtained yet".to_string(),
            };
            parts.push(format!(
                "ACME {} ({}{held})",
                acme.names.join(","),
                acme.challenge.name()
            ));
        }
        if let Some(clients) = &self.clients {
            let auth = match clients.auth {
                ClientAuth::Required => "required",
                ClientAuth::Optional => "optional",
            };
            parts.push(format!(
                "client certificates {auth} (CA {})",
                clients.ca_file.display()
            ));
        }
        parts.join("  ")
    }
}

impl PartialEq for ListenerTls {
    /// The same settings and the same certificates, file for file and byte for byte.
    fn eq(&self, other: &ListenerTls) -> bool {
        let same_certificate = |(a, b): (&super::certificates::Certificate, &_)| {
            let b: &super::certificates::Certificate = b;
            a.chain_file == b.chain_file && a.key_file == b.key_file && a.key.cert == b.key.cert
        };
        self.min_version == other.min_version
            && self.hsts_line == other.hsts_line
            && self.clients == other.clients
            && self.acme == other.acme
            && self.certificates.unknown_name() == other.certificates.unknown_name()
            && self.certificates.certificates().len() == other.certificates.certificates().len()
            && self
                .certificates
                .certificates()
                .iter()
                .zip(other.certificates.certificates())
                .all(same_certificate)
    }
}

impl ListenerTls {
    /// The same settings over the files read again (their certificates changed on disk): every
    /// certificate, and the client CAs; the file and the reason when one does not load.
    pub fn read_again(&self) -> Result<ListenerTls, String> {
        let provider = provider();
        let certificates = self
            .certificates
            .certificates()
            .iter()
            .map(|old| Certificate::load(&old.chain_file, &old.key_file, &provider))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| error.to_string())?;
        let store = CertificateStore::new(certificates, self.certificates.unknown_name());
        let clients = match &self.clients {
            Some(old) => Some(
                ClientCertificates::load(&old.ca_file, old.auth)
                    .map_err(|why| format!("{}: {why}", old.ca_file.display()))?,
            ),
            None => None,
        };
        let hsts = self.hsts_line.clone();
        Ok(ListenerTls::build(
            Arc::new(store),
            self.min_version,
            hsts,
            clients,
            self.acme.clone(),
            self.http2,
        ))
    }

    /// The files it was read from: each certificate's chain and key, and the client CAs.
    pub fn files(&self) -> Vec<std::path::PathBuf> {
        let certificates = self.certificates.certificates().iter();
        let pairs = certificates.flat_map(|c| [c.chain_file.clone(), c.key_file.clone()]);
        pairs
            .chain(self.clients.iter().map(|c| c.ca_file.clone()))
            .collect()
    }

    /// The settings over `certificates`, with the server config they make; `hsts` the value of
    /// the `Strict-Transport-Security` field to add to responses, if any.
    pub fn new(
        certificates: Arc<CertificateStore>,
        min_version: TlsVersion,
        hsts: Option<&str>,
        clients: Option<ClientCertificates>,
        acme: Option<AcmeSettings>,
        http2: bool,
    ) -> ListenerTls {
        let hsts_line = hsts.map_or_else(Box::default, |value| {
            format!("Strict-Transport-Security: {value}\r\n")
                .into_bytes()
                .into_boxed_slice()
        });
        ListenerTls::build(certificates, min_version, hsts_line, clients, acme, http2)
    }

    fn build(
        certificates: Arc<CertificateStore>,
        min_version: TlsVersion,
        hsts_line: Box<[u8]>,
        clients: Option<ClientCertificates>,
        acme: Option<AcmeSettings>,
        http2: bool,
    ) -> ListenerTls {
        let versions: &[&'static rustls::SupportedProtocolVersion] = match min_version {
            TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
            TlsVersion::Tls13 => &[&rustls::version::TLS13],
        };
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .expect("the provider supports TLS 1.2 and 1.3");
        let builder = match clients.as_ref().and_then(client_verifier) {
            Some(verifier) => builder.with_client_cert_verifier(verifier),
            None => builder.with_no_client_auth(),
        };
        let mut config = match &acme {
            // A listener without ACME resolves straight from its store, as before ACME existed.
            None => builder.with_cert_resolver(Arc::clone(&certificates) as _),
            Some(acme) => builder.with_cert_resolver(Arc::new(AcmeResolver {
                store: Arc::clone(&certificates),
                managed: Arc::clone(&acme.managed),
            })),
        };
        // HTTP/2 first: a client that speaks both gets it (RFC 7301: the server's order decides).
        config.alpn_protocols = match http2 {
            true => vec![ALPN_H2.to_vec(), ALPN_HTTP1.to_vec()],
            false => vec![ALPN_HTTP1.to_vec()],
        };
        if acme.is_some() {
            // Agreed only with a TLS-ALPN-01 validator, which offers nothing else; the session
            // closes such a connection after its handshake.
            config.alpn_protocols.push(ALPN_ACME_TLS.to_vec());
        }
        config.ticketer = TicketKeys::global();
        config.session_storage = session_cache();
        // Renegotiation does not exist in rustls; 0-RTT data stays off (it can be replayed).
        config.max_early_data_size = 0;
        ListenerTls {
            certificates,
            min_version,
            clients,
            server_config: Arc::new(config),
            hsts_line,
            acme,
            http2,
        }
    }
}

/// What checks a client's certificate against `clients`' roots; `None` when the roots are
/// unusable (the config check refuses such a file first: see [`ClientCertificates::load`]).
fn client_verifier(
    clients: &ClientCertificates,
) -> Option<Arc<dyn rustls::server::danger::ClientCertVerifier>> {
    let mut roots = rustls::RootCertStore::empty();
    for root in &clients.roots {
        roots.add(root.clone()).ok()?;
    }
    let builder =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
    let builder = match clients.auth {
        ClientAuth::Required => builder,
        ClientAuth::Optional => builder.allow_unauthenticated(),
    };
    builder.build().ok()
}

impl ClientCertificates {
    /// The CA certificates in the PEM file `ca_file` (see [`CaFile::read`]); the reason when
    /// the file cannot be read or holds none usable.
    pub fn load(ca_file: &std::path::Path, auth: ClientAuth) -> Result<ClientCertificates, String> {
        Ok(ClientCertificates {
            ca_file: ca_file.to_path_buf(),
            roots: CaFile::read(ca_file)?.certificates,
            auth,
        })
    }
}

/// A PEM file of CA certificates, read and checked: what `client_ca`, `[pool.tls] ca` and
/// `acme.directory_ca` name.
pub struct CaFile {
    pub certificates: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// The same, as trust anchors.
    pub roots: rustls::RootCertStore,
    /// The file's bytes.
    pub pem: Vec<u8>,
}

impl CaFile {
    /// The certificates in `path`, each usable as a trust anchor; the reason when the file
    /// cannot be read or holds none.
    pub fn read(path: &std::path::Path) -> Result<CaFile, String> {
        use rustls::pki_types::pem::PemObject;
        let pem = std::fs::read(path).map_err(|error| format!("cannot be read: {error}"))?;
        let certificates = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| format!("not a PEM certificate: {error}"))?;
        if certificates.is_empty() {
            return Err("holds no certificate".to_string());
        }
        let mut roots = rustls::RootCertStore::empty();
        for certificate in &certificates {
            roots
                .add(certificate.clone())
                .map_err(|error| format!("a certificate that cannot be a CA: {error}"))?;
        }
        Ok(CaFile {
            certificates,
            roots,
            pem,
        })
    }
}

/// The crypto provider every TLS connection uses: aws-lc-rs's key exchange, signatures and
/// randomness (its ECDSA handshake costs 0.83x ring's) with ring's cipher suites (sealing 1 MiB
/// costs 0.66-0.71x aws-lc-rs's on this machine): bench/results/tls-provider.md.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    Arc::clone(PROVIDER.get_or_init(|| {
        Arc::new(CryptoProvider {
            cipher_suites: rustls::crypto::ring::default_provider().cipher_suites,
            ..rustls::crypto::aws_lc_rs::default_provider()
        })
    }))
}

/// The process's TLS 1.2 session cache, shared and kept across reloads like the ticket keys.
fn session_cache() -> Arc<dyn StoresServerSessions + Send + Sync> {
    static CACHE: OnceLock<Arc<dyn StoresServerSessions + Send + Sync>> = OnceLock::new();
    Arc::clone(CACHE.get_or_init(|| ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES)))
}
