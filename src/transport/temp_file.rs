//! Temporary files for buffered bodies: made in `[buffering] temp_dir` with no name (O_TMPFILE,
//! or created and unlinked at once where the file system lacks it), their space counted against
//! the process-wide `disk_total`, gone when closed; leftovers of a crash removed at start.
//!
//! Reads and writes are plain blocking calls on the worker's thread, as nginx's workers write
//! their temp files: they go to the page cache (about 10 µs per 64 KiB here), and a body only
//! comes here once it has outgrown its memory, which a fast client never lets it do.

use std::cell::Cell;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::stats::BufferUse;

/// Disk space is taken from `disk_total` in steps of this many bytes: one atomic update per
/// 64 KiB of file (a write of that size to the page cache costs about 10 µs, the update well
/// under 0.1 µs), and a file's count is at most 64 KiB above its size. With 1 MiB steps, the
/// slow-clients benchmark's 1,000 answers of 512 KiB counted 1,000 MiB for 359 MiB of files.
const RESERVE_STEP: u64 = 64 << 10;

/// The names a file gets where O_TMPFILE is not available: `herdsman-<pid>-<n>.tmp`, unlinked as
/// soon as it is open (only a crash between the two leaves one).
const NAME_PREFIX: &str = "herdsman-";
const NAME_SUFFIX: &str = ".tmp";

/// One unnamed temporary file and the disk space it holds of the process's total.
pub struct TempFile<'a> {
    file: File,
    /// Bytes of `usage.disk` this file holds (a multiple of [`RESERVE_STEP`]).
    reserved: u64,
    /// The end of what was written to it: its share of `usage.disk_written`.
    written: Cell<u64>,
    usage: &'a BufferUse,
    total: u64,
}

impl<'a> TempFile<'a> {
    /// A new empty file in `dir`, whose space counts in `usage.disk` up to `total`.
    pub fn create(dir: &Path, usage: &'a BufferUse, total: u64) -> io::Result<TempFile<'a>> {
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE)
            .open(dir)
        {
            Ok(file) => file,
            // A file system without O_TMPFILE (EOPNOTSUPP; EISDIR or EINVAL from older kernels).
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
                ) =>
            {
                create_and_unlink(dir)?
            }
            Err(e) => return Err(e),
        };
        Ok(TempFile {
            file,
            reserved: 0,
            written: Cell::new(0),
            usage,
            total,
        })
    }

    /// Makes sure the file's space covers `end` bytes, taking more of the total in steps;
    /// false when the total has no room for it.
    pub fn reserve_to(&mut self, end: u64) -> bool {
        if end <= self.reserved {
            return true;
        }
        let wanted = end.div_ceil(RESERVE_STEP) * RESERVE_STEP - self.reserved;
        if !BufferUse::reserve(&self.usage.disk, wanted, self.total) {
            return false;
        }
        self.reserved += wanted;
        true
    }

    /// Writes all of `bytes` at `offset` (within what [`TempFile::reserve_to`] covered).
    pub fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(bytes, offset)?;
        let end = offset + bytes.len() as u64;
        let written = self.written.get();
        if end > written {
            self.usage
                .disk_written
                .fetch_add(end - written, Ordering::Relaxed);
            self.written.set(end);
        }
        Ok(())
    }

    /// Reads into `into` from `offset`; the bytes read.
    pub fn read_at(&self, into: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(into, offset)
    }

    /// Empties the file and gives its space back to the total.
    pub fn clear(&mut self) -> io::Result<()> {
        BufferUse::release(&self.usage.disk, std::mem::take(&mut self.reserved));
        BufferUse::release(&self.usage.disk_written, self.written.take());
        self.file.set_len(0)
    }
}

impl Drop for TempFile<'_> {
    fn drop(&mut self) {
        BufferUse::release(&self.usage.disk, self.reserved);
        BufferUse::release(&self.usage.disk_written, self.written.get());
    }
}

/// A named file, unlinked as soon as it is open.
fn create_and_unlink(dir: &Path) -> io::Result<File> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!(
        "{NAME_PREFIX}{}-{n}{NAME_SUFFIX}",
        std::process::id()
    ));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    match std::fs::remove_file(&path) {
        // A starting herdsman cleaning the directory was quicker.
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(file),
    }
}

/// Checks that temporary files can be made in `dir` (creating it if missing) and removes the
/// named ones a crashed herdsman left there; how many it removed.
pub fn prepare_temp_dir(dir: &Path) -> io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let usage = BufferUse::default();
    drop(TempFile::create(dir, &usage, 0)?);
    let mut removed = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let ours = name
            .strip_prefix(NAME_PREFIX)
            .and_then(|rest| rest.strip_suffix(NAME_SUFFIX))
            .is_some_and(|middle| middle.split('-').all(|n| n.parse::<u64>().is_ok()));
        if ours && entry.file_type()?.is_file() {
            std::fs::remove_file(entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_holds_its_space_of_the_total_until_cleared_or_closed() {
        let dir = std::env::temp_dir().join(format!("herdsman-tf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let usage = BufferUse::default();
        let mut file = TempFile::create(&dir, &usage, 3 * RESERVE_STEP).unwrap();
        assert!(file.reserve_to(10));
        assert_eq!(usage.disk.load(Ordering::Relaxed), RESERVE_STEP);
        assert_eq!(usage.disk_written.load(Ordering::Relaxed), 0);
        file.write_at(b"0123456789", 0).unwrap();
        file.write_at(b"345", 3).unwrap();
        assert_eq!(
            usage.disk_written.load(Ordering::Relaxed),
            10,
            "rewritten bytes count once"
        );
        let mut back = [0; 4];
        assert_eq!(file.read_at(&mut back, 3).unwrap(), 4);
        assert_eq!(&back, b"3456");
        assert!(!file.reserve_to(3 * RESERVE_STEP + 1), "beyond the total");
        assert!(file.reserve_to(3 * RESERVE_STEP));
        file.clear().unwrap();
        assert_eq!(usage.disk.load(Ordering::Relaxed), 0);
        assert_eq!(usage.disk_written.load(Ordering::Relaxed), 0);
        assert!(file.reserve_to(1));
        file.write_at(b"x", 0).unwrap();
        assert_eq!(usage.disk_written.load(Ordering::Relaxed), 1);
        drop(file);
        assert_eq!(usage.disk.load(Ordering::Relaxed), 0);
        assert_eq!(usage.disk_written.load(Ordering::Relaxed), 0);
        // Nothing is left in the directory, and a crash's leftovers are removed.
        std::fs::write(dir.join("herdsman-123-4.tmp"), b"left").unwrap();
        std::fs::write(dir.join("keep.tmp"), b"not ours").unwrap();
        assert_eq!(prepare_temp_dir(&dir).unwrap(), 1);
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["keep.tmp"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
