//! §6.4: RST_STREAM, and §7: unknown error codes, which must change nothing.

use crate::kit::*;

cases! {
    /// §6.4: RST_STREAM on stream 0 is a connection error of type PROTOCOL_ERROR.
    fn s6_4_rst_stream_on_stream_0_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_rst_stream(0, CANCEL);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.4: RST_STREAM on an idle stream is a connection error of type PROTOCOL_ERROR.
    fn s6_4_rst_stream_on_an_idle_stream_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_rst_stream(3, CANCEL);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.4: RST_STREAM of a length other than 4 octets is a connection error of type
    /// FRAME_SIZE_ERROR.
    fn s6_4_rst_stream_of_the_wrong_length_is_frame_size_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/reset-length");
        conn.send_frame(RST_STREAM, 0, 1, &[0, 0, 0, 8, 0]);
        conn.expect_goaway(FRAME_SIZE_ERROR);
    }

    /// §6.4: the client's RST_STREAM ends a stream whose request is still coming: herdsman
    /// sends nothing more on it, and the connection serves other streams.
    fn s6_4_rst_stream_cancels_a_stream(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/cancelled");
        conn.send_rst_stream(1, CANCEL);
        conn.expect_silence_on(1);
        conn.send_get(3, "/after-cancel");
        conn.expect_ok(3, "GET", "/after-cancel");
    }

    /// §5.1: RST_STREAM on a half-closed (remote) stream is allowed.
    fn s5_1_rst_stream_on_a_half_closed_stream_is_allowed(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(1, "/half-closed-reset");
        conn.send_rst_stream(1, CANCEL);
        conn.expect_alive();
    }

    /// §7: an unknown error code in RST_STREAM triggers nothing special.
    fn s7_rst_stream_with_an_unknown_error_code_is_accepted(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/unknown-code");
        conn.send_rst_stream(1, 0xff);
        conn.expect_alive();
    }

    /// §7: an unknown error code in GOAWAY triggers nothing special: the stream in flight is
    /// still served. (With nothing in flight herdsman may close at once after a client's GOAWAY,
    /// so a PING sent after it proves nothing either way.)
    fn s7_goaway_with_an_unknown_error_code_is_accepted(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/unknown-goaway-code");
        conn.send_frame(GOAWAY, 0, 0, &[0, 0, 0, 0, 0, 0, 0, 0xff]);
        conn.send_frame(DATA, END_STREAM, 1, b"body");
        conn.expect_echo(1, "/unknown-goaway-code", b"body");
    }
}
