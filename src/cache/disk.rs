//! The optional disk tier (`[cache.disk]`): every entry the store keeps is written to a file of
//! its own as well, so that a restart or a binary upgrade starts warm, and an object memory
//! evicted may still be read back. Nothing corrupt is ever served: each file ends with a CRC-32
//! of everything before it, checked on every read, and a file that fails it (a flipped byte, a
//! truncation) is counted, deleted and fetched again as a miss. A file is written under a
//! temporary name and renamed into place whole, so a `kill -9` in the middle of a write leaves
//! only a temporary file, which the next start deletes.
//!
//! No worker's event loop waits on the disk: writes go to one writer thread of the tier's own
//! (in order, so a removal follows the write it removes), and reads run on tokio's blocking pool.
//! The index — which keys have a file, how large, in what order they came — is a map under one
//! mutex, touched on a miss, a write and a purge, never on a memory hit. The files take at most
//! `size` bytes: past it, the oldest go.
//!
//! A file's name is its key's SHA-256, cut to 64 bits in hexadecimal, stable across versions;
//! the file holds the whole key, compared on every read.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::fields::read_response;
use super::freshness::{unix_now_ms, Freshness};
use super::object::Object;
use super::store::Entry;
use crate::http1::{header_slots, parse_response, Method};
use crate::transport::Moment;

/// What every file starts with: the format's name and version.
const MAGIC: &[u8; 16] = b"HERDSMAN-CACHE1\n";

/// What a file holds after [`MAGIC`]: one byte saying which kind of entry.
const OBJECT: u8 = 0;
const VARIANTS: u8 = 1;

/// The tier: its folder, its budget, its index and its writer.
pub struct Disk {
    dir: PathBuf,
    size: u64,
    index: Mutex<DiskIndex>,
    writer: Mutex<Sender<Job>>,
    /// Files that failed their checksum or could not be read as an entry, since start.
    pub corrupt: AtomicU64,
    /// Entries read back from the disk, since start.
    pub read: AtomicU64,
    /// Entries written, since start.
    pub written: AtomicU64,
}

impl std::fmt::Debug for Disk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Disk")
            .field("dir", &self.dir)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// Which keys have a file.
#[derive(Default)]
struct DiskIndex {
    files: HashMap<u64, FileEntry>,
    /// The files by the order they were written: the oldest go first when the budget is full.
    order: BTreeMap<u64, u64>,
    /// Bytes the files take.
    used: u64,
    next: u64,
}

/// One file as the index knows it.
struct FileEntry {
    key: Box<[u8]>,
    /// Its surrogate keys, space-separated (for purges by tag).
    tags: Box<[u8]>,
    /// A response (not the names a varying one varies on).
    object: bool,
    bytes: u64,
    written: u64,
}

/// What the writer thread does next.
enum Job {
    Put(Arc<Entry>),
    Remove(u64),
    /// Answers once every job sent before it is done (for tests and a graceful stop).
    Flush(Sender<()>),
}

/// The 64-bit name of `key`'s file.
fn name_of(key: &[u8]) -> u64 {
    let digest = Sha256::digest(key);
    u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"))
}

impl Disk {
    /// Opens (or makes) the tier in `dir`, holding at most `size` bytes of files. The files
    /// there are indexed by a thread of their own, so a start with many does not wait for it:
    /// until a file is indexed it is a miss.
    pub fn open(dir: &Path, size: u64) -> io::Result<Arc<Disk>> {
        fs::create_dir_all(dir)?;
        let (sender, jobs) = channel();
        let disk = Arc::new(Disk {
            dir: dir.to_path_buf(),
            size,
            index: Mutex::default(),
            writer: Mutex::new(sender),
            corrupt: AtomicU64::new(0),
            read: AtomicU64::new(0),
            written: AtomicU64::new(0),
        });
        let scanning = Arc::clone(&disk);
        std::thread::Builder::new()
            .name("cache-disk-scan".into())
            .spawn(move || scanning.scan())?;
        let writing = Arc::downgrade(&disk);
        std::thread::Builder::new()
            .name("cache-disk-write".into())
            .spawn(move || write_jobs(&writing, jobs))?;
        Ok(disk)
    }

