//! The access log writer: one thread for the process (`herdsman-log`) that owns the files and
//! writes the buffers workers hand it, so that no worker ever waits on a disk.
//!
//! Workers send over a bounded channel with `try_send`: when [`MOST_OUTSTANDING`] buffers wait,
//! the next one is dropped and its lines counted, and the writer warns about them at most once a
//! second. SIGUSR1 ([`AccessLogWriter::reopen`]) sets a flag the writer reads between two
//! buffers; it then opens each file again by path (O_APPEND|O_CREAT, mode 0640), so that every
//! buffer written before goes to the old file and every one after to the new, whole.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::STANDARD_OUTPUT;

/// Buffers that may wait for the writer, over all workers: with buffers handed over at 32 KiB,
/// about 2 MiB of lines, or a few seconds of a busy proxy's; more means the disk cannot keep up,
/// and waiting longer would only hold memory.
pub const MOST_OUTSTANDING: usize = 64;

/// The writer says how many lines it lost at most this often.
const COMPLAIN_EVERY: Duration = Duration::from_secs(1);

/// What the writer is sent.
pub(super) enum Message {
    /// Whole lines for one file.
    Lines(Batch),
    /// Look at the flags (a reopen was asked for).
    Wake,
}

/// Whole lines for the file at `path`.
pub(super) struct Batch {
    pub path: Arc<Path>,
    pub bytes: Vec<u8>,
    pub lines: u64,
}

/// What workers, the writer and the signal handler share.
#[derive(Debug)]
struct Shared {
    /// SIGUSR1 asked for the files to be opened again.
    reopen: AtomicBool,
    /// Lines dropped because the writer was [`MOST_OUTSTANDING`] buffers behind, since start
    /// (shared with the metrics: `Stats::access_log_dropped_lines`).
    dropped: Arc<AtomicU64>,
}

/// A worker's way to the writer.
#[derive(Debug, Clone)]
pub struct LogSink {
    sender: SyncSender<Message>,
    shared: Arc<Shared>,
}

impl LogSink {
    /// Hands `batch` to the writer without waiting. When the writer is too far behind (or gone),
    /// the lines are counted as dropped and the buffer comes back, emptied, for reuse.
    pub(super) fn hand_over(&self, batch: Batch) -> Option<Vec<u8>> {
        match self.sender.try_send(Message::Lines(batch)) {
            Ok(()) => None,
            Err(TrySendError::Full(message) | TrySendError::Disconnected(message)) => {
                let Message::Lines(batch) = message else {
                    return None;
                };
                self.shared
                    .dropped
                    .fetch_add(batch.lines, Ordering::Relaxed);
                let mut bytes = batch.bytes;
                bytes.clear();
                Some(bytes)
            }
        }
    }

    /// Hands `batch` to the writer, waiting for room: only for a worker that is stopping, whose
    /// last lines must not be lost.
    pub(super) fn hand_over_waiting(&self, batch: Batch) {
        let lines = batch.lines;
        if self.sender.send(Message::Lines(batch)).is_err() {
            self.shared.dropped.fetch_add(lines, Ordering::Relaxed);
        }
    }
}

/// The writer thread, as the server holds it.
pub struct AccessLogWriter {
    /// Dropped by [`AccessLogWriter::finish`]: once the workers' senders are gone too, the writer
    /// writes what is left and ends.
    sender: Option<SyncSender<Message>>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl AccessLogWriter {
    /// Starts the writer thread with `files` (those opened at start; others are opened when
    /// their first lines come, after a reload).
    /// Starts the writer thread with `files` open; lines it has to drop are counted in
    /// `dropped`.
    pub fn start(files: LogFiles, dropped: Arc<AtomicU64>) -> io::Result<AccessLogWriter> {
        let (sender, receiver) = mpsc::sync_channel(MOST_OUTSTANDING);
        let shared = Arc::new(Shared {
            reopen: AtomicBool::new(false),
            dropped,
        });
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("herdsman-log".into())
                .spawn(move || write_until_closed(&receiver, &shared, files))?
        };
        Ok(AccessLogWriter {
            sender: Some(sender),
            shared,
            thread: Some(thread),
        })
    }

