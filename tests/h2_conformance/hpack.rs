//! RFC 7541, HPACK: every representation a request's fields may take (each must reach the
//! server as sent), the dynamic table across field blocks, and the decoding errors that are a
//! connection error of type COMPRESSION_ERROR (RFC 9113 §4.3).

use crate::kit::hpack::{integer, string, METHOD_GET, PATH_ROOT, SCHEME_HTTP};
use crate::kit::huffman;
use crate::kit::*;

/// The static-table index of `cookie`, a field the server echoes (as `x-seen-cookie`).
const COOKIE: usize = 32;

/// GET `/hpack` with `fields` after its pseudo-fields: served, and the server saw `echoed`'s
/// field (`x-seen-...` of the response) with its value.
fn served_with(transport: Transport, fields: Block, echoed: (&str, &str)) {
    let mut conn = Conn::start(transport);
    let mut block = Block::get("/hpack");
    block.bytes.extend_from_slice(&fields.bytes);
    conn.send_headers(1, END_STREAM, &block);
    let response = conn.expect_ok(1, "GET", "/hpack");
    assert_eq!(response.field(echoed.0), Some(echoed.1), "{response:?}");
}

/// GET `/` with `fields` after its pseudo-fields: a connection error of type
/// COMPRESSION_ERROR.
fn refused_with(transport: Transport, fields: Block) {
    let mut conn = Conn::start(transport);
    let mut block = Block::get("/");
    block.bytes.extend_from_slice(&fields.bytes);
    conn.send_headers(1, END_STREAM, &block);
    conn.expect_goaway(COMPRESSION_ERROR);
}

/// A literal field without indexing named `x-conformance` whose value is the Huffman code
/// `coded`, as it is, valid or not.
fn huffman_value(coded: &[u8]) -> Block {
    let mut bytes = vec![0x00];
    string(&mut bytes, b"x-conformance", false);
    integer(&mut bytes, 0x80, 7, coded.len());
    bytes.extend_from_slice(coded);
    Block::new().raw(&bytes)
}

const SEEN_COOKIE: &str = "x-seen-cookie";
const SEEN: &str = "x-seen-conformance";

