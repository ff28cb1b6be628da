//! TLS for the tests: a test CA that issues server certificates into files herdsman loads, a
//! rustls client that trusts it (blocking, over std's TcpStream, every read bounded), and the
//! `[listener.tls]` text that serves them.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, HandshakeKind, RootCertStore, StreamOwned};

use super::binary::fresh_temp_dir;
use super::heads::{Framing, Head, Response};
use super::IO_TIMEOUT;

/// The tests' certificate authority: made once per test binary.
pub struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pub der: CertificateDer<'static>,
    /// Its certificate as PEM, for curl's and openssl's `-CAfile`.
    pub pem_file: PathBuf,
}

impl TestCa {
    /// A new CA named `name` (its certificate's common name), its certificate in a file.
    fn new(name: &str, tag: &str) -> TestCa {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let certificate = params.self_signed(&key).unwrap();
        let pem_file = fresh_temp_dir(tag).join("ca.pem");
        std::fs::write(&pem_file, certificate.pem()).unwrap();
        TestCa {
            issuer: rcgen::Issuer::new(params, key),
            der: certificate.der().clone(),
            pem_file,
        }
    }

    /// A client certificate for `common_name` (with `uri` as its subject alternative name),
    /// issued by this CA: its files, and a client config that presents it.
    pub fn client_identity(&self, common_name: &str, uri: &str) -> ClientIdentity {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        params.subject_alt_names.push(rcgen::SanType::URI(
            rcgen::string::Ia5String::try_from(uri).unwrap(),
        ));
        let key = rcgen::KeyPair::generate().unwrap();
        let certificate = params.signed_by(&key, &self.issuer).unwrap();
        let dir = fresh_temp_dir(&format!("client-{common_name}"));
        let (chain, key_file) = (dir.join("chain.pem"), dir.join("key.pem"));
        std::fs::write(&chain, certificate.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(test_ca().der.clone()).unwrap();
        let private_key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        let mut config = ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(vec![certificate.der().clone()], private_key)
        .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        ClientIdentity {
            chain,
            key: key_file,
            der: certificate.der().clone(),
            config: Arc::new(config),
        }
    }
}

/// A client's certificate: its files (for curl and openssl), and a rustls config presenting it.
pub struct ClientIdentity {
    pub chain: PathBuf,
    pub key: PathBuf,
    pub der: CertificateDer<'static>,
    pub config: Arc<ClientConfig>,
}

/// The tests' CA, which issues the servers' certificates.
pub fn test_ca() -> &'static TestCa {
    static CA: OnceLock<TestCa> = OnceLock::new();
    CA.get_or_init(|| TestCa::new("herdsman test CA", "tls-ca"))
}

/// The CA that issues the clients' certificates (mTLS).
pub fn client_ca() -> &'static TestCa {
    static CA: OnceLock<TestCa> = OnceLock::new();
    CA.get_or_init(|| TestCa::new("herdsman test clients CA", "tls-client-ca"))
}

/// A CA no listener trusts.
pub fn stranger_ca() -> &'static TestCa {
    static CA: OnceLock<TestCa> = OnceLock::new();
    CA.get_or_init(|| TestCa::new("a stranger's CA", "tls-stranger-ca"))
}

/// A server certificate issued by the test CA, in files: `chain` (the certificate) and `key`.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub chain: PathBuf,
    pub key: PathBuf,
    pub der: CertificateDer<'static>,
}

impl CertFiles {
    /// A certificate for `names` (ECDSA P-256) in a directory of its own named after `tag`.
    pub fn issue(tag: &str, names: &[&str]) -> CertFiles {
        CertFiles::issue_with(tag, names, &rcgen::PKCS_ECDSA_P256_SHA256)
    }

    /// As [`CertFiles::issue`], with a key of `algorithm` (e.g. `rcgen::PKCS_RSA_SHA256`).
    pub fn issue_with(
        tag: &str,
        names: &[&str],
        algorithm: &'static rcgen::SignatureAlgorithm,
    ) -> CertFiles {
        let dir = fresh_temp_dir(&format!("tls-{tag}"));
        CertFiles::issue_into(&dir, names, algorithm)
    }

