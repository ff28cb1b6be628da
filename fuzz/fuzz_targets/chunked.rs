//! Fuzzes the chunked decoder: never a panic, never more bytes claimed than given, and the same
//! result whether the input arrives whole or one byte at a time.
#![no_main]

use herdsman::http1::chunked::{decode_all, ChunkedDecoder, Step};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let whole = decode_all(data);
    let mut decoder = ChunkedDecoder::new();
    let mut decoded = Vec::new();
    let mut end = None;
    let mut failed = false;
    'bytes: for (i, byte) in data.iter().enumerate() {
        let piece = std::slice::from_ref(byte);
        let mut at = 0;
        while at < 1 {
            match decoder.step(&piece[at..]) {
                Ok(Step::Framing(n)) => at += n,
                Ok(Step::Data(n)) => {
                    decoded.extend_from_slice(&piece[at..at + n]);
                    at += n;
                }
                Ok(Step::Done(n)) => {
                    end = Some(i + at + n);
                    break 'bytes;
                }
                Err(_) => {
                    failed = true;
                    break 'bytes;
                }
            }
        }
    }
    match whole {
        Ok((data_whole, end_whole)) => {
            assert!(!failed);
            assert_eq!(data_whole, decoded);
            assert_eq!(end_whole, end);
        }
        Err(_) => assert!(failed),
    }
});
