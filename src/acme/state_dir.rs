//! `[tls] acme_state_dir` on disk: the ACME accounts (one per directory URL), each certificate
//! obtained with its key (`certificates/<id>/chain.pem`, `key.pem`), and the lock that lets one
//! process order at a time. Keys and account credentials are written 0600 in folders made 0700;
//! every file is written beside its final name and renamed over it, so a reader (a second
//! herdsman, a restart after a crash) sees the old file or the new one, never half of one.
//!
//! Layout:
//! ```text
//! <state_dir>/lock                              flock'd while a process orders
//! <state_dir>/accounts/<hash of directory>.json the account's credentials (its key)
//! <state_dir>/certificates/<id>/chain.pem       the certificate, then its intermediates
//! <state_dir>/certificates/<id>/key.pem         its private key
//! ```

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// One state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
}

/// A certificate as stored: its chain and key, PEM, and the files they are in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub chain_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    pub chain_file: PathBuf,
    pub key_file: PathBuf,
}

/// The exclusive lock on a state directory, held while an order runs; released when dropped
/// (or when the process dies: the kernel drops a flock with its last descriptor).
#[derive(Debug)]
pub struct OrderLock {
    _file: File,
}

impl StateDir {
    /// The state directory at `root`, made (0700) if it is not there yet.
    pub fn open(root: &Path) -> io::Result<StateDir> {
        make_private_dir(root)?;
        Ok(StateDir {
            root: root.to_path_buf(),
        })
    }

    /// The stored credentials of the account at `directory`, if any (JSON, as instant-acme
    /// writes them).
    pub fn account(&self, directory: &str) -> io::Result<Option<Vec<u8>>> {
        read_if_there(&self.account_file(directory))
    }

    pub fn store_account(&self, directory: &str, credentials: &[u8]) -> io::Result<()> {
        make_private_dir(&self.root.join("accounts"))?;
        write_replacing(&self.account_file(directory), credentials, 0o600)
    }

    fn account_file(&self, directory: &str) -> PathBuf {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(directory.as_bytes());
        let name: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        self.root.join("accounts").join(format!("{name}.json"))
    }

    /// The certificate stored under `id`, if both its files are there.
    pub fn certificate(&self, id: &str) -> io::Result<Option<Stored>> {
        let (chain_file, key_file) = self.certificate_files(id);
        let (Some(chain_pem), Some(key_pem)) =
            (read_if_there(&chain_file)?, read_if_there(&key_file)?)
        else {
            return Ok(None);
        };
        Ok(Some(Stored {
            chain_pem,
            key_pem,
            chain_file,
            key_file,
        }))
    }

    /// Stores a certificate under `id`: the key first, so that a chain on disk always has its
    /// key beside it (a reader that finds a new key with the old chain refuses the pair as
    /// mismatched and tries again later).
    pub fn store_certificate(
        &self,
        id: &str,
        chain_pem: &[u8],
        key_pem: &[u8],
    ) -> io::Result<Stored> {
        let (chain_file, key_file) = self.certificate_files(id);
        make_private_dir(&self.root.join("certificates"))?;
        make_private_dir(chain_file.parent().expect("a certificate's folder"))?;
        write_replacing(&key_file, key_pem, 0o600)?;
        write_replacing(&chain_file, chain_pem, 0o644)?;
        Ok(Stored {
            chain_pem: chain_pem.to_vec(),
            key_pem: key_pem.to_vec(),
            chain_file,
            key_file,
        })
    }

    fn certificate_files(&self, id: &str) -> (PathBuf, PathBuf) {
        let folder = self.root.join("certificates").join(id);
        (folder.join("chain.pem"), folder.join("key.pem"))
    }

    /// Copies into this directory what `earlier` holds of the certificates `ids` and the
    /// accounts at `directories` and this one lacks, so that a reload that moves
    /// `acme_state_dir` costs no new order and no new account (a restart then reads them here).
    /// What this directory holds already stays: another process may keep it. The names of what
    /// was copied, as `certificates/<id>` and `accounts/<directory>`.
    pub fn carry_from(
        &self,
        earlier: &StateDir,
        ids: &[&str],
        directories: &[&str],
    ) -> io::Result<Vec<String>> {
        let mut carried = Vec::new();
        for &id in ids {
            if self.certificate(id)?.is_some() {
                continue;
            }
            if let Some(stored) = earlier.certificate(id)? {
                self.store_certificate(id, &stored.chain_pem, &stored.key_pem)?;
                carried.push(format!("certificates/{id}"));
            }
        }
        for &directory in directories {
            if self.account(directory)?.is_some() {
                continue;
            }
            if let Some(credentials) = earlier.account(directory)? {
                self.store_account(directory, &credentials)?;
                carried.push(format!("accounts/{directory}"));
            }
        }
        Ok(carried)
    }

    /// The order lock, if no other process holds it now.
    pub fn try_lock(&self) -> io::Result<Option<OrderLock>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(self.root.join("lock"))?;
        // SAFETY: flock on a descriptor this function owns; no memory is involved.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if locked == 0 {
            return Ok(Some(OrderLock { _file: file }));
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EWOULDBLOCK) => Ok(None),
            _ => Err(error),
        }
    }
}