    fn lock(&self) -> MutexGuard<'_, DiskIndex> {
        self.index
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn send(&self, job: Job) {
        let writer = self
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = writer.send(job);
    }

    fn path_of(&self, name: u64) -> PathBuf {
        self.dir.join(format!("{name:016x}"))
    }

    /// Whether a file for `key` is known (it may still fail its checksum when read).
    pub fn has(&self, key: &[u8]) -> bool {
        let name = name_of(key);
        self.lock()
            .files
            .get(&name)
            .is_some_and(|file| *file.key == *key)
    }

    /// Writes `entry` to its file, in the background.
    pub fn save(&self, entry: Arc<Entry>) {
        self.send(Job::Put(entry));
    }

    /// Removes `key`'s file, in the background.
    pub fn remove(&self, key: &[u8]) {
        self.send(Job::Remove(name_of(key)));
    }

    /// Removes the files whose keys begin with one of `prefixes`; the keys of the responses
    /// among them.
    pub fn remove_prefixed(&self, prefixes: &[Vec<u8>]) -> Vec<Box<[u8]>> {
        self.remove_where(|file| prefixes.iter().any(|prefix| file.key.starts_with(prefix)))
    }

    /// Removes the files of responses tagged `tag`; their keys.
    pub fn remove_tagged(&self, tag: &[u8]) -> Vec<Box<[u8]>> {
        self.remove_where(|file| file.tags.split(|&byte| byte == b' ').any(|one| one == tag))
    }

    fn remove_where(&self, matches: impl Fn(&FileEntry) -> bool) -> Vec<Box<[u8]>> {
        let found: Vec<(u64, Box<[u8]>, bool)> = self
            .lock()
            .files
            .iter()
            .filter(|(_, file)| matches(file))
            .map(|(name, file)| (*name, file.key.clone(), file.object))
            .collect();
        let mut objects = Vec::new();
        for (name, key, object) in found {
            self.send(Job::Remove(name));
            if object {
                objects.push(key);
            }
        }
        objects
    }

    /// Waits until every write and removal asked before is done.
    pub fn flush(&self) {
        let (done, wait) = channel();
        self.send(Job::Flush(done));
        let _ = wait.recv_timeout(Duration::from_secs(30));
    }

    /// Files known, and the bytes they take.
    pub fn held(&self) -> (u64, u64) {
        let index = self.lock();
        (index.files.len() as u64, index.used)
    }

    /// Reads `key`'s entry back, off the event loop: `None` when there is no file for it, or its
    /// file failed its checksum (then it is counted and deleted).
    pub async fn read(self: &Arc<Self>, key: Vec<u8>) -> Option<Arc<Entry>> {
        if !self.has(&key) {
            return None;
        }
        let disk = Arc::clone(self);
        tokio::task::spawn_blocking(move || disk.load(&key))
            .await
            .ok()
            .flatten()
    }

    /// Reads `key`'s file and checks it (blocking).
    pub fn load(&self, key: &[u8]) -> Option<Arc<Entry>> {
        let name = name_of(key);
        let bytes = fs::read(self.path_of(name)).ok()?;
        match decode(&bytes) {
            Some(entry) if entry.key() == key => {
                self.read.fetch_add(1, Relaxed);
                Some(Arc::new(entry))
            }
            // Another key with the same name: not this one's, and not corrupt.
            Some(_) => None,
            None => {
                self.corrupt.fetch_add(1, Relaxed);
                tracing::warn!(file = %self.path_of(name).display(), "a cached object on disk failed its checksum: deleted, and fetched again");
                self.send(Job::Remove(name));
                None
            }
        }
    }

