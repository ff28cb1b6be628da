//! The certificates a TLS listener serves and which one a handshake gets: loaded from PEM files
//! (a chain and its key, checked to match), named by their own subject alternative names, and
//! chosen by the client's SNI — an exact name first, then a `*.` wildcard one label up, then the
//! listener's default, or none (the handshake is refused) when the listener says so.
//!
//! It lives in `config`, below both of its users, as the route index does: the config's check
//! (`check/tls.rs`), which loads a listener's certificates so that a file that does not load, or
//! a key that is not its certificate's, is refused with the file and the reason; and the TLS
//! handshake, which asks the store what to present (through rustls's `ResolvesServerCert`).
//!
//! Selection is two hash lookups whatever the number of names (nginx keeps its `server_name`s in
//! hashes too; HAProxy's `crt-list` walks an ebtree per SNI): a listener with 10,000 certificates
//! picks as fast as one with ten. Among certificates that name the same host, the first listed
//! wins, as the first matching route does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Why a certificate did not load: the file it is about and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("{cert} and {key}: the key does not match the certificate ({reason})")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
}

/// One loaded certificate: its chain and key ready for handshakes, and what an operator is shown
/// of it (`herdsman ctl certs`, the metrics).
#[derive(Debug, Clone)]
pub struct Certificate {
    pub key: Arc<CertifiedKey>,
    /// The DNS names it covers (its subject alternative names, lowercase; `*.example.com` for a
    /// wildcard), else its subject's common name.
    pub names: Vec<String>,
    pub issuer: String,
    pub not_after: SystemTime,
    pub chain_file: PathBuf,
    pub key_file: PathBuf,
}

impl Certificate {
    /// Loads the chain in `chain_file` (the server's certificate first, then intermediates) and
    /// the private key in `key_file` (PKCS#8, PKCS#1 or SEC1), and checks that the key is the
    /// certificate's.
    pub fn load(
        chain_file: &Path,
        key_file: &Path,
        provider: &CryptoProvider,
    ) -> Result<Certificate, CertificateError> {
        let chain_pem = read(chain_file)?;
        let key_pem = read(key_file)?;
        Certificate::from_pem(&chain_pem, &key_pem, chain_file, key_file, provider)
    }

    /// As [`Certificate::load`], from the files' contents (`chain_file` and `key_file` only name
    /// them in errors and listings).
    pub fn from_pem(
        chain_pem: &[u8],
        key_pem: &[u8],
        chain_file: &Path,
        key_file: &Path,
        provider: &CryptoProvider,
    ) -> Result<Certificate, CertificateError> {
        let file_error = |path: &Path, reason: String| CertificateError::File {
            path: path.to_path_buf(),
            reason,
        };
        let chain = CertificateDer::pem_slice_iter(chain_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| {
                file_error(chain_file, format!("not a PEM certificate chain: {error}"))
            })?;
        let Some(leaf) = chain.first() else {
            return Err(file_error(chain_file, "holds no certificate".into()));
        };
        let described = describe(leaf).map_err(|reason| file_error(chain_file, reason))?;
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|error| file_error(key_file, format!("holds no private key: {error}")))?;
        let certified = CertifiedKey::from_der(chain, key, provider).map_err(|error| {
            use rustls::Error;
            match error {
                Error::InconsistentKeys(_) => CertificateError::Mismatch {
                    cert: chain_file.to_path_buf(),
                    key: key_file.to_path_buf(),
                    reason: error.to_string(),
                },
                other => file_error(key_file, format!("an unusable private key: {other}")),
            }
        })?;
        Ok(Certificate {
            key: Arc::new(certified),
            names: described.names,
            issuer: described.issuer,
            not_after: described.not_after,
            chain_file: chain_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
        })
    }
}

impl Certificate {
    /// Its names and expiry, as `herdsman check` and the `listening` line say them:
    /// `app.example,www.app.example until 2027-02-25 (89 days left)`, or `EXPIRED` once past.
    pub fn describe(&self, now: SystemTime) -> String {
        let seconds = self.seconds_left(now);
        let left = match seconds {
            ..0 => "EXPIRED".to_string(),
            _ => format!("{} days left", seconds / 86_400),
        };
        let until = self
            .not_after
            .duration_since(SystemTime::UNIX_EPOCH)
            .ok()
            .and_then(|since| i64::try_from(since.as_secs()).ok())
            .and_then(|seconds| time::OffsetDateTime::from_unix_timestamp(seconds).ok())
            .map_or_else(|| "?".to_string(), |moment| moment.date().to_string());
        format!("{} until {until} ({left})", self.names.join(","))
    }

