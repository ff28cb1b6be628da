//! §5.3 and §6.3: priority signals. RFC 9113 deprecates their meaning (§5.3.2) but not their
//! framing: PRIORITY is allowed in every stream state, a stream may not depend on itself, and a
//! PRIORITY frame must be 5 octets on a stream.

use crate::kit::*;

cases! {
    /// §5.3.1: a HEADERS frame whose priority makes the stream depend on itself is a stream
    /// error of type PROTOCOL_ERROR.
    fn s5_3_1_headers_depending_on_itself_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        let mut payload = priority_payload(1, false, 15);
        payload.extend_from_slice(&Block::get("/self").bytes);
        conn.send_frame(HEADERS, END_HEADERS | END_STREAM | PRIORITY_FLAG, 1, &payload);
        conn.expect_reset(1, PROTOCOL_ERROR);
    }

    /// §5.3.1: a PRIORITY frame making a stream depend on itself, likewise.
    fn s5_3_1_priority_depending_on_itself_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(PRIORITY, 0, 1, &priority_payload(1, false, 15));
        conn.expect_reset(1, PROTOCOL_ERROR);
    }

    /// §6.3: PRIORITY on stream 0 is a connection error of type PROTOCOL_ERROR.
    fn s6_3_priority_on_stream_0_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(PRIORITY, 0, 0, &priority_payload(1, false, 15));
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.3: a PRIORITY frame of a length other than 5 octets is a stream error of type
    /// FRAME_SIZE_ERROR (herdsman may make it the connection's).
    fn s6_3_priority_of_the_wrong_length_is_frame_size_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(PRIORITY, 0, 1, &[0, 0, 0, 3, 15, 0]);
        conn.expect_stream_or_connection_error(1, FRAME_SIZE_ERROR);
    }

    /// §5.1: PRIORITY on an idle stream is allowed, and the stream can then be opened.
    fn s5_1_priority_on_an_idle_stream_is_allowed(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(PRIORITY, 0, 1, &priority_payload(0, false, 15));
        conn.send_get(1, "/after-priority");
        conn.expect_ok(1, "GET", "/after-priority");
    }

    /// §5.1: PRIORITY on a half-closed (remote) stream is allowed; the response still comes.
    fn s5_1_priority_on_a_half_closed_stream_is_allowed(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(1, "/half-closed-priority");
        conn.send_frame(PRIORITY, 0, 1, &priority_payload(0, false, 15));
        conn.expect_ok(1, "GET", "/half-closed-priority");
    }

    /// §5.1: PRIORITY on a closed stream is allowed.
    fn s5_1_priority_on_a_closed_stream_is_allowed(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(1, "/closed-priority");
        conn.expect_ok(1, "GET", "/closed-priority");
        conn.send_frame(PRIORITY, 0, 1, &priority_payload(0, false, 15));
        conn.expect_alive();
    }

    /// §6.3: the lowest weight (1, sent as 0), then a request.
    fn s6_3_priority_with_weight_1_is_accepted(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(PRIORITY, 0, 1, &priority_payload(0, false, 0));
        conn.send_get(1, "/weight-1");
        conn.expect_ok(1, "GET", "/weight-1");
    }

    /// §6.3: the highest weight (256, sent as 255).
    fn s6_3_priority_with_weight_256_is_accepted(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(PRIORITY, 0, 1, &priority_payload(0, false, 255));
        conn.send_get(1, "/weight-256");
        conn.expect_ok(1, "GET", "/weight-256");
    }

    /// §6.3: a dependency on another stream.
    fn s6_3_priority_with_a_dependency_is_accepted(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(1, "/parent");
        conn.expect_ok(1, "GET", "/parent");
        conn.send_frame(PRIORITY, 0, 3, &priority_payload(1, false, 15));
        conn.send_get(3, "/child");
        conn.expect_ok(3, "GET", "/child");
    }

    /// §6.3: an exclusive dependency.
    fn s6_3_priority_with_an_exclusive_dependency_is_accepted(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(PRIORITY, 0, 3, &priority_payload(1, true, 15));
        conn.send_get(3, "/exclusive");
        conn.expect_ok(3, "GET", "/exclusive");
    }

    /// §5.1.1 with §6.3: PRIORITY on idle stream 5 does not open it, so stream 3 may still be
    /// opened after it.
    fn s6_3_priority_on_a_higher_idle_stream_leaves_lower_ones_usable(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(PRIORITY, 0, 5, &priority_payload(0, false, 15));
        conn.send_get(3, "/lower");
        conn.expect_ok(3, "GET", "/lower");
    }

    /// §6.2: a HEADERS frame with priority fields is served.
    fn s6_2_headers_with_priority_is_served(transport) {
        let mut conn = Conn::start(transport);
        let mut payload = priority_payload(0, false, 200);
        payload.extend_from_slice(&Block::get("/with-priority").bytes);
        conn.send_frame(HEADERS, END_HEADERS | END_STREAM | PRIORITY_FLAG, 1, &payload);
        conn.expect_ok(1, "GET", "/with-priority");
    }
}
