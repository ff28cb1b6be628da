//! Fuzzes the request head parser and the forwarded head it produces: never a panic, a later
//! HTTP/1 minor version rewritten in place parses as HTTP/1.1, and a head that parses is
//! rewritten into one that parses again with the same framing, host and upgrade.
#![no_main]

use herdsman::config::UpgradeProtocols;
use herdsman::http1::forward::{write_request_head, AddressText};
use herdsman::http1::head::read_as_http11;
use herdsman::http1::upgrade;
use herdsman::http1::{header_slots, parse_request, HeadError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut data = data.to_vec();
    let upgrades = UpgradeProtocols::new(["websocket"]);
    // At most one rewrite: the proxy's exchange does the same, then parses again.
    for _ in 0..2 {
        let mut headers = header_slots();
        match parse_request(&data, &mut headers, 65536) {
            Err(HeadError::LaterMinorVersion { digit_at }) => {
                read_as_http11(&mut data, digit_at);
                continue;
            }
            Ok(Some(request)) => {
                assert!(request.head_len <= data.len());
                let mut forwarded = Vec::new();
                let client = AddressText::new("127.0.0.1".parse().unwrap());
                write_request_head(&request, &upgrades, &client, &mut forwarded);
                let mut again = header_slots();
                let reparsed = parse_request(&forwarded, &mut again, 1 << 20)
                    .expect("a forwarded head parses")
                    .expect("a forwarded head is complete");
                assert_eq!(reparsed.body, request.body);
                assert_eq!(reparsed.head_len, forwarded.len());
                assert_eq!(
                    reparsed.host.unwrap_or_default(),
                    request.host.unwrap_or_default()
                );
                assert_eq!(reparsed.upgrade, upgrade::forwards(&upgrades, &request));
                return;
            }
            Ok(None) | Err(_) => return,
        }
    }
    panic!("a head rewritten to HTTP/1.1 asked for another rewrite");
});
