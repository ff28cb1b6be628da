//! Certificates herdsman obtains itself (ACME, RFC 8555) as the data path reads them: a
//! listener's `acme` settings once checked, the certificate ACME keeps for them
//! ([`ManagedCertificate`]: issued, installed and renewed by the control plane's ACME thread,
//! `src/acme/`), and the challenge answers a validator asks for while an order is open —
//! HTTP-01 tokens answered by the exchange, TLS-ALPN-01 certificates (RFC 8737) presented by the
//! handshake.
//!
//! It lives in `config`, below its readers (the TLS handshake's certificate resolver, the
//! exchange) and its writer (the ACME thread), as the certificate store does. Everything the
//! request path reads is behind `arc_swap` or an atomic: a handshake or a request takes no lock.
//! The one mutex ([`AcmeBoard::managed`]) is taken by the config check and the ACME thread only.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use arc_swap::{ArcSwap, ArcSwapOption};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::certificates::{Certificate, CertificateStore, UnknownName};

/// The ALPN protocol of a TLS-ALPN-01 validation (RFC 8737 §6.2): a connection that agrees on it
/// is the validator's and carries no HTTP; it is closed once the handshake ends.
pub const ALPN_ACME_TLS: &[u8] = b"acme-tls/1";

/// Where an HTTP-01 validator asks for a token's answer (RFC 8555 §8.3).
pub const HTTP01_PATH: &str = "/.well-known/acme-challenge/";

/// How a CA is to check that herdsman answers for a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeKind {
    /// An HTTP request to port 80 for `/.well-known/acme-challenge/<token>`, answered by any of
    /// herdsman's cleartext listeners.
    Http01,
    /// A TLS handshake to port 443 offering ALPN `acme-tls/1`, answered by the TLS listener
    /// itself with a certificate made for the challenge.
    TlsAlpn01,
}

impl ChallengeKind {
    /// The word the config uses for it, which is also the challenge's name in RFC 8555.
    pub fn name(self) -> &'static str {
        match self {
            ChallengeKind::Http01 => "http-01",
            ChallengeKind::TlsAlpn01 => "tls-alpn-01",
        }
    }
}

/// A listener's `[listener.tls] acme`, checked.
#[derive(Debug, Clone)]
pub struct AcmeSettings {
    /// The CA's ACME directory URL (https).
    pub directory: String,
    /// `mailto:` addresses the CA may write to about the account; may be empty.
    pub contact: Vec<String>,
    /// The DNS names the certificate covers, lowercase, the first as its subject; at least one,
    /// no wildcard (those need DNS-01, which herdsman cannot answer).
    pub names: Vec<String>,
    pub challenge: ChallengeKind,
    /// A CA certificate (PEM) to trust for the directory's HTTPS instead of the system's roots
    /// (a test CA such as Pebble's).
    pub directory_ca: Option<PathBuf>,
    /// The certificate ACME keeps for these names and this directory, shared by every config
    /// that names them, so that a reload keeps serving what was issued.
    pub managed: Arc<ManagedCertificate>,
}

impl PartialEq for AcmeSettings {
    /// The same settings; the managed certificate follows from them.
    fn eq(&self, other: &AcmeSettings) -> bool {
        self.directory == other.directory
            && self.contact == other.contact
            && self.names == other.names
            && self.challenge == other.challenge
            && self.directory_ca == other.directory_ca
    }
}

/// The certificate ACME keeps for one set of names from one directory: what handshakes for those
/// names are given (swapped in whole when it is renewed, no lock), and when it is next renewed.
#[derive(Debug)]
pub struct ManagedCertificate {
    /// Its folder under the state directory: the first name and a hash of the directory URL and
    /// every name, so that two sets that share a first name do not share a folder.
    pub id: String,
    /// As in [`AcmeSettings::names`].
    pub names: Vec<String>,
    current: ArcSwapOption<Certificate>,
    /// When the ACME thread plans to renew it, in seconds since the epoch; 0 until planned.
    renews_at: AtomicI64,
    /// Orders for it that failed since the process started.
    pub failures: AtomicU64,
}

impl ManagedCertificate {
    fn new(id: String, names: Vec<String>) -> ManagedCertificate {
        ManagedCertificate {
            id,
            names,
            current: ArcSwapOption::empty(),
            renews_at: AtomicI64::new(0),
            failures: AtomicU64::new(0),
        }
    }

    /// The certificate serving now, if one was issued (or read from the state directory).
    pub fn current(&self) -> Option<Arc<Certificate>> {
        self.current.load_full()
    }

