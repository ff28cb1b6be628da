//! §3.4: the connection preface, and the SETTINGS frame that must follow it.

use crate::kit::*;

cases! {
    /// The preface and SETTINGS are answered with herdsman's SETTINGS (its first frame) and an
    /// acknowledgement of the client's; a request is then served.
    fn s3_4_preface_and_settings_open_the_connection(transport) {
        let mut conn = Conn::open(transport);
        conn.handshake(&[]);
        conn.send_get(1, "/preface");
        conn.expect_ok(1, "GET", "/preface");
    }

    /// A preface that starts as HTTP/2's and then differs is a connection error of type
    /// PROTOCOL_ERROR; the GOAWAY may be left out, the close may not. (On h2c, where HTTP/1.1
    /// shares the port, herdsman sends GOAWAY PROTOCOL_ERROR rather than an HTTP/1.1 status:
    /// `tests/http2.rs`.)
    fn s3_4_an_invalid_preface_closes_the_connection(transport) {
        let mut conn = Conn::open(transport);
        conn.send(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n");
        conn.send_settings(&[]);
        conn.expect_closed_or_goaway(PROTOCOL_ERROR);
    }

    /// The preface must be followed by a SETTINGS frame: anything else first is an invalid
    /// preface (PROTOCOL_ERROR).
    fn s3_4_a_preface_not_followed_by_settings_is_a_connection_error(transport) {
        let mut conn = Conn::open(transport);
        conn.send(PREFACE);
        conn.send_ping(0, *b"notfirst");
        conn.expect_closed_or_goaway(PROTOCOL_ERROR);
    }
}
