//! The encoders, one per compressed answer: zstd (C library, window 128 KiB), brotli (pure
//! Rust, window 256 KiB) and gzip (flate2 on zlib-rs, window 32 KiB). Each piece of the body
//! is compressed and flushed at once — a sync flush for gzip, a flush operation for brotli and
//! zstd — so every byte the server sent can be decoded from what the client got so far: an event
//! stream's events are not held back until a window fills. Memory each holds, measured in
//! `bench/results/compression-levels.md`: brotli 4 1,988 KiB, gzip 5 403 KiB, zstd 3 about
//! 1 MiB (its C library's, estimated from its parameters), freed when the answer ends.

use std::io::{self, Write};

use super::Compressing;
use crate::config::Algorithm;

/// Log₂ of zstd's window: 128 KiB (its default at level 3 is 2 MiB for a stream of unknown
/// length; a proxy holding one per answer keeps it small, and text answers rarely repeat
/// further back than that).
const ZSTD_WINDOW_LOG: u32 = 17;
/// Log₂ of brotli's window: 256 KiB (its default is 4 MiB).
const BROTLI_WINDOW_LOG: u32 = 18;
/// Brotli's buffer of compressed bytes before they reach the output.
const BROTLI_BUFFER: usize = 4096;

/// One answer's encoder, writing into a byte vector the caller empties after each piece.
pub enum Encoder {
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    /// Ended: its last bytes are here.
    Finished(Vec<u8>),
}

impl Encoder {
    pub fn new(compressing: Compressing) -> io::Result<Encoder> {
        let level = i32::from(compressing.level);
        Ok(match compressing.algorithm {
            Algorithm::Zstd => {
                let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), level)?;
                encoder.set_parameter(zstd::stream::raw::CParameter::WindowLog(ZSTD_WINDOW_LOG))?;
                Encoder::Zstd(encoder)
            }
            Algorithm::Brotli => Encoder::Brotli(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                BROTLI_BUFFER,
                level as u32,
                BROTLI_WINDOW_LOG,
            ))),
            Algorithm::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(level as u32),
            )),
        })
    }

    /// Compresses `input` and flushes: what [`Encoder::output`] holds then decodes to every
    /// byte given so far.
    pub fn push(&mut self, input: &[u8]) -> io::Result<()> {
        match self {
            Encoder::Zstd(encoder) => flush_after(encoder, input),
            Encoder::Brotli(encoder) => flush_after(encoder.as_mut(), input),
            Encoder::Gzip(encoder) => flush_after(encoder, input),
            Encoder::Finished(_) => Err(io::Error::other("compressing after the end")),
        }
    }

    /// Ends the stream: its last bytes (a gzip trailer, the final blocks) go to the output.
    pub fn finish(&mut self) -> io::Result<()> {
        let ended = std::mem::replace(self, Encoder::Finished(Vec::new()));
        let last = match ended {
            Encoder::Zstd(encoder) => encoder.finish()?,
            Encoder::Brotli(encoder) => encoder.into_inner(),
            Encoder::Gzip(encoder) => encoder.finish()?,
            Encoder::Finished(bytes) => bytes,
        };
        *self = Encoder::Finished(last);
        Ok(())
    }

    /// The compressed bytes not yet taken.
    pub fn output(&mut self) -> &mut Vec<u8> {
        match self {
            Encoder::Zstd(encoder) => encoder.get_mut(),
            Encoder::Brotli(encoder) => encoder.get_mut(),
            Encoder::Gzip(encoder) => encoder.get_mut(),
            Encoder::Finished(bytes) => bytes,
        }
    }
}

fn flush_after(encoder: &mut impl Write, input: &[u8]) -> io::Result<()> {
    encoder.write_all(input)?;
    encoder.flush()
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Read;

    use super::*;

    /// `bytes` decoded as `algorithm` wrote them.
    pub(crate) fn decoded(algorithm: Algorithm, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match algorithm {
            Algorithm::Zstd => {
                zstd::stream::read::Decoder::new(bytes)
                    .unwrap()
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Algorithm::Brotli => {
                brotli::Decompressor::new(bytes, 4096)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Algorithm::Gzip => {
                flate2::read::GzDecoder::new(bytes)
                    .read_to_end(&mut out)
                    .unwrap();
            }
        }
        out
    }

    #[test]
    fn each_piece_decodes_as_soon_as_it_is_pushed_and_the_whole_at_the_end() {
        for algorithm in Algorithm::ALL {
            let mut encoder = Encoder::new(Compressing {
                algorithm,
                level: 3,
            })
            .unwrap();
            let mut sent = Vec::new();
            encoder.push(b"data: first event\n\n").unwrap();
            sent.append(encoder.output());
            // A streaming decoder reads the first event before the stream ends.
            let mut partial = Vec::new();
            match algorithm {
                Algorithm::Gzip => {
                    let _ = flate2::read::GzDecoder::new(&sent[..]).read_to_end(&mut partial);
                }
                Algorithm::Brotli => {
                    let _ = brotli::Decompressor::new(&sent[..], 4096).read_to_end(&mut partial);
                }
                Algorithm::Zstd => {
                    let _ = zstd::stream::read::Decoder::new(&sent[..])
                        .unwrap()
                        .read_to_end(&mut partial);
                }
            }
            assert_eq!(partial, b"data: first event\n\n", "{algorithm:?}");
            encoder.push(&b"x".repeat(100_000)).unwrap();
            sent.append(encoder.output());
            encoder.finish().unwrap();
            sent.append(encoder.output());
            let whole = [&b"data: first event\n\n"[..], &b"x".repeat(100_000)].concat();
            assert_eq!(decoded(algorithm, &sent), whole, "{algorithm:?}");
            assert!(sent.len() < 2000, "{algorithm:?}: {}", sent.len());
        }
    }
}
