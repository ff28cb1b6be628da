//! §6.2: HEADERS — padding, and the field block that must not be interrupted.

use crate::kit::*;

cases! {
    /// §6.2: a HEADERS frame opens a stream and is served.
    fn s6_2_headers_opens_a_stream(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(1, "/headers");
        let response = conn.expect_ok(1, "GET", "/headers");
        assert_eq!(response.body, GREETING);
    }

    /// §6.2: a padded HEADERS frame's padding is not part of the field block.
    fn s6_2_padded_headers_are_served(transport) {
        let mut conn = Conn::start(transport);
        let payload = padded(&Block::get("/padded-headers").bytes, 10);
        conn.send_frame(HEADERS, PADDED | END_HEADERS | END_STREAM, 1, &payload);
        conn.expect_ok(1, "GET", "/padded-headers");
    }

    /// §6.2: padding and priority fields together.
    fn s6_2_padded_headers_with_priority_are_served(transport) {
        let mut conn = Conn::start(transport);
        let mut content = priority_payload(0, true, 31);
        content.extend_from_slice(&Block::get("/padded-priority").bytes);
        let flags = PADDED | PRIORITY_FLAG | END_HEADERS | END_STREAM;
        conn.send_frame(HEADERS, flags, 1, &padded(&content, 3));
        conn.expect_ok(1, "GET", "/padded-priority");
    }

    /// §6.2: HEADERS without END_HEADERS must be followed by CONTINUATION of the same
    /// stream: a PING instead is a connection error of type PROTOCOL_ERROR.
    fn s6_2_a_ping_inside_a_field_block_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(HEADERS, END_STREAM, 1, &Block::get("/").bytes);
        conn.send_ping(0, *b"inblock!");
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.2: a complete HEADERS frame of another stream while a field block is open:
    /// PROTOCOL_ERROR.
    fn s6_2_headers_of_another_stream_while_a_block_is_open_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(HEADERS, 0, 1, &Block::request("POST", "/").bytes);
        conn.send_headers(3, END_STREAM, &Block::get("/"));
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.2: HEADERS on stream 0 is a connection error of type PROTOCOL_ERROR.
    fn s6_2_headers_on_stream_0_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(0, "/");
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.2: padding as long as the rest of the payload is a connection error of type
    /// PROTOCOL_ERROR.
    fn s6_2_padding_as_long_as_the_payload_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        let block = Block::get("/").bytes;
        let mut payload = vec![block.len() as u8 + 1];
        payload.extend_from_slice(&block);
        conn.send_frame(HEADERS, PADDED | END_HEADERS | END_STREAM, 1, &payload);
        conn.expect_goaway(PROTOCOL_ERROR);
    }
}
