//! The decoder and encoder against RFC 7541 Appendix C, every HpackError, the table's eviction
//! edges and memory, and encode → decode round trips.

use proptest::prelude::*;

use super::primitives::write_integer;
use super::*;

/// Bytes from hex digits (spaces allowed), as the RFC's dumps are written.
pub(super) fn hex(digits: &str) -> Vec<u8> {
    let digits: Vec<u8> = digits
        .bytes()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// What one block of a sequence decodes to: its fields, then the table (newest first) and size.
type Step<'a> = (Fields, Vec<(&'a str, &'a str)>, usize);

/// Every field `block` decodes to, with `scratch` kept by the caller.
fn decode_with(
    decoder: &mut Decoder,
    block: &[u8],
    scratch: &mut Vec<u8>,
) -> Result<Fields, HpackError> {
    let mut fields = Vec::new();
    let result = decoder.decode(block, scratch, |name, value| {
        fields.push((name.to_vec(), value.to_vec()));
        Ok::<(), ()>(())
    });
    match result {
        Ok(()) => Ok(fields),
        Err(DecodeError::Compression(error)) => Err(error),
        Err(DecodeError::Field(())) => unreachable!("the callback never refuses"),
    }
}

fn decode(decoder: &mut Decoder, block: &[u8]) -> Result<Fields, HpackError> {
    decode_with(decoder, block, &mut Vec::new())
}

fn fields(list: &[(&str, &str)]) -> Fields {
    list.iter()
        .map(|(name, value)| (name.as_bytes().to_vec(), value.as_bytes().to_vec()))
        .collect()
}

fn table(decoder: &Decoder) -> Vec<(String, String)> {
    decoder
        .table_entries()
        .map(|(name, value)| {
            let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).unwrap();
            (text(name), text(value))
        })
        .collect()
}

fn entries(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_field_representations_of_c2() {
    let mut decoder = Decoder::new(4096);
    let block = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
    assert_eq!(
        decode(&mut decoder, &block),
        Ok(fields(&[("custom-key", "custom-header")]))
    );
    assert_eq!(table(&decoder), entries(&[("custom-key", "custom-header")]));
    assert_eq!(decoder.table_size(), 55);

    let cases = [
        (
            "040c 2f73 616d 706c 652f 7061 7468",
            (":path", "/sample/path"),
        ),
        (
            "1008 7061 7373 776f 7264 0673 6563 7265 74",
            ("password", "secret"),
        ),
        ("82", (":method", "GET")),
    ];
    for (block, field) in cases {
        let mut decoder = Decoder::new(4096);
        assert_eq!(decode(&mut decoder, &hex(block)), Ok(fields(&[field])));
        assert_eq!(decoder.table_size(), 0, "{block} adds nothing to the table");
    }
}

/// Each block decoded in turn on one connection, checking its fields, then the dynamic table's
/// entries (newest first) and size after it; one scratch buffer for all.
fn in_sequence(decoder: &mut Decoder, blocks: [&str; 3], expected: [Step; 3]) {
    let mut scratch = Vec::new();
    for (block, (list, dynamic, size)) in blocks.iter().zip(expected) {
        assert_eq!(
            decode_with(decoder, &hex(block), &mut scratch),
            Ok(list),
            "{block}"
        );
        assert_eq!(table(decoder), entries(&dynamic));
        assert_eq!(decoder.table_size(), size);
    }
}

/// Three requests on one connection (C.3 raw, C.4 Huffman): the same fields and table.
fn three_requests(blocks: [&str; 3]) {
    let mut decoder = Decoder::new(4096);
    let first = [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ];
    let expected = [
        (fields(&first), vec![(":authority", "www.example.com")], 57),
        (
            fields(&[
                first[0],
                first[1],
                first[2],
                first[3],
                ("cache-control", "no-cache"),
            ]),
            vec![
                ("cache-control", "no-cache"),
                (":authority", "www.example.com"),
            ],
            110,
        ),
        (
            fields(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value"),
            ]),
            vec![
                ("custom-key", "custom-value"),
                ("cache-control", "no-cache"),
                (":authority", "www.example.com"),
            ],
            164,
        ),
    ];
    in_sequence(&mut decoder, blocks, expected);
}

