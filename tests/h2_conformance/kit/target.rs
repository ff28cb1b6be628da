//! The herdsman the cases talk to: one per kind of config and transport, started once for the
//! whole binary (in this process, on 127.0.0.1) in front of one mock server, and kept running
//! until the binary exits. Each case opens connections of its own to it.

use std::net::SocketAddr;
use std::sync::OnceLock;

use crate::common::*;

/// How a case reaches herdsman: cleartext HTTP/2 with prior knowledge (a listener with
/// `h2c = true`), or TLS with `h2` agreed by ALPN (`http2 = true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    H2c,
    Tls,
}

/// Which config herdsman runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The defaults of `[http2]`.
    Default,
    /// `[http2] max_concurrent_streams = 2`, for §5.1.2.
    FewStreams,
}

/// The name herdsman's certificate is for (the TLS client asks for it by SNI).
pub const SERVER_NAME: &str = "conformance.test";

/// What the mock server answers a GET without a body with (a request with one gets it back).
pub const GREETING: &[u8] = b"herdsman conformance";

/// Request fields the mock server echoes back as response fields, so that a case can see what
/// reached the server: (request field, response field).
const ECHOED: [(&str, &str); 4] = [
    ("x-conformance", "x-seen-conformance"),
    ("cookie", "x-seen-cookie"),
    ("host", "x-seen-host"),
    ("te", "x-seen-te"),
];

/// The server behind every herdsman: 200 with the request's body (or [`GREETING`]), the
/// method and target, and the fields of [`ECHOED`]; a HEAD is answered with the length of
/// the greeting and no body; `/connection-fields` is answered chunked, with the fields HTTP/2
/// forbids (§8.2.2) that herdsman must leave out; `/trailers` is answered chunked with a trailer
/// section; a request that expects `100-continue` gets it first.
fn mock_server() -> Mock {
    Mock::start(|ex| {
        if ex.head.has_token("expect", "100-continue") {
            ex.write(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        }
        let body = ex.read_body()?;
        let method = ex.head.method().to_string();
        let target = ex.head.target().to_string();
        if target == "/connection-fields" {
            ex.write(
                b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\
                  Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            )?;
            return Ok(Flow::KeepAlive);
        }
        if target == "/trailers" {
            ex.write(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: x-checksum\r\n\r\n\
                  5\r\nhello\r\n0\r\nx-checksum: 42\r\n\r\n",
            )?;
            return Ok(Flow::KeepAlive);
        }
        let mut fields = vec![("X-Method", method.clone()), ("X-Target", target)];
        for (request, response) in ECHOED {
            if let Some(value) = ex.head.header(request) {
                fields.push((response, value.to_string()));
            }
        }
        let fields: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (*n, v.as_str())).collect();
        if method == "HEAD" {
            let mut head = "HTTP/1.1 200 OK\r\n".to_string();
            for (name, value) in &fields {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str(&format!("Content-Length: {}\r\n\r\n", GREETING.len()));
            ex.write(head.as_bytes())?;
        } else if body.is_empty() {
            ex.respond(200, &fields, GREETING)?;
        } else {
            ex.respond(200, &fields, &body)?;
        }
        Ok(Flow::KeepAlive)
    })
}

/// The config text of `target` over `transport`, in front of `server`.
fn config(target: Target, transport: Transport, server: SocketAddr) -> String {
    let listener = match transport {
        Transport::H2c => "h2c = true\n".to_string(),
        Transport::Tls => {
            let certs = CertFiles::issue("h2-conformance", &[SERVER_NAME]);
            format!("http2 = true\n{}", tls_table(&[&certs], ""))
        }
    };
    let http2 = match target {
        Target::Default => "",
        Target::FewStreams => "\n[http2]\nmax_concurrent_streams = 2\n",
    };
    let text = Setup::new().server("a", server).toml("127.0.0.1:0");
    let text = text.replacen(
        "pool = \"app\"\n\n",
        &format!("pool = \"app\"\n{listener}\n"),
        1,
    );
    text + http2
}

/// Where herdsman for `target` over `transport` listens (started at the first call).
pub fn address(target: Target, transport: Transport) -> SocketAddr {
    static STARTED: [OnceLock<SocketAddr>; 4] = [const { OnceLock::new() }; 4];
    let slot = match (target, transport) {
        (Target::Default, Transport::H2c) => 0,
        (Target::Default, Transport::Tls) => 1,
        (Target::FewStreams, Transport::H2c) => 2,
        (Target::FewStreams, Transport::Tls) => 3,
    };
    *STARTED[slot].get_or_init(|| {
        let server = mock_server();
        let proxy = Proxy::start(&config(target, transport, server.addr));
        let addr = proxy.addr;
        // Both serve every case of the binary, and end with it.
        std::mem::forget(proxy);
        std::mem::forget(server);
        addr
    })
}
