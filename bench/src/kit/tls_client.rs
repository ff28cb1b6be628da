//! The benchmarks' own TLS client (rustls on ring, blocking): a client configuration that trusts
//! exactly the certificates the benchmark made for itself, one connection with its handshake and
//! one request, and "does this TLS listener serve yet".
//!
//! Certificate verification is off for this client only: the proxies serve self-signed leaves made
//! at the start of the run, which no root store holds, so `PinnedCertificates` accepts a server
//! whose certificate is byte for byte one of those files (and nothing else), and still checks
//! the handshake's signature with that certificate's key, as a verifying client would (but for
//! `storm_config`, a load generator of new handshakes, which skips that one costly check).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, HandshakeKind, ProtocolVersion,
    SignatureScheme, StreamOwned,
};

use crate::kit::exchange::complete_response_length;

/// The name every benchmark certificate is made for, and the one the client asks for (SNI).
pub const SERVER_NAME: &str = "bench.test";

/// How long one connection's handshake and exchange may take.
const EXCHANGE_LIMIT: Duration = Duration::from_secs(10);

/// `GET /`, keep-alive.
pub const KEEP_ALIVE_GET: &[u8] = b"GET / HTTP/1.1\r\nHost: bench.test\r\n\r\n";

/// Accepts a server certificate when it is one of the pinned ones; handshake signatures are
/// checked with ring's algorithms.
#[derive(Debug)]
struct PinnedCertificates {
    pinned: Vec<CertificateDer<'static>>,
    algorithms: WebPkiSupportedAlgorithms,
    /// Whether the handshake's signature is checked; off only for a load generator of new
    /// handshakes, whose own checking would cost it more CPU than the server's signing.
    check_signatures: bool,
}

impl ServerCertVerifier for PinnedCertificates {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self
            .pinned
            .iter()
            .any(|pinned| pinned.as_ref() == end_entity.as_ref())
        {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        if !self.check_signatures {
            return Ok(HandshakeSignatureValid::assertion());
        }
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        if !self.check_signatures {
            return Ok(HandshakeSignatureValid::assertion());
        }
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The certificates in the PEM files `paths` (each file's first), to pin.
pub fn read_certificates(
    paths: &[impl AsRef<Path>],
) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    paths
        .iter()
        .map(|path| {
            let path = path.as_ref();
            CertificateDer::from_pem_file(path)
                .with_context(|| format!("reading a certificate from {}", path.display()))
        })
        .collect()
}

/// A client configuration that trusts only `pinned`, offers ALPN http/1.1 and TLS 1.2 and 1.3,
/// and resumes sessions (tickets, session ids) when `resume`; without, every handshake is full.
pub fn client_config(
    pinned: Vec<CertificateDer<'static>>,
    resume: bool,
) -> anyhow::Result<Arc<ClientConfig>> {
    config_with(pinned, resume, true)
}

/// `client_config` without resumption for a storm of new handshakes: the server's certificate is
/// still pinned, but its handshake signature is not checked, since checking an ECDSA signature
/// costs a client more than making it costs the server, and the storm is to load the server.
pub fn storm_config(pinned: Vec<CertificateDer<'static>>) -> anyhow::Result<Arc<ClientConfig>> {
    config_with(pinned, false, false)
}

fn config_with(
    pinned: Vec<CertificateDer<'static>>,
    resume: bool,
    check_signatures: bool,
) -> anyhow::Result<Arc<ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = PinnedCertificates {
        pinned,
        algorithms: provider.signature_verification_algorithms,
        check_signatures,
    };
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("the TLS client's protocol versions")?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    if !resume {
        config.resumption = Resumption::disabled();
    }
    Ok(Arc::new(config))
}

/// What one connection's handshake and exchange came to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exchanged {
    pub status: u16,
    pub version: Option<ProtocolVersion>,
    pub kind: Option<HandshakeKind>,
}