#[test]
fn the_requests_of_c3_without_huffman() {
    three_requests([
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ]);
}

#[test]
fn the_requests_of_c4_with_huffman() {
    three_requests([
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ]);
}

/// Three responses with a 256-byte table (C.5 raw, C.6 Huffman): evictions along the way.
fn three_responses(blocks: [&str; 3]) {
    let mut decoder = Decoder::new(256);
    let date1 = "Mon, 21 Oct 2013 20:13:21 GMT";
    let date2 = "Mon, 21 Oct 2013 20:13:22 GMT";
    let location = "https://www.example.com";
    let cookie = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";
    let expected = [
        (
            fields(&[
                (":status", "302"),
                ("cache-control", "private"),
                ("date", date1),
                ("location", location),
            ]),
            vec![
                ("location", location),
                ("date", date1),
                ("cache-control", "private"),
                (":status", "302"),
            ],
            222,
        ),
        (
            fields(&[
                (":status", "307"),
                ("cache-control", "private"),
                ("date", date1),
                ("location", location),
            ]),
            vec![
                (":status", "307"),
                ("location", location),
                ("date", date1),
                ("cache-control", "private"),
            ],
            222,
        ),
        (
            fields(&[
                (":status", "200"),
                ("cache-control", "private"),
                ("date", date2),
                ("location", location),
                ("content-encoding", "gzip"),
                ("set-cookie", cookie),
            ]),
            vec![
                ("set-cookie", cookie),
                ("content-encoding", "gzip"),
                ("date", date2),
            ],
            215,
        ),
    ];
    in_sequence(&mut decoder, blocks, expected);
}

#[test]
fn the_responses_of_c5_without_huffman() {
    three_responses([
        "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
         2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
         6c65 2e63 6f6d",
        "4803 3330 37c1 c0bf",
        "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
         54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
         5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
         3d31",
    ]);
}

#[test]
fn the_responses_of_c6_with_huffman() {
    three_responses([
        "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
         2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
        "4883 640e ffc1 c0bf",
        "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
         77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
         9587 3160 65c0 03ed 4ee5 b106 3d50 07",
    ]);
}

#[test]
fn scratch_is_reused_not_regrown() {
    let block = hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf");
    let mut decoder = Decoder::new(4096);
    decoder.set_max_table_size(4096);
    // Without the earlier requests the table has no entry 63: begin with one at hand.
    let mut scratch = Vec::new();
    decode_with(
        &mut decoder,
        &hex("418c f1e3 c2e5 f23a 6ba0 ab90 f4ff 4000 00"),
        &mut scratch,
    )
    .unwrap();
    decode_with(&mut decoder, &block, &mut scratch).unwrap();
    let (capacity, address) = (scratch.capacity(), scratch.as_ptr());
    assert!(capacity > 0);
    for _ in 0..3 {
        decode_with(&mut decoder, &block, &mut scratch).unwrap();
    }
    assert_eq!((scratch.capacity(), scratch.as_ptr()), (capacity, address));
}

/// The error a block ends in, on a fresh decoder with a 4096-byte table.
fn error(block: &[u8]) -> HpackError {
    decode(&mut Decoder::new(4096), block).unwrap_err()
}

/// An integer's bytes with its flags, for the blocks below.
fn integer(flags: u8, prefix_bits: u32, value: usize) -> Vec<u8> {
    let mut out = Vec::new();
    write_integer(&mut out, flags, prefix_bits, value);
    out
}

