//! The operating-system specific socket calls, with honest fallbacks elsewhere.

use std::io;

use socket2::Socket;

/// SO_REUSEPORT: several sockets on one address, connections spread over them by the kernel.
#[cfg(unix)]
pub fn set_reuse_port(socket: &Socket) -> io::Result<()> {
    socket.set_reuse_port(true)
}

#[cfg(not(unix))]
pub fn set_reuse_port(_socket: &Socket) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "intake = \"reuseport\" needs SO_REUSEPORT, which this platform lacks",
    ))
}
