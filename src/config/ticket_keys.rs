//! The keys that seal TLS session tickets: one set for the process, shared by every listener and
//! worker (each listener's rustls config holds the same `Arc`), kept across reloads, handed to
//! the new process at a binary upgrade so that clients resume across it, and rotated every
//! [`ROTATE_EVERY`] with the previous key still opening tickets — or read from
//! `[tls] ticket_key_file`, so that several herdsman instances behind one name open each other's
//! tickets (their operator then rotates the file, as with nginx's `ssl_session_ticket_key`).
//!
//! A ticket is `key name (16 bytes) | nonce (12) | AES-256-GCM(session state) | tag (16)`, the
//! name also bound as associated data; a key is 48 bytes, name then AES key, the layout of
//! nginx's 48-byte key files (`openssl rand 48 > ticket.key`). Sealing costs one AEAD pass per
//! ticket and a read lock (an atomic add): nothing next to the handshake that asks for it.

use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::server::ProducesTickets;

/// Bytes of one key: a 16-byte name, then a 32-byte AES-256 key.
pub const KEY_LEN: usize = 48;
/// The most keys a `ticket_key_file` may hold (the first seals, all open).
pub const MOST_KEYS: usize = 8;
/// How often generated keys are replaced. The ticket lifetime told to clients is the same, and
/// the previous key still opens tickets: a ticket is good for at most twice this.
pub const ROTATE_EVERY: Duration = Duration::from_secs(6 * 3600);
const NAME_LEN: usize = 16;

/// Where the process's ticket keys come from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TicketKeySource {
    /// Made at random at start (or handed down by the process this one replaced), rotated.
    #[default]
    Generated,
    /// Read from `[tls] ticket_key_file`: the first key seals, every key opens; never rotated
    /// by herdsman.
    File {
        path: std::path::PathBuf,
        keys: Vec<[u8; KEY_LEN]>,
    },
}

/// One key, ready to seal and open.
struct Key {
    bytes: [u8; KEY_LEN],
    aead: LessSafeKey,
}

impl Key {
    fn new(bytes: [u8; KEY_LEN]) -> Key {
        let unbound = UnboundKey::new(&AES_256_GCM, &bytes[NAME_LEN..])
            .expect("32 bytes make an AES-256 key");
        Key {
            bytes,
            aead: LessSafeKey::new(unbound),
        }
    }

    fn random(rng: &SystemRandom) -> Key {
        let mut bytes = [0u8; KEY_LEN];
        rng.fill(&mut bytes).expect("the system's random numbers");
        Key::new(bytes)
    }

    fn name(&self) -> &[u8] {
        &self.bytes[..NAME_LEN]
    }
}

/// The keys in use.
struct Keys {
    /// Seals new tickets (and opens them).
    current: Key,
    /// Still open tickets: the key before the last rotation, or a file's other keys.
    others: Vec<Key>,
    /// When `current` began to seal.
    since: SystemTime,
    /// Rotated by herdsman (generated keys), or kept as the file says.
    rotates: bool,
}

/// The process's ticket keys (see the module's comment).
pub struct TicketKeys {
    keys: RwLock<Keys>,
    rng: SystemRandom,
}

impl std::fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys themselves.
        f.debug_struct("TicketKeys").finish_non_exhaustive()
    }
}

impl TicketKeys {
    /// A fresh set: one random key, rotating.
    pub fn generated() -> TicketKeys {
        let rng = SystemRandom::new();
        let current = Key::random(&rng);
        TicketKeys {
            keys: RwLock::new(Keys {
                current,
                others: Vec::new(),
                since: SystemTime::now(),
                rotates: true,
            }),
            rng,
        }
    }

    /// The process's keys, made at first use.
    pub fn global() -> Arc<TicketKeys> {
        static KEYS: OnceLock<Arc<TicketKeys>> = OnceLock::new();
        Arc::clone(KEYS.get_or_init(|| Arc::new(TicketKeys::generated())))
    }

    /// Takes the keys `source` says (at start and after each reload that was accepted): a file's
    /// keys as they are; generated ones kept if they are generated already, else made anew.
    pub fn install(&self, source: &TicketKeySource) {
        let mut keys = self.write();
        match source {
            TicketKeySource::File { keys: listed, .. } => {
                let mut listed = listed.iter().map(|bytes| Key::new(*bytes));
                let Some(current) = listed.next() else {
                    return;
                };
                *keys = Keys {
                    current,
                    others: listed.collect(),
                    since: SystemTime::now(),
                    rotates: false,
                };
            }
            TicketKeySource::Generated if keys.rotates => {}
            TicketKeySource::Generated => {
                *keys = Keys {
                    current: Key::random(&self.rng),
                    others: Vec::new(),
                    since: SystemTime::now(),
                    rotates: true,
                };
            }
        }
    }