#[test]
fn every_malformed_block_is_refused_with_its_reason() {
    assert_eq!(error(&[0x80]), HpackError::IndexZero);
    // 62 with an empty dynamic table; 62 as a literal's name; 63 with one entry.
    assert_eq!(error(&[0xbe]), HpackError::IndexTooLarge);
    assert_eq!(error(&[0x7e, 0x01, b'a']), HpackError::IndexTooLarge);
    assert_eq!(error(&[0x0f, 0x2f, 0x01, b'a']), HpackError::IndexTooLarge);
    assert_eq!(error(&hex("4001 6101 62 bf")), HpackError::IndexTooLarge);
    assert_eq!(
        error(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x0f]),
        HpackError::IntegerOverflow
    );
    assert_eq!(error(&[0x82, 0xff]), HpackError::IntegerTruncated);
    assert_eq!(error(&[0x40, 0x7f]), HpackError::IntegerTruncated);
    assert_eq!(
        error(&[0x40, 0x05, b'a', b'b']),
        HpackError::StringTruncated
    );
    assert_eq!(error(&[0x40, 0x01, b'a']), HpackError::StringTruncated);
    assert_eq!(
        error(&[0x00, 0x01, b'a', 0x85, b'b']),
        HpackError::StringTruncated
    );
    // Huffman strings: EOS, a byte of padding, padding of 0s (as a name and as a value).
    assert_eq!(error(&hex("4084 ffff fffc 00")), HpackError::HuffmanEos);
    assert_eq!(
        error(&hex("0001 61 82 07ff")),
        HpackError::HuffmanPaddingTooLong
    );
    assert_eq!(error(&hex("0081 00 00")), HpackError::HuffmanPaddingNotOnes);
    // Size updates: above 4096; after a field; three at the start (two are fine).
    let mut block = integer(0x20, 5, 4097);
    assert_eq!(error(&block), HpackError::SizeUpdateTooLarge);
    block = integer(0x20, 5, 4096);
    assert_eq!(decode(&mut Decoder::new(4096), &block), Ok(vec![]));
    assert_eq!(error(&[0x82, 0x20]), HpackError::SizeUpdateNotAtStart);
    assert_eq!(
        decode(&mut Decoder::new(4096), &[0x20, 0x3f, 0xe1, 0x1f, 0x82]).map(|f| f.len()),
        Ok(1)
    );
    assert_eq!(
        error(&[0x20, 0x20, 0x20, 0x82]),
        HpackError::TooManySizeUpdates
    );
}

#[test]
fn a_lowered_setting_requires_a_size_update_at_most_it() {
    let mut decoder = Decoder::new(4096);
    decode(&mut decoder, &hex("4001 6101 62")).unwrap();
    decoder.set_max_table_size(1024);
    assert_eq!(decoder.table_limit(), 1024);
    // No update: refused. An update above the new maximum: refused.
    assert_eq!(
        decode(&mut decoder.clone(), &[0x82]),
        Err(HpackError::SizeUpdateMissing)
    );
    let above = integer(0x20, 5, 2000);
    assert_eq!(
        decode(&mut decoder.clone(), &above),
        Err(HpackError::SizeUpdateTooLarge)
    );
    // Lowered twice then raised before the next block: the smallest first, then up to the last.
    decoder.set_max_table_size(100);
    decoder.set_max_table_size(4096);
    let mut block = integer(0x20, 5, 100);
    assert_eq!(
        decode(&mut decoder.clone(), &[block.as_slice(), &[0x82]].concat()).map(|f| f.len()),
        Ok(1)
    );
    block.extend(integer(0x20, 5, 4096));
    block.push(0xbe);
    assert_eq!(
        decode(&mut decoder.clone(), &block),
        Ok(fields(&[("a", "b")])),
        "the entry survives 100"
    );
    assert_eq!(
        decode(&mut decoder.clone(), &integer(0x20, 5, 1024)),
        Err(HpackError::SizeUpdateTooLarge)
    );
    // Once satisfied, later blocks need none; a raised setting never requires one.
    let mut decoder = Decoder::new(4096);
    decode(&mut decoder, &[0x20]).unwrap();
    decoder.set_max_table_size(8192);
    assert_eq!(decode(&mut decoder, &[0x82]).map(|f| f.len()), Ok(1));
    assert_eq!(
        decoder.table_limit(),
        0,
        "the encoder's own size holds until it updates it"
    );
    assert_eq!(decode(&mut decoder, &integer(0x20, 5, 8192)), Ok(vec![]));
    assert_eq!(decoder.table_limit(), 8192);
}