cases! {
    /// §6.1: fields from the static table by index (`:method GET`, `:scheme http`, `:path /`).
    fn hpack_6_1_indexed_fields_are_decoded(transport) {
        let mut conn = Conn::start(transport);
        let block = Block::new()
            .indexed(METHOD_GET)
            .indexed(SCHEME_HTTP)
            .indexed(PATH_ROOT)
            .field(":authority", "conformance.test");
        conn.send_headers(1, END_STREAM, &block);
        conn.expect_ok(1, "GET", "/");
    }

    /// §6.2.1: with incremental indexing, the name indexed.
    fn hpack_6_2_1_incremental_indexing_indexed_name(transport) {
        let field = Block::new().literal_name(Literal::Indexed, COOKIE, "a=1", false);
        served_with(transport, field, (SEEN_COOKIE, "a=1"));
    }

    /// §6.2.1: with incremental indexing, the name indexed, the value Huffman-coded.
    fn hpack_6_2_1_incremental_indexing_indexed_name_huffman(transport) {
        let field = Block::new().literal_name(Literal::Indexed, COOKIE, "a=huffman", true);
        served_with(transport, field, (SEEN_COOKIE, "a=huffman"));
    }

    /// §6.2.1: with incremental indexing, a new name.
    fn hpack_6_2_1_incremental_indexing_new_name(transport) {
        let field = Block::new().literal(Literal::Indexed, "x-conformance", "new", false);
        served_with(transport, field, (SEEN, "new"));
    }

    /// §6.2.1: with incremental indexing, a new name, Huffman-coded.
    fn hpack_6_2_1_incremental_indexing_new_name_huffman(transport) {
        let field = Block::new().literal(Literal::Indexed, "x-conformance", "new huffman", true);
        served_with(transport, field, (SEEN, "new huffman"));
    }

    /// §6.2.2: without indexing, the name indexed.
    fn hpack_6_2_2_without_indexing_indexed_name(transport) {
        let field = Block::new().literal_name(Literal::WithoutIndexing, COOKIE, "b=2", false);
        served_with(transport, field, (SEEN_COOKIE, "b=2"));
    }

    /// §6.2.2: without indexing, the name indexed, Huffman-coded.
    fn hpack_6_2_2_without_indexing_indexed_name_huffman(transport) {
        let field = Block::new().literal_name(Literal::WithoutIndexing, COOKIE, "b=huff", true);
        served_with(transport, field, (SEEN_COOKIE, "b=huff"));
    }

    /// §6.2.2: without indexing, a new name.
    fn hpack_6_2_2_without_indexing_new_name(transport) {
        let field = Block::new().literal(Literal::WithoutIndexing, "x-conformance", "plain", false);
        served_with(transport, field, (SEEN, "plain"));
    }

    /// §6.2.2: without indexing, a new name, Huffman-coded.
    fn hpack_6_2_2_without_indexing_new_name_huffman(transport) {
        let field = Block::new().literal(Literal::WithoutIndexing, "x-conformance", "coded", true);
        served_with(transport, field, (SEEN, "coded"));
    }

    /// §6.2.3: never indexed, the name indexed.
    fn hpack_6_2_3_never_indexed_indexed_name(transport) {
        let field = Block::new().literal_name(Literal::NeverIndexed, COOKIE, "secret=1", false);
        served_with(transport, field, (SEEN_COOKIE, "secret=1"));
    }

    /// §6.2.3: never indexed, the name indexed, Huffman-coded.
    fn hpack_6_2_3_never_indexed_indexed_name_huffman(transport) {
        let field = Block::new().literal_name(Literal::NeverIndexed, COOKIE, "secret=2", true);
        served_with(transport, field, (SEEN_COOKIE, "secret=2"));
    }

    /// §6.2.3: never indexed, a new name.
    fn hpack_6_2_3_never_indexed_new_name(transport) {
        let field = Block::new().literal(Literal::NeverIndexed, "x-conformance", "never", false);
        served_with(transport, field, (SEEN, "never"));
    }

    /// §6.2.3: never indexed, a new name, Huffman-coded.
    fn hpack_6_2_3_never_indexed_new_name_huffman(transport) {
        let field = Block::new().literal(Literal::NeverIndexed, "x-conformance", "never coded", true);
        served_with(transport, field, (SEEN, "never coded"));
    }

    /// §5.1: an integer on more than one octet (a value of 300 octets).
    fn hpack_5_1_a_multi_octet_integer_is_decoded(transport) {
        let value = "v".repeat(300);
        let field = Block::new().literal(Literal::WithoutIndexing, "x-conformance", &value, false);
        served_with(transport, field, (SEEN, &value));
    }

    /// §6.3 and §4.2: a dynamic table size update at the start of a block.
    fn hpack_6_3_a_size_update_at_the_start_is_accepted(transport) {
        let mut conn = Conn::start(transport);
        let block = Block::get("/resized").after_size_update(0);
        conn.send_headers(1, END_STREAM, &block);
        conn.expect_ok(1, "GET", "/resized");
    }

    /// §4.2: two size updates at the start of a block (the smallest, then the final size).
    fn hpack_4_2_two_size_updates_at_the_start_are_accepted(transport) {
        let mut conn = Conn::start(transport);
        let block = Block::get("/resized-twice").after_size_update(4096).after_size_update(0);
        conn.send_headers(1, END_STREAM, &block);
        conn.expect_ok(1, "GET", "/resized-twice");
    }

    /// §2.3.2 and §4.1: a field added to the dynamic table by one block is referred to by index
    /// in the next block of the connection.
    fn hpack_2_3_2_the_dynamic_table_lasts_across_blocks(transport) {
        let mut conn = Conn::start(transport);
        let first = Block::get("/first").literal(Literal::Indexed, "x-conformance", "remembered", false);
        conn.send_headers(1, END_STREAM, &first);
        let response = conn.expect_ok(1, "GET", "/first");
        assert_eq!(response.field(SEEN), Some("remembered"));
        // Index 62: the newest dynamic entry.
        conn.send_headers(3, END_STREAM, &Block::get("/second").indexed(62));
        let response = conn.expect_ok(3, "GET", "/second");
        assert_eq!(response.field(SEEN), Some("remembered"));
    }

    /// §4.3: a size update to 0 evicts every entry; referring to one afterwards is an index
    /// out of range (§2.3.3).
    fn hpack_4_3_an_evicted_entry_is_no_longer_addressable(transport) {
        let mut conn = Conn::start(transport);
        let first = Block::get("/first").literal(Literal::Indexed, "x-conformance", "evicted", false);
        conn.send_headers(1, END_STREAM, &first);
        conn.expect_ok(1, "GET", "/first");
        let second = Block::get("/second").after_size_update(0).indexed(62);
        conn.send_headers(3, END_STREAM, &second);
        conn.expect_goaway(COMPRESSION_ERROR);
    }

    /// §2.3.3: an indexed field beyond both tables: COMPRESSION_ERROR.
    fn hpack_2_3_3_an_index_out_of_range_is_compression_error(transport) {
        refused_with(transport, Block::new().indexed(70));
    }

    /// §2.3.3: a literal whose indexed name is beyond both tables: COMPRESSION_ERROR.
    fn hpack_2_3_3_a_name_index_out_of_range_is_compression_error(transport) {
        refused_with(transport, Block::new().literal_name(Literal::WithoutIndexing, 70, "x", false));
    }

    /// §6.1: index 0 is not used: COMPRESSION_ERROR.
    fn hpack_6_1_index_0_is_compression_error(transport) {
        refused_with(transport, Block::new().indexed(0));
    }

    /// §4.2: a dynamic table size update after the first field of a block: COMPRESSION_ERROR.
    fn hpack_4_2_a_size_update_at_the_end_of_a_block_is_compression_error(transport) {
        refused_with(transport, Block::new().size_update(0));
    }

    /// §6.3: a size update above SETTINGS_HEADER_TABLE_SIZE (herdsman's: 4,096):
    /// COMPRESSION_ERROR.
    fn hpack_6_3_a_size_update_over_the_limit_is_compression_error(transport) {
        let mut conn = Conn::start(transport);
        let block = Block::get("/").after_size_update(4097);
        conn.send_headers(1, END_STREAM, &block);
        conn.expect_goaway(COMPRESSION_ERROR);
    }

    /// §5.1: an integer longer than any decoder must take (it overflows 64 bits):
    /// COMPRESSION_ERROR.
    fn hpack_5_1_an_integer_overflow_is_compression_error(transport) {
        let mut bytes = vec![0xff];
        bytes.extend_from_slice(&[0xff; 10]);
        bytes.push(0x01);
        refused_with(transport, Block::new().raw(&bytes));
    }

    /// §5.2: Huffman padding longer than 7 bits: COMPRESSION_ERROR.
    fn hpack_5_2_huffman_padding_over_7_bits_is_compression_error(transport) {
        // 'a' (5 bits) and 11 bits of 1s.
        refused_with(transport, huffman_value(&huffman::encode_raw(&[usize::from(b'a')], 11)));
    }

    /// §5.2: Huffman padding that is not the start of EOS (zero bits): COMPRESSION_ERROR.
    fn hpack_5_2_huffman_padding_of_zeros_is_compression_error(transport) {
        refused_with(transport, huffman_value(&huffman::encode_raw(&[usize::from(b'a')], 0)));
    }

    /// §5.2: a Huffman string containing EOS: COMPRESSION_ERROR.
    fn hpack_5_2_huffman_eos_in_a_string_is_compression_error(transport) {
        let coded = huffman::encode_raw(&[usize::from(b'a'), 256], 5);
        refused_with(transport, huffman_value(&coded));
    }
}
