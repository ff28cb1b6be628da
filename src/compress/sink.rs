//! The writer between a response body's relay and its client when the answer is compressed:
//! each piece the relay writes (one read from the server, its chunk framing taken off) is
//! compressed and flushed, framed as one chunk (or sent bare to an HTTP/1.0 client, whose body
//! ends with the connection), and written whole before the write reports done — so the relay
//! reads the server again only once the client has all it sent so far.

use std::future::poll_fn;
use std::io::{self, Write};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::AsyncWrite;

use super::Encoder;

/// An `AsyncWrite` that compresses what it is given into `inner`.
pub struct CompressingSink<'w, W> {
    inner: &'w mut W,
    encoder: Encoder,
    /// Frame each piece as a chunk (an HTTP/1.1 client; HTTP/2's session reads the chunks back
    /// into DATA frames).
    chunked: bool,
    /// Bytes for `inner`, framed, and how many of them went.
    pending: Vec<u8>,
    written: usize,
    /// The length of the piece in `pending`, reported once all of it went.
    absorbed: Option<usize>,
    /// Body bytes taken, and compressed bytes made (framing not counted).
    pub bytes_in: u64,
    pub bytes_out: u64,
}

impl<'w, W: AsyncWrite + Unpin> CompressingSink<'w, W> {
    pub fn new(inner: &'w mut W, encoder: Encoder, chunked: bool) -> Self {
        CompressingSink {
            inner,
            encoder,
            chunked,
            pending: Vec::new(),
            written: 0,
            absorbed: None,
            bytes_in: 0,
            bytes_out: 0,
        }
    }

    /// Ends the compressed stream and, when chunked, the body: written whole.
    pub async fn finish(&mut self) -> io::Result<()> {
        poll_fn(|cx| self.poll_drain(cx)).await?;
        self.encoder.finish()?;
        self.frame();
        if self.chunked {
            self.pending.extend_from_slice(b"0\r\n\r\n");
        }
        poll_fn(|cx| self.poll_drain(cx)).await
    }

    /// Moves what the encoder made into `pending`, framed.
    fn frame(&mut self) {
        let output = self.encoder.output();
        if output.is_empty() {
            return;
        }
        self.bytes_out += output.len() as u64;
        if self.chunked {
            // Writing into a vector cannot fail.
            let _ = write!(self.pending, "{:x}\r\n", output.len());
            self.pending.extend_from_slice(output);
            self.pending.extend_from_slice(b"\r\n");
        } else {
            self.pending.extend_from_slice(output);
        }
        output.clear();
    }

    /// Writes `pending` to `inner`, all of it.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let rest = &self.pending[self.written..];
            match ready!(Pin::new(&mut *self.inner).poll_write(cx, rest)) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(n) => self.written += n,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for CompressingSink<'_, W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        piece: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.absorbed.is_none() {
            this.encoder.push(piece)?;
            this.bytes_in += piece.len() as u64;
            this.frame();
            this.absorbed = Some(piece.len());
        }
        ready!(this.poll_drain(cx))?;
        Poll::Ready(Ok(this.absorbed.take().unwrap_or(0)))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut *self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut *self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;
    use crate::compress::encoder::tests::decoded;
    use crate::compress::Compressing;
    use crate::config::Algorithm;

    /// The data of a chunked body, and whether it ended with its last chunk.
    fn dechunked(mut framed: &[u8]) -> (Vec<u8>, bool) {
        let mut data = Vec::new();
        loop {
            let Some(end) = framed.windows(2).position(|w| w == b"\r\n") else {
                return (data, false);
            };
            let size =
                usize::from_str_radix(std::str::from_utf8(&framed[..end]).unwrap(), 16).unwrap();
            if size == 0 {
                return (data, &framed[end..] == b"\r\n\r\n");
            }
            data.extend_from_slice(&framed[end + 2..end + 2 + size]);
            framed = &framed[end + 2 + size + 2..];
        }
    }

    #[tokio::test]
    async fn pieces_go_out_as_chunks_that_decode_to_the_body() {
        for algorithm in Algorithm::ALL {
            let mut out = Vec::new();
            let encoder = Encoder::new(Compressing {
                algorithm,
                level: 1,
            })
            .unwrap();
            let mut sink = CompressingSink::new(&mut out, encoder, true);
            sink.write_all(b"hello, ").await.unwrap();
            sink.write_all(b"world").await.unwrap();
            sink.finish().await.unwrap();
            let (bytes_in, bytes_out) = (sink.bytes_in, sink.bytes_out);
            let (data, ended) = dechunked(&out);
            assert!(ended, "{algorithm:?}");
            assert_eq!(data.len() as u64, bytes_out);
            assert_eq!(bytes_in, 12);
            assert_eq!(decoded(algorithm, &data), b"hello, world", "{algorithm:?}");
        }
    }
}
