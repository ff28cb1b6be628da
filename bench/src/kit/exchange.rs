//! One request and its answer on a client connection, as the benchmarks' own client processes
//! make them (the fairness clients, the idle holders): `GET /` with keep-alive or with
//! `Connection: close`, the answer read to its end and required to be a 2xx.

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const KEEP_ALIVE: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
const CLOSE: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";

/// A request with `Connection: close`; the answer is read to EOF and must be a 2xx.
pub async fn closing_exchange(stream: &mut TcpStream) -> anyhow::Result<()> {
    stream.write_all(CLOSE).await?;
    let mut answer = Vec::with_capacity(256);
    stream.read_to_end(&mut answer).await?;
    check_status(&answer)
}

/// A keep-alive request; its answer is read up to the end of its Content-Length body.
pub async fn keep_alive_exchange(stream: &mut TcpStream) -> anyhow::Result<()> {
    stream.write_all(KEEP_ALIVE).await?;
    let mut answer = Vec::with_capacity(256);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(length) = complete_response_length(&answer)? {
            if answer.len() >= length {
                return check_status(&answer);
            }
        }
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            bail!("the connection closed before a whole response arrived");
        }
        answer.extend_from_slice(&chunk[..read]);
    }
}

/// The total length of the response (head + Content-Length body) once its head has arrived.
pub fn complete_response_length(bytes: &[u8]) -> anyhow::Result<Option<usize>> {
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = String::from_utf8_lossy(&bytes[..end]);
    let length = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .map(|(_, value)| value.trim().parse::<usize>())
        .context("a keep-alive response without Content-Length")?
        .context("a bad Content-Length")?;
    Ok(Some(end + 4 + length))
}

fn check_status(answer: &[u8]) -> anyhow::Result<()> {
    if answer.starts_with(b"HTTP/1.") && answer.get(9) == Some(&b'2') {
        Ok(())
    } else {
        let shown = String::from_utf8_lossy(&answer[..answer.len().min(40)]).to_string();
        bail!("answered {shown:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_ends_after_its_content_length() {
        let response = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(complete_response_length(&response[..10]).unwrap(), None);
        assert_eq!(
            complete_response_length(response).unwrap(),
            Some(response.len())
        );
        assert!(complete_response_length(b"HTTP/1.1 200 OK\r\n\r\n").is_err());
        assert!(check_status(response).is_ok());
        assert!(check_status(b"HTTP/1.1 502 Bad Gateway\r\n").is_err());
    }
}