    /// Indexes the files in the folder (deleting temporary files a stop left, and files whose
    /// head cannot be read), oldest first, within the budget.
    fn scan(&self) {
        let Ok(listing) = fs::read_dir(&self.dir) else {
            return;
        };
        let mut found = Vec::new();
        for item in listing.flatten() {
            let path = item.path();
            let file_name = item.file_name();
            let file_name = file_name.to_string_lossy();
            if file_name.ends_with(".tmp") {
                let _ = fs::remove_file(&path);
                continue;
            }
            let Ok(name) = u64::from_str_radix(&file_name, 16) else {
                continue;
            };
            let modified = item.metadata().and_then(|meta| meta.modified()).ok();
            match read_index_entry(&path) {
                Some(entry) if name_of(&entry.key) == name => found.push((modified, name, entry)),
                _ => {
                    self.corrupt.fetch_add(1, Relaxed);
                    let _ = fs::remove_file(&path);
                }
            }
        }
        found.sort_by_key(|(modified, _, _)| *modified);
        let mut index = self.lock();
        for (_, name, entry) in found {
            // A file written since the scan began is indexed already, and newer.
            if !index.files.contains_key(&name) {
                index.insert(name, entry);
            }
        }
        let gone = index.over_budget(self.size);
        drop(index);
        for name in gone {
            let _ = fs::remove_file(self.path_of(name));
        }
    }
}

impl DiskIndex {
    fn insert(&mut self, name: u64, mut entry: FileEntry) {
        if let Some(old) = self.files.remove(&name) {
            self.order.remove(&old.written);
            self.used -= old.bytes;
        }
        entry.written = self.next;
        self.next += 1;
        self.order.insert(entry.written, name);
        self.used += entry.bytes;
        self.files.insert(name, entry);
    }

    fn remove(&mut self, name: u64) -> bool {
        let Some(old) = self.files.remove(&name) else {
            return false;
        };
        self.order.remove(&old.written);
        self.used -= old.bytes;
        true
    }

    /// Takes the oldest files out of the index until the rest fit `size`; their names, to
    /// delete.
    fn over_budget(&mut self, size: u64) -> Vec<u64> {
        let mut gone = Vec::new();
        while self.used > size {
            let Some((_, name)) = self.order.pop_first() else {
                break;
            };
            if let Some(file) = self.files.remove(&name) {
                self.used -= file.bytes;
                gone.push(name);
            }
        }
        gone
    }
}

