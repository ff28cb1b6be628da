//! §6.8: GOAWAY from the client.

use crate::kit::*;

cases! {
    /// §6.8: GOAWAY on a stream other than 0 is a connection error of type PROTOCOL_ERROR.
    fn s6_8_goaway_on_a_stream_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(GOAWAY, 0, 1, &[0, 0, 0, 0, 0, 0, 0, 0]);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.8: a GOAWAY shorter than its 8 octets of last stream and error code is a connection
    /// error of type FRAME_SIZE_ERROR (§4.2: a frame on stream 0).
    fn s6_8_goaway_shorter_than_8_octets_is_frame_size_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(GOAWAY, 0, 0, &[0, 0, 0, 0, 0, 0]);
        conn.expect_goaway(FRAME_SIZE_ERROR);
    }

    /// §6.8: the client's GOAWAY (NO_ERROR, with debug data) says it opens no more streams;
    /// the connection is not broken by it: a PING is still answered, or it closes cleanly.
    fn s6_8_a_client_goaway_is_accepted(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(GOAWAY, 0, 0, b"\0\0\0\0\0\0\0\0conformance");
        conn.send_ping(0, *b"stillup?");
        conn.expect_ping_ack_or_close(*b"stillup?");
    }

    /// §6.8: streams the client opened before its GOAWAY are still served.
    fn s6_8_streams_before_a_client_goaway_are_served(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/before-goaway");
        conn.send_frame(GOAWAY, 0, 0, &[0, 0, 0, 1, 0, 0, 0, 0]);
        conn.send_frame(DATA, END_STREAM, 1, b"finish me");
        conn.expect_echo(1, "/before-goaway", b"finish me");
    }
}
