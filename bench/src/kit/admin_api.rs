//! herdsman's admin API from outside: a `GET` on a fresh loopback connection (`Connection: close`)
//! whose answer must be a whole 200 with a body, a change (`POST`, `PUT`, `DELETE` with a JSON
//! body) timed to its answer's status, waiting until the API answers at all, and a metric's value
//! in its `/metrics` text.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::process::Supervised;

/// How long one GET may take, connect to last byte, before it counts as failed.
const GET_LIMIT: Duration = Duration::from_secs(2);

/// How long the admin API may take to answer its first `GET /healthz` once herdsman's listener
/// serves.
const ADMIN_READY_LIMIT: Duration = Duration::from_secs(5);

/// `GET path` on a fresh connection to 127.0.0.1:`port`; the body when the answer is 200 with a
/// non-empty body of its Content-Length.
pub fn get(port: u16, path: &str) -> anyhow::Result<Vec<u8>> {
    let mut stream = TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), GET_LIMIT)
        .with_context(|| format!("connecting to 127.0.0.1:{port}"))?;
    stream.set_read_timeout(Some(GET_LIMIT))?;
    stream.set_write_timeout(Some(GET_LIMIT))?;
    // One write: `write!` on the stream would send the head piece by piece.
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    // Connection: close, so the answer ends where the connection does.
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .with_context(|| format!("reading the answer to GET {path}"))?;
    body_of_ok(&answer).with_context(|| format!("GET {path}"))
}

/// How long a change may take to be answered: a reload of a large config parses and compiles it
/// all before it answers.
const CHANGE_LIMIT: Duration = Duration::from_secs(60);

/// `METHOD path` with `body` as JSON (none when empty) on a fresh connection to
/// 127.0.0.1:`port`: the answer's status and how long it took, from the request's first byte to
/// the answer's last. A change is answered once it applies, so the time is what it costs.
pub fn change(port: u16, method: &str, path: &str, body: &str) -> anyhow::Result<(u16, Duration)> {
    let mut stream = TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), GET_LIMIT)
        .with_context(|| format!("connecting to 127.0.0.1:{port}"))?;
    stream.set_read_timeout(Some(CHANGE_LIMIT))?;
    stream.set_write_timeout(Some(GET_LIMIT))?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let started = Instant::now();
    stream.write_all(request.as_bytes())?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .with_context(|| format!("reading the answer to {method} {path}"))?;
    let took = started.elapsed();
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    response
        .parse(&answer)
        .with_context(|| format!("parsing the answer to {method} {path}"))?;
    let status = response
        .code
        .with_context(|| format!("{method} {path}: the answer ended within its head"))?;
    Ok((status, took))
}

/// The body of a complete `200` answer whose body is as long as its Content-Length and not empty.
fn body_of_ok(answer: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let head_length = match response
        .parse(answer)
        .context("parsing the answer's head")?
    {
        httparse::Status::Complete(length) => length,
        httparse::Status::Partial => bail!("the answer ended within its head"),
    };
    if response.code != Some(200) {
        bail!(
            "answered {} {}",
            response.code.unwrap_or(0),
            response.reason.unwrap_or("")
        );
    }
    let announced = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| {
            std::str::from_utf8(h.value)
                .ok()?
                .trim()
                .parse::<usize>()
                .ok()
        })
        .context("no Content-Length")?;
    let body = &answer[head_length..];
    if body.len() != announced {
        bail!(
            "the body has {} bytes of the {announced} announced",
            body.len()
        );
    }
    if body.is_empty() {
        bail!("the body is empty");
    }
    Ok(body.to_vec())
}

/// Waits until `GET /healthz` on the admin API answers 200, or fails with the reason.
pub fn wait_for_admin(process: &mut Supervised, admin_port: u16) -> anyhow::Result<()> {
    let deadline = Instant::now() + ADMIN_READY_LIMIT;
    loop {
        process.check_running()?;
        match get(admin_port, "/healthz") {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                bail!(
                    "herdsman's admin API on 127.0.0.1:{admin_port} did not answer within \
                     {ADMIN_READY_LIMIT:?} ({e:#}); its log ends: {}",
                    process.log_tail(5)
                )
            }
            Err(_) => thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The sum of the samples of metric `name` in a `/metrics` text (every label set), or None when
/// it has none.
pub fn metric_sum(exposition: &str, name: &str) -> Option<f64> {
    let values: Vec<f64> = exposition
        .lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metric_is_summed_over_its_labels() {
        let text = "# HELP x\nherdsman_health_checker_cpu_seconds_total{mode=\"user\"} 1.5\n\
                    herdsman_health_checker_cpu_seconds_total{mode=\"system\"} 0.25\n\
                    herdsman_config_generation 7\nherdsman_config_generation_other 9\n";
        let checker = "herdsman_health_checker_cpu_seconds_total";
        assert_eq!(metric_sum(text, checker), Some(1.75));
        assert_eq!(metric_sum(text, "herdsman_config_generation"), Some(7.0));
        assert_eq!(metric_sum(text, "herdsman_nothing"), None);
    }

    #[test]
    fn only_a_whole_non_empty_200_counts() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc";
        assert_eq!(body_of_ok(ok).unwrap(), b"abc");
        let short = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc";
        assert!(format!("{:#}", body_of_ok(short).unwrap_err()).contains("3 bytes of the 5"));
        let empty = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert!(body_of_ok(empty).is_err());
        let refused = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\n\r\nno";
        assert!(format!("{:#}", body_of_ok(refused).unwrap_err()).contains("401"));
        assert!(body_of_ok(b"HTTP/1.1 200 OK\r\nContent-").is_err());
    }
}
