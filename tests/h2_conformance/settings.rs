//! §6.5: SETTINGS — the frame's form (§6.5), its parameters' ranges (§6.5.2) and their
//! acknowledgement (§6.5.3).

use crate::kit::*;

cases! {
    /// §6.5.3: a SETTINGS frame is acknowledged.
    fn s6_5_3_settings_are_acknowledged(transport) {
        let mut conn = Conn::start(transport);
        conn.send_settings(&[(MAX_CONCURRENT_STREAMS, 100), (HEADER_TABLE_SIZE, 4096)]);
        conn.expect_settings_ack();
    }

    /// §6.5: SETTINGS with ACK and a payload is a connection error of type FRAME_SIZE_ERROR.
    fn s6_5_settings_ack_with_a_payload_is_frame_size_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(SETTINGS, ACK, 0, &settings_payload(&[(ENABLE_PUSH, 0)]));
        conn.expect_goaway(FRAME_SIZE_ERROR);
    }

    /// §6.5: SETTINGS on a stream other than 0 is a connection error of type PROTOCOL_ERROR.
    fn s6_5_settings_on_a_stream_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(SETTINGS, 0, 1, &settings_payload(&[(ENABLE_PUSH, 0)]));
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.5: a SETTINGS length that is not a multiple of 6 is a connection error of type
    /// FRAME_SIZE_ERROR.
    fn s6_5_settings_of_a_length_not_a_multiple_of_6_is_frame_size_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(SETTINGS, 0, 0, &[0, ENABLE_PUSH as u8, 0, 0]);
        conn.expect_goaway(FRAME_SIZE_ERROR);
    }

    /// §6.5.2: SETTINGS_ENABLE_PUSH other than 0 or 1 is a connection error of type
    /// PROTOCOL_ERROR.
    fn s6_5_2_enable_push_of_2_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_settings(&[(ENABLE_PUSH, 2)]);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.5.2: SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1 is a connection error of type
    /// FLOW_CONTROL_ERROR.
    fn s6_5_2_initial_window_size_above_the_maximum_is_flow_control_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_settings(&[(INITIAL_WINDOW_SIZE, 1 << 31)]);
        conn.expect_goaway(FLOW_CONTROL_ERROR);
    }

    /// §6.5.2: SETTINGS_MAX_FRAME_SIZE below 2^14 is a connection error of type PROTOCOL_ERROR.
    fn s6_5_2_max_frame_size_below_the_initial_value_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_settings(&[(MAX_FRAME_SIZE, 16_383)]);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.5.2: SETTINGS_MAX_FRAME_SIZE above 2^24-1, likewise.
    fn s6_5_2_max_frame_size_above_the_maximum_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_settings(&[(MAX_FRAME_SIZE, 1 << 24)]);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.5.2: an unknown parameter is ignored, and the frame acknowledged.
    fn s6_5_2_an_unknown_parameter_is_ignored(transport) {
        let mut conn = Conn::start(transport);
        conn.send_settings(&[(0xff, 1)]);
        conn.expect_settings_ack();
        conn.send_get(1, "/unknown-setting");
        conn.expect_ok(1, "GET", "/unknown-setting");
    }

    /// §6.5.3: the values of one SETTINGS frame are processed in order, so the last of two
    /// SETTINGS_INITIAL_WINDOW_SIZE wins: with a window of 1, the response's body comes one
    /// octet a frame.
    fn s6_5_3_values_are_processed_in_order(transport) {
        let mut conn = Conn::start(transport);
        conn.send_settings(&[(INITIAL_WINDOW_SIZE, 100), (INITIAL_WINDOW_SIZE, 1)]);
        conn.expect_settings_ack();
        conn.send_get(1, "/in-order");
        let response = conn.expect_ok(1, "GET", "/in-order");
        assert_eq!(response.body, GREETING);
        assert_eq!(response.data_frames[0], 1, "{:?}", response.data_frames);
    }

    /// §6.5.2 with RFC 7541 §4.2: a client's SETTINGS_HEADER_TABLE_SIZE of 0 bounds herdsman's
    /// encoder: across responses (whose fields repeat), it refers to no entry of a dynamic
    /// table the client does not keep.
    fn s6_5_2_a_header_table_size_of_0_is_kept_to(transport) {
        let mut conn = Conn::open(transport);
        conn.handshake(&[(HEADER_TABLE_SIZE, 0)]);
        for stream in [1, 3, 5] {
            conn.send_get(stream, "/no-table");
            conn.expect_ok(stream, "GET", "/no-table");
        }
    }

    /// §4.2 and §6.5.2: herdsman keeps to the client's SETTINGS_MAX_FRAME_SIZE (the default,
    /// 2^14): a body of 40,000 octets comes back in DATA frames of at most that.
    fn s6_5_2_response_frames_keep_to_the_clients_max_frame_size(transport) {
        let mut conn = Conn::start(transport);
        conn.send_window_update(0, 1 << 20);
        conn.send_settings(&[(INITIAL_WINDOW_SIZE, 1 << 20)]);
        conn.expect_settings_ack();
        let body = vec![b'z'; 40_000];
        let block = Block::request("POST", "/big").field("content-length", "40000");
        conn.send_headers(1, 0, &block);
        for chunk in body.chunks(DEFAULT_MAX_FRAME_SIZE) {
            conn.send_frame(DATA, 0, 1, chunk);
        }
        conn.send_frame(DATA, END_STREAM, 1, &[]);
        let response = conn.expect_echo(1, "/big", &body);
        assert!(
            response.data_frames.iter().all(|&n| n <= DEFAULT_MAX_FRAME_SIZE),
            "{:?}",
            response.data_frames
        );
    }
}
