//! The decoder's dynamic table (RFC 7541 §2.3.2, §4), stored compactly: every entry's name and
//! value in one byte buffer, oldest first, and per entry only three lengths — a parked idle
//! connection keeps this table, and its memory is what herdsman's idle cost is measured by.

use std::collections::VecDeque;

/// What an entry counts for beyond its bytes (§4.1).
pub(super) const ENTRY_OVERHEAD: usize = 32;

/// The smallest buffer the table allocates: a first entry usually fits it.
const FIRST_CAPACITY: usize = 64;

#[derive(Debug, Clone, Default)]
pub(super) struct DynamicTable {
    /// Every entry's name then value, oldest first, from `start` to the end; what lies before
    /// `start` is evicted entries' bytes, reclaimed when the buffer would otherwise grow.
    /// Invariant: its capacity stays at most `limit` (or the one entry's bytes if larger), so
    /// the table never holds more memory than the encoder may fill, plus the index.
    bytes: Vec<u8>,
    start: usize,
    /// One per entry, newest first (HPACK's index order).
    entries: VecDeque<Entry>,
    /// The table's size as §4.1 counts it: each entry's name, value and 32.
    size: usize,
    /// The maximum size in force (§4.2): the encoder's last size update, else the initial.
    limit: usize,
}

/// Where an entry's bytes are in `DynamicTable::bytes`. u32: a table is at most 2^32 - 1 bytes
/// (the decoder clamps its maximum there), and 12 bytes an entry rather than 24.
#[derive(Debug, Clone, Copy)]
struct Entry {
    at: u32,
    name_len: u32,
    value_len: u32,
}

impl Entry {
    fn len(self) -> usize {
        self.name_len as usize + self.value_len as usize
    }
}

impl DynamicTable {
    /// An empty table of maximum size `limit`: no allocation until the first insertion.
    pub fn new(limit: usize) -> DynamicTable {
        DynamicTable {
            limit,
            ..DynamicTable::default()
        }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The entry at `index` (0 is the newest).
    pub fn get(&self, index: usize) -> Option<(&[u8], &[u8])> {
        let entry = *self.entries.get(index)?;
        let at = entry.at as usize;
        let (name, value) = self.bytes[at..at + entry.len()].split_at(entry.name_len as usize);
        Some((name, value))
    }

    /// Adds a field as the newest entry, evicting the oldest until it fits (§4.4); a field
    /// larger than the maximum empties the table and is not added. `name` and `value` must not
    /// borrow the table — an entry they came from may be the one evicted (the decoder copies).
    pub fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.limit {
            self.evict_to(0);
            return;
        }
        self.evict_to(self.limit - size);
        let needed = name.len() + value.len();
        if self.bytes.len() + needed > self.bytes.capacity() {
            self.make_room(needed);
        }
        let at = self.bytes.len() as u32;
        self.bytes.extend_from_slice(name);
        self.bytes.extend_from_slice(value);
        self.entries.push_front(Entry {
            at,
            name_len: name.len() as u32,
            value_len: value.len() as u32,
        });
        self.size += size;
    }

    /// Room for `needed` more bytes: first the evicted bytes before `start` (moving the live
    /// ones to the front), then a larger buffer — doubling, never past `limit`. Moving costs at
    /// most the live bytes (under `limit`), and happens once the evicted ones fill the spare room.
    fn make_room(&mut self, needed: usize) {
        self.compact();
        let live = self.bytes.len();
        if live + needed > self.bytes.capacity() {
            let target = (2 * self.bytes.capacity())
                .max(FIRST_CAPACITY)
                .min(self.limit)
                .max(live + needed);
            self.bytes.reserve_exact(target - live);
        }
    }

    /// Moves the live bytes to the front of the buffer, over the evicted ones.
    fn compact(&mut self) {
        if self.start > 0 {
            self.bytes.drain(..self.start);
            let moved = self.start as u32;
            for entry in &mut self.entries {
                entry.at -= moved;
            }
            self.start = 0;
        }
    }

    /// Evicts the oldest entries until the size is at most `size`.
    fn evict_to(&mut self, size: usize) {
        while self.size > size {
            let Some(oldest) = self.entries.pop_back() else {
                break;
            };
            self.start += oldest.len();
            self.size -= oldest.len() + ENTRY_OVERHEAD;
        }
        if self.entries.is_empty() {
            // Nothing live: the buffer starts over without moving a byte.
            self.bytes.clear();
            self.start = 0;
        }
    }

    /// A new maximum size (a size update, or herdsman's setting lowered): evicts down to it,
    /// and gives back what the buffer holds beyond it, keeping the capacity invariant.
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
        self.evict_to(limit);
        if self.bytes.capacity() > limit {
            self.shrink_to_fit();
        }
    }

    /// Heap bytes held: the byte buffer's and the index's capacity.
    pub fn heap_bytes(&self) -> usize {
        self.bytes.capacity() + self.entries.capacity() * std::mem::size_of::<Entry>()
    }

    /// Gives back spare capacity: the buffer and index shrink to the live entries (none when
    /// empty), for a connection about to park.
    pub fn shrink_to_fit(&mut self) {
        self.compact();
        self.bytes.shrink_to_fit();
        self.entries.shrink_to_fit();
    }

    /// The entries, newest first.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        (0..self.entries.len()).filter_map(|index| self.get(index))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Any run of insertions and limit changes leaves the same entries, newest first, as a
        /// table of one allocation per entry would hold, and never more capacity than the limit
        /// allows (plus the one entry that exceeds a limit raised since).
        #[test]
        fn the_compact_table_holds_what_a_plain_one_would(
            steps in prop::collection::vec((0..40usize, 0..120usize, 0..12u8), 1..200)
        ) {
            let mut table = DynamicTable::new(256);
            let mut model: VecDeque<(Vec<u8>, Vec<u8>)> = VecDeque::new();
            let mut limit = 256;
            for (i, &(name_len, value_len, action)) in steps.iter().enumerate() {
                if action == 0 {
                    limit = [0, 64, 100, 256, 300][value_len % 5];
                    table.set_limit(limit);
                } else {
                    let name = vec![b'a' + (i % 26) as u8; name_len];
                    let value = vec![b'0' + (i % 10) as u8; value_len];
                    table.insert(&name, &value);
                    model.push_front((name, value));
                }
                let size = |model: &VecDeque<(Vec<u8>, Vec<u8>)>| {
                    model.iter().map(|(n, v)| n.len() + v.len() + ENTRY_OVERHEAD).sum::<usize>()
                };
                while size(&model) > limit {
                    model.pop_back();
                }
                let entries: Vec<_> = table.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
                prop_assert_eq!(&entries, &model.iter().cloned().collect::<Vec<_>>());
                prop_assert_eq!(table.size(), size(&model));
                prop_assert!(table.bytes.capacity() <= limit);
                if model.is_empty() {
                    prop_assert_eq!(table.bytes.len(), 0);
                }
            }
            table.shrink_to_fit();
            let live: usize = model.iter().map(|(n, v)| n.len() + v.len()).sum();
            prop_assert_eq!(table.heap_bytes(), live + model.len() * std::mem::size_of::<Entry>());
        }
    }
}
