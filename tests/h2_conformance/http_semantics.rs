//! §8: HTTP semantics over HTTP/2. Requests served as they should be (GET, HEAD, POST,
//! trailers, cookies, Host from `:authority`), and malformed requests (§8.1.1), which must be a
//! stream error of type PROTOCOL_ERROR — RST_STREAM on that stream, never a response, never
//! reaching the server, the connection still serving: bad field names and values (§8.2.1),
//! connection-specific fields (§8.2.2), bad pseudo-header fields (§8.3), `:authority` and
//! `Host` that disagree (§8.3.1), a content-length that is not the body's (§8.1.1), trailers
//! that are not trailers (§8.1); and §8.4: a client cannot push.

use crate::kit::*;

/// Sends `block` as a request on stream 1 (ended with it) and expects the stream reset with
/// PROTOCOL_ERROR, the connection still serving.
fn malformed(transport: Transport, block: Block) {
    let mut conn = Conn::start(transport);
    conn.send_headers(1, END_STREAM, &block);
    conn.expect_reset(1, PROTOCOL_ERROR);
}

/// As [`malformed`], for fields herdsman's h2 crate refuses while it decodes the block (a name
/// that is not a lowercase token, a value with a control character, an unknown pseudo-header):
/// it makes the stream error the connection's, which §5.4.1 allows — PROTOCOL_ERROR either way.
fn malformed_field(transport: Transport, block: Block) {
    let mut conn = Conn::start(transport);
    conn.send_headers(1, END_STREAM, &block);
    conn.expect_stream_or_connection_error(1, PROTOCOL_ERROR);
}

/// The pseudo-fields of a request to `/` with `:method` `method`, with the one named `leave`
/// left out.
fn request_without(leave: &str) -> Block {
    let mut block = Block::new();
    for (name, value) in [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "conformance.test"),
    ] {
        if name != leave {
            block = block.field(name, value);
        }
    }
    block
}

