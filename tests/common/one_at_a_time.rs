//! A server like gunicorn's sync workers (Unicorn, PHP-FPM): a few threads, each serving one
//! connection at a time from accept to close. What `[buffering]` protects: a slow client that
//! reached it directly would hold one of its workers for as long as it liked. And the GET that
//! tells whether a worker is free.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use super::{get_request, Conn};

/// Worker threads of the one-at-a-time server.
pub const SERVER_WORKERS: usize = 4;

/// Starts the server: `SERVER_WORKERS` threads, each taking one connection, reading its head and
/// its whole body (however slowly it comes), answering, and closing. `GET /big/<n>` answers `n`
/// bytes of [`big_byte`] as fast as the client side takes them; anything else answers `200 ok`.
pub fn start_one_at_a_time_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    for _ in 0..SERVER_WORKERS {
        let listener = listener.try_clone().unwrap();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = serve_one(stream);
            }
        });
    }
    addr
}

/// Byte `i` of a `/big/<n>` answer.
pub fn big_byte(i: u64) -> u8 {
    (i % 251) as u8
}

fn serve_one(stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut length = 0u64;
    let mut request_line = String::new();
    if reader.read_line(&mut request_line)? == 0 {
        return Ok(());
    }
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    // The body, read whole and counted (it may be large).
    let read = std::io::copy(&mut (&mut reader).take(length), &mut std::io::sink())?;
    let mut stream = stream;
    let target = request_line.split(' ').nth(1).unwrap_or("/");
    if let Some(size) = target
        .strip_prefix("/big/")
        .and_then(|n| n.parse::<u64>().ok())
    {
        let head =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n");
        stream.write_all(head.as_bytes())?;
        // A whole number of the pattern's periods, so that blocks follow on.
        let block: Vec<u8> = (0..251 * 256).map(big_byte).collect();
        let mut left = size;
        while left > 0 {
            let n = left.min(block.len() as u64) as usize;
            stream.write_all(&block[..n])?;
            left -= n as u64;
        }
        return Ok(());
    }
    let answer = format!("{read}");
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
        answer.len()
    );
    stream.write_all(head.as_bytes())
}

/// How long a GET through herdsman took to be answered 200, or `None` within `patience`.
pub fn time_a_get(herdsman: SocketAddr, patience: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut client = Conn::connect(herdsman);
    client.set_read_timeout(patience);
    client.send(&get_request("/", ""));
    match client.read_head() {
        Ok(Some(head)) if head.status() == 200 => Some(started.elapsed()),
        _ => None,
    }
}

/// The median time of five GETs answered one after another (`None` when one was not answered
/// within `patience`): one GET on a shared test machine can wait out a scheduling hiccup.
pub fn median_get_time(herdsman: SocketAddr, patience: Duration) -> Option<Duration> {
    let mut times = Vec::new();
    for _ in 0..5 {
        times.push(time_a_get(herdsman, patience)?);
    }
    times.sort();
    Some(times[2])
}