/// The writer thread: jobs in order, until the tier is dropped.
fn write_jobs(disk: &std::sync::Weak<Disk>, jobs: Receiver<Job>) {
    while let Ok(job) = jobs.recv() {
        let Some(disk) = disk.upgrade() else {
            return;
        };
        match job {
            Job::Put(entry) => {
                if let Err(error) = disk.write(&entry) {
                    tracing::warn!(dir = %disk.dir.display(), %error, "cannot write a cached object to disk");
                }
            }
            Job::Remove(name) => {
                disk.lock().remove(name);
                let _ = fs::remove_file(disk.path_of(name));
            }
            Job::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

impl Disk {
    /// Writes one entry's file: under a temporary name, then renamed into place whole.
    fn write(&self, entry: &Entry) -> io::Result<()> {
        let bytes = encode(entry);
        if bytes.len() as u64 > self.size {
            return Ok(());
        }
        let name = name_of(entry.key());
        let path = self.path_of(name);
        let temporary = self.dir.join(format!("{name:016x}.tmp"));
        let mut file = fs::File::create(&temporary)?;
        file.write_all(&bytes)?;
        drop(file);
        fs::rename(&temporary, &path)?;
        let (tags, object) = match entry {
            Entry::Object(object) => (object.tags.clone(), true),
            Entry::Variants { .. } => (Box::default(), false),
        };
        let mut index = self.lock();
        index.insert(
            name,
            FileEntry {
                key: entry.key().into(),
                tags,
                object,
                bytes: bytes.len() as u64,
                written: 0,
            },
        );
        let gone = index.over_budget(self.size);
        drop(index);
        for name in gone {
            let _ = fs::remove_file(self.path_of(name));
        }
        self.written.fetch_add(1, Relaxed);
        Ok(())
    }
}

/// An entry's file: [`MAGIC`], its kind, its key, its parts, and the CRC-32 of all of that.
fn encode(entry: &Entry) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + entry.key().len());
    out.extend_from_slice(MAGIC);
    let put_bytes = |out: &mut Vec<u8>, bytes: &[u8]| {
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(bytes);
    };
    match entry {
        Entry::Object(object) => {
            out.push(OBJECT);
            put_bytes(&mut out, &object.key);
            put_bytes(&mut out, &object.head);
            // When it arrived, on the wall clock: its age goes on counting while it is on disk.
            let here_for = object.stored.elapsed().as_millis() as u64;
            let stored = unix_now_ms().saturating_sub(here_for);
            for number in [object.freshness.lifetime, object.initial_age, stored] {
                out.extend_from_slice(&number.to_le_bytes());
            }
            put_bytes(&mut out, &object.body);
        }
        Entry::Variants { key, names } => {
            out.push(VARIANTS);
            put_bytes(&mut out, key);
            put_bytes(&mut out, names);
        }
    }
    let checksum = crc32fast::hash(&out);
    out.extend_from_slice(&checksum.to_le_bytes());
    out
}

/// Reads from the front of a file's bytes.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (taken, rest) = self.bytes.split_at_checked(n)?;
        self.bytes = rest;
        Some(taken)
    }

    fn number(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn part(&mut self) -> Option<&'a [u8]> {
        let length = usize::try_from(self.number()?).ok()?;
        self.take(length)
    }
}

/// The entry a file holds, if it is whole and its checksum holds.
fn decode(bytes: &[u8]) -> Option<Entry> {
    let (content, checksum) = bytes.split_last_chunk::<4>()?;
    if crc32fast::hash(content) != u32::from_le_bytes(*checksum) {
        return None;
    }
    let mut reader = Reader { bytes: content };
    if reader.take(MAGIC.len())? != MAGIC {
        return None;
    }
    let kind = reader.take(1)?[0];
    let key = reader.part()?;
    let entry = match kind {
        OBJECT => {
            let head = reader.part()?;
            let (lifetime, initial_age, stored) =
                (reader.number()?, reader.number()?, reader.number()?);
            let body = reader.part()?;
            object_of(key, head, body, lifetime, initial_age, stored)?
        }
        VARIANTS => Entry::Variants {
            key: key.into(),
            names: reader.part()?.into(),
        },
        _ => return None,
    };
    reader.bytes.is_empty().then_some(entry)
}

/// The object a file's parts make: what its head says (status, validators, tags, controls)
/// read again, its age grown by the time since it arrived.
fn object_of(
    key: &[u8],
    head: &[u8],
    body: &[u8],
    lifetime: u64,
    initial_age: u64,
    stored: u64,
) -> Option<Entry> {
    let mut whole_head = Vec::with_capacity(head.len() + 2);
    whole_head.extend_from_slice(head);
    whole_head.extend_from_slice(b"\r\n");
    let mut slots = header_slots();
    let response =
        parse_response(&whole_head, &mut slots, Method::Head, whole_head.len()).ok()??;
    let fields = read_response(&response);
    let since = unix_now_ms().saturating_sub(stored) / 1000;
    Some(Entry::Object(Object {
        key: key.into(),
        head: head.into(),
        body: bytes::Bytes::copy_from_slice(body),
        status: fields.facts.status,
        freshness: Freshness {
            lifetime,
            control: fields.facts.control,
        },
        initial_age: initial_age + since,
        stored: Moment::now(),
        etag: fields.etag,
        last_modified: fields.facts.last_modified,
        tags: fields.tags.into(),
    }))
}

