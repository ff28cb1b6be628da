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
    use std::io::ErrorKind::{Interrupted, WouldBlock, WriteZero};
    *written = match stream.try_write(bytes) {
        Ok(n) => n,
        Err(e) if matches!(e.kind(), WouldBlock | Interrupted) => 0,
        Err(e) => return Some(Err(e)),
    };
    if *written == bytes.len() {
        return Some(Ok(()));
    }
    let rest = async {
        while *written < bytes.len() {
            match stream.write(&bytes[*written..]).await {
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
