//! A body on its way to a slower peer: a first-in first-out queue of bytes, in memory up to a
//! limit, then in a temporary file up to another, within the process's totals. What fills it
//! never waits for what drains it, until both limits are reached.

use std::io;
use std::path::Path;

use crate::stats::{BufferUse, MemoryHold};

use super::recycle;
use super::temp_file::TempFile;

/// The most read back from the file at once.
const WINDOW: usize = 64 * 1024;

/// How a spool may grow: its own limits, the process's totals, and where its file goes.
#[derive(Clone, Copy)]
pub struct SpoolLimits<'a> {
    /// Bytes held in memory (taken from `memory_total` when the spool is made).
    pub memory: usize,
    /// Bytes held in the file at once (0: no file).
    pub file: u64,
    pub memory_total: u64,
    pub disk_total: u64,
    pub dir: &'a Path,
    pub usage: &'a BufferUse,
}

/// The queue. Memory's bytes always come before the file's: while the file holds unread bytes,
/// new ones go to it; once it is read to its end it is emptied and memory takes them again.
pub struct Spool<'a> {
    limits: SpoolLimits<'a>,
    /// Memory's bytes; those before `memory_read` are sent.
    memory: Vec<u8>,
    memory_read: usize,
    /// Of `memory_total`, what this spool holds: its memory limit, or nothing when the total had
    /// no room (then it holds what one push brings).
    memory_hold: Option<MemoryHold<'a>>,
    file: Option<TempFile<'a>>,
    file_written: u64,
    file_read: u64,
    /// Bytes read back from the file; those before `window_read` are sent.
    window: Vec<u8>,
    window_read: usize,
    /// A total or the file's limit stopped it growing at least once (it then filled only as
    /// fast as it drained).
    pub was_full: bool,
    /// It wrote to a file at least once.
    pub spilled: bool,
    /// Making or writing the file failed once; it no longer tries.
    file_failed: bool,
    /// A push went beyond the limits (the file or a total had no room): no more until empty.
    blocked: bool,
}

