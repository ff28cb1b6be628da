//! Linux calls on connected sockets that neither tokio nor socket2 offer.

use std::os::fd::RawFd;

/// Bytes sent once (retransmissions aside) and bytes acknowledged on the TCP socket `fd`, from
/// TCP_INFO.
#[cfg(target_os = "linux")]
pub fn tcp_bytes(fd: RawFd) -> Option<(u64, u64)> {
    /// The start of Linux's `struct tcp_info` up to `tcpi_bytes_retrans` (libc's copy of the
    /// struct ends before the byte counts).
    #[repr(C)]
    #[derive(Default)]
    struct TcpInfo {
        head: [u8; 8],
        words: [u32; 24],
        pacing_rate: u64,
        max_pacing_rate: u64,
        bytes_acked: u64,
        bytes_received: u64,
        segs: [u32; 6],
        delivery_rate: u64,
        busy_time: u64,
        rwnd_limited: u64,
        sndbuf_limited: u64,
        delivered: [u32; 2],
        bytes_sent: u64,
        bytes_retrans: u64,
    }
    let mut info = TcpInfo::default();
    let mut length = std::mem::size_of::<TcpInfo>() as libc::socklen_t;
    // SAFETY: `info` is a plain struct of integers with room for `length` bytes, which the
    // kernel fills (at most that many) and reports back.
    let status = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            std::ptr::addr_of_mut!(info).cast(),
            &mut length,
        )
    };
    if status != 0 || (length as usize) < std::mem::size_of::<TcpInfo>() {
        return None;
    }
    let sent = info.bytes_sent.checked_sub(info.bytes_retrans)?;
    Some((sent, info.bytes_acked))
}

#[cfg(not(target_os = "linux"))]
pub fn tcp_bytes(_fd: RawFd) -> Option<(u64, u64)> {
    None
}