cases! {
    /// §8.1: a GET is served.
    fn s8_1_a_get_is_served(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(1, "/get?query=1");
        let response = conn.expect_ok(1, "GET", "/get?query=1");
        assert_eq!(response.body, GREETING);
    }

    /// §8.1: a HEAD is answered with the GET's fields and no content.
    fn s8_1_a_head_is_answered_without_content(transport) {
        let mut conn = Conn::start(transport);
        conn.send_headers(1, END_STREAM, &Block::request("HEAD", "/head"));
        let response = conn.expect_ok(1, "HEAD", "/head");
        assert!(response.body.is_empty(), "{response:?}");
        assert_eq!(response.field("content-length"), Some("20"), "{response:?}");
    }

    /// §8.1: a POST with a body of known length is served.
    fn s8_1_a_post_is_served(transport) {
        let mut conn = Conn::start(transport);
        let block = Block::request("POST", "/post").field("content-length", "4");
        conn.send_headers(1, 0, &block);
        conn.send_frame(DATA, END_STREAM, 1, b"body");
        conn.expect_echo(1, "/post", b"body");
    }

    /// §8.1: a POST with trailers (a HEADERS frame with END_STREAM after the DATA) is served.
    fn s8_1_a_post_with_trailers_is_served(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/with-trailers");
        conn.send_frame(DATA, 0, 1, b"with trailers");
        conn.send_headers(1, END_STREAM, &Block::new().field("x-checksum", "abc"));
        conn.expect_echo(1, "/with-trailers", b"with trailers");
    }

    /// §8.1: a second HEADERS frame without END_STREAM (trailers that do not end the stream)
    /// makes the request malformed.
    fn s8_1_trailers_without_end_stream_are_malformed(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/");
        conn.send_frame(DATA, 0, 1, b"body");
        conn.send_headers(1, 0, &Block::new().field("x-checksum", "abc"));
        conn.expect_reset(1, PROTOCOL_ERROR);
    }

    /// §8.1: trailers may not carry pseudo-header fields.
    fn s8_1_trailers_with_a_pseudo_header_are_malformed(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/");
        conn.send_frame(DATA, 0, 1, b"body");
        conn.send_headers(1, END_STREAM, &Block::new().field(":method", "GET"));
        conn.expect_reset(1, PROTOCOL_ERROR);
    }

    /// §8.1.1: a content-length other than the DATA frames' total (one frame).
    fn s8_1_1_content_length_above_the_data_is_malformed(transport) {
        let mut conn = Conn::start(transport);
        let block = Block::request("POST", "/").field("content-length", "10");
        conn.send_headers(1, 0, &block);
        conn.send_frame(DATA, END_STREAM, 1, b"short");
        conn.expect_reset(1, PROTOCOL_ERROR);
    }

    /// §8.1.1: a content-length below the total of several DATA frames.
    fn s8_1_1_content_length_below_the_data_is_malformed(transport) {
        let mut conn = Conn::start(transport);
        let block = Block::request("POST", "/").field("content-length", "4");
        conn.send_headers(1, 0, &block);
        conn.send_frame(DATA, 0, 1, b"four");
        conn.send_frame(DATA, END_STREAM, 1, b"more");
        conn.expect_reset(1, PROTOCOL_ERROR);
    }

    /// §8.1.1: DATA beyond the content-length after a pause long enough for a server to have
    /// answered the first frame's bytes: the request still is malformed, never served.
    fn s8_1_1_data_beyond_the_content_length_after_a_pause_is_malformed(transport) {
        let mut conn = Conn::start(transport);
        let block = Block::request("POST", "/").field("content-length", "4");
        conn.send_headers(1, 0, &block);
        conn.send_frame(DATA, 0, 1, b"four");
        std::thread::sleep(std::time::Duration::from_millis(300));
        conn.send_frame(DATA, END_STREAM, 1, b"more");
        conn.expect_reset(1, PROTOCOL_ERROR);
    }

    /// §8.1.1: a content-length above 0 on a request the HEADERS frame ended (no DATA at all).
    fn s8_1_1_content_length_without_data_is_malformed(transport) {
        let block = Block::request("POST", "/").field("content-length", "5");
        malformed(transport, block);
    }

    /// §8.1.1: a content-length that is not a number.
    fn s8_1_1_a_content_length_that_is_no_number_is_malformed(transport) {
        let mut conn = Conn::start(transport);
        let block = Block::request("POST", "/").field("content-length", "four");
        conn.send_headers(1, 0, &block);
        conn.expect_reset(1, PROTOCOL_ERROR);
    }

    /// §8.2: field names are lowercase; an uppercase letter makes the request malformed.
    fn s8_2_an_uppercase_field_name_is_malformed(transport) {
        malformed_field(transport, Block::get("/").field("X-Conformance", "upper"));
    }

    /// §8.2.1: a field name with a character outside the token set (a space).
    fn s8_2_1_a_field_name_with_a_space_is_malformed(transport) {
        malformed_field(transport, Block::get("/").literal_bytes(b"x conformance", b"v"));
    }

    /// §8.2.1: a field value with a line feed.
    fn s8_2_1_a_field_value_with_a_line_feed_is_malformed(transport) {
        malformed_field(transport, Block::get("/").literal_bytes(b"x-conformance", b"a\nb"));
    }

    /// §8.2.1: a field value with a NUL.
    fn s8_2_1_a_field_value_with_a_nul_is_malformed(transport) {
        malformed_field(transport, Block::get("/").literal_bytes(b"x-conformance", b"a\0b"));
    }

    /// §8.2.1: a field value that starts with whitespace.
    fn s8_2_1_a_field_value_starting_with_whitespace_is_malformed(transport) {
        malformed(transport, Block::get("/").literal_bytes(b"x-conformance", b" padded"));
    }

    /// §8.2.1: a field value that ends with whitespace.
    fn s8_2_1_a_field_value_ending_with_whitespace_is_malformed(transport) {
        malformed(transport, Block::get("/").literal_bytes(b"x-conformance", b"padded\t"));
    }

    /// §8.2.2: each connection-specific field makes a request malformed (one stream each, on
    /// one connection, which serves on after every reset).
    fn s8_2_2_connection_specific_fields_are_malformed(transport) {
        let mut conn = Conn::start(transport);
        let fields = [
            ("connection", "keep-alive"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
        ];
        for (i, (name, value)) in fields.into_iter().enumerate() {
            let stream = 1 + 2 * i as u32;
            conn.send_headers(stream, END_STREAM, &Block::get("/").field(name, value));
            conn.expect_reset(stream, PROTOCOL_ERROR);
        }
    }

    /// §8.2.2: `te` with a value other than `trailers`.
    fn s8_2_2_te_other_than_trailers_is_malformed(transport) {
        malformed(transport, Block::get("/").field("te", "trailers, deflate"));
    }

    /// §8.2.2: `te: trailers` is allowed, and served.
    fn s8_2_2_te_trailers_is_served(transport) {
        let mut conn = Conn::start(transport);
        conn.send_headers(1, END_STREAM, &Block::get("/te").field("te", "trailers"));
        conn.expect_ok(1, "GET", "/te");
    }

    /// §8.2.2: a response carries no connection-specific field: those of the server's
    /// HTTP/1.1 response (Connection, Keep-Alive, Transfer-Encoding) are left out.
    fn s8_2_2_responses_carry_no_connection_specific_fields(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(1, "/connection-fields");
        let response = conn.expect_response(1);
        assert_eq!(response.status(), 200);
        assert_eq!(response.body, b"hello");
        for name in ["connection", "keep-alive", "transfer-encoding"] {
            assert_eq!(response.field(name), None, "{name} in {response:?}");
        }
    }

    /// §8.2.3: cookie fields may come split; the server gets them joined into one.
    fn s8_2_3_split_cookies_are_joined(transport) {
        let mut conn = Conn::start(transport);
        let block = Block::get("/cookies").field("cookie", "a=1").field("cookie", "b=2");
        conn.send_headers(1, END_STREAM, &block);
        let response = conn.expect_ok(1, "GET", "/cookies");
        assert_eq!(response.field("x-seen-cookie"), Some("a=1; b=2"));
    }

    /// §8.3: an unknown pseudo-header field.
    fn s8_3_an_unknown_pseudo_header_is_malformed(transport) {
        malformed_field(transport, Block::get("/").field(":conformance", "x"));
    }

    /// §8.3: a response pseudo-header field (`:status`) in a request.
    fn s8_3_a_response_pseudo_header_in_a_request_is_malformed(transport) {
        malformed(transport, Block::get("/").field(":status", "200"));
    }

    /// §8.3: a pseudo-header field after a regular field.
    fn s8_3_a_pseudo_header_after_a_regular_field_is_malformed(transport) {
        let block = request_without(":authority")
            .field("x-conformance", "first")
            .field(":authority", "conformance.test");
        malformed(transport, block);
    }

    /// §8.3.1: an empty `:path`.
    fn s8_3_1_an_empty_path_is_malformed(transport) {
        malformed(transport, request_without(":path").field(":path", ""));
    }

    /// §8.1: a response's trailer section comes as a last HEADERS frame with END_STREAM, with
    /// no pseudo-header field in it.
    fn s8_1_response_trailers_end_the_stream(transport) {
        let mut conn = Conn::start(transport);
        conn.send_get(1, "/trailers");
        let response = conn.expect_response(1);
        assert_eq!(response.status(), 200);
        assert_eq!(response.body, b"hello");
        assert_eq!(response.trailers, [("x-checksum".to_string(), "42".to_string())]);
    }

    /// §8.1: an interim response (100) is a HEADERS frame without END_STREAM before the final
    /// one.
    fn s8_1_an_interim_response_comes_before_the_final_one(transport) {
        let mut conn = Conn::start(transport);
        let block = Block::request("POST", "/continue").field("expect", "100-continue");
        conn.send_headers(1, 0, &block);
        conn.expect_interim(1, 100);
        conn.send_frame(DATA, END_STREAM, 1, b"continued");
        conn.expect_echo(1, "/continue", b"continued");
    }

    /// §8.3.1: a `:path` that is neither an absolute path nor `*` (for OPTIONS).
    fn s8_3_1_a_path_without_a_leading_slash_is_malformed(transport) {
        malformed(transport, request_without(":path").field(":path", "relative"));
    }

    /// §8.3.1: `*` is a `:path` for OPTIONS only.
    fn s8_3_1_an_asterisk_path_is_malformed_but_for_options(transport) {
        malformed(transport, request_without(":path").field(":path", "*"));
    }

    /// §8.3.1: OPTIONS `*` (asterisk-form) is served; the server sees `OPTIONS *`.
    fn s8_3_1_options_asterisk_is_served(transport) {
        let mut conn = Conn::start(transport);
        conn.send_headers(1, END_STREAM, &Block::request("OPTIONS", "*"));
        conn.expect_ok(1, "OPTIONS", "*");
    }

    /// §8.3.1: no `:method`.
    fn s8_3_1_no_method_is_malformed(transport) {
        malformed(transport, request_without(":method"));
    }

    /// §8.3.1: no `:scheme`.
    fn s8_3_1_no_scheme_is_malformed(transport) {
        malformed(transport, request_without(":scheme"));
    }

    /// §8.3.1: no `:path`.
    fn s8_3_1_no_path_is_malformed(transport) {
        malformed(transport, request_without(":path"));
    }

    /// §8.3.1: `:method` twice.
    fn s8_3_1_a_second_method_is_malformed(transport) {
        malformed(transport, Block::get("/").field(":method", "POST"));
    }

    /// §8.3.1: `:scheme` twice.
    fn s8_3_1_a_second_scheme_is_malformed(transport) {
        malformed(transport, Block::get("/").field(":scheme", "https"));
    }

    /// §8.3.1: `:path` twice.
    fn s8_3_1_a_second_path_is_malformed(transport) {
        malformed(transport, Block::get("/").field(":path", "/other"));
    }

    /// §8.3.1: `:authority` and `Host` must name the same host.
    fn s8_3_1_authority_and_host_that_differ_are_malformed(transport) {
        malformed(transport, Block::get("/").field("host", "elsewhere.test"));
    }

    /// §8.3.1: for `http` and `https`, a request needs `:authority` or `Host`.
    fn s8_3_1_no_authority_and_no_host_is_malformed(transport) {
        malformed(transport, request_without(":authority"));
    }

    /// §8.3.1: an `:authority` that is there must not be empty.
    fn s8_3_1_an_empty_authority_is_malformed(transport) {
        malformed(transport, request_without(":authority").field(":authority", ""));
    }

    /// §8.3.1: a `Host` alone (no `:authority`) names the host; the server sees it.
    fn s8_3_1_host_without_authority_is_served(transport) {
        let mut conn = Conn::start(transport);
        let block = request_without(":authority").field("host", "host-only.test");
        conn.send_headers(1, END_STREAM, &block);
        let response = conn.expect_ok(1, "GET", "/");
        assert_eq!(response.field("x-seen-host"), Some("host-only.test"));
    }

    /// §8.3.1: the same host in `:authority` and `Host` (in another case) is served, and the
    /// server sees one Host.
    fn s8_3_1_authority_and_the_same_host_are_served(transport) {
        let mut conn = Conn::start(transport);
        let block = Block::get("/same-host").field("host", "Conformance.test");
        conn.send_headers(1, END_STREAM, &block);
        let response = conn.expect_ok(1, "GET", "/same-host");
        assert_eq!(response.field("x-seen-host"), Some("conformance.test"));
    }

    /// §8.5: CONNECT without `:authority`.
    fn s8_5_connect_without_authority_is_malformed(transport) {
        malformed(transport, Block::new().field(":method", "CONNECT"));
    }

    /// §8.5: CONNECT with `:path` (which it must leave out).
    fn s8_5_connect_with_a_path_is_malformed(transport) {
        let block = Block::new()
            .field(":method", "CONNECT")
            .field(":authority", "conformance.test:443")
            .field(":path", "/");
        malformed(transport, block);
    }

    /// §8.4: a client cannot push: PUSH_PROMISE is a connection error of type PROTOCOL_ERROR.
    fn s8_4_push_promise_from_a_client_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/");
        let mut payload = 2u32.to_be_bytes().to_vec();
        payload.extend_from_slice(&Block::get("/pushed").bytes);
        conn.send_frame(PUSH_PROMISE, END_HEADERS, 1, &payload);
        conn.expect_goaway(PROTOCOL_ERROR);
    }
}