fn make_private_dir(path: &Path) -> io::Result<()> {
    match fs::create_dir(path) {
        Ok(()) => fs::set_permissions(path, fs::Permissions::from_mode(0o700)),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(path)?;
            fs::set_permissions(path, fs::Permissions::from_mode(0o700))
        }
        Err(error) => Err(error),
    }
}

fn read_if_there(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Writes `bytes` to `path` with `mode`: into a file beside it (made with that mode, so a key
/// is never readable by others, even for a moment), synced, then renamed over it.
fn write_replacing(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut beside = path.as_os_str().to_owned();
    beside.push(format!(".{}.new", std::process::id()));
    let beside = PathBuf::from(beside);
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(mode)
        .open(&beside)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&beside, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn fresh(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("herdsman-acme-state-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn certificates_and_accounts_come_back_as_stored_with_private_modes() {
        let root = fresh("round-trip").join("deeper");
        let state = StateDir::open(&root).unwrap();
        assert_eq!(state.certificate("a.test-0011").unwrap(), None);
        assert_eq!(state.account("https://ca/dir").unwrap(), None);
        let stored = state
            .store_certificate("a.test-0011", b"CHAIN", b"KEY")
            .unwrap();
        state.store_account("https://ca/dir", b"{}").unwrap();
        // Read again as a restarted process would.
        let again = StateDir::open(&root).unwrap();
        assert_eq!(
            again.certificate("a.test-0011").unwrap(),
            Some(stored.clone())
        );
        assert_eq!(
            again.account("https://ca/dir").unwrap().as_deref(),
            Some(&b"{}"[..])
        );
        assert_eq!(again.account("https://other/dir").unwrap(), None);
        let mode = |path: &Path| fs::metadata(path).unwrap().mode() & 0o777;
        assert_eq!(mode(&stored.key_file), 0o600);
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(stored.key_file.parent().unwrap()), 0o700);
        // Replaced whole.
        let replaced = again
            .store_certificate("a.test-0011", b"CHAIN2", b"KEY2")
            .unwrap();
        assert_eq!(fs::read(&replaced.chain_file).unwrap(), b"CHAIN2");
        assert_eq!(mode(&replaced.key_file), 0o600);
        let _ = fs::remove_dir_all(root.parent().unwrap());
    }

    #[test]
    fn a_moved_state_directory_gets_what_it_lacks_and_keeps_what_it_has() {
        let root = fresh("carry");
        let earlier = StateDir::open(&root.join("old")).unwrap();
        earlier
            .store_certificate("a-01", b"CHAIN-A", b"KEY-A")
            .unwrap();
        earlier
            .store_certificate("b-02", b"CHAIN-B", b"KEY-B")
            .unwrap();
        earlier
            .store_certificate("gone-03", b"CHAIN-G", b"KEY-G")
            .unwrap();
        earlier
            .store_account("https://ca/dir", b"{\"old\":1}")
            .unwrap();
        let moved = StateDir::open(&root.join("new")).unwrap();
        // Another process's certificate for b is there already.
        moved
            .store_certificate("b-02", b"CHAIN-B2", b"KEY-B2")
            .unwrap();
        let carried = moved
            .carry_from(
                &earlier,
                &["a-01", "b-02", "c-04"],
                &["https://ca/dir", "https://x/dir"],
            )
            .unwrap();
        assert_eq!(carried, ["certificates/a-01", "accounts/https://ca/dir"]);
        let a = moved.certificate("a-01").unwrap().unwrap();
        assert_eq!(
            (&a.chain_pem[..], &a.key_pem[..]),
            (&b"CHAIN-A"[..], &b"KEY-A"[..])
        );
        assert!(a.chain_file.starts_with(root.join("new")));
        assert_eq!(fs::metadata(&a.key_file).unwrap().mode() & 0o777, 0o600);
        assert_eq!(
            moved.certificate("b-02").unwrap().unwrap().chain_pem,
            b"CHAIN-B2"
        );
        // Only what the config still wants.
        assert_eq!(moved.certificate("gone-03").unwrap(), None);
        assert_eq!(
            moved.account("https://ca/dir").unwrap().as_deref(),
            Some(&b"{\"old\":1}"[..])
        );
        // Nothing more the second time.
        assert!(moved
            .carry_from(&earlier, &["a-01"], &["https://ca/dir"])
            .unwrap()
            .is_empty());
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn one_holder_of_the_order_lock_at_a_time() {
        let root = fresh("lock");
        let state = StateDir::open(&root).unwrap();
        let held = state.try_lock().unwrap().expect("free at first");
        // Another open file description, as another process has: refused while held.
        assert!(StateDir::open(&root).unwrap().try_lock().unwrap().is_none());
        drop(held);
        assert!(state.try_lock().unwrap().is_some());
        let _ = fs::remove_dir_all(&root);
    }
}
