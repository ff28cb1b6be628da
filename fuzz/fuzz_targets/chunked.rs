//! Fuzzes the chunked decoder: never a panic, and the same result — the bytes passed on (less
//! dropped trailer fields), the data and the end — whether the input arrives whole or one byte
//! at a time (a held trailer line waits for the next byte).
#![no_main]

use herdsman::http1::chunked::pass_on_in_pieces;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let whole = pass_on_in_pieces(input, &[input.len()]);
    let bytewise = pass_on_in_pieces(input, &[1]);
    match (whole, bytewise) {
        (Ok(whole), Ok(bytewise)) => assert_eq!(whole, bytewise),
        (Err(_), Err(_)) => {}
        (whole, bytewise) => panic!("whole: {whole:?}, byte by byte: {bytewise:?}"),
    }
});
