//! §5.1: stream states (idle, half-closed (remote), closed) and what each lets through;
//! §5.1.1: stream identifiers; §5.1.2: the concurrency limit; §5.4.1: after a connection error
//! the connection closes.

use crate::kit::*;

/// A GET on `stream` answered whole: the stream is closed both ways after it.
fn served_get(conn: &mut Conn, stream: u32) {
    conn.send_get(stream, "/closed");
    conn.expect_ok(stream, "GET", "/closed");
}

cases! {
    /// §5.1, idle: any frame but HEADERS or PRIORITY is a connection error of type
    /// PROTOCOL_ERROR — DATA.
    fn s5_1_idle_data_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(DATA, END_STREAM, 1, b"idle");
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §5.1, idle: RST_STREAM.
    fn s5_1_idle_rst_stream_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_rst_stream(1, CANCEL);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §5.1, idle: WINDOW_UPDATE.
    fn s5_1_idle_window_update_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_window_update(1, 100);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §5.1, idle: CONTINUATION.
    fn s5_1_idle_continuation_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(CONTINUATION, END_HEADERS, 1, &Block::get("/").bytes);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §5.1, half-closed (remote): frames other than WINDOW_UPDATE, PRIORITY and RST_STREAM are
    /// a stream error of type STREAM_CLOSED — DATA after END_STREAM. (Whether the response
    /// closed the stream first is a race the client cannot see: then it is closed, and the
    /// error is the connection's, of the same type.)
    fn s5_1_half_closed_remote_data_is_stream_closed(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(1, "/half-closed");
        conn.send_frame(DATA, END_STREAM, 1, b"late");
        conn.expect_stream_or_connection_error(1, STREAM_CLOSED);
    }

    /// §5.1, half-closed (remote): a second HEADERS with END_STREAM is STREAM_CLOSED; herdsman
    /// says PROTOCOL_ERROR, which §5.1.1 gives a HEADERS frame whose stream identifier is not
    /// above the last (the stream may be closed by then: the response raced it).
    fn s5_1_half_closed_remote_headers_is_an_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(1, "/half-closed");
        conn.send_get(1, "/half-closed");
        conn.expect_stream_or_connection_error_among(1, &[STREAM_CLOSED, PROTOCOL_ERROR]);
    }

    /// §5.1, closed: once both sides ended a stream (its response read whole), HEADERS on it is
    /// a connection error of type STREAM_CLOSED (h2spec's 5.1/12, strict).
    fn s5_1_closed_headers_is_a_connection_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(1, "/closed");
        conn.expect_ok(1, "GET", "/closed");
        conn.send_get(1, "/closed");
        conn.expect_goaway(STREAM_CLOSED);
    }

    /// §5.1, half-closed (remote): CONTINUATION (which also follows no open field block: a
    /// PROTOCOL_ERROR by §6.10, the type herdsman gives it).
    fn s5_1_half_closed_remote_continuation_is_an_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(1, "/half-closed");
        conn.send_frame(CONTINUATION, END_HEADERS, 1, &Block::new().field("x-a", "b").bytes);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §5.1, closed: after the client's RST_STREAM, a DATA frame on the stream is a stream
    /// error of type STREAM_CLOSED.
    fn s5_1_closed_by_reset_data_is_stream_closed(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/reset");
        conn.send_rst_stream(1, CANCEL);
        conn.send_frame(DATA, END_STREAM, 1, b"after reset");
        conn.expect_stream_or_connection_error(1, STREAM_CLOSED);
    }

    /// §5.1, closed: after the client's RST_STREAM, HEADERS on the stream: STREAM_CLOSED, or
    /// PROTOCOL_ERROR as a stream identifier not above the last (§5.1.1).
    fn s5_1_closed_by_reset_headers_is_an_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/reset");
        conn.send_rst_stream(1, CANCEL);
        conn.send_get(1, "/reset");
        conn.expect_stream_or_connection_error_among(1, &[STREAM_CLOSED, PROTOCOL_ERROR]);
    }

    /// §5.1, closed: after the client's RST_STREAM, CONTINUATION on the stream (outside any
    /// field block: PROTOCOL_ERROR, §6.10).
    fn s5_1_closed_by_reset_continuation_is_an_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/reset");
        conn.send_rst_stream(1, CANCEL);
        conn.send_frame(CONTINUATION, END_HEADERS, 1, &Block::new().field("x-a", "b").bytes);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §5.1, closed: a stream whose request and response both ended takes no more DATA:
    /// STREAM_CLOSED.
    fn s5_1_closed_data_is_stream_closed(transport) {
        let mut conn = Conn::start(transport);
        served_get(&mut conn, 1);
        conn.send_frame(DATA, END_STREAM, 1, b"closed");
        conn.expect_stream_or_connection_error(1, STREAM_CLOSED);
    }

    /// §5.1, closed: HEADERS on a closed stream (STREAM_CLOSED, or PROTOCOL_ERROR by §5.1.1).
    fn s5_1_closed_headers_is_an_error(transport) {
        let mut conn = Conn::start(transport);
        served_get(&mut conn, 1);
        conn.send_get(1, "/closed");
        conn.expect_stream_or_connection_error_among(1, &[STREAM_CLOSED, PROTOCOL_ERROR]);
    }

    /// §5.1, closed: CONTINUATION on a closed stream (outside a field block: PROTOCOL_ERROR).
    fn s5_1_closed_continuation_is_an_error(transport) {
        let mut conn = Conn::start(transport);
        served_get(&mut conn, 1);
        conn.send_frame(CONTINUATION, END_HEADERS, 1, &Block::new().field("x-a", "b").bytes);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §5.1.1: a client's streams are odd-numbered; an even one is a connection error of type
    /// PROTOCOL_ERROR.
    fn s5_1_1_an_even_stream_identifier_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(2, "/even");
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §5.1.1: a new stream's identifier must be greater than every one before it.
    fn s5_1_1_a_smaller_stream_identifier_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(5, "/five");
        conn.expect_ok(5, "GET", "/five");
        conn.send_get(3, "/three");
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §5.1.1: streams need not be used in order; a skipped identifier is closed implicitly
    /// and the higher one is served.
    fn s5_1_1_skipped_identifiers_are_fine(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(7, "/seven");
        conn.expect_ok(7, "GET", "/seven");
        conn.send_get(11, "/eleven");
        conn.expect_ok(11, "GET", "/eleven");
    }

    /// §5.1.2: a HEADERS frame beyond the advertised SETTINGS_MAX_CONCURRENT_STREAMS is a stream
    /// error of type PROTOCOL_ERROR or REFUSED_STREAM (herdsman refuses it, so the client may
    /// retry), and the streams within the limit are served.
    fn s5_1_2_a_stream_over_the_concurrency_limit_is_refused(transport) {
        let mut conn = Conn::open_to(Target::FewStreams, transport);
        conn.handshake(&[]);
        assert!(
            conn.settings.contains(&(MAX_CONCURRENT_STREAMS, 2)),
            "{:?}",
            conn.settings
        );
        conn.send_post_head(1, "/one");
        conn.send_post_head(3, "/two");
        conn.send_post_head(5, "/three");
        conn.expect_reset(5, REFUSED_STREAM);
        conn.send_frame(DATA, END_STREAM, 1, b"first");
        conn.expect_echo(1, "/one", b"first");
    }

    /// §5.4.1: after a connection error herdsman sends GOAWAY and closes the TCP connection (a
    /// PING on stream 3 is one); §6.8: the GOAWAY names the last stream it served (1), so the
    /// client knows which requests it may send again.
    fn s5_4_1_a_connection_error_closes_the_connection(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(1, "/before-the-error");
        conn.expect_ok(1, "GET", "/before-the-error");
        conn.send_frame(PING, 0, 3, b"onstream");
        assert_eq!(conn.expect_goaway(PROTOCOL_ERROR), 1, "the last stream");
    }

    /// §6.8: a connection error before any stream names stream 0 as the last.
    fn s6_8_a_goaway_before_any_stream_names_stream_0(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(PING, 0, 3, b"onstream");
        assert_eq!(conn.expect_goaway(PROTOCOL_ERROR), 0, "the last stream");
    }
}
