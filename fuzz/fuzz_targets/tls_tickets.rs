//! Fuzzes what herdsman parses itself of TLS: a session ticket as a client presents it (key
//! name, nonce, sealed state — untrusted bytes every resuming client sends) and the ticket keys a
//! previous process hands down. Never a panic; no forged ticket opens; what was sealed opens to
//! itself.
#![no_main]

use herdsman::config::ticket_keys::TicketKeys;
use libfuzzer_sys::fuzz_target;
use rustls::server::ProducesTickets;

fuzz_target!(|input: &[u8]| {
    let keys = TicketKeys::generated();
    assert!(keys.decrypt(input).is_none(), "a forged ticket opened");
    let sealed = keys.encrypt(input).expect("sealing never fails");
    assert_eq!(keys.decrypt(&sealed).as_deref(), Some(input));
    // Handed-down keys: garbage is refused, or taken whole and then used.
    if keys.import(input) {
        let again = keys.encrypt(b"state").unwrap();
        assert_eq!(keys.decrypt(&again).as_deref(), Some(&b"state"[..]));
    }
});
