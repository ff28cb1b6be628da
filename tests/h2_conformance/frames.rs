//! §4: the frame format (unknown types, flags and the reserved bit are ignored), frame sizes
//! (SETTINGS_MAX_FRAME_SIZE), and field blocks that must arrive whole (§4.3); §5.5's
//! extensions, which a receiver ignores except inside a field block.

use crate::kit::*;

cases! {
    /// §4.1: a frame of an unknown type is ignored; the connection goes on.
    fn s4_1_a_frame_of_unknown_type_is_ignored(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(0x16, 0, 0, b"unknown");
        conn.expect_alive();
    }

    /// §4.1: flags a frame type does not define are ignored (a PING with all of them but ACK
    /// is still answered).
    fn s4_1_undefined_flags_are_ignored(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(PING, 0xfe, 0, b"flagsset");
        conn.expect_ping_ack(*b"flagsset");
    }

    /// §4.1: the reserved bit of the stream identifier is ignored on receipt.
    fn s4_1_the_reserved_bit_is_ignored(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(PING, 0, 1 << 31, b"reserved");
        conn.expect_ping_ack(*b"reserved");
    }

    /// §4.2: a DATA frame of 2^14 octets (the size every endpoint must take) is accepted.
    fn s4_2_a_data_frame_of_16384_octets_is_accepted(transport) {
        let mut conn = Conn::start(transport);
        let body = vec![b'x'; DEFAULT_MAX_FRAME_SIZE];
        let block = Block::request("POST", "/max-frame").field("content-length", "16384");
        conn.send_headers(1, 0, &block);
        conn.send_frame(DATA, END_STREAM, 1, &body);
        conn.expect_echo(1, "/max-frame", &body);
    }

    /// §4.2: a DATA frame larger than SETTINGS_MAX_FRAME_SIZE is a FRAME_SIZE_ERROR (of the
    /// stream or, as a frame that may not even be parsed, the connection).
    fn s4_2_a_data_frame_over_max_frame_size_is_frame_size_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/too-big");
        conn.send_frame(DATA, END_STREAM, 1, &vec![b'x'; DEFAULT_MAX_FRAME_SIZE + 1]);
        conn.expect_stream_or_connection_error(1, FRAME_SIZE_ERROR);
    }

    /// §4.2: a HEADERS frame over the size carries a field block, so it alters the connection's
    /// state: a connection error of type FRAME_SIZE_ERROR.
    fn s4_2_a_headers_frame_over_max_frame_size_is_a_connection_error(transport) {
        let mut conn = Conn::start(transport);
        let mut block = Block::get("/too-big-head");
        for i in 0..6 {
            block = block.field(&format!("x-filler-{i}"), &"y".repeat(3000));
        }
        assert!(block.bytes.len() > DEFAULT_MAX_FRAME_SIZE);
        conn.send_headers(1, END_STREAM, &block);
        conn.expect_goaway(FRAME_SIZE_ERROR);
    }

    /// §4.3: a field block that cannot be decoded is a connection error of type
    /// COMPRESSION_ERROR (here: a literal whose name's length runs past the block).
    fn s4_3_a_field_block_that_cannot_be_decoded_is_compression_error(transport) {
        let mut conn = Conn::start(transport);
        let block = Block::get("/").raw(&[0x00, 0x7f, 0x7f]);
        conn.send_headers(1, END_STREAM, &block);
        conn.expect_goaway(COMPRESSION_ERROR);
    }

    /// §4.3: a field block is a contiguous run of frames; a PRIORITY frame inside it is a
    /// connection error of type PROTOCOL_ERROR.
    fn s4_3_a_priority_frame_inside_a_field_block_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(HEADERS, END_STREAM, 1, &Block::get("/").bytes);
        conn.send_frame(PRIORITY, 0, 1, &priority_payload(0, false, 255));
        conn.send_frame(CONTINUATION, END_HEADERS, 1, &Block::new().field("x-a", "b").bytes);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §4.3: frames of another stream inside a field block: PROTOCOL_ERROR.
    fn s4_3_headers_of_another_stream_inside_a_field_block_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(HEADERS, END_STREAM, 1, &Block::get("/").bytes);
        conn.send_headers(3, END_STREAM, &Block::get("/"));
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §5.5: an unknown extension frame on a stream is ignored, and the stream is served.
    fn s5_5_an_unknown_extension_frame_is_ignored(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/extension");
        conn.send_frame(0xfa, 0x3, 1, b"extension payload");
        conn.send_frame(DATA, END_STREAM, 1, b"after");
        conn.expect_echo(1, "/extension", b"after");
    }

    /// §5.5: an extension frame in the middle of a field block is a connection error of type
    /// PROTOCOL_ERROR.
    fn s5_5_an_unknown_frame_inside_a_field_block_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_frame(HEADERS, END_STREAM, 1, &Block::get("/").bytes);
        conn.send_frame(0xfa, 0, 1, b"in the middle");
        conn.send_frame(CONTINUATION, END_HEADERS, 1, &Block::new().field("x-a", "b").bytes);
        conn.expect_goaway(PROTOCOL_ERROR);
    }
}
