//! HPACK decoding (RFC 7541 §3, §6): one connection's decoding context — its dynamic table and
//! the limits herdsman's SETTINGS put on it — and the decoding of one complete header block into
//! fields handed to a callback, borrowed, with no allocation per field.

use std::ops::Range;

use super::huffman;
use super::primitives::{RawString, Reader};
use super::static_table::{static_entry, STATIC_TABLE};
use super::table::DynamicTable;
use super::{DecodeError, HpackError};

/// The most dynamic table size updates a block may begin with. §4.2 has the encoder signal at
/// most two (the smallest maximum since the last block, then the final one); a third is refused
/// rather than tolerated: no encoder sends one, and a run of them decodes to nothing.
const MOST_SIZE_UPDATES: usize = 2;

/// The decoding side of one connection's header compression context.
///
/// What it enforces of the table's size: the encoder may set any size up to `max_size` with a
/// size update at the start of a block. `set_max_table_size` is called when herdsman's new
/// SETTINGS_HEADER_TABLE_SIZE is acknowledged; until then the old maximum holds. When the new
/// one is below the size the encoder last set, the table is cut to it at once, and the next
/// block must begin with a size update no larger than the smallest maximum acknowledged since
/// the last block (§4.2) — else [`HpackError::SizeUpdateMissing`]. A larger new maximum needs
/// no update: it only lets the encoder raise the size with one.
#[derive(Debug, Clone)]
pub struct Decoder {
    table: DynamicTable,
    /// The largest size the encoder may set: herdsman's acknowledged SETTINGS_HEADER_TABLE_SIZE.
    max_size: usize,
    /// Set when herdsman's setting went below the table's size limit: the first size update the
    /// next block must begin with may be at most this.
    required_update: Option<usize>,
}

/// A string of a field being decoded: borrowed (from the block, the static table or the
/// dynamic table) or decoded into the caller's scratch buffer.
enum Text<'a> {
    Borrowed(&'a [u8]),
    Scratch(Range<usize>),
}

impl<'a> Text<'a> {
    fn read<'s>(&'s self, scratch: &'s [u8]) -> &'s [u8]
    where
        'a: 's,
    {
        match self {
            Text::Borrowed(bytes) => bytes,
            Text::Scratch(range) => &scratch[range.clone()],
        }
    }
}

/// A string literal's bytes: as the block holds them, or Huffman-decoded onto `scratch`.
fn text<'a>(raw: RawString<'a>, scratch: &mut Vec<u8>) -> Result<Text<'a>, HpackError> {
    if !raw.huffman {
        return Ok(Text::Borrowed(raw.bytes));
    }
    let start = scratch.len();
    huffman::decode(raw.bytes, scratch)?;
    Ok(Text::Scratch(start..scratch.len()))
}

/// HTTP/2 settings are 32-bit: a larger maximum means no more, and the table's offsets are u32.
fn clamp(size: usize) -> usize {
    size.min(u32::MAX as usize)
}

impl Decoder {
    /// A decoder whose encoder may use a table of up to `max_table_size` bytes: the maximum in
    /// force when the connection starts (4096, RFC 9113's initial SETTINGS_HEADER_TABLE_SIZE,
    /// until the client acknowledges herdsman's own; then [`Decoder::set_max_table_size`]).
    /// Allocates nothing until the first entry is inserted.
    pub fn new(max_table_size: usize) -> Decoder {
        let max_size = clamp(max_table_size);
        Decoder {
            table: DynamicTable::new(max_size),
            max_size,
            required_update: None,
        }
    }

    /// herdsman's SETTINGS_HEADER_TABLE_SIZE changed and the client acknowledged it (see the
    /// type's doc for what this enforces).
    pub fn set_max_table_size(&mut self, max_table_size: usize) {
        let max_size = clamp(max_table_size);
        self.max_size = max_size;
        if max_size < self.table.limit() {
            self.table.set_limit(max_size);
            self.required_update = Some(self.required_update.map_or(max_size, |r| r.min(max_size)));
        }
    }

