//! A pool's `[pool.tls]` as the config check builds it: TLS to the pool's servers — the roots
//! their certificates must chain to (a CA file, or the system's), the name each server is asked
//! for and verified against, the certificate herdsman presents to servers that ask for one
//! (mTLS) — and the rustls client config every connection to them starts from, built once per
//! config and shared by every worker.

use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::ResolvesClientCert;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::certificates::Certificate;
use super::tls::{provider, ALPN_H2, ALPN_HTTP1};
use super::ServerAddr;

/// Where the servers' certificates must chain to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Roots {
    /// `ca`: the CA certificates in this PEM file.
    File(PathBuf),
    /// No `ca`: the system's trusted roots (what `rustls-native-certs` finds: /etc/ssl/certs on
    /// Debian), as curl and browsers trust.
    System,
}

/// A pool's `[pool.tls]`, checked, its files loaded.
#[derive(Debug, Clone)]
pub struct PoolTls {
    pub roots: Roots,
    /// `sni`: the name every server of the pool is asked for and verified against, unless the
    /// server has its own; neither: the server's address (verified against an IP address in
    /// its certificate).
    pub sni: Option<String>,
    /// `verify = false`: servers' certificates are not checked (the config warns of it).
    pub verify: bool,
    /// `certificate`: what herdsman presents to a server that asks for a client certificate.
    pub client_certificate: Option<Arc<Certificate>>,
    /// What every connection to the pool's servers starts from.
    pub client_config: Arc<ClientConfig>,
    /// A digest of the settings and of the bytes of every file they name: two pools' TLS is the
    /// same exactly when their fingerprints are, and a server whose TLS changed on a reload is a
    /// new server to the snapshot (its idle connections, made with the old settings, close).
    pub fingerprint: u64,
}

impl PartialEq for PoolTls {
    fn eq(&self, other: &PoolTls) -> bool {
        self.fingerprint == other.fingerprint
    }
}

/// How one server of a TLS pool is connected to: the pool's client config and the name sent in
/// SNI and verified.
#[derive(Debug, Clone)]
pub struct ServerTls {
    pub client_config: Arc<ClientConfig>,
    pub name: ServerName<'static>,
}

impl PoolTls {
    /// The settings, with the client config they make. `roots` are the anchors `ca` (or the
    /// system) gave; `ca_pem` the CA file's bytes (empty for the system's), for the fingerprint.
    /// `http2`: ALPN offers `h2` alone (the pool's `protocol = "h2"`), else `http/1.1`.
    pub fn new(
        roots: (Roots, RootCertStore),
        sni: Option<String>,
        verify: bool,
        client_certificate: Option<Certificate>,
        ca_pem: &[u8],
        http2: bool,
    ) -> PoolTls {
        let (roots, anchors) = roots;
        let provider = provider();
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .expect("the provider supports TLS 1.2 and 1.3");
        let builder = if verify {
            builder.with_root_certificates(anchors)
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
        };
        let client_certificate = client_certificate.map(Arc::new);
        // rustls's default resumption (an in-memory store of 256 sessions behind a mutex, shared
        // by the workers) stays: it is touched once per new server connection, not per request.
        let mut config = match &client_certificate {
            Some(certificate) => {
                builder.with_client_cert_resolver(Arc::new(Presents(Arc::clone(&certificate.key))))
            }
            None => builder.with_no_client_auth(),
        };
        let alpn = if http2 { ALPN_H2 } else { ALPN_HTTP1 };
        config.alpn_protocols = vec![alpn.to_vec()];
        let mut digest = std::hash::DefaultHasher::new();
        (&roots, &sni, verify, http2).hash(&mut digest);
        if let Some(certificate) = &client_certificate {
            // The chain as loaded: a new key comes with a new certificate.
            (&certificate.chain_file, &certificate.key_file).hash(&mut digest);
            for der in &certificate.key.cert {
                der.as_ref().hash(&mut digest);
            }
        }
        ca_pem.hash(&mut digest);
        PoolTls {
            roots,
            sni,
            verify,
            client_certificate,
            client_config: Arc::new(config),
            fingerprint: digest.finish(),
        }
    }

    /// How the server at `addr`, whose own `sni` is `server_sni`, is connected to. A server on
    /// a UNIX socket is never in a pool with TLS (the check refuses it): it would be asked for
    /// `localhost`.
    pub fn for_server(&self, server_sni: Option<&str>, addr: &ServerAddr) -> ServerTls {
        let by_address = || match addr {
            ServerAddr::Tcp(addr) => ServerName::IpAddress(addr.ip().into()),
            ServerAddr::Unix(_) => ServerName::try_from("localhost").expect("a DNS name"),
        };
        let name = server_sni
            .or(self.sni.as_deref())
            .and_then(|name| ServerName::try_from(name.to_string()).ok())
            .unwrap_or_else(by_address);
        ServerTls {
            client_config: Arc::clone(&self.client_config),
            name,
        }
    }
}

/// Whether `name` can be sent in SNI and verified: a DNS name or an IP address.
pub fn is_server_name(name: &str) -> bool {
    ServerName::try_from(name).is_ok()
}

/// The system's trusted roots; the reason when none can be found.
pub fn load_system_roots() -> Result<RootCertStore, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map_or_else(|| "none installed".to_string(), |e| e.to_string());
        return Err(format!(
            "the system's trusted CA certificates cannot be read ({why}); install Debian's \
             ca-certificates or name the servers' CA, e.g. ca = \"/etc/herdsman/servers-ca.pem\""
        ));
    }
    Ok(roots)
}

/// The certificate herdsman presents to every server that asks for one.
#[derive(Debug)]
struct Presents(Arc<CertifiedKey>);

impl ResolvesClientCert for Presents {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// `verify = false`: any certificate is taken, but the handshake's signatures are still checked
/// (the server must hold the key of the certificate it shows, whatever that is).
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