    /// Writes a new certificate for `names` to `dir`/chain.pem and `dir`/key.pem (replacing what
    /// is there).
    pub fn issue_into(
        dir: &Path,
        names: &[&str],
        algorithm: &'static rcgen::SignatureAlgorithm,
    ) -> CertFiles {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let params = rcgen::CertificateParams::new(names).unwrap();
        let key = rcgen::KeyPair::generate_for(algorithm).unwrap();
        let certificate = params.signed_by(&key, &test_ca().issuer).unwrap();
        let (chain, key_file) = (dir.join("chain.pem"), dir.join("key.pem"));
        std::fs::write(&chain, certificate.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        CertFiles {
            chain,
            key: key_file,
            der: certificate.der().clone(),
        }
    }

    /// This certificate as one entry of `certificates = [...]`.
    pub fn entry(&self) -> String {
        format!(
            "{{ chain = \"{}\", key = \"{}\" }}",
            self.chain.display(),
            self.key.display()
        )
    }
}

/// `[listener.tls]` serving `certs` (the first the default), then `extra` lines.
pub fn tls_table(certs: &[&CertFiles], extra: &str) -> String {
    let entries: Vec<String> = certs.iter().map(|c| c.entry()).collect();
    format!(
        "[listener.tls]\ncertificates = [{}]\n{extra}\n",
        entries.join(", ")
    )
}

/// A client config that trusts the test CA, speaks TLS 1.3 and 1.2, offers `http/1.1`, and
/// keeps sessions for resumption.
pub fn client_config() -> Arc<ClientConfig> {
    client_config_trusting(test_ca().der.clone())
}

/// As [`client_config`], trusting `root` alone (another CA's, such as Pebble's).
pub fn client_config_trusting(root: CertificateDer<'static>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(root).unwrap();
    let mut config = ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// A TLS client connection, blocking, with a read buffer.
pub struct TlsConn {
    pub stream: StreamOwned<ClientConnection, TcpStream>,
    buf: Vec<u8>,
}

impl TlsConn {
    /// Connects to `addr` and completes the handshake for `sni`, or returns why it failed.
    pub fn try_connect(
        addr: SocketAddr,
        sni: &str,
        config: &Arc<ClientConfig>,
    ) -> io::Result<TlsConn> {
        let tcp = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
        tcp.set_read_timeout(Some(IO_TIMEOUT))?;
        tcp.set_write_timeout(Some(IO_TIMEOUT))?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from(sni.to_string()).map_err(io::Error::other)?;
        let connection =
            ClientConnection::new(Arc::clone(config), name).map_err(io::Error::other)?;
        let mut stream = StreamOwned::new(connection, tcp);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(TlsConn {
            stream,
            buf: Vec::new(),
        })
    }

    pub fn connect(addr: SocketAddr, sni: &str) -> TlsConn {
        TlsConn::try_connect(addr, sni, &client_config())
            .unwrap_or_else(|e| panic!("TLS to {addr} as {sni}: {e}"))
    }

    /// The certificate the server presented.
    pub fn server_certificate(&self) -> CertificateDer<'static> {
        self.stream.conn.peer_certificates().unwrap()[0].clone()
    }

    pub fn resumed(&self) -> bool {
        self.stream.conn.handshake_kind() == Some(HandshakeKind::Resumed)
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
        self.stream.flush().unwrap();
    }

    fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 16384];
        let n = self.stream.read(&mut chunk)?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// Reads one response with a Content-Length (or none: then to the end of the stream).
    pub fn read_response(&mut self) -> io::Result<Response> {
        let end = loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            if self.fill()? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        };
        let head = Head::parse(self.buf[..end].to_vec());
        self.buf.drain(..end);
        let framing = head.response_framing(false);
        let body = match framing {
            Framing::None => Vec::new(),
            Framing::Length(length) => {
                let length = length as usize;
                while self.buf.len() < length {
                    if self.fill()? == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                }
                self.buf.drain(..length).collect()
            }
            Framing::Chunked => return Err(io::Error::other("chunked: not read by TlsConn")),
            Framing::Close => {
                while self.fill()? > 0 {}
                std::mem::take(&mut self.buf)
            }
        };
        Ok(Response {
            head,
            framing,
            body,
        })
    }

    pub fn roundtrip(&mut self, request: &[u8]) -> Response {
        self.send(request);
        self.read_response().expect("a response over TLS")
    }
}
