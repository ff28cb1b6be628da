//! §5.2, §6.9: flow control — WINDOW_UPDATE's form (§6.9), the window's bounds (§6.9.1) and
//! SETTINGS_INITIAL_WINDOW_SIZE's changes to the windows of streams already open (§6.9.2).

use crate::kit::*;

cases! {
    /// §6.9: WINDOW_UPDATE on the connection and on a stream, then a request, served.
    fn s6_9_window_updates_are_accepted(transport) {
        let mut conn = Conn::start(transport);
        conn.send_window_update(0, 1000);
        conn.send_post_head(1, "/window");
        conn.send_window_update(1, 1000);
        conn.send_frame(DATA, END_STREAM, 1, b"windowed");
        conn.expect_echo(1, "/window", b"windowed");
    }

    /// §6.9: an increment of 0 on the connection is a connection error of type PROTOCOL_ERROR.
    fn s6_9_a_zero_increment_on_the_connection_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_window_update(0, 0);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.9: an increment of 0 on a stream is a stream error of type PROTOCOL_ERROR (herdsman's
    /// h2 crate makes it the connection's, as §5.4.1 allows).
    fn s6_9_a_zero_increment_on_a_stream_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/zero-increment");
        conn.send_window_update(1, 0);
        conn.expect_stream_or_connection_error(1, PROTOCOL_ERROR);
    }

    /// §6.9: WINDOW_UPDATE of a length other than 4 octets is a connection error of type
    /// FRAME_SIZE_ERROR.
    fn s6_9_window_update_of_the_wrong_length_is_frame_size_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(WINDOW_UPDATE, 0, 0, &[0, 0, 0, 1, 0]);
        conn.expect_goaway(FRAME_SIZE_ERROR);
    }

    /// §6.9.1: with a stream window of 1, herdsman sends its response body one octet at a time
    /// as the window opens.
    fn s6_9_1_a_window_of_1_lets_one_octet_through(transport) {
        let mut conn = Conn::open(transport);
        conn.handshake(&[(INITIAL_WINDOW_SIZE, 1)]);
        conn.send_get(1, "/window-1");
        let response = conn.expect_ok(1, "GET", "/window-1");
        assert_eq!(response.body, GREETING);
        assert_eq!(response.data_frames[0], 1, "{:?}", response.data_frames);
    }

    /// §6.9.1: a connection window raised above 2^31-1 is a connection error of type
    /// FLOW_CONTROL_ERROR.
    fn s6_9_1_a_connection_window_over_the_maximum_is_flow_control_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_window_update(0, 0x7fff_ffff);
        conn.send_window_update(0, 0x7fff_ffff);
        conn.expect_goaway(FLOW_CONTROL_ERROR);
    }

    /// §6.9.1: a stream window raised above 2^31-1 is a stream error of type
    /// FLOW_CONTROL_ERROR.
    fn s6_9_1_a_stream_window_over_the_maximum_is_flow_control_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/overflow");
        conn.send_window_update(1, 0x7fff_ffff);
        conn.send_window_update(1, 0x7fff_ffff);
        conn.expect_reset(1, FLOW_CONTROL_ERROR);
    }

    /// §6.9.2: raising SETTINGS_INITIAL_WINDOW_SIZE after a stream opened raises that stream's
    /// window: a response stalled at a window of 0 moves once it is 1.
    fn s6_9_2_a_new_initial_window_size_applies_to_open_streams(transport) {
        let mut conn = Conn::open(transport);
        conn.handshake(&[(INITIAL_WINDOW_SIZE, 0)]);
        conn.send_get(1, "/window-0");
        let head = conn.expect_head(1);
        assert_eq!(head.status(), 200);
        conn.send_settings(&[(INITIAL_WINDOW_SIZE, 1)]);
        let data = conn.expect_data(1);
        assert_eq!(data, &GREETING[..1]);
    }

    /// §6.9.2: a SETTINGS_INITIAL_WINDOW_SIZE change can leave a stream's window negative; the
    /// stream waits until WINDOW_UPDATE makes it positive, then sends.
    fn s6_9_2_a_window_may_go_negative(transport) {
        let mut conn = Conn::open(transport);
        conn.handshake(&[(INITIAL_WINDOW_SIZE, 5)]);
        conn.send_get(1, "/negative");
        let head = conn.expect_head(1);
        assert_eq!(head.status(), 200);
        assert_eq!(conn.expect_data(1), &GREETING[..5]);
        // The window was 5 and all of it is used: lowering the initial size by 3 leaves -3.
        conn.send_settings(&[(INITIAL_WINDOW_SIZE, 2)]);
        conn.expect_settings_ack();
        conn.send_window_update(1, 4);
        // -3 + 4 = 1 octet may go.
        assert_eq!(conn.expect_data(1), &GREETING[5..6]);
    }

    /// §6.9.2: SETTINGS_INITIAL_WINDOW_SIZE of 2^32-1 is a connection error of type
    /// FLOW_CONTROL_ERROR.
    fn s6_9_2_an_initial_window_size_over_the_maximum_is_flow_control_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_settings(&[(INITIAL_WINDOW_SIZE, u32::MAX)]);
        conn.expect_goaway(FLOW_CONTROL_ERROR);
    }
}
