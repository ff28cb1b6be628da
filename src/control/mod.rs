//! Control of a running herdsman from outside: the pools' registry and reload, signals, the
//! admin API (`admin`, with its pool routes in `admin_pools`, whom it answers in `admin_guard`
//! and its UNIX socket in `admin_socket`), its command-line clients `ctl`
//! and `top` (a live view of workers and servers), the watch on the kernel's listen queue, the
//! binary upgrade (`upgrade`), the drain of a process that stops or handed over (`drain`), and
//! what systemd is told about it all (`notify`).

pub mod ctl;
pub mod top;
