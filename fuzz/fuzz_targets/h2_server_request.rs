//! Fuzzes the reader that turns the exchange's request to an HTTP/2 server (HTTP/1.1 bytes) into
//! the stream's pieces (`http2::servers::request`): never a panic; the same pieces — the head,
//! body bytes, trailers, the end — or the same refusal, whether the bytes come whole or one at a
//! time (but for a broken head one way calls incomplete, see below); a head it makes is an HPACK
//! block that decodes, whose pseudo-fields come first — a method, a scheme, an authority and a
//! path — and whose fields are lowercase, none of them one HTTP/2 forbids (RFC 9113 §8.2.2).
//!
//! Input: a byte whose low bit says the server is reached over TLS (the seeds write `0` or `1`),
//! then the exchange's bytes.
#![no_main]

use herdsman::http2::body::{forbidden_name, BodyPiece};
use herdsman::http2::hpack::Decoder;
use herdsman::http2::servers::request::{RequestPiece, RequestReader};
use libfuzzer_sys::fuzz_target;

/// What the pieces say, body bytes joined (their split follows the writes), and how it ended.
#[derive(Debug, PartialEq)]
struct Read {
    head: Option<String>,
    body: Vec<u8>,
    trailers: Vec<String>,
    ends: usize,
    refused: bool,
}

fn note(read: &mut Read, piece: RequestPiece, input: &[u8]) {
    match piece {
        RequestPiece::Head { block, ends, .. } => {
            let mut fields = Vec::new();
            Decoder::new(4096)
                .decode(&block, &mut Vec::new(), |name, value| {
                    fields.push((name.to_vec(), value.to_vec()));
                    Ok::<(), ()>(())
                })
                .expect("a head's block decodes");
            let pseudo: Vec<&[u8]> = fields
                .iter()
                .take_while(|(name, _)| name.starts_with(b":"))
                .map(|(name, _)| &name[..])
                .collect();
            assert_eq!(
                pseudo,
                [&b":method"[..], b":scheme", b":authority", b":path"]
            );
            assert!(
                !fields[2].1.is_empty() && !fields[3].1.is_empty(),
                "{fields:?}"
            );
            for (name, value) in &fields[4..] {
                assert!(!name.starts_with(b":"), "a late pseudo-field in {fields:?}");
                assert!(!name.iter().any(u8::is_ascii_uppercase), "{fields:?}");
                assert!(!forbidden_name(name), "{fields:?}");
                if name == b"te" {
                    assert_eq!(value, b"trailers");
                }
            }
            assert!(read.head.is_none(), "a second head");
            read.head = Some(format!("{fields:?} {ends}"));
            read.ends += usize::from(ends);
        }
        RequestPiece::Body(BodyPiece::Data { len, last }) => {
            read.body.extend_from_slice(&input[..len]);
            read.ends += usize::from(last);
        }
        RequestPiece::Body(BodyPiece::Trailers(trailers)) => {
            read.trailers.push(format!("{trailers:?}"));
            read.ends += 1;
        }
        RequestPiece::Body(BodyPiece::End) => read.ends += 1,
    }
}

/// Feeds `bytes` in writes of `step`, each read until taken, as the stream does.
fn feed(tls: bool, bytes: &[u8], step: usize) -> Read {
    let mut reader = RequestReader::new(tls);
    let mut read = Read {
        head: None,
        body: vec![],
        trailers: vec![],
        ends: 0,
        refused: false,
    };
    for write in bytes.chunks(step.max(1)) {
        let mut at = 0;
        // Every call takes bytes or makes a piece: bounded by twice the bytes and the pieces.
        for _ in 0..(2 * write.len() + 8) {
            if at == write.len() || reader.is_done() {
                break;
            }
            match reader.read(&write[at..]) {
                Ok((used, piece)) => {
                    if let Some(piece) = piece {
                        note(&mut read, piece, &write[at..]);
                    } else if used == 0 {
                        // A head or chunk line waits for more bytes.
                        break;
                    }
                    at += used;
                }
                Err(_) => {
                    read.refused = true;
                    return read;
                }
            }
        }
        if reader.is_done() {
            break;
        }
    }
    assert!(read.ends <= 1, "the stream ended {} times", read.ends);
    read
}

fuzz_target!(|input: &[u8]| {
    let Some((&flags, bytes)) = input.split_first() else {
        return;
    };
    let tls = flags & 1 == 1;
    let whole = feed(tls, bytes, bytes.len());
    let bytewise = feed(tls, bytes, 1);
    if whole.refused != bytewise.refused {
        // httparse can call a request line that breaks off mid-garbage incomplete where a
        // shorter prefix of it was already invalid: a head the exchange never writes. The side
        // that did not refuse must then still be waiting for its head, having made nothing.
        let waiting = if whole.refused { &bytewise } else { &whole };
        assert!(
            waiting.head.is_none() && waiting.body.is_empty() && waiting.ends == 0,
            "{whole:?} / {bytewise:?}"
        );
        return;
    }
    assert_eq!(whole, bytewise);
});
