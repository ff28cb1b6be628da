//! The server behind every proxy of `slow-clients`, as gunicorn's sync workers are: `--workers`
//! threads, each serving one connection at a time, from accept to close. It reads the whole
//! request (the head, then a Content-Length body however slowly it comes), writes its answer as
//! fast as the connection takes it, with `Connection: close`, and closes: `/big` gets
//! `--answer-bytes` bytes, any other path the fast backend's 19. The hidden `sync-server`
//! subcommand, and starting it for a run.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::kit::backend::OK_CLOSE;
use crate::kit::process::{option_args, start_own_server, Supervised};

/// The hidden subcommand's name.
const SUBCOMMAND: &str = "sync-server";

/// gunicorn's default `backlog`: connections the kernel accepts and queues while every worker is
/// busy. A proxy's requests beyond the workers wait here, not refused.
const BACKLOG: libc::c_int = 2048;

/// The largest request head read; a larger one is answered 400.
const HEAD_LIMIT: usize = 16 * 1024;

/// A connection silent this long, either way, is dropped: nothing hangs for ever. Longer than
/// any run lasts, and a slow client is never silent (it moves every second); gunicorn's own
/// worker `timeout` (30 s by default), which restarts a worker stuck that long, is not modelled.
const SILENCE_LIMIT: Duration = Duration::from_secs(60);

/// `/big`'s body is this chunk, written again and again.
static CHUNK: [u8; 64 * 1024] = [b'x'; 64 * 1024];

const BAD_REQUEST: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Options of the hidden `sync-server` subcommand.
#[derive(Debug, clap::Args)]
pub struct SyncServerArgs {
    #[arg(long)]
    pub listen: SocketAddr,
    /// Worker threads, each serving one connection at a time.
    #[arg(long, default_value_t = 8)]
    pub workers: u32,
    /// The length of `/big`'s answer.
    #[arg(long)]
    pub answer_bytes: u64,
    /// SO_SNDBUF of every connection (the kernel doubles it); 0 leaves it to the kernel, which
    /// grows it up to net.ipv4.tcp_wmem's largest (4 MiB here).
    #[arg(long, default_value_t = 0)]
    pub send_buffer: u32,
}

impl SyncServerArgs {
    /// The arguments that give these options, after the subcommand.
    fn to_args(&self) -> Vec<String> {
        option_args([
            ("--listen", self.listen.to_string()),
            ("--workers", self.workers.to_string()),
            ("--answer-bytes", self.answer_bytes.to_string()),
            ("--send-buffer", self.send_buffer.to_string()),
        ])
    }
}

/// Starts the server as this program's `sync-server`, its log in `dir`, and waits until it
/// answers.
pub fn start(args: &SyncServerArgs, dir: &Path) -> anyhow::Result<Supervised> {
    let log = dir.join("sync-server.log");
    start_own_server(SUBCOMMAND, &args.to_args(), args.listen.port(), &log)
}

