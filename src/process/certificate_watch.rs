//! Certificate files watched on disk: when a TLS listener's chain, key or client CA file changes
//! (replaced by certbot, a secrets manager or an operator), the certificates are read again and
//! new handshakes get them, with no reload and no connection dropped. A file that then does not
//! load is named in the log and the certificates already serving go on; it is not tried again
//! until it changes again.
//!
//! Polled, every [`WATCH_EVERY`]: a `stat` per file (its inode, size and modification time, so an
//! atomic rename is seen as well as a write in place). inotify would need a watch per directory
//! and still miss a file replaced through a symlink that changed (Kubernetes' secret volumes);
//! a few `stat`s a second cost nothing.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::upstream::registry::Registry;

/// How often the files are looked at.
pub const WATCH_EVERY: Duration = Duration::from_secs(2);

/// What a file looked like: inode, size, modification time (ns); `None` when it cannot be read.
type Seen = Option<(u64, u64, i128)>;

fn look(path: &PathBuf) -> Seen {
    let metadata = std::fs::metadata(path).ok()?;
    let modified = i128::from(metadata.mtime()) * 1_000_000_000 + i128::from(metadata.mtime_nsec());
    Some((metadata.ino(), metadata.size(), modified))
}

/// Starts the watch for `registry`'s TLS listeners; it ends when the registry goes (the server
/// stopped).
/// stopped). The files are looked at once now, just after they were read, so that a change from
/// then on is seen.
pub fn start(registry: &Arc<Registry>) -> std::io::Result<()> {
    let seen = look_at_all(registry);
    let registry = Arc::downgrade(registry);
    std::thread::Builder::new()
        .name("herdsman-certificate-watch".into())
        .spawn(move || watch(registry, seen, WATCH_EVERY))?;
    Ok(())
}

fn look_at_all(registry: &Registry) -> HashMap<PathBuf, Seen> {
    let files = registry.certificate_files().into_iter();
    files.map(|file| (file.clone(), look(&file))).collect()
}

fn watch(registry: Weak<Registry>, mut seen: HashMap<PathBuf, Seen>, every: Duration) {
    loop {
        std::thread::sleep(every);
        let Some(registry) = registry.upgrade() else {
            return;
        };
        let now = look_at_all(&registry);
        // A file the config newly names (a reload) is only noted; a known one that changed
        // is a change.
        let changed: Vec<&PathBuf> = now
            .iter()
            .filter(|(file, state)| seen.get(*file).is_some_and(|before| before != *state))
            .map(|(file, _)| file)
            .collect();
        if !changed.is_empty() {
            let names: Vec<String> = changed.iter().map(|f| f.display().to_string()).collect();
            match registry.reread_certificates() {
                Ok(listeners) => tracing::info!(
                    files = %names.join(", "),
                    listeners,
                    "certificate files changed: read again, new handshakes get them"
                ),
                Err(why) => tracing::error!(
                    files = %names.join(", "),
                    "certificate files changed but do not load ({why}); the certificates already serving go on"
                ),
            }
        }
        seen = now;
    }
}