impl<'a> Spool<'a> {
    pub fn new(limits: SpoolLimits<'a>) -> Spool<'a> {
        let memory_hold = limits
            .usage
            .hold_memory(limits.memory as u64, limits.memory_total);
        Spool {
            limits,
            memory: Vec::new(),
            memory_read: 0,
            was_full: memory_hold.is_none(),
            memory_hold,
            file: None,
            file_written: 0,
            file_read: 0,
            window: Vec::new(),
            window_read: 0,
            spilled: false,
            file_failed: false,
            blocked: false,
        }
    }

    /// The memory this spool may fill.
    fn memory_reserved(&self) -> u64 {
        self.memory_hold.as_ref().map_or(0, MemoryHold::bytes)
    }

    /// Bytes held, not yet sent.
    pub fn len(&self) -> u64 {
        (self.memory.len() - self.memory_read) as u64
            + (self.window.len() - self.window_read) as u64
            + (self.file_written - self.file_read)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether bytes that went to the file wait to be sent, in the file or already read back
    /// into the window: then new bytes go behind them, to the file, whatever room memory has.
    fn file_part_unread(&self) -> bool {
        self.file_written > self.file_read || self.window_read < self.window.len()
    }

    /// Whether it takes more now without going past its limits (else the filler should wait
    /// for it to drain: the body then moves at the drainer's pace). An empty spool always takes
    /// one push.
    pub fn has_room(&mut self) -> bool {
        if self.is_empty() {
            self.blocked = false;
            return true;
        }
        let room = !self.blocked
            && if self.file_part_unread() {
                self.file_written < self.limits.file
            } else {
                ((self.memory.len() - self.memory_read) as u64) < self.memory_reserved()
                    || (!self.file_failed && self.limits.file > 0)
            };
        if !room {
            self.was_full = true;
        }
        room
    }

    /// Appends all of `bytes`: to memory while it has room (and the file holds nothing unread),
    /// else to the file; to memory beyond its limit when the file cannot take them (a full total,
    /// a failed write), which [`Spool::has_room`] then refuses more of. An error only when the
    /// bytes could not be kept at all (the file failed a write while it held unread bytes).
    pub fn push(&mut self, bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        if !self.file_part_unread() {
            if self.memory_read == self.memory.len() {
                self.memory.clear();
                self.memory_read = 0;
            }
            let in_memory = (self.memory.len() - self.memory_read) as u64;
            if in_memory + bytes.len() as u64 <= self.memory_reserved() {
                self.append_to_memory(bytes);
                return Ok(());
            }
        }
        let result = self.append_to_file(bytes);
        if let Err(e) = &result {
            if !self.file_failed {
                tracing::warn!(dir = %self.limits.dir.display(), error = %e, "cannot write a buffered body to a temporary file; bodies stream instead");
            }
            self.file_failed = true;
            if !self.file_part_unread() {
                // Kept in memory after all.
                return Ok(());
            }
        }
        result
    }

    fn append_to_memory(&mut self, bytes: &[u8]) {
        if self.memory.capacity() == 0 {
            self.memory = recycle::take_bytes(self.limits.memory.max(bytes.len()));
        } else if self.memory.len() + bytes.len() > self.memory.capacity() && self.memory_read > 0 {
            // Sent bytes at the front make the room.
            self.memory.drain(..self.memory_read);
            self.memory_read = 0;
        }
        self.memory.extend_from_slice(bytes);
    }

    /// Appends to the file (made at the first spill). Bytes the file cannot take (its limit, the
    /// disk total) go to memory beyond its limit when nothing of the file is unread, else to the
    /// file beyond its reservation (order is kept); either way the spool then takes no more
    /// until it is empty, so it overshoots by one push at most.
    fn append_to_file(&mut self, bytes: &[u8]) -> io::Result<()> {
        let end = self.file_written + bytes.len() as u64;
        let file_takes = !self.file_failed && end <= self.limits.file && {
            if self.file.is_none() {
                let limits = &self.limits;
                match TempFile::create(limits.dir, limits.usage, limits.disk_total) {
                    Ok(file) => self.file = Some(file),
                    Err(e) => {
                        self.blocked = true;
                        self.append_to_memory(bytes);
                        return Err(e);
                    }
                }
            }
            self.file.as_mut().is_some_and(|file| file.reserve_to(end))
        };
        if !file_takes {
            self.was_full = true;
            self.blocked = true;
            if !self.file_part_unread() {
                self.append_to_memory(bytes);
                return Ok(());
            }
        }
        let file = self.file.as_ref().expect("the file holds unread bytes");
        if let Err(e) = file.write_at(bytes, self.file_written) {
            self.blocked = true;
            if !self.file_part_unread() {
                // Nothing of the file is unread: memory keeps the order.
                self.append_to_memory(bytes);
            }
            return Err(e);
        }
        self.file_written = end;
        self.spilled = true;
        Ok(())
    }

    /// The bytes to send next (empty only when it is empty).
    pub fn front(&mut self) -> io::Result<&[u8]> {
        if self.memory_read < self.memory.len() {
            return Ok(&self.memory[self.memory_read..]);
        }
        if self.window_read == self.window.len() && self.file_read < self.file_written {
            if self.window.capacity() == 0 {
                self.window = recycle::take_bytes(WINDOW);
            }
            let want = (self.file_written - self.file_read).min(WINDOW as u64) as usize;
            self.window.resize(want, 0);
            let file = self.file.as_ref().expect("unread bytes are in the file");
            let got = file.read_at(&mut self.window, self.file_read)?;
            if got == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.window.truncate(got);
            self.window_read = 0;
            self.file_read += got as u64;
            if self.file_read == self.file_written {
                // All of it is in the window: the file starts again empty.
                self.file_read = 0;
                self.file_written = 0;
                if let Some(file) = self.file.as_mut() {
                    file.clear()?;
                }
            }
        }
        Ok(&self.window[self.window_read..])
    }

    /// Drops every byte held (their reader went away).
    pub fn clear(&mut self) {
        self.memory.clear();
        self.memory_read = 0;
        self.window_read = self.window.len();
        self.file_read = 0;
        self.file_written = 0;
        if let Some(file) = self.file.as_mut() {
            let _ = file.clear();
        }
    }

    /// Marks the first `n` bytes of [`Spool::front`] as sent.
    pub fn consume(&mut self, n: usize) {
        if self.memory_read < self.memory.len() {
            self.memory_read += n;
        } else {
            self.window_read += n;
        }
    }
}

impl Drop for Spool<'_> {
    fn drop(&mut self) {
        recycle::give_back_bytes(std::mem::take(&mut self.memory));
        recycle::give_back_bytes(std::mem::take(&mut self.window));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// Takes up to `most` bytes from `spool`, at most `step` at a time.
    fn take(spool: &mut Spool, most: usize, step: usize) -> Vec<u8> {
        let mut out = Vec::new();
        while out.len() < most && !spool.is_empty() {
            let front = spool.front().unwrap();
            let n = front.len().min(step).min(most - out.len());
            out.extend_from_slice(&front[..n]);
            spool.consume(n);
        }
        out
    }

    /// Drains `spool` `step` bytes at a time.
    fn drain(spool: &mut Spool, step: usize) -> Vec<u8> {
        take(spool, usize::MAX, step)
    }

    #[test]
    fn bytes_leave_in_order_through_memory_and_file_within_the_totals() {
        let dir = std::env::temp_dir();
        let usage = BufferUse::default();
        let limits = SpoolLimits {
            memory: 8,
            file: 32,
            memory_total: 100,
            disk_total: 1 << 30,
            dir: &dir,
            usage: &usage,
        };
        let mut spool = Spool::new(limits);
        assert_eq!(usage.memory.load(Ordering::Relaxed), 8);
        let mut sent = Vec::new();
        let mut expected = Vec::new();
        for round in 0..20u8 {
            while spool.has_room() {
                let bytes = [round; 5];
                spool.push(&bytes).unwrap();
                expected.extend_from_slice(&bytes);
            }
            // Half drained between rounds: memory and file interleave.
            let half = (spool.len() / 2) as usize;
            sent.extend(take(&mut spool, half, 3));
        }
        assert!(spool.spilled);
        assert!(spool.len() <= 8 + 32 + 5);
        sent.extend(drain(&mut spool, 7));
        assert_eq!(sent, expected);
        assert_eq!(
            usage.disk.load(Ordering::Relaxed),
            0,
            "an empty file holds nothing"
        );
        drop(spool);
        assert_eq!(usage.memory.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn bytes_read_back_from_the_file_go_before_newer_ones_in_memory() {
        let dir = std::env::temp_dir();
        let usage = BufferUse::default();
        let limits = SpoolLimits {
            memory: 4,
            file: 1 << 20,
            memory_total: 100,
            disk_total: 1 << 30,
            dir: &dir,
            usage: &usage,
        };
        let mut spool = Spool::new(limits);
        spool.push(b"0123").unwrap();
        spool.push(b"4567").unwrap();
        assert!(spool.spilled);
        // Memory drained and the file read back whole into the window, one byte of it sent:
        // the file is empty again, memory has room, and the window's bytes still come first.
        let mut sent = take(&mut spool, 5, 1);
        spool.push(b"89").unwrap();
        sent.extend(drain(&mut spool, 1));
        assert_eq!(sent, b"0123456789");
    }

    #[test]
    fn a_full_memory_total_leaves_a_spool_one_push_deep() {
        let dir = std::env::temp_dir();
        let usage = BufferUse::default();
        let limits = SpoolLimits {
            memory: 8,
            file: 0,
            memory_total: 4,
            disk_total: 0,
            dir: &dir,
            usage: &usage,
        };
        let mut spool = Spool::new(limits);
        assert!(spool.was_full);
        assert!(spool.has_room());
        spool.push(b"0123456789").unwrap();
        assert!(!spool.has_room());
        assert_eq!(drain(&mut spool, 4), b"0123456789");
        assert!(spool.has_room());
    }

    proptest::proptest! {
        /// Whatever the order of pushes and partial drains, and whatever the limits, the bytes
        /// leave exactly as they came.
        #[test]
        fn any_pushes_and_drains_keep_the_bytes_in_order(
            memory in 0usize..12,
            file in 0u64..40,
            memory_total in 0u64..16,
            steps in proptest::collection::vec((0usize..9, 0usize..11), 1..60),
        ) {
            let dir = std::env::temp_dir();
            let usage = BufferUse::default();
            let limits = SpoolLimits {
                memory,
                file,
                memory_total,
                disk_total: 1 << 30,
                dir: &dir,
                usage: &usage,
            };
            let mut spool = Spool::new(limits);
            let (mut pushed, mut sent) = (Vec::new(), Vec::new());
            let mut next = 0u8;
            for (push, taken) in steps {
                if spool.has_room() {
                    let bytes: Vec<u8> = (0..push).map(|_| { next = next.wrapping_add(1); next }).collect();
                    spool.push(&bytes).unwrap();
                    pushed.extend_from_slice(&bytes);
                }
                sent.extend(take(&mut spool, taken, usize::MAX));
                proptest::prop_assert_eq!(spool.len() as usize, pushed.len() - sent.len());
            }
            sent.extend(drain(&mut spool, 5));
            proptest::prop_assert_eq!(sent, pushed);
            drop(spool);
            proptest::prop_assert_eq!(usage.memory.load(Ordering::Relaxed), 0);
            proptest::prop_assert_eq!(usage.disk.load(Ordering::Relaxed), 0);
        }
    }
}
