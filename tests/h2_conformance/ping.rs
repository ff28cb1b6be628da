//! §6.7: PING.

use crate::kit::*;

cases! {
    /// §6.7: a PING is answered with a PING ACK of the same payload.
    fn s6_7_ping_is_answered_with_the_same_payload(transport) {
        let mut conn = Conn::start(transport);
        conn.send_ping(0, *b"h2ping!?");
        conn.expect_ping_ack(*b"h2ping!?");
    }

    /// §6.7: a PING ACK must not be answered: the first acknowledgement herdsman sends is the
    /// one for the PING after it.
    fn s6_7_a_ping_ack_is_not_answered(transport) {
        let mut conn = Conn::start(transport);
        conn.send_ping(ACK, *b"unasked!");
        conn.send_ping(0, *b"asked!!!");
        conn.expect_ping_ack(*b"asked!!!");
    }

    /// §6.7: PING on a stream other than 0 is a connection error of type PROTOCOL_ERROR.
    fn s6_7_ping_on_a_stream_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(PING, 0, 1, b"onstream");
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.7: PING of a length other than 8 is a connection error of type FRAME_SIZE_ERROR (its
    /// GOAWAY naming the stream served before it as the last).
    fn s6_7_ping_of_the_wrong_length_is_frame_size_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(1, "/before-the-ping");
        conn.expect_ok(1, "GET", "/before-the-ping");
        conn.send_frame(PING, 0, 0, b"short");
        assert_eq!(conn.expect_goaway(FRAME_SIZE_ERROR), 1, "the last stream");
    }
}