    /// The keys as the next process takes them at a binary upgrade: when the current one began
    /// (seconds since the epoch, 8 bytes big-endian), whether they rotate (1 byte), then each
    /// key, the current first.
    pub fn export(&self) -> Vec<u8> {
        let keys = self.read();
        let since = keys
            .since
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let mut out = since.to_be_bytes().to_vec();
        out.push(u8::from(keys.rotates));
        out.extend_from_slice(&keys.current.bytes);
        for key in &keys.others {
            out.extend_from_slice(&key.bytes);
        }
        out
    }

    /// Takes keys exported by the process this one replaces; false (and nothing changed) when
    /// `bytes` is not an export.
    pub fn import(&self, bytes: &[u8]) -> bool {
        let Some((head, rest)) = bytes.split_first_chunk::<9>() else {
            return false;
        };
        if rest.is_empty() || rest.len() % KEY_LEN != 0 || rest.len() / KEY_LEN > MOST_KEYS + 1 {
            return false;
        }
        let mut seconds = [0u8; 8];
        seconds.copy_from_slice(&head[..8]);
        // A time past what the clock can hold is no export (the fuzzer's first find: a sum that
        // overflowed and panicked).
        let Some(since) = UNIX_EPOCH.checked_add(Duration::from_secs(u64::from_be_bytes(seconds)))
        else {
            return false;
        };
        let mut listed = rest.chunks_exact(KEY_LEN).map(|chunk| {
            let mut bytes = [0u8; KEY_LEN];
            bytes.copy_from_slice(chunk);
            Key::new(bytes)
        });
        let Some(current) = listed.next() else {
            return false;
        };
        *self.write() = Keys {
            current,
            others: listed.collect(),
            since,
            rotates: head[8] != 0,
        };
        true
    }

    /// Replaces a generated key that has sealed for [`ROTATE_EVERY`]: the new one seals, the
    /// old one only opens, the one before it goes.
    fn rotate_if_due(&self) {
        let due = |keys: &Keys| {
            keys.rotates
                && SystemTime::now()
                    .duration_since(keys.since)
                    .is_ok_and(|age| age >= ROTATE_EVERY)
        };
        if !due(&self.read()) {
            return;
        }
        let mut keys = self.write();
        if !due(&keys) {
            return;
        }
        let fresh = Key::random(&self.rng);
        let old = std::mem::replace(&mut keys.current, fresh);
        keys.others = vec![old];
        keys.since = SystemTime::now();
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Keys> {
        self.keys
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Keys> {
        self.keys
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    #[cfg(test)]
    fn age_by(&self, by: Duration) {
        let mut keys = self.write();
        keys.since -= by;
    }
}

impl ProducesTickets for TicketKeys {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        ROTATE_EVERY.as_secs() as u32
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.rotate_if_due();
        let keys = self.read();
        let key = &keys.current;
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut ticket = Vec::with_capacity(NAME_LEN + NONCE_LEN + plain.len() + 16);
        ticket.extend_from_slice(key.name());
        ticket.extend_from_slice(&nonce);
        let mut sealed = plain.to_vec();
        let aad = Aad::from(key.name());
        key.aead
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), aad, &mut sealed)
            .ok()?;
        ticket.extend_from_slice(&sealed);
        Some(ticket)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        let (name, rest) = ticket.split_at_checked(NAME_LEN)?;
        let (nonce, sealed) = rest.split_at_checked(NONCE_LEN)?;
        let keys = self.read();
        let key = std::iter::once(&keys.current)
            .chain(&keys.others)
            .find(|key| key.name() == name)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut opened = sealed.to_vec();
        let plain = key
            .aead
            .open_in_place(nonce, Aad::from(name), &mut opened)
            .ok()?;
        let len = plain.len();
        opened.truncate(len);
        Some(opened)
    }
}