#[test]
fn a_refused_field_stops_the_callback_but_the_table_stays_in_step() {
    let mut decoder = Decoder::new(4096);
    let mut seen = 0;
    // C.3.1: the callback refuses the third field; the fourth is still inserted.
    let block = hex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d");
    let result = decoder.decode(&block, &mut Vec::new(), |_, _| {
        seen += 1;
        if seen == 3 {
            Err("too large")
        } else {
            Ok(())
        }
    });
    assert_eq!(result, Err(DecodeError::Field("too large")));
    assert_eq!(seen, 3);
    assert_eq!(
        table(&decoder),
        entries(&[(":authority", "www.example.com")])
    );
    // A compression error later in the block outranks the field's.
    let result = decoder.decode(&[0x82, 0x80], &mut Vec::new(), |_, _| Err("no"));
    assert_eq!(result, Err(DecodeError::Compression(HpackError::IndexZero)));
}

#[test]
fn evictions_at_the_edges_of_the_maximum() {
    // An entry exactly the maximum is inserted alone; one byte more empties the table and is
    // still delivered.
    let mut decoder = Decoder::new(100);
    decode(&mut decoder, &hex("4001 6101 62")).unwrap();
    let exact = [&hex("4001 6143")[..], &[b'v'; 67]].concat(); // 1 + 67 + 32 = 100
    let fields_exact = decode(&mut decoder, &exact).unwrap();
    assert_eq!(decoder.table_size(), 100);
    assert_eq!(decoder.table_entries().count(), 1);
    assert_eq!(fields_exact[0].1.len(), 67);
    let over = [&hex("4001 6144")[..], &[b'v'; 68]].concat();
    assert_eq!(decode(&mut decoder, &over).unwrap()[0].1.len(), 68);
    assert_eq!(
        (decoder.table_size(), decoder.table_entries().count()),
        (0, 0)
    );

    // A literal named by the entry its own insertion evicts: the name survives.
    let mut decoder = Decoder::new(100);
    decode(
        &mut decoder,
        &hex("400a 6375 7374 6f6d 2d6b 6579 0a 3031 3233 3435 3637 3839"),
    )
    .unwrap();
    let evicting = [&[0x7e, 40][..], &[b'x'; 40]].concat(); // name: 62, custom-key
    let list = decode(&mut decoder, &evicting).unwrap();
    assert_eq!(list, vec![(b"custom-key".to_vec(), vec![b'x'; 40])]);
    assert_eq!(
        table(&decoder),
        vec![("custom-key".to_string(), "x".repeat(40))]
    );
    assert_eq!(decoder.table_size(), 82);
    // And when that insertion is itself larger than the table.
    let too_large = [&[0x7e, 70][..], &[b'y'; 70]].concat();
    assert_eq!(
        decode(&mut decoder, &too_large).unwrap()[0].0,
        b"custom-key"
    );
    assert_eq!(decoder.table_size(), 0);
}

#[test]
fn a_size_update_to_zero_empties_and_frees_the_table_and_it_fills_again() {
    let mut decoder = Decoder::new(4096);
    decode(&mut decoder, &hex("4001 6101 62 4001 6301 64")).unwrap();
    assert!(decoder.heap_bytes() > 0);
    assert_eq!(decode(&mut decoder, &[0x20]), Ok(vec![]));
    assert_eq!((decoder.table_size(), decoder.heap_bytes()), (0, 0));
    assert_eq!(
        error_after(&mut decoder, &[0xbe]),
        HpackError::IndexTooLarge
    );
    let mut block = integer(0x20, 5, 4096);
    block.extend(hex("4001 6501 66 be"));
    assert_eq!(
        decode(&mut decoder, &block),
        Ok(fields(&[("e", "f"), ("e", "f")]))
    );
    assert_eq!(decoder.table_size(), 34);
}

