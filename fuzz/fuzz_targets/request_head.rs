//! Fuzzes the request head parser and the forwarded head it produces: never a panic, a later
//! HTTP/1 minor version rewritten in place parses as HTTP/1.1, and a head that parses is either
//! refused as too large once forwarded or rewritten into one that parses again — under the same
//! limits, as a second tier of herdsman would read it — with the same framing, host and upgrade.
#![no_main]

use herdsman::config::UpgradeProtocols;
use herdsman::http1::forward::{write_request_head, AddressText, Forwarded};
use herdsman::http1::head::read_as_http11;
use herdsman::http1::upgrade;
use herdsman::http1::{header_slots, parse_request, HeadError};
use libfuzzer_sys::fuzz_target;

/// The limit on a head's bytes, herdsman's default.
const MAX_HEAD: usize = 65536;

fuzz_target!(|data: &[u8]| {
    let mut data = data.to_vec();
    let upgrades = UpgradeProtocols::new(["websocket"]);
    // At most one rewrite: the proxy's exchange does the same, then parses again.
    for _ in 0..2 {
        let mut headers = header_slots();
        match parse_request(&data, &mut headers, MAX_HEAD) {
            Err(HeadError::LaterMinorVersion { digit_at }) => {
                read_as_http11(&mut data, digit_at);
                continue;
            }
            Ok(Some(request)) => {
                assert!(request.head_len <= data.len());
                let mut forwarded = Vec::new();
                let client = AddressText::new("127.0.0.1".parse().unwrap());
                let tls = Forwarded {
                    secure: data.len().is_multiple_of(2),
                    client_certificate: b"Hash=ab;Subject=\"CN=fuzz\"",
                    trailers: data.len().is_multiple_of(3),
                };
                match write_request_head(
                    &request,
                    &upgrades,
                    &client,
                    tls,
                    MAX_HEAD,
                    &mut forwarded,
                ) {
                    Err(HeadError::TooLarge) => return,
                    Err(other) => panic!("forwarding refused a head otherwise: {other:?}"),
                    Ok(()) => {}
                }
                let mut again = header_slots();
                let reparsed = parse_request(&forwarded, &mut again, MAX_HEAD)
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