/// Serves until the process is killed (the benchmark owns it and stops it).
pub fn run(args: SyncServerArgs) -> anyhow::Result<()> {
    if args.workers == 0 {
        bail!("--workers must be at least 1");
    }
    let listener = listen(args.listen, args.send_buffer)
        .with_context(|| format!("listening on {}", args.listen))?;
    let big_head = Arc::new(format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        args.answer_bytes
    ));
    let mut workers = Vec::new();
    for _ in 0..args.workers {
        let listener = listener.try_clone()?;
        let big_head = Arc::clone(&big_head);
        let answer_bytes = args.answer_bytes;
        workers.push(std::thread::spawn(move || loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    let _ = serve_one(stream, big_head.as_bytes(), answer_bytes);
                }
                // Out of descriptors, or a connection reset before accept: not fatal; pause so
                // that a full descriptor table does not turn into a busy loop.
                Err(e) => {
                    eprintln!("accept: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }));
    }
    eprintln!(
        "sync-server on {}: {} workers, one connection each at a time; /big answers {} bytes",
        args.listen, args.workers, args.answer_bytes
    );
    for worker in workers {
        let _ = worker.join();
    }
    Ok(())
}

/// A listening socket with `BACKLOG` and, when not 0, `send_buffer` as SO_SNDBUF, which every
/// accepted connection inherits.
fn listen(addr: SocketAddr, send_buffer: u32) -> io::Result<TcpListener> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    if send_buffer > 0 {
        socket.set_send_buffer_size(send_buffer)?;
    }
    socket.bind(addr)?;
    // tokio's own listen would register the socket with a runtime, which this server has none
    // of: its workers block in accept.
    // SAFETY: listen(2) on the socket's own open descriptor.
    if unsafe { libc::listen(socket.as_raw_fd(), BACKLOG) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor is a listening TCP socket that nothing else owns from here on.
    let listener = unsafe { TcpListener::from_raw_fd(socket.into_raw_fd()) };
    // tokio made it non-blocking; the workers block in accept.
    listener.set_nonblocking(false)?;
    Ok(listener)
}

/// One connection, accept to close: the whole request, then the whole answer.
fn serve_one(mut stream: TcpStream, big_head: &[u8], answer_bytes: u64) -> io::Result<()> {
    stream.set_read_timeout(Some(SILENCE_LIMIT))?;
    stream.set_write_timeout(Some(SILENCE_LIMIT))?;
    stream.set_nodelay(true)?;
    let Some(request) = read_request(&mut stream)? else {
        return stream.write_all(BAD_REQUEST);
    };
    if request.big {
        stream.write_all(big_head)?;
        let mut left = answer_bytes;
        while left > 0 {
            let n = left.min(CHUNK.len() as u64) as usize;
            stream.write_all(&CHUNK[..n])?;
            left -= n as u64;
        }
        Ok(())
    } else {
        stream.write_all(OK_CLOSE)
    }
}

/// What the server needs of a request once it has read all of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Request {
    /// It asked for `/big`.
    big: bool,
}

/// Reads one request, head and body; None when the head is malformed or too large. A closed
/// connection before the request is whole is an error.
fn read_request(stream: &mut TcpStream) -> io::Result<Option<Request>> {
    let mut head = Vec::with_capacity(1024);
    let mut buffer = [0u8; 4096];
    loop {
        let n = stream.read(&mut buffer)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&buffer[..n]);
        match parse_head(&head) {
            Parsed::Partial if head.len() < HEAD_LIMIT => continue,
            Parsed::Partial | Parsed::Bad => return Ok(None),
            Parsed::Whole {
                request,
                head_length,
                body_length,
            } => {
                let already = (head.len() - head_length) as u64;
                let mut rest = body_length.saturating_sub(already);
                while rest > 0 {
                    let want = rest.min(buffer.len() as u64) as usize;
                    let n = stream.read(&mut buffer[..want])?;
                    if n == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                    rest -= n as u64;
                }
                return Ok(Some(request));
            }
        }
    }
}

/// A request head as far as it has come.
#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    Partial,
    Bad,
    Whole {
        request: Request,
        head_length: usize,
        body_length: u64,
    },
}

fn parse_head(bytes: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Request::new(&mut headers);
    let head_length = match parsed.parse(bytes) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Bad,
    };
    let mut body_length = 0;
    for header in parsed.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            match std::str::from_utf8(header.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
            {
                Some(length) => body_length = length,
                None => return Parsed::Bad,
            }
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            // No client of this benchmark sends a chunked body.
            return Parsed::Bad;
        }
    }
    Parsed::Whole {
        request: Request {
            big: parsed.path == Some("/big"),
        },
        head_length,
        body_length,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_give_the_path_and_the_body_length() {
        let post = b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nab";
        assert_eq!(
            parse_head(post),
            Parsed::Whole {
                request: Request { big: false },
                head_length: post.len() - 2,
                body_length: 1000
            }
        );
        let get = b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(
            parse_head(get),
            Parsed::Whole {
                request: Request { big: true },
                head_length: get.len(),
                body_length: 0
            }
        );
        assert_eq!(parse_head(b"GET /big HTTP/1.1\r\nHo"), Parsed::Partial);
        assert_eq!(
            parse_head(b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
            Parsed::Bad
        );
    }

    /// A whole server of two workers on a free port: one worker is held by a slow upload, the
    /// other still answers; the upload is answered once its body is whole; `/big` is as long as
    /// it says.
    #[test]
    fn each_worker_serves_one_whole_request_at_a_time() {
        let port = crate::kit::process::free_port().unwrap();
        let args = SyncServerArgs {
            listen: SocketAddr::from(([127, 0, 0, 1], port)),
            workers: 2,
            answer_bytes: 200_000,
            send_buffer: 0,
        };
        std::thread::spawn(move || run(args));
        let connect = || loop {
            if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) {
                stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                return stream;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut upload = connect();
        upload
            .write_all(b"POST /upload HTTP/1.1\r\nContent-Length: 3\r\n\r\na")
            .unwrap();
        let mut big = connect();
        big.write_all(b"GET /big HTTP/1.1\r\n\r\n").unwrap();
        let mut answer = Vec::new();
        big.read_to_end(&mut answer).unwrap();
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 200000\r\nConnection: close\r\n\r\n";
        assert_eq!(answer.len(), head.len() + 200_000);
        assert!(answer.starts_with(head));
        upload.write_all(b"bc").unwrap();
        let mut answer = Vec::new();
        upload.read_to_end(&mut answer).unwrap();
        assert_eq!(answer, OK_CLOSE);
    }
}