fn error_after(decoder: &mut Decoder, block: &[u8]) -> HpackError {
    decode(decoder, block).unwrap_err()
}

#[test]
fn the_table_allocates_nothing_until_an_insertion_and_holds_c3_in_104_bytes() {
    let mut decoder = Decoder::new(4096);
    assert_eq!(decoder.heap_bytes(), 0);
    decode(&mut decoder, &hex("8286 84")).unwrap();
    assert_eq!(decoder.heap_bytes(), 0, "static fields insert nothing");
    for block in [
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ] {
        decode(&mut decoder, &hex(block)).unwrap();
    }
    let grown = decoder.heap_bytes();
    decoder.shrink_to_fit();
    // 68 bytes of names and values, and three 12-byte records.
    assert_eq!(decoder.heap_bytes(), 68 + 3 * 12, "grown to {grown} before");
    assert!(grown < 300, "{grown}");
    assert_eq!(table(&decoder).len(), 3);
    // Still decodes after shrinking (the table's offsets moved with its bytes).
    assert_eq!(decode(&mut decoder, &hex("bebf c0")).unwrap().len(), 3);
}

#[test]
fn every_status_encodes_to_itself() {
    for status in 100..=999u16 {
        let mut out = Vec::new();
        encode_status(&mut out, status);
        let indexed = [200, 204, 206, 304, 400, 404, 500].contains(&status);
        assert_eq!(out.len(), if indexed { 1 } else { 5 }, "{status}");
        let list = decode(&mut Decoder::new(0), &out).unwrap();
        assert_eq!(
            list,
            vec![(b":status".to_vec(), status.to_string().into_bytes())]
        );
    }
}

#[test]
fn static_names_are_indexes_and_sensitive_fields_never_indexed() {
    let mut out = Vec::new();
    encode_field(&mut out, b"content-type", b"text/html");
    assert_eq!(
        out,
        [&[0x0f, 0x10, 9][..], b"text/html"].concat(),
        "name index 31"
    );
    out.clear();
    encode_field_never_indexed(&mut out, b"set-cookie", b"a=b");
    assert_eq!(
        out,
        [&[0x1f, 0x28, 3][..], b"a=b"].concat(),
        "name index 55"
    );
    out.clear();
    encode_field(&mut out, b"x-id", b"7");
    assert_eq!(out, [&[0x00, 4][..], b"x-id", &[1], b"7"].concat());
    out.clear();
    encode_field_huffman(&mut out, b"location", b"https://www.example.com");
    assert_eq!(
        out,
        hex("0f1f 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3")
    );
}

proptest! {
    #[test]
    fn any_fields_encoded_decode_to_the_same_bytes(
        list in prop::collection::vec(
            (
                prop_oneof![
                    Just(b"content-type".to_vec()),
                    Just(b"set-cookie".to_vec()),
                    Just(b"www-authenticate".to_vec()),
                    prop::collection::vec(any::<u8>().prop_filter("lowercase", |b| !b.is_ascii_uppercase()), 0..40),
                ],
                prop::collection::vec(any::<u8>(), 0..300),
                0..3u8,
            ),
            0..20,
        )
    ) {
        let mut block = Vec::new();
        for (name, value, how) in &list {
            match how {
                0 => encode_field(&mut block, name, value),
                1 => encode_field_never_indexed(&mut block, name, value),
                _ => encode_field_huffman(&mut block, name, value),
            }
        }
        let mut decoder = Decoder::new(4096);
        let decoded = decode(&mut decoder, &block).unwrap();
        let expected: Fields = list.into_iter().map(|(name, value, _)| (name, value)).collect();
        prop_assert_eq!(decoded, expected);
        prop_assert_eq!(decoder.heap_bytes(), 0, "the encoder never indexes");
    }
}