/// The keys in the file `path` (one or more 48-byte keys back to back, as `openssl rand 48`
/// makes one); the reason when it holds none or a part of one.
pub fn read_key_file(path: &std::path::Path) -> Result<Vec<[u8; KEY_LEN]>, String> {
    let bytes = std::fs::read(path).map_err(|error| format!("cannot be read: {error}"))?;
    if bytes.is_empty() || bytes.len() % KEY_LEN != 0 || bytes.len() / KEY_LEN > MOST_KEYS {
        return Err(format!(
            "holds {} bytes; it must hold 1 to {MOST_KEYS} keys of {KEY_LEN} bytes each (make one with `openssl rand {KEY_LEN}`)",
            bytes.len()
        ));
    }
    Ok(bytes
        .chunks_exact(KEY_LEN)
        .map(|chunk| {
            let mut key = [0u8; KEY_LEN];
            key.copy_from_slice(chunk);
            key
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_opens_with_its_key_and_not_once_altered() {
        let keys = TicketKeys::generated();
        let ticket = keys.encrypt(b"session state").unwrap();
        assert_eq!(ticket.len(), NAME_LEN + NONCE_LEN + 13 + 16);
        assert_eq!(keys.decrypt(&ticket).unwrap(), b"session state");
        let mut altered = ticket.clone();
        *altered.last_mut().unwrap() ^= 1;
        assert!(keys.decrypt(&altered).is_none());
        assert!(keys.decrypt(&ticket[..20]).is_none());
        assert!(
            TicketKeys::generated().decrypt(&ticket).is_none(),
            "another key opened it"
        );
    }

    #[test]
    fn a_rotation_keeps_the_previous_key_for_opening_and_drops_the_one_before() {
        let keys = TicketKeys::generated();
        let first = keys.encrypt(b"one").unwrap();
        keys.age_by(ROTATE_EVERY);
        let second = keys.encrypt(b"two").unwrap();
        assert_ne!(
            first[..NAME_LEN],
            second[..NAME_LEN],
            "no new key after the rotation"
        );
        assert_eq!(keys.decrypt(&first).unwrap(), b"one");
        keys.age_by(ROTATE_EVERY);
        let _third = keys.encrypt(b"three").unwrap();
        assert!(
            keys.decrypt(&first).is_none(),
            "a key two rotations old still opens"
        );
        assert_eq!(keys.decrypt(&second).unwrap(), b"two");
    }

    #[test]
    fn the_next_process_opens_what_this_one_sealed() {
        let old = TicketKeys::generated();
        let ticket = old.encrypt(b"resume me").unwrap();
        let new = TicketKeys::generated();
        assert!(new.import(&old.export()));
        assert_eq!(new.decrypt(&ticket).unwrap(), b"resume me");
        assert!(!new.import(b"short"), "garbage was taken");
        // A start time past the clock's range (found by fuzz/fuzz_targets/tls_tickets.rs).
        let mut far = vec![0x9f; 9 + KEY_LEN];
        far[8] = 1;
        assert!(!new.import(&far), "a time the clock cannot hold was taken");
        assert_eq!(new.decrypt(&ticket).unwrap(), b"resume me");
    }

    #[test]
    fn file_keys_are_shared_by_instances_and_not_rotated() {
        let dir = std::env::temp_dir().join(format!("herdsman-tickets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ticket.key");
        let mut bytes = [0u8; 2 * KEY_LEN];
        SystemRandom::new().fill(&mut bytes).unwrap();
        std::fs::write(&path, bytes).unwrap();
        let source = TicketKeySource::File {
            path: path.clone(),
            keys: read_key_file(&path).unwrap(),
        };
        let (one, other) = (TicketKeys::generated(), TicketKeys::generated());
        one.install(&source);
        other.install(&source);
        let ticket = one.encrypt(b"shared").unwrap();
        assert_eq!(other.decrypt(&ticket).unwrap(), b"shared");
        assert_eq!(ticket[..NAME_LEN], bytes[..NAME_LEN], "the first key seals");
        one.age_by(ROTATE_EVERY * 3);
        let later = one.encrypt(b"later").unwrap();
        assert_eq!(
            later[..NAME_LEN],
            bytes[..NAME_LEN],
            "a file's key was rotated"
        );
        // Back to generated keys: new ones, rotating again.
        one.install(&TicketKeySource::Generated);
        assert!(one.decrypt(&ticket).is_none());
        std::fs::write(&path, [0u8; 47]).unwrap();
        assert!(read_key_file(&path).unwrap_err().contains("47 bytes"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