    /// A worker's way to the writer.
    pub fn sink(&self) -> Option<LogSink> {
        let sender = self.sender.clone()?;
        Some(LogSink {
            sender,
            shared: Arc::clone(&self.shared),
        })
    }

    /// Has the writer open every file again by path (SIGUSR1). Returns at once: the writer does
    /// it between two buffers.
    pub fn reopen(&self) {
        self.shared.reopen.store(true, Ordering::Release);
        if let Some(sender) = &self.sender {
            // A full channel means the writer is busy and reads the flag after its next buffer.
            let _ = sender.try_send(Message::Wake);
        }
    }

    /// Lines dropped because the writer was too far behind, since start.
    pub fn dropped_lines(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Waits for the writer to write everything it was handed and end. Call once the workers
    /// have ended (their senders keep it going).
    pub fn finish(mut self) {
        self.sender = None;
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the access log writer panicked");
            }
        }
    }
}

/// The files the writer owns, by path.
#[derive(Debug, Default)]
pub struct LogFiles {
    files: Vec<LogFile>,
}

#[derive(Debug)]
struct LogFile {
    path: Arc<Path>,
    /// `None` while it cannot be opened (tried again with each batch).
    file: Option<File>,
    /// Lines were written to it, or it was opened, since the last reopen: a file that was not is
    /// closed at a reopen rather than created again, and opened again by its next lines.
    used: bool,
    /// Lines lost to errors since the last complaint, and when that was.
    lost: u64,
    complained: Option<Instant>,
}

impl LogFiles {
    pub fn new() -> LogFiles {
        LogFiles::default()
    }

    /// Opens the file at `path` (at start, where an error stops the start), unless it is open.
    pub fn open(&mut self, path: &Arc<Path>) -> io::Result<()> {
        if self.files.iter().any(|file| file.path == *path) {
            return Ok(());
        }
        let file = open(path)?;
        self.files.push(LogFile {
            path: Arc::clone(path),
            file: Some(file),
            used: true,
            lost: 0,
            complained: None,
        });
        Ok(())
    }

    /// Writes `batch` to its file, opening the file if it is not open yet; lines that cannot be
    /// written are counted and complained about at most once a second per file.
    fn write(&mut self, batch: Batch) {
        let index = match self.files.iter().position(|file| file.path == batch.path) {
            Some(index) => index,
            None => {
                self.files.push(LogFile {
                    path: Arc::clone(&batch.path),
                    file: None,
                    used: true,
                    lost: 0,
                    complained: None,
                });
                self.files.len() - 1
            }
        };
        let log = &mut self.files[index];
        log.used = true;
        let written = match &mut log.file {
            Some(file) => file.write_all(&batch.bytes),
            None => open(&log.path).and_then(|mut file| {
                tracing::info!(path = %log.path.display(), "access log opened");
                let written = file.write_all(&batch.bytes);
                log.file = Some(file);
                written
            }),
        };
        if let Err(error) = written {
            log.lost += batch.lines;
            let due = log
                .complained
                .is_none_or(|at| at.elapsed() >= COMPLAIN_EVERY);
            if due {
                tracing::error!(path = %log.path.display(), %error, lost = log.lost, "access log: cannot write; lines lost");
                log.lost = 0;
                log.complained = Some(Instant::now());
            }
        }
    }

    /// Opens every file used since the last reopen again by path, and closes the others. A file
    /// that cannot be opened keeps its old descriptor, and the error is logged.
    fn reopen(&mut self) {
        self.files.retain_mut(|log| {
            if !log.used {
                tracing::info!(path = %log.path.display(), "access log closed: no lines since the last reopen");
                return false;
            }
            log.used = false;
            match open(&log.path) {
                Ok(file) => log.file = Some(file),
                Err(error) => tracing::error!(
                    path = %log.path.display(),
                    %error,
                    "access log: cannot reopen; writing on to the file open before"
                ),
            }
            true
        });
        tracing::info!(files = self.files.len(), "access logs reopened");
    }
}

/// The access log file at `path`, opened to append, created if missing (mode 0640: the group,
/// say `adm`, may read it).
fn open(path: &Path) -> io::Result<File> {
    if path.as_os_str() == STANDARD_OUTPUT {
        // A descriptor of its own for standard output (a container's or journald's log), which
        // a reopen duplicates again: there is nothing to rotate.
        use std::os::fd::AsFd;
        return Ok(File::from(io::stdout().as_fd().try_clone_to_owned()?));
    }
    let mut options = OpenOptions::new();
    options.append(true).create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o640);
    options.open(path)
}