/// Connects to 127.0.0.1:`port`, completes a handshake, sends `request` and reads its whole answer
/// (by its Content-Length); returns the socket, its TLS state dropped (the connection stays open
/// for a holder that only keeps it), and what the exchange came to.
pub fn exchange(
    config: &Arc<ClientConfig>,
    port: u16,
    request: &[u8],
) -> anyhow::Result<(TcpStream, Exchanged)> {
    let socket = TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), EXCHANGE_LIMIT)
        .with_context(|| format!("connecting to 127.0.0.1:{port}"))?;
    socket.set_read_timeout(Some(EXCHANGE_LIMIT))?;
    socket.set_write_timeout(Some(EXCHANGE_LIMIT))?;
    socket.set_nodelay(true)?;
    let name = ServerName::try_from(SERVER_NAME)?;
    let connection = ClientConnection::new(Arc::clone(config), name)?;
    let mut stream = StreamOwned::new(connection, socket);
    // The first write completes the handshake before the request goes out.
    stream
        .write_all(request)
        .with_context(|| format!("the handshake with 127.0.0.1:{port}"))?;
    stream.flush()?;
    let answer = read_answer(&mut stream)?;
    let exchanged = Exchanged {
        status: status_of(&answer)?,
        version: stream.conn.protocol_version(),
        kind: stream.conn.handshake_kind(),
    };
    Ok((stream.sock, exchanged))
}

/// Reads one answer up to the end of its Content-Length body.
fn read_answer(stream: &mut impl Read) -> anyhow::Result<Vec<u8>> {
    let mut answer = Vec::with_capacity(256);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(length) = complete_response_length(&answer)? {
            if answer.len() >= length {
                return Ok(answer);
            }
        }
        let read = stream.read(&mut chunk).context("reading the answer")?;
        if read == 0 {
            bail!("the connection closed before a whole answer arrived");
        }
        answer.extend_from_slice(&chunk[..read]);
    }
}

/// The status code of an answer's first line.
fn status_of(answer: &[u8]) -> anyhow::Result<u16> {
    let line = answer.split(|&b| b == b'\r').next().unwrap_or_default();
    let text = String::from_utf8_lossy(line);
    text.strip_prefix("HTTP/1.")
        .and_then(|rest| rest.get(2..5))
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("not an HTTP answer: {text:?}"))
}

/// Ok when `request` over a fresh TLS connection to 127.0.0.1:`port` is answered 2xx.
pub fn probe_with(config: &Arc<ClientConfig>, port: u16, request: &[u8]) -> anyhow::Result<()> {
    let (_, exchanged) = exchange(config, port, request)?;
    if !(200..300).contains(&exchanged.status) {
        bail!("answered {}", exchanged.status);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_read_to_its_length_and_its_status_taken() {
        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcEXTRA";
        let read = read_answer(&mut &answer[..]).unwrap();
        assert_eq!(read.len(), answer.len());
        assert_eq!(status_of(&read).unwrap(), 200);
        assert_eq!(status_of(b"HTTP/1.0 502 Bad Gateway\r\n").unwrap(), 502);
        assert!(status_of(b"SSH-2.0").is_err());
        assert!(read_answer(&mut &b"HTTP/1.1 200 OK\r\nContent-Le"[..]).is_err());
    }

    #[test]
    fn only_the_pinned_certificate_is_accepted() {
        let provider = rustls::crypto::ring::default_provider();
        let verifier = PinnedCertificates {
            pinned: vec![CertificateDer::from(vec![1, 2, 3])],
            algorithms: provider.signature_verification_algorithms,
            check_signatures: true,
        };
        let name = ServerName::try_from(SERVER_NAME).unwrap();
        let check = |bytes: Vec<u8>| {
            verifier.verify_server_cert(
                &CertificateDer::from(bytes),
                &[],
                &name,
                &[],
                UnixTime::now(),
            )
        };
        assert!(check(vec![1, 2, 3]).is_ok());
        assert!(check(vec![1, 2, 4]).is_err());
        assert!(!verifier.supported_verify_schemes().is_empty());
    }
}
