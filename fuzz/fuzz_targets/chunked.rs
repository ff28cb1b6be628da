//! Fuzzes the chunked decoder, which reads request bodies coming up and response bodies coming
//! down: never a panic; the same result — the bytes passed on (less dropped trailer fields), the
//! data and the end — whether the input arrives whole or one byte at a time (a held trailer line
//! waits for the next byte); and data that decodes, framed again in chunks of other sizes (as
//! another client or server would frame it), decodes to the same data.
#![no_main]

use herdsman::http1::chunked::{decode_all, pass_on_in_pieces};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let whole = pass_on_in_pieces(input, &[input.len()]);
    let bytewise = pass_on_in_pieces(input, &[1]);
    match (whole, bytewise) {
        (Ok(whole), Ok(bytewise)) => assert_eq!(whole, bytewise),
        (Err(_), Err(_)) => {}
        (whole, bytewise) => panic!("whole: {whole:?}, byte by byte: {bytewise:?}"),
    }
    let Ok((data, Some(_end))) = decode_all(input) else {
        return;
    };
    // Chunk sizes from the input's own bytes, in hex with either case, some with extensions.
    let mut framed = Vec::new();
    let mut rest = &data[..];
    let mut sizes = input.iter().cycle().map(|&b| usize::from(b % 61) + 1);
    let mut upper = false;
    while !rest.is_empty() {
        let size = sizes.next().unwrap_or(1).min(rest.len());
        let line = match upper {
            true => format!("{size:X};ext=1\r\n"),
            false => format!("{size:x}\r\n"),
        };
        upper = !upper;
        framed.extend_from_slice(line.as_bytes());
        framed.extend_from_slice(&rest[..size]);
        framed.extend_from_slice(b"\r\n");
        rest = &rest[size..];
    }
    framed.extend_from_slice(b"0\r\nX-Check: 1\r\n\r\n");
    let (again, end) = decode_all(&framed).expect("data framed again decodes");
    assert_eq!(again, data);
    assert_eq!(end, Some(framed.len()));
});
