//! §6.1: DATA — bodies in one frame or many, padding, and DATA where it may not be.

use crate::kit::*;

cases! {
    /// §6.1: a request body in one DATA frame reaches the server.
    fn s6_1_a_data_frame_carries_the_body(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post(1, "/data", b"one frame");
        conn.expect_echo(1, "/data", b"one frame");
    }

    /// §6.1: a body in several DATA frames arrives whole and in order.
    fn s6_1_several_data_frames_carry_one_body(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/data");
        conn.send_frame(DATA, 0, 1, b"one ");
        conn.send_frame(DATA, 0, 1, b"two ");
        conn.send_frame(DATA, 0, 1, b"");
        conn.send_frame(DATA, END_STREAM, 1, b"three");
        conn.expect_echo(1, "/data", b"one two three");
    }

    /// §6.1: a padded DATA frame's padding is not content.
    fn s6_1_padding_is_not_content(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/padded");
        conn.send_frame(DATA, PADDED | END_STREAM, 1, &padded(b"padded", 8));
        conn.expect_echo(1, "/padded", b"padded");
    }

    /// §6.1: DATA on stream 0 is a connection error of type PROTOCOL_ERROR.
    fn s6_1_data_on_stream_0_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(DATA, END_STREAM, 0, b"stream 0");
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.1: DATA on a stream not open (half-closed (remote) here) is STREAM_CLOSED.
    fn s6_1_data_on_a_stream_not_open_is_stream_closed(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/ended");
        conn.send_frame(DATA, END_STREAM, 1, b"end");
        conn.send_frame(DATA, END_STREAM, 1, b"more");
        conn.expect_stream_or_connection_error(1, STREAM_CLOSED);
    }

    /// §6.1: padding as long as the payload or longer is a connection error of type
    /// PROTOCOL_ERROR.
    fn s6_1_padding_as_long_as_the_payload_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/bad-padding");
        conn.send_frame(DATA, PADDED | END_STREAM, 1, &[6, b'a', b'b', b'c', 0, 0]);
        conn.expect_goaway(PROTOCOL_ERROR);
    }
}
