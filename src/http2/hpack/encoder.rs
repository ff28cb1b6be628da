//! HPACK encoding of herdsman's responses, stateless: herdsman keeps no encoder dynamic table
//! (nothing to park with an idle connection), so every field is a literal without indexing (or
//! never indexed) whose name, when the static table has it, is its index — and `:status` an
//! index when the static table has the whole field.
//!
//! Sensitive fields: the caller writes `set-cookie` with [`encode_field_never_indexed`], the one
//! response field that carries a secret (a session) an intermediary re-compressing the response
//! with a table of its own could be probed for (RFC 7541 §7.1.3); to herdsman's own client the
//! two representations cost the same. Values are written raw by default: Huffman saved 21 % of
//! a 10-field page response's head (227 bytes, not 289) for four times the encoding time (1.5 µs,
//! not 0.37, on a loaded 2-core machine: `cargo bench --bench hpack`) — 60 bytes of a response
//! whose body is usually kilobytes are not worth a microsecond a request, so the caller decides
//! per field (`encode_field_huffman`).

use super::huffman;
use super::primitives::write_integer;
use super::static_table::static_name_index;

/// Literal Header Field without Indexing (§6.2.2): `0000` and a 4-bit name index.
const WITHOUT_INDEXING: u8 = 0x00;

/// Literal Header Field Never Indexed (§6.2.3): `0001` and a 4-bit name index.
const NEVER_INDEXED: u8 = 0x10;

/// The static index of `:status` (its first entry, `200`).
const STATUS_NAME: usize = 8;

/// Appends `:status`: an indexed field for the seven statuses of the static table (200, 204,
/// 206, 304, 400, 404, 500), else a literal without indexing on name index 8.
pub fn encode_status(out: &mut Vec<u8>, status: u16) {
    let index = match status {
        200 => 8,
        204 => 9,
        206 => 10,
        304 => 11,
        400 => 12,
        404 => 13,
        500 => 14,
        _ => 0,
    };
    if index != 0 {
        encode_indexed(out, index);
        return;
    }
    // The decimal digits, most significant first (a status has 3; a u16 at most 5).
    let mut digits = [0u8; 5];
    let mut start = digits.len();
    let mut rest = status;
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    write_integer(out, WITHOUT_INDEXING, 4, STATUS_NAME);
    write_raw_string(out, &digits[start..]);
}

/// Appends an Indexed Header Field (§6.1) naming a whole static entry (1 to 61): a request's
/// `:method: GET`, `:scheme: https`, `:path: /`, a response's common statuses.
pub fn encode_indexed(out: &mut Vec<u8>, index: u8) {
    debug_assert!((1..=61).contains(&index), "a static table entry");
    out.push(0x80 | index);
}

/// Appends a field as a literal without indexing, its value raw. `name` must be lowercase
/// (HTTP/2's rule; it is written as given).
pub fn encode_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    write_literal(out, WITHOUT_INDEXING, name, value, false);
}

/// Appends a field as a literal never indexed (for `set-cookie`: see the module's doc), its
/// value raw.
pub fn encode_field_never_indexed(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    write_literal(out, NEVER_INDEXED, name, value, false);
}

/// Appends a field as a literal without indexing, its value Huffman-coded when that is shorter.
/// Costs a pass to measure the coded length and one to code: see the module's doc for when it
/// is worth it.
pub fn encode_field_huffman(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    write_literal(out, WITHOUT_INDEXING, name, value, true);
}

fn write_literal(out: &mut Vec<u8>, representation: u8, name: &[u8], value: &[u8], huffman: bool) {
    debug_assert!(
        !name.iter().any(u8::is_ascii_uppercase),
        "HTTP/2 field names are lowercase"
    );
    match static_name_index(name) {
        Some(index) => write_integer(out, representation, 4, usize::from(index)),
        None => {
            out.push(representation);
            write_raw_string(out, name);
        }
    }
    let coded_len = if huffman {
        huffman::encoded_len(value)
    } else {
        value.len()
    };
    if coded_len < value.len() {
        write_integer(out, 0x80, 7, coded_len);
        huffman::encode(out, value);
    } else {
        write_raw_string(out, value);
    }
}

fn write_raw_string(out: &mut Vec<u8>, bytes: &[u8]) {
    write_integer(out, 0, 7, bytes.len());
    out.extend_from_slice(bytes);
}
