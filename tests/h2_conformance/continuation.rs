//! §6.10: CONTINUATION — a field block across frames, and every way of breaking the sequence.

use crate::kit::*;

/// A GET's field block in two parts (the cut inside the pseudo-fields, where no decoder can
/// act on the first part alone).
fn two_parts(path: &str) -> (Vec<u8>, Vec<u8>) {
    let block = Block::get(path).field("x-conformance", "continued").bytes;
    let (first, second) = block.split_at(5);
    (first.to_vec(), second.to_vec())
}

cases! {
    /// §6.10: HEADERS and one CONTINUATION make one field block.
    fn s6_10_one_continuation_completes_the_block(transport) {
        let mut conn = Conn::start(transport);
        let (first, second) = two_parts("/continued");
        conn.send_frame(HEADERS, END_STREAM, 1, &first);
        conn.send_frame(CONTINUATION, END_HEADERS, 1, &second);
        let response = conn.expect_ok(1, "GET", "/continued");
        assert_eq!(response.field("x-seen-conformance"), Some("continued"));
    }

    /// §6.10: several CONTINUATION frames make one field block. (Not one an octet: herdsman's
    /// h2 crate ends a connection whose block comes in more frames than its size needs, a
    /// CONTINUATION flood.)
    fn s6_10_several_continuations_complete_the_block(transport) {
        let mut conn = Conn::start(transport);
        let block = Block::get("/many").field("x-conformance", "in pieces").bytes;
        let pieces: Vec<&[u8]> = block.chunks(block.len() / 4 + 1).collect();
        conn.send_frame(HEADERS, END_STREAM, 1, pieces[0]);
        for (i, piece) in pieces.iter().enumerate().skip(1) {
            let flags = if i == pieces.len() - 1 { END_HEADERS } else { 0 };
            conn.send_frame(CONTINUATION, flags, 1, piece);
        }
        let response = conn.expect_ok(1, "GET", "/many");
        assert_eq!(response.field("x-seen-conformance"), Some("in pieces"));
    }

    /// §6.10: a frame other than CONTINUATION (DATA) while a block is open is a connection
    /// error of type PROTOCOL_ERROR.
    fn s6_10_data_after_an_unfinished_block_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        let (first, second) = two_parts("/");
        conn.send_frame(HEADERS, 0, 1, &first);
        conn.send_frame(CONTINUATION, 0, 1, &second);
        conn.send_frame(DATA, END_STREAM, 1, b"data");
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.10: CONTINUATION on stream 0: PROTOCOL_ERROR.
    fn s6_10_continuation_on_stream_0_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        let (first, second) = two_parts("/");
        conn.send_frame(HEADERS, END_STREAM, 1, &first);
        conn.send_frame(CONTINUATION, END_HEADERS, 0, &second);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.10: CONTINUATION after a HEADERS that had END_HEADERS: PROTOCOL_ERROR.
    fn s6_10_continuation_after_end_headers_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/");
        conn.send_frame(CONTINUATION, END_HEADERS, 1, &Block::new().field("x-a", "b").bytes);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.10: CONTINUATION after a CONTINUATION that had END_HEADERS: PROTOCOL_ERROR.
    fn s6_10_continuation_after_a_finished_continuation_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        let (first, second) = two_parts("/");
        conn.send_frame(HEADERS, 0, 1, &first);
        conn.send_frame(CONTINUATION, END_HEADERS, 1, &second);
        conn.send_frame(CONTINUATION, END_HEADERS, 1, &Block::new().field("x-a", "b").bytes);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.10: CONTINUATION after DATA: PROTOCOL_ERROR.
    fn s6_10_continuation_after_data_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        conn.send_post_head(1, "/");
        conn.send_frame(DATA, 0, 1, b"body");
        conn.send_frame(CONTINUATION, END_HEADERS, 1, &Block::new().field("x-a", "b").bytes);
        conn.expect_goaway(PROTOCOL_ERROR);
    }

    /// §6.10: CONTINUATION of another stream while a block is open: PROTOCOL_ERROR.
    fn s6_10_continuation_of_another_stream_is_protocol_error(transport) {
        let mut conn = Conn::start(transport);
        let (first, second) = two_parts("/");
        conn.send_frame(HEADERS, END_STREAM, 1, &first);
        conn.send_frame(CONTINUATION, END_HEADERS, 3, &second);
        conn.expect_goaway(PROTOCOL_ERROR);
    }
}