/// The writer thread: writes each batch as it comes, reopens when asked, warns about dropped
/// lines at most once a second, and ends when every sender is gone and the channel is empty.
fn write_until_closed(receiver: &Receiver<Message>, shared: &Shared, mut files: LogFiles) {
    let mut reported_drops = 0;
    let mut last_report: Option<Instant> = None;
    loop {
        // Sleeps without a timer unless there are drops still to report.
        let unreported = shared.dropped.load(Ordering::Relaxed) != reported_drops;
        let message = if unreported {
            match receiver.recv_timeout(COMPLAIN_EVERY) {
                Ok(message) => Some(message),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            }
        } else {
            match receiver.recv() {
                Ok(message) => Some(message),
                Err(_) => break,
            }
        };
        if let Some(Message::Lines(batch)) = message {
            files.write(batch);
        }
        if shared.reopen.swap(false, Ordering::AcqRel) {
            files.reopen();
        }
        let dropped = shared.dropped.load(Ordering::Relaxed);
        let due = last_report.is_none_or(|at| at.elapsed() >= COMPLAIN_EVERY);
        if dropped != reported_drops && due {
            tracing::warn!(
                lines = dropped - reported_drops,
                total = dropped,
                "access log lines dropped: the disk is not keeping up with the requests"
            );
            reported_drops = dropped;
            last_report = Some(Instant::now());
        }
    }
    let dropped = shared.dropped.load(Ordering::Relaxed);
    if dropped != reported_drops {
        tracing::warn!(
            lines = dropped - reported_drops,
            total = dropped,
            "access log lines dropped"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("herdsman-access-log-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn batch(path: &Arc<Path>, text: &str) -> Batch {
        Batch {
            path: Arc::clone(path),
            bytes: text.as_bytes().to_vec(),
            lines: text.matches('\n').count() as u64,
        }
    }

    #[test]
    fn a_reopen_sends_later_lines_to_a_new_file_at_the_path() {
        let dir = temp_dir("reopen");
        let path: Arc<Path> = Arc::from(dir.join("access.log"));
        let mut files = LogFiles::new();
        files.open(&path).unwrap();
        files.write(batch(&path, "one\n"));
        std::fs::rename(&path, dir.join("access.log.1")).unwrap();
        files.write(batch(&path, "two\n"));
        files.reopen();
        files.write(batch(&path, "three\n"));
        assert_eq!(
            std::fs::read_to_string(dir.join("access.log.1")).unwrap(),
            "one\ntwo\n"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "three\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            // The umask may take bits away, never add them.
            assert_eq!(mode & 0o777 & !0o640, 0, "{mode:o}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_file_unused_between_two_reopens_is_closed_and_opened_by_its_next_lines() {
        let dir = temp_dir("unused");
        let path: Arc<Path> = Arc::from(dir.join("quiet.log"));
        let mut files = LogFiles::new();
        files.open(&path).unwrap();
        files.reopen();
        files.reopen();
        assert!(files.files.is_empty());
        std::fs::remove_file(&path).unwrap();
        files.write(batch(&path, "later\n"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "later\n");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_full_channel_drops_and_counts_without_waiting_and_finish_writes_the_rest() {
        let dir = temp_dir("full");
        let path: Arc<Path> = Arc::from(dir.join("access.log"));
        let writer = AccessLogWriter::start(LogFiles::new(), Arc::default()).unwrap();
        let sink = writer.sink().unwrap();
        let mut sent = 0;
        // Far more than fit: the writer cannot have taken them all by the time the loop ends,
        // and no call may wait.
        let started = Instant::now();
        for _ in 0..MOST_OUTSTANDING * 50 {
            if sink.hand_over(batch(&path, "x\n")).is_none() {
                sent += 1;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(sink);
        let dropped = writer.dropped_lines();
        writer.finish();
        let written = std::fs::read_to_string(&path).unwrap().lines().count() as u64;
        assert_eq!(written, sent);
        assert_eq!(written + dropped, (MOST_OUTSTANDING * 50) as u64);
        let _ = std::fs::remove_dir_all(dir);
    }
}