    /// Whole seconds from `now` until it expires; negative once it has.
    pub fn seconds_left(&self, now: SystemTime) -> i64 {
        match self.not_after.duration_since(now) {
            Ok(left) => left.as_secs() as i64,
            Err(past) => -(past.duration().as_secs() as i64),
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>, CertificateError> {
    std::fs::read(path).map_err(|error| CertificateError::File {
        path: path.to_path_buf(),
        reason: format!("cannot be read: {error}"),
    })
}

/// What a certificate says of itself that the store and the operator need.
struct Described {
    names: Vec<String>,
    issuer: String,
    not_after: SystemTime,
}

fn describe(leaf: &CertificateDer<'_>) -> Result<Described, String> {
    use x509_parser::extensions::GeneralName;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|error| format!("its first certificate does not parse: {error}"))?;
    let mut names: Vec<String> = Vec::new();
    if let Ok(Some(alternatives)) = parsed.subject_alternative_name() {
        for name in &alternatives.value.general_names {
            if let GeneralName::DNSName(dns) = name {
                let dns = dns.to_ascii_lowercase();
                if !names.contains(&dns) {
                    names.push(dns);
                }
            }
        }
    }
    if names.is_empty() {
        // Clients ignore the common name when alternative names are present; only without them
        // is it the name.
        if let Some(common) = parsed
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
        {
            names.push(common.to_ascii_lowercase());
        }
    }
    let seconds = parsed.validity().not_after.timestamp();
    let not_after = if seconds >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds as u64)
    } else {
        SystemTime::UNIX_EPOCH
    };
    Ok(Described {
        names,
        issuer: parsed.issuer().to_string(),
        not_after,
    })
}

/// When a client names no host the listener has a certificate for, or names none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownName {
    /// The default certificate (the first listed) is served.
    Default,
    /// The handshake fails (rustls sends an `access_denied` alert).
    Refuse,
}

/// A listener's certificates, indexed by the names they cover.
#[derive(Debug)]
pub struct CertificateStore {
    certificates: Vec<Certificate>,
    /// Exact names → index into `certificates`.
    exact: HashMap<Box<str>, usize>,
    /// For `*.example.com`, "example.com" → index.
    wildcard: HashMap<Box<str>, usize>,
    unknown: UnknownName,
}

impl CertificateStore {
    /// A store over `certificates`, in the order given (the first is the default); at least one.
    pub fn new(certificates: Vec<Certificate>, unknown: UnknownName) -> CertificateStore {
        let mut exact = HashMap::new();
        let mut wildcard = HashMap::new();
        for (index, certificate) in certificates.iter().enumerate() {
            for name in &certificate.names {
                let (map, key) = match name.strip_prefix("*.") {
                    Some(parent) => (&mut wildcard, parent),
                    None => (&mut exact, name.as_str()),
                };
                // The first certificate to name a host keeps it.
                map.entry(Box::from(key)).or_insert(index);
            }
        }
        CertificateStore {
            certificates,
            exact,
            wildcard,
            unknown,
        }
    }

    /// What a client naming no host of these certificates gets.
    pub fn unknown_name(&self) -> UnknownName {
        self.unknown
    }

    pub fn certificates(&self) -> &[Certificate] {
        &self.certificates
    }

    /// The certificate for a client that sent `server_name` (SNI), if any.
    pub fn select(&self, server_name: Option<&str>) -> Option<&Certificate> {
        let index = server_name.and_then(|name| self.find(name));
        match (index, self.unknown) {
            (Some(index), _) => Some(&self.certificates[index]),
            (None, UnknownName::Default) => self.certificates.first(),
            (None, UnknownName::Refuse) => None,
        }
    }

