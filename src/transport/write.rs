//! Writes bounded by a deadline, which arm a timer only when the socket cannot take the bytes at
//! once.

use super::clock::Moment;
use tokio::io::AsyncWriteExt;

use super::deadline::timeout_at;

use super::Stream;

/// Writes all of `bytes` to `stream` by `deadline`; `None` if the deadline passed first.
/// `written` counts the bytes written so far, also when it fails. Most writes fit the socket's
/// buffer and are done by the first try, which arms no timer: setting up and dropping a timeout
/// that is never waited on cost about 250 instructions a write (bench/results/optimisation.md).
/// Same syscalls: a try that would block makes none (tokio knows the socket is not writable) or
/// is the first `write` of the timed loop.
pub async fn write_all_by(
    stream: &mut Stream,
    bytes: &[u8],
    deadline: Moment,
    written: &mut usize,
) -> Option<std::io::Result<()>> {
    *written = match first_try(stream.try_write(bytes)) {
        Ok(n) => n,
        Err(e) => return Some(Err(e)),
    };
    if *written == bytes.len() {
        return Some(Ok(()));
    }
    finish(stream, bytes, &[], deadline, written).await
}

/// As [`write_all_by`], for `first` and then `second` (a cached answer's head and its stored
/// body): over TCP the first try writes both in one system call (and on loopback one segment),
/// where two writes would make two of each. `written` counts over both. The first try is not
/// shared with `write_all_by` through one more async function: that layer cost every keep-alive
/// request about 130 instructions (callgrind, 9,095 → 9,226).
pub async fn write_two_by(
    stream: &mut Stream,
    first: &[u8],
    second: &[u8],
    deadline: Moment,
    written: &mut usize,
) -> Option<std::io::Result<()>> {
    *written = match first_try(stream.try_write_two(first, second)) {
        Ok(n) => n,
        Err(e) => return Some(Err(e)),
    };
    if *written == first.len() + second.len() {
        return Some(Ok(()));
    }
    finish(stream, first, second, deadline, written).await
}

/// A first try's bytes written: none when the socket would block (or the call was interrupted).
#[inline]
fn first_try(tried: std::io::Result<usize>) -> std::io::Result<usize> {
    use std::io::ErrorKind::{Interrupted, WouldBlock};
    match tried {
        Err(e) if matches!(e.kind(), WouldBlock | Interrupted) => Ok(0),
        tried => tried,
    }
}

/// Writes the rest of `first` and then `second`, `written` bytes of them being written, waiting
/// for room by `deadline`.
async fn finish(
    stream: &mut Stream,
    first: &[u8],
    second: &[u8],
    deadline: Moment,
    written: &mut usize,
) -> Option<std::io::Result<()>> {
    use std::io::ErrorKind::{Interrupted, WriteZero};
    let total = first.len() + second.len();
    let rest = async {
        while *written < total {
            let left = match first.get(*written..) {
                Some(left) if !left.is_empty() => left,
                _ => &second[*written - first.len()..],
            };
            match stream.write(left).await {
                Ok(0) => return Err(std::io::Error::from(WriteZero)),
                Ok(n) => *written += n,
                Err(e) if e.kind() == Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    };
    timeout_at(deadline, rest).await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    /// More than loopback's socket buffers hold, so the first try writes only part of it.
    const LARGE: usize = 8 * 1024 * 1024;

    async fn connected_pair() -> (Stream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let writer = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (reader, _) = listener.accept().await.unwrap();
        (Stream::Tcp(writer), reader)
    }

    #[tokio::test]
    async fn a_write_too_large_for_the_socket_sends_every_byte_once_and_in_order() {
        let (mut writer, mut reader) = connected_pair().await;
        let bytes: Vec<u8> = (0..LARGE).map(|i| (i % 251) as u8).collect();
        let read = tokio::spawn(async move {
            let mut got = Vec::with_capacity(LARGE);
            reader.read_to_end(&mut got).await.unwrap();
            got
        });
        let deadline = Moment::now() + Duration::from_secs(10);
        let written = write_all_by(&mut writer, &bytes, deadline, &mut 0).await;
        assert!(matches!(written, Some(Ok(()))), "{written:?}");
        drop(writer);
        assert!(read.await.unwrap() == bytes, "the reader got other bytes");
    }

    #[tokio::test]
    async fn a_head_and_a_body_too_large_for_the_socket_arrive_whole_and_in_order() {
        let (mut writer, mut reader) = connected_pair().await;
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 8388608\r\n\r\n".to_vec();
        let body: Vec<u8> = (0..LARGE).map(|i| (i % 251) as u8).collect();
        let read = tokio::spawn(async move {
            let mut got = Vec::with_capacity(LARGE);
            reader.read_to_end(&mut got).await.unwrap();
            got
        });
        let deadline = Moment::now() + Duration::from_secs(10);
        let mut written = 0;
        let sent = write_two_by(&mut writer, &head, &body, deadline, &mut written).await;
        assert!(matches!(sent, Some(Ok(()))), "{sent:?}");
        assert_eq!(written, head.len() + body.len());
        drop(writer);
        let got = read.await.unwrap();
        assert!(
            got.len() == head.len() + body.len(),
            "got {} bytes",
            got.len()
        );
        assert!(got[..head.len()] == head[..], "the head is not first");
        assert!(got[head.len()..] == body[..], "the body came otherwise");
    }

    #[tokio::test]
    async fn a_write_to_a_peer_that_does_not_read_ends_at_the_deadline() {
        let (mut writer, _reader) = connected_pair().await;
        let bytes = vec![b'x'; LARGE];
        let started = Moment::now();
        let deadline = started + Duration::from_millis(100);
        let written = write_all_by(&mut writer, &bytes, deadline, &mut 0).await;
        assert!(written.is_none(), "{written:?}");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(100), "ended after {took:?}");
        assert!(took < Duration::from_secs(5), "ended after {took:?}");
    }
}
