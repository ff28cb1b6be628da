//! The admin API's UNIX socket (`[admin] socket`): made with the mode and owner the config asks
//! for (0600 and herdsman's own user by default), so that the file's permissions decide which
//! local users reach the API, as HAProxy's runtime socket does. Loopback TCP cannot tell one
//! local user from another; a socket file can, and the kernel names each caller's uid
//! (`SO_PEERCRED`), which the API writes in its log.

use std::ffi::CString;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use crate::config::AdminSocket;

/// Listens on `socket.path`: removes a socket file left by a process that no longer serves on
/// it (nothing accepts a connection there), refuses to replace any other file or a socket that
/// still answers, then sets the mode and ownership. Not for a socket handed down at a binary
/// upgrade, which is adopted as it is.
pub fn listen(socket: &AdminSocket) -> io::Result<UnixListener> {
    let path = &socket.path;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another process serves on this socket",
                ));
            }
            // Left by a process that has gone.
            std::fs::remove_file(path)?;
        }
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a file that is not a socket is in the way",
            ))
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    let listener = UnixListener::bind(path)?;
    let made = set_owner(path, socket.owner.as_deref(), socket.group.as_deref()).and_then(|()| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(socket.mode))
    });
    if let Err(error) = made {
        let _ = std::fs::remove_file(path);
        return Err(error);
    }
    Ok(listener)
}

/// Gives `path` to `owner` and `group` (names or numbers); `None` leaves each as it is.
fn set_owner(path: &Path, owner: Option<&str>, group: Option<&str>) -> io::Result<()> {
    if owner.is_none() && group.is_none() {
        return Ok(());
    }
    let uid = owner.map(user_id).transpose()?;
    let gid = group.map(group_id).transpose()?;
    std::os::unix::fs::chown(path, uid, gid)
}

fn user_id(name: &str) -> io::Result<u32> {
    if let Ok(number) = name.parse() {
        return Ok(number);
    }
    let c_name = CString::new(name).map_err(|_| unknown("user", name))?;
    // SAFETY: getpwnam reads a NUL-terminated name and returns a pointer into static storage or
    // null; the uid is copied out at once, on this one thread (start-up).
    let entry = unsafe { libc::getpwnam(c_name.as_ptr()) };
    if entry.is_null() {
        return Err(unknown("user", name));
    }
    // SAFETY: not null, so a valid passwd entry.
    Ok(unsafe { (*entry).pw_uid })
}

fn group_id(name: &str) -> io::Result<u32> {
    if let Ok(number) = name.parse() {
        return Ok(number);
    }
    let c_name = CString::new(name).map_err(|_| unknown("group", name))?;
    // SAFETY: as for getpwnam.
    let entry = unsafe { libc::getgrnam(c_name.as_ptr()) };
    if entry.is_null() {
        return Err(unknown("group", name));
    }
    // SAFETY: not null, so a valid group entry.
    Ok(unsafe { (*entry).gr_gid })
}

fn unknown(kind: &str, name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("no {kind} named {name:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A directory of this test's own, removed with everything in it when dropped.
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new(test: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!(
                "herdsman-admin-socket-{}-{test}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        fn socket_at(&self, name: &str, mode: u32) -> AdminSocket {
            AdminSocket {
                path: self.0.join(name),
                mode,
                owner: None,
                group: None,
            }
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_socket_gets_its_mode_and_a_stale_one_is_replaced() {
        let scratch = Scratch::new("mode");
        let socket = scratch.socket_at("mode.sock", 0o600);
        let first = listen(&socket).unwrap();
        let meta = std::fs::metadata(&socket.path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        // Still served: not replaced.
        let error = listen(&socket).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::AddrInUse);
        // Its process gone (the listener dropped, the file left): replaced.
        drop(first);
        let again = listen(&AdminSocket {
            mode: 0o660,
            ..socket.clone()
        })
        .unwrap();
        let meta = std::fs::metadata(&socket.path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o660);
        drop(again);
        std::fs::remove_file(&socket.path).unwrap();
    }

    #[test]
    fn another_file_in_the_way_and_unknown_owners_are_refused() {
        let scratch = Scratch::new("in-the-way");
        let socket = scratch.socket_at("file.sock", 0o600);
        std::fs::write(&socket.path, b"not a socket").unwrap();
        assert_eq!(
            listen(&socket).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        std::fs::remove_file(&socket.path).unwrap();
        let owned = AdminSocket {
            owner: Some("no-such-user-herdsman".into()),
            ..scratch.socket_at("owner.sock", 0o600)
        };
        let error = listen(&owned).unwrap_err();
        assert!(error.to_string().contains("no user named"), "{error}");
        assert!(
            !owned.path.exists(),
            "a socket that failed its setup was left behind"
        );
    }
}
