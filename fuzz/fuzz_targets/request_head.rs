//! Fuzzes the request head parser and the forwarded head it produces: never a panic, and a head
//! that parses is rewritten into one that parses again with the same framing.
#![no_main]

use herdsman::http1::forward::write_request_head;
use herdsman::http1::{parse_request, MAX_HEADERS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    if let Ok(Some(request)) = parse_request(data, &mut headers, 65536) {
        assert!(request.head_len <= data.len());
        let mut forwarded = Vec::new();
        write_request_head(&request, "127.0.0.1".parse().unwrap(), &mut forwarded);
        let mut again = [httparse::EMPTY_HEADER; MAX_HEADERS + 4];
        let reparsed = parse_request(&forwarded, &mut again, 1 << 20)
            .expect("a forwarded head parses")
            .expect("a forwarded head is complete");
        assert_eq!(reparsed.body, request.body);
        assert_eq!(reparsed.head_len, forwarded.len());
    }
});
