//! Fuzzes the reader that turns what the exchange writes (an HTTP/1.1 response) into an HTTP/2
//! stream's pieces (`http2::response`): never a panic, and the same pieces — heads, body
//! bytes, trailers, the end — or the same refusal, whether the bytes come whole or one at a time.
#![no_main]

use herdsman::http1::Method;
use herdsman::http2::response::{Piece, ResponseReader};
use libfuzzer_sys::fuzz_target;

/// What the pieces say, body bytes joined (their split follows the writes), and how it ended.
#[derive(Debug, PartialEq)]
struct Read {
    heads: Vec<String>,
    body: Vec<u8>,
    trailers: Vec<String>,
    ends: usize,
    refused: bool,
}

fn note(read: &mut Read, piece: Piece, input: &[u8], block: &[u8]) {
    match piece {
        Piece::Head {
            status,
            interim,
            ends,
        } => {
            // The field block as encoded: the same whichever way the bytes came.
            read.heads
                .push(format!("{status} {interim} {ends} {block:?}"));
            read.ends += usize::from(ends);
        }
        Piece::Data { len, last } => {
            read.body.extend_from_slice(&input[..len]);
            read.ends += usize::from(last);
        }
        Piece::Trailers(trailers) => {
            read.trailers.push(format!("{trailers:?}"));
            read.ends += 1;
        }
        Piece::End => read.ends += 1,
    }
}

/// Feeds `bytes` in writes of `step`, each read until taken, as the stream's sink does.
fn feed(method: Method, bytes: &[u8], step: usize) -> Read {
    let mut reader = ResponseReader::new(method);
    let mut read = Read {
        heads: vec![],
        body: vec![],
        trailers: vec![],
        ends: 0,
        refused: false,
    };
    for write in bytes.chunks(step.max(1)) {
        let mut at = 0;
        // Every call takes bytes or makes a piece: bounded by twice the bytes and the pieces.
        for _ in 0..(2 * write.len() + 8) {
            if at == write.len() {
                break;
            }
            match reader.read(&write[at..]) {
                Ok((used, piece)) => {
                    if let Some(piece) = piece {
                        note(&mut read, piece, &write[at..], &reader.block);
                    } else if used == 0 {
                        panic!("no progress at {at} of a write of {}", write.len());
                    }
                    at += used;
                }
                Err(_) => {
                    read.refused = true;
                    return read;
                }
            }
        }
        assert_eq!(at, write.len(), "a write was not all taken");
    }
    // A body of known length ends with its bytes; one ending with the exchange ends now.
    if let Ok((0, Some(piece))) = reader.read(&[]) {
        note(&mut read, piece, &[], &reader.block);
    }
    if let Some(piece) = reader.finish() {
        note(&mut read, piece, &[], &reader.block);
    }
    read
}

fuzz_target!(|input: &[u8]| {
    let Some((&first, bytes)) = input.split_first() else {
        return;
    };
    let method = if first & 1 == 0 {
        Method::Get
    } else {
        Method::Head
    };
    let whole = feed(method, bytes, bytes.len());
    let bytewise = feed(method, bytes, 1);
    assert_eq!(whole, bytewise);
    assert!(
        whole.ends <= 1,
        "the stream ended more than once: {whole:?}"
    );
});