/// What the index keeps of a file, read from its front without its body (the start's scan).
fn read_index_entry(path: &Path) -> Option<FileEntry> {
    use std::io::Read;
    let mut file = fs::File::open(path).ok()?;
    let bytes = file.metadata().ok()?.len();
    let mut front = vec![0; MAGIC.len() + 1 + 8];
    file.read_exact(&mut front).ok()?;
    if &front[..MAGIC.len()] != MAGIC {
        return None;
    }
    let kind = front[MAGIC.len()];
    let key_length = u64::from_le_bytes(front[MAGIC.len() + 1..].try_into().ok()?);
    if key_length > bytes {
        return None;
    }
    let mut key = vec![0; key_length as usize];
    file.read_exact(&mut key).ok()?;
    let tags = match kind {
        OBJECT => {
            let mut length = [0; 8];
            file.read_exact(&mut length).ok()?;
            let head_length = u64::from_le_bytes(length);
            if head_length > bytes {
                return None;
            }
            let mut head = vec![0; head_length as usize];
            file.read_exact(&mut head).ok()?;
            head.extend_from_slice(b"\r\n");
            let mut slots = header_slots();
            let response = parse_response(&head, &mut slots, Method::Head, head.len()).ok()??;
            read_response(&response).tags.into()
        }
        VARIANTS => Box::default(),
        _ => return None,
    };
    Some(FileEntry {
        key: key.into(),
        tags,
        object: kind == OBJECT,
        bytes,
        written: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(key: &[u8], body: &[u8]) -> Entry {
        let head = b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nETag: \"e\"\r\nSurrogate-Key: t1 t2\r\n";
        Entry::Object(Object::fresh(key, head, body.to_vec(), 60))
    }

    #[test]
    fn an_entry_comes_back_as_it_went_and_a_flipped_byte_is_caught() {
        let entry = object(b"app\0http\0a\0/x\0", b"the body");
        let bytes = encode(&entry);
        let Some(Entry::Object(back)) = decode(&bytes) else {
            panic!("not decoded");
        };
        assert_eq!(&*back.key, b"app\0http\0a\0/x\0");
        assert_eq!(&back.body[..], b"the body");
        assert_eq!(back.etag.as_deref(), Some(&b"\"e\""[..]));
        assert_eq!(&*back.tags, b"t1 t2");
        assert_eq!(back.freshness.lifetime, 60);
        for at in [0, 20, bytes.len() / 2, bytes.len() - 6, bytes.len() - 1] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x40;
            assert!(decode(&flipped).is_none(), "a flipped byte at {at}");
        }
        assert!(decode(&bytes[..bytes.len() - 3]).is_none(), "truncated");
        let variants = Entry::Variants {
            key: (*b"k").into(),
            names: (*b"accept-encoding").into(),
        };
        assert!(matches!(
            decode(&encode(&variants)),
            Some(Entry::Variants { .. })
        ));
    }

    #[test]
    fn files_survive_a_reopen_within_the_budget() {
        let dir = std::env::temp_dir().join(format!("herdsman-disk-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let disk = Disk::open(&dir, 64 * 1024).unwrap();
        for n in 0..40 {
            disk.save(Arc::new(object(format!("k{n}").as_bytes(), &[b'x'; 4000])));
        }
        disk.flush();
        let (files, bytes) = disk.held();
        assert!(bytes <= 64 * 1024, "{bytes} bytes held");
        assert!(files < 40 && files > 5, "{files} files");
        assert!(!disk.has(b"k0"), "the oldest went");
        assert!(disk.has(b"k39"));
        drop(disk);
        fs::write(dir.join("0123456789abcdef.tmp"), b"half a write").unwrap();
        let reopened = Disk::open(&dir, 64 * 1024).unwrap();
        assert!(crate::cache::disk::tests::eventually(
            || reopened.has(b"k39")
        ));
        assert!(reopened.load(b"k39").is_some());
        assert!(
            !dir.join("0123456789abcdef.tmp").exists(),
            "a half write is deleted"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    fn eventually(done: impl Fn() -> bool) -> bool {
        for _ in 0..200 {
            if done() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}