    /// Serves `certificate` from the next handshake on.
    pub fn install(&self, certificate: Certificate) {
        self.current.store(Some(Arc::new(certificate)));
    }

    /// When it is planned to be renewed (seconds since the epoch), if planned.
    pub fn renews_at(&self) -> Option<i64> {
        Some(self.renews_at.load(Ordering::Relaxed)).filter(|&at| at > 0)
    }

    pub fn plan_renewal(&self, at_unix_seconds: i64) {
        self.renews_at.store(at_unix_seconds, Ordering::Relaxed);
    }

    /// Whether `host` (as a client's SNI has it: any case, perhaps a trailing dot) is one of its
    /// names. A scan: a certificate has a handful of names, and this runs once per handshake.
    fn covers(&self, host: &str) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host);
        self.names
            .iter()
            .any(|name| name.eq_ignore_ascii_case(host))
    }

    /// The key handshakes get, if a certificate is installed.
    fn certified_key(&self) -> Option<Arc<CertifiedKey>> {
        self.current.load().as_ref().map(|c| Arc::clone(&c.key))
    }
}

/// The process's ACME state that outlives a config: the managed certificates by id, and the
/// challenges open now.
#[derive(Debug, Default)]
pub struct AcmeBoard {
    /// Taken by the config check (to find a listener's certificate) and the ACME thread, never
    /// on the request path. Weak: a certificate no config names any more is let go.
    managed: Mutex<HashMap<String, Weak<ManagedCertificate>>>,
    /// HTTP-01: token → key authorization (the answer's body).
    http01: ArcSwap<HashMap<Box<str>, Arc<str>>>,
    /// The number of tokens in `http01`, read first so that a request costs one atomic load
    /// when no order is open (nearly always).
    http01_open: AtomicUsize,
    /// TLS-ALPN-01: name → the challenge's self-signed certificate.
    tls_alpn01: ArcSwap<HashMap<Box<str>, Arc<CertifiedKey>>>,
}

impl AcmeBoard {
    /// The process's board (one per process as the TLS ticket keys are: it outlives configs).
    pub fn global() -> &'static AcmeBoard {
        static BOARD: OnceLock<AcmeBoard> = OnceLock::new();
        BOARD.get_or_init(AcmeBoard::default)
    }

    /// The certificate kept for `names` from `directory`, made empty the first time asked.
    pub fn managed(&self, directory: &str, names: &[String]) -> Arc<ManagedCertificate> {
        let id = certificate_id(directory, names);
        let mut managed = self.managed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(kept) = managed.get(&id).and_then(Weak::upgrade) {
            return kept;
        }
        managed.retain(|_, kept| kept.strong_count() > 0);
        let made = Arc::new(ManagedCertificate::new(id.clone(), names.to_vec()));
        managed.insert(id, Arc::downgrade(&made));
        made
    }

    /// Opens an HTTP-01 challenge: `token`'s answer is `key_authorization` until closed.
    pub fn open_http01(&self, token: &str, key_authorization: &str) {
        self.http01.rcu(|open| {
            let mut open = HashMap::clone(open);
            open.insert(Box::from(token), Arc::from(key_authorization));
            open
        });
        let count = self.http01.load().len();
        self.http01_open.store(count, Ordering::Release);
    }

    pub fn close_http01(&self, token: &str) {
        self.http01.rcu(|open| {
            let mut open = HashMap::clone(open);
            open.remove(token);
            open
        });
        let count = self.http01.load().len();
        self.http01_open.store(count, Ordering::Release);
    }

    /// The answer to a request for `target`, when it asks for an open HTTP-01 token.
    pub fn http01_answer(&self, target: &str) -> Option<Arc<str>> {
        if self.http01_open.load(Ordering::Acquire) == 0 {
            return None;
        }
        let token = target.strip_prefix(HTTP01_PATH)?;
        self.http01.load().get(token).cloned()
    }

    /// Opens a TLS-ALPN-01 challenge: a handshake for `name` offering `acme-tls/1` gets
    /// `certificate` until closed.
    pub fn open_tls_alpn01(&self, name: &str, certificate: Arc<CertifiedKey>) {
        self.tls_alpn01.rcu(|open| {
            let mut open = HashMap::clone(open);
            open.insert(Box::from(name), Arc::clone(&certificate));
            open
        });
    }

    pub fn close_tls_alpn01(&self, name: &str) {
        self.tls_alpn01.rcu(|open| {
            let mut open = HashMap::clone(open);
            open.remove(name);
            open
        });
    }

    fn tls_alpn01_certificate(&self, host: &str) -> Option<Arc<CertifiedKey>> {
        let host = host.strip_suffix('.').unwrap_or(host);
        let open = self.tls_alpn01.load();
        if let Some(found) = open.get(host) {
            return Some(Arc::clone(found));
        }
        // Validators send the name as the order has it (lowercase); another case is rare.
        let lowered = host.to_ascii_lowercase();
        open.get(lowered.as_str()).cloned()
    }
}