    /// Decodes one complete header block (a HEADERS frame's fragment and its CONTINUATIONs,
    /// joined), calling `field(name, value)` for each field in order. Names and values are
    /// borrowed from `block`, the tables, or `scratch` (Huffman-decoded strings; it grows only
    /// when a string needs more room and keeps its capacity for the next call).
    ///
    /// The first error `field` returns is handed back as [`DecodeError::Field`], and `field` is
    /// not called again; but the rest of the block is still decoded, so that the dynamic table
    /// stays the encoder's and the caller may end only the stream (RFC 9113 §4.3: a block must
    /// be processed even for a stream being reset). A compression error found after it wins:
    /// the connection ends either way.
    pub fn decode<E>(
        &mut self,
        block: &[u8],
        scratch: &mut Vec<u8>,
        mut field: impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) -> Result<(), DecodeError<E>> {
        let mut reader = Reader::new(block);
        self.size_updates(&mut reader)?;
        let mut refused = None;
        let mut deliver = |name: &[u8], value: &[u8]| {
            if refused.is_none() {
                refused = field(name, value).err();
            }
        };
        while let Some(first) = reader.peek() {
            scratch.clear();
            if first & 0x80 != 0 {
                // Indexed Header Field (§6.1).
                let (name, value) = self.entry(reader.integer(7)?)?;
                deliver(name, value);
            } else if first & 0x40 != 0 {
                self.literal_with_indexing(&mut reader, scratch, &mut deliver)?;
            } else if first & 0x20 != 0 {
                return Err(HpackError::SizeUpdateNotAtStart.into());
            } else {
                // Without indexing (0000) and never indexed (0001) decode alike (§6.2.2, §6.2.3).
                let name_index = reader.integer(4)?;
                let name = match name_index {
                    0 => text(reader.string()?, scratch)?,
                    index => Text::Borrowed(self.entry(index)?.0),
                };
                let value = text(reader.string()?, scratch)?;
                deliver(name.read(scratch), value.read(scratch));
            }
        }
        match refused {
            Some(error) => Err(DecodeError::Field(error)),
            None => Ok(()),
        }
    }

    /// Literal Header Field with Incremental Indexing (§6.2.1): delivered, and inserted.
    fn literal_with_indexing(
        &mut self,
        reader: &mut Reader<'_>,
        scratch: &mut Vec<u8>,
        deliver: &mut impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let name = match reader.integer(6)? {
            0 => text(reader.string()?, scratch)?,
            index => match static_entry(index) {
                Some((name, _)) => Text::Borrowed(name),
                None => {
                    // Copied out of the table first: inserting may evict the very entry that
                    // lends the name (§4.4).
                    let (name, _) = self.entry(index)?;
                    let start = scratch.len();
                    scratch.extend_from_slice(name);
                    Text::Scratch(start..scratch.len())
                }
            },
        };
        let value = text(reader.string()?, scratch)?;
        let (name, value) = (name.read(scratch), value.read(scratch));
        self.table.insert(name, value);
        deliver(name, value);
        Ok(())
    }

    /// The size updates a block begins with (§4.2, §6.3), and the one a lowered setting requires.
    fn size_updates(&mut self, reader: &mut Reader<'_>) -> Result<(), HpackError> {
        let mut updates = 0;
        while reader.peek().is_some_and(|first| first & 0xe0 == 0x20) {
            let size = reader.integer(5)?;
            updates += 1;
            if updates > MOST_SIZE_UPDATES {
                return Err(HpackError::TooManySizeUpdates);
            }
            // After herdsman's setting went down, the first update must come down to it.
            let most = self.required_update.take().unwrap_or(self.max_size);
            if size > most {
                return Err(HpackError::SizeUpdateTooLarge);
            }
            self.table.set_limit(size);
        }
        if self.required_update.is_some() {
            return Err(HpackError::SizeUpdateMissing);
        }
        Ok(())
    }

    /// The entry at an HPACK `index`: the static table's 1 to 61, then the dynamic table's.
    fn entry(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        if index == 0 {
            return Err(HpackError::IndexZero);
        }
        if let Some(entry) = static_entry(index) {
            return Ok(entry);
        }
        self.table
            .get(index - STATIC_TABLE.len() - 1)
            .ok_or(HpackError::IndexTooLarge)
    }

    /// The dynamic table's size as §4.1 counts it (names, values and 32 per entry).
    pub fn table_size(&self) -> usize {
        self.table.size()
    }

    /// The table's maximum size in force: the encoder's last size update, else the initial.
    pub fn table_limit(&self) -> usize {
        self.table.limit()
    }

    /// The dynamic table's entries, newest (index 62) first.
    pub fn table_entries(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.table.iter()
    }

    /// Heap memory the decoder holds (its table: one byte buffer and a 12-byte record per
    /// entry), capacity included.
    pub fn heap_bytes(&self) -> usize {
        self.table.heap_bytes()
    }

    /// Gives back the table's spare capacity, for a connection about to park.
    pub fn shrink_to_fit(&mut self) {
        self.table.shrink_to_fit();
    }
}
