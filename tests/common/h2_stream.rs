//! An HTTP/2 client connection with one stream in flight, held open for as long as a test looks:
//! raw bytes (the preface, an empty SETTINGS, one GET's HEADERS) to an `h2c` listener, and a
//! server that holds every request until its gate opens. What `top` and the stats page show as
//! HTTP/2 connections and streams open.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use super::binary::{wait_listening, ChildGuard};
use super::mock::{free_port, Flow, Mock};
use super::start::Setup;
use super::sync::Gate;
use super::IO_TIMEOUT;

/// The longest a held request waits for its gate: past it the server answers anyway, so that a
/// test that fails before opening the gate leaves no thread behind for long.
const LONGEST_HOLD: Duration = Duration::from_secs(30);

impl Mock {
    /// Answers each request 200 with the body "held", once `gate` opens.
    pub fn holding(gate: Gate) -> Mock {
        Mock::start(move |ex| {
            ex.read_body()?;
            gate.wait(LONGEST_HOLD);
            ex.respond(200, &[], b"held")?;
            Ok(Flow::KeepAlive)
        })
    }
}

/// The herdsman binary with `workers` workers and its admin API, its listener taking h2c, in
/// front of one server that holds every request until `gate` opens.
pub struct HoldingH2c {
    /// Declared first so that it stops before its server goes.
    pub herdsman: ChildGuard,
    /// The listener (HTTP/1.1 and h2c).
    pub web: SocketAddr,
    pub admin: SocketAddr,
    pub server: Mock,
}

impl HoldingH2c {
    /// Starts it, and returns once its listener and admin API accept connections.
    pub fn start(workers: usize, gate: &Gate) -> HoldingH2c {
        let server = Mock::holding(gate.clone());
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let (herdsman, web) = Setup::new()
            .workers(workers)
            .admin_at(admin)
            .h2c()
            .server("a", server.addr)
            .start_binary();
        assert!(
            wait_listening(admin, Duration::from_secs(10)),
            "the admin API is not listening on {admin}"
        );
        HoldingH2c {
            herdsman,
            web,
            admin,
            server,
        }
    }

    /// A stream held in flight: `GET path` on a new HTTP/2 connection, once the server has it.
    pub fn hold(&self, path: &str) -> HeldStream {
        let held = HeldStream::open(self.web, path);
        assert!(
            self.server.wait_for_heads(1, Duration::from_secs(10)),
            "the request never reached the server"
        );
        held
    }
}

/// A raw HTTP/2 connection that has sent one GET (stream 1) and reads nothing until asked.
pub struct HeldStream {
    conn: TcpStream,
}

impl HeldStream {
    /// Connects to `addr` (an `h2c = true` listener) and sends `GET path` with `:authority` the
    /// address, its stream ended: the request is on its way to a server.
    pub fn open(addr: SocketAddr, path: &str) -> HeldStream {
        let mut conn = TcpStream::connect(addr).unwrap();
        conn.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        // SETTINGS, empty.
        bytes.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        // HPACK (RFC 7541 appendix A): :method GET (static index 2), :scheme http (6), then
        // :path and :authority as literals without indexing, their names from the static table
        // (4 and 1), values raw.
        let mut block = vec![0x82, 0x86];
        for (name_index, value) in [(0x04u8, path.to_string()), (0x01, addr.to_string())] {
            assert!(value.len() < 127, "{value} fits a one-byte length");
            block.push(name_index);
            block.push(value.len() as u8);
            block.extend_from_slice(value.as_bytes());
        }
        // HEADERS on stream 1, END_STREAM | END_HEADERS.
        let length = block.len() as u32;
        bytes.extend_from_slice(&length.to_be_bytes()[1..]);
        bytes.extend_from_slice(&[1, 0x05, 0, 0, 0, 1]);
        bytes.extend_from_slice(&block);
        conn.write_all(&bytes).unwrap();
        HeldStream { conn }
    }

    /// Reads until the connection has carried `wanted` (the held answer's body, say), or the
    /// read times out; whether it came.
    pub fn wait_for(&mut self, wanted: &[u8]) -> bool {
        let mut got = Vec::new();
        let mut buffer = [0u8; 4096];
        while !got.windows(wanted.len()).any(|w| w == wanted) {
            match self.conn.read(&mut buffer) {
                Ok(0) | Err(_) => return false,
                Ok(n) => got.extend_from_slice(&buffer[..n]),
            }
        }
        true
    }
}