    /// The certificate naming `host` exactly, else a wildcard one label above it. Case is
    /// ignored; a trailing dot too (rustls hands the name on as the client sent it).
    fn find(&self, host: &str) -> Option<usize> {
        let host = host.strip_suffix('.').unwrap_or(host);
        let mut lowered = [0u8; 253];
        let host = match host.len() {
            0 => return None,
            len if len <= lowered.len() && host.bytes().any(|b| b.is_ascii_uppercase()) => {
                lowered[..len].copy_from_slice(host.as_bytes());
                lowered[..len].make_ascii_lowercase();
                std::str::from_utf8(&lowered[..len]).ok()?
            }
            _ => host,
        };
        if let Some(&index) = self.exact.get(host) {
            return Some(index);
        }
        // A wildcard covers exactly one label: "*.example.com" names "a.example.com", neither
        // "example.com" nor "a.b.example.com" (RFC 6125 §6.4.3).
        let (first, parent) = host.split_once('.')?;
        if first.is_empty() || parent.is_empty() {
            return None;
        }
        self.wildcard.get(parent).copied()
    }
}

impl ResolvesServerCert for CertificateStore {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = client_hello.server_name();
        note_client_hello(&client_hello);
        self.select(name)
            .map(|certificate| Arc::clone(&certificate.key))
    }
}

thread_local! {
    /// The host name of the last ClientHello resolved on this thread, until taken.
    static SERVER_NAME: std::cell::RefCell<Option<Box<str>>> = const { std::cell::RefCell::new(None) };
}