/// The folder name of the certificate for `names` from `directory` (see
/// [`ManagedCertificate::id`]): safe as a file name whatever the names hold.
pub fn certificate_id(directory: &str, names: &[String]) -> String {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    hash.update(directory.as_bytes());
    for name in names {
        hash.update(b"\n");
        hash.update(name.as_bytes());
    }
    let digest = hash.finalize();
    let first: String = names
        .first()
        .map(String::as_str)
        .unwrap_or("")
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            _ => '_',
        })
        .collect();
    let mut id = first;
    id.push('-');
    for byte in &digest[..6] {
        id.push_str(&format!("{byte:02x}"));
    }
    id
}

/// What a TLS listener with `acme` presents: the challenge certificate to a validator offering
/// `acme-tls/1`; for ACME's names the certificate ACME keeps; for other names the listener's own
/// certificates (as [`CertificateStore`] picks them); and, when neither has one, ACME's as the
/// default unless the listener refuses unknown names.
#[derive(Debug)]
pub struct AcmeResolver {
    pub store: Arc<CertificateStore>,
    pub managed: Arc<ManagedCertificate>,
}

impl ResolvesServerCert for AcmeResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = client_hello.server_name();
        super::certificates::note_client_hello(&client_hello);
        let validating = client_hello
            .alpn()
            .is_some_and(|mut offered| offered.any(|protocol| protocol == ALPN_ACME_TLS));
        if validating {
            // Only the challenge's certificate answers acme-tls/1 (RFC 8737 §3): none, no
            // handshake.
            return name.and_then(|name| AcmeBoard::global().tls_alpn01_certificate(name));
        }
        if let Some(name) = name {
            if self.managed.covers(name) {
                if let Some(key) = self.managed.certified_key() {
                    return Some(key);
                }
            }
        }
        if let Some(own) = self.store.select(name) {
            return Some(Arc::clone(&own.key));
        }
        match self.store.unknown_name() {
            UnknownName::Default => self.managed.certified_key(),
            UnknownName::Refuse => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_a_file_name_and_tells_sets_apart() {
        let names = |list: &[&str]| list.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let one = certificate_id("https://ca/dir", &names(&["a.test", "b.test"]));
        assert!(one.starts_with("a.test-"), "{one}");
        assert_eq!(one.len(), "a.test-".len() + 12);
        assert_ne!(one, certificate_id("https://ca/dir", &names(&["a.test"])));
        assert_ne!(
            one,
            certificate_id("https://other/dir", &names(&["a.test", "b.test"]))
        );
        assert!(!certificate_id("d", &names(&["../x"])).contains('/'));
    }

    #[test]
    fn a_managed_certificate_is_kept_while_a_config_names_it() {
        let board = AcmeBoard::default();
        let names = vec!["a.test".to_string()];
        let first = board.managed("https://ca/dir", &names);
        let again = board.managed("https://ca/dir", &names);
        assert!(Arc::ptr_eq(&first, &again));
        drop((first, again));
        let fresh = board.managed("https://ca/dir", &names);
        assert!(fresh.current().is_none());
        assert!(fresh.covers("A.TEST."));
        assert!(!fresh.covers("b.test"));
    }

    #[test]
    fn http01_answers_only_open_tokens() {
        let board = AcmeBoard::default();
        assert_eq!(board.http01_answer("/.well-known/acme-challenge/tok"), None);
        board.open_http01("tok", "tok.thumb");
        let answer = board.http01_answer("/.well-known/acme-challenge/tok");
        assert_eq!(answer.as_deref(), Some("tok.thumb"));
        assert_eq!(
            board.http01_answer("/.well-known/acme-challenge/other"),
            None
        );
        assert_eq!(board.http01_answer("/tok"), None);
        board.close_http01("tok");
        assert_eq!(board.http01_answer("/.well-known/acme-challenge/tok"), None);
    }
}