thread_local! {
    /// The ALPN protocols the last ClientHello resolved on this thread offered, comma-separated
    /// (its memory kept from one handshake to the next).
    static OFFERED_ALPN: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Notes what a ClientHello asked for — its host name, for `take_server_name`, and the ALPN
/// protocols it offered, for `offered_alpn` — as every certificate resolver does first.
pub fn note_client_hello(hello: &ClientHello<'_>) {
    SERVER_NAME.with(|asked| asked.replace(hello.server_name().map(Box::from)));
    OFFERED_ALPN.with(|offered| {
        let mut offered = offered.borrow_mut();
        offered.clear();
        for (index, protocol) in hello.alpn().into_iter().flatten().enumerate() {
            if index > 0 {
                offered.push(',');
            }
            offered.push_str(&String::from_utf8_lossy(protocol));
        }
    });
}

/// The ALPN protocols the ClientHello this thread's last handshake step resolved offered,
/// comma-separated (empty: none): read when a handshake failed for want of a protocol in
/// common, in the same step, to say what the client wanted.
pub fn offered_alpn() -> String {
    OFFERED_ALPN.with(|offered| offered.borrow().clone())
}

/// The host name (SNI) of the ClientHello this thread's last handshake step resolved a
/// certificate for, if it named one: how a handshake learns it, as rustls's unbuffered server
/// connection does not say (`transport::tls_state`). Taken once.
pub fn take_server_name() -> Option<Box<str>> {
    SERVER_NAME.with(|asked| asked.take())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider() -> CryptoProvider {
        rustls::crypto::aws_lc_rs::default_provider()
    }

    /// A self-signed certificate for `names` (ECDSA P-256), as PEM chain and key.
    fn self_signed(names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(names).unwrap();
        (cert.pem(), signing_key.serialize_pem())
    }

    fn certificate(names: &[&str]) -> Certificate {
        let (chain, key) = self_signed(names);
        Certificate::from_pem(
            chain.as_bytes(),
            key.as_bytes(),
            Path::new(&format!("{}.pem", names[0])),
            Path::new("key.pem"),
            &provider(),
        )
        .unwrap()
    }

    fn chosen(store: &CertificateStore, sni: Option<&str>) -> Option<String> {
        store.select(sni).map(|c| c.names[0].clone())
    }

    #[test]
    fn names_come_from_the_certificate_and_sni_picks_exact_then_wildcard_then_default() {
        let store = CertificateStore::new(
            vec![
                certificate(&["default.test"]),
                certificate(&["www.example.com", "Example.com"]),
                certificate(&["*.example.com"]),
                certificate(&["api.example.com"]),
            ],
            UnknownName::Default,
        );
        assert_eq!(
            store.certificates()[1].names,
            ["www.example.com", "example.com"]
        );
        let pick = |sni| chosen(&store, sni);
        assert_eq!(
            pick(Some("www.example.com")).as_deref(),
            Some("www.example.com")
        );
        assert_eq!(
            pick(Some("EXAMPLE.com.")).as_deref(),
            Some("www.example.com")
        );
        // The exact name wins over the wildcard, whatever the order listed.
        assert_eq!(
            pick(Some("api.example.com")).as_deref(),
            Some("api.example.com")
        );
        assert_eq!(
            pick(Some("shop.example.com")).as_deref(),
            Some("*.example.com")
        );
        // One label only.
        assert_eq!(
            pick(Some("a.b.example.com")).as_deref(),
            Some("default.test")
        );
        assert_eq!(pick(Some("unknown.org")).as_deref(), Some("default.test"));
        assert_eq!(pick(None).as_deref(), Some("default.test"));
        let refusing = CertificateStore::new(vec![certificate(&["a.test"])], UnknownName::Refuse);
        assert_eq!(chosen(&refusing, Some("b.test")), None);
        assert_eq!(chosen(&refusing, None), None);
        assert_eq!(chosen(&refusing, Some("A.TEST")).as_deref(), Some("a.test"));
    }

    #[test]
    fn the_first_certificate_to_name_a_host_keeps_it() {
        let store = CertificateStore::new(
            vec![
                certificate(&["one.test", "shared.test"]),
                certificate(&["two.test", "shared.test"]),
            ],
            UnknownName::Refuse,
        );
        assert_eq!(
            chosen(&store, Some("shared.test")).as_deref(),
            Some("one.test")
        );
        assert_eq!(
            chosen(&store, Some("two.test")).as_deref(),
            Some("two.test")
        );
    }

    #[test]
    fn a_bad_file_is_named_with_its_fault() {
        let provider = provider();
        let (chain, key) = self_signed(&["a.test"]);
        let (_, other_key) = self_signed(&["b.test"]);
        let load = |chain: &str, key: &str| {
            Certificate::from_pem(
                chain.as_bytes(),
                key.as_bytes(),
                Path::new("/etc/site/chain.pem"),
                Path::new("/etc/site/key.pem"),
                &provider,
            )
            .map(|_| ())
            .map_err(|error| error.to_string())
        };
        assert!(load(&chain, &key).is_ok());
        let mismatch = load(&chain, &other_key).unwrap_err();
        assert!(
            mismatch
                .starts_with("/etc/site/chain.pem and /etc/site/key.pem: the key does not match"),
            "{mismatch}"
        );
        let no_key = load(&chain, &chain).unwrap_err();
        assert!(
            no_key.starts_with("/etc/site/key.pem: holds no private key"),
            "{no_key}"
        );
        let no_chain = load("", &key).unwrap_err();
        assert_eq!(no_chain, "/etc/site/chain.pem: holds no certificate");
        let missing = Certificate::load(
            Path::new("/nonexistent/chain.pem"),
            Path::new("/nonexistent/key.pem"),
            &provider,
        )
        .unwrap_err()
        .to_string();
        assert!(
            missing.starts_with("/nonexistent/chain.pem: cannot be read"),
            "{missing}"
        );
    }

    #[test]
    fn expiry_and_issuer_are_read() {
        let certificate = certificate(&["a.test"]);
        // rcgen's default validity runs to 4096.
        assert!(certificate.not_after > SystemTime::now() + Duration::from_secs(365 * 86_400));
        assert!(!certificate.issuer.is_empty());
    }

    #[test]
    fn thousands_of_certificates_are_indexed_by_name() {
        // One key for all, so that making them costs a signature each.
        let key = rcgen::KeyPair::generate().unwrap();
        let key_pem = key.serialize_pem();
        let provider = provider();
        let listed: Vec<Certificate> = (0..2_000)
            .map(|i| {
                let name = format!("site{i}.example.net");
                let params = rcgen::CertificateParams::new(vec![name.clone()]).unwrap();
                let chain = params.self_signed(&key).unwrap().pem();
                Certificate::from_pem(
                    chain.as_bytes(),
                    key_pem.as_bytes(),
                    Path::new(&name),
                    Path::new("key.pem"),
                    &provider,
                )
                .unwrap()
            })
            .collect();
        let store = CertificateStore::new(listed, UnknownName::Refuse);
        assert_eq!(store.exact.len(), 2_000);
        for i in [0, 999, 1_999] {
            let name = format!("site{i}.example.net");
            assert_eq!(chosen(&store, Some(&name)), Some(name));
        }
        assert_eq!(chosen(&store, Some("site2000.example.net")), None);
    }
}
