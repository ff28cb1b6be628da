//! The process's life, seen from outside: the signals it serves (`signals`), what systemd is told
//! (`notify`), the binary upgrade that hands the listening sockets to a new process (`upgrade`),
//! the drain of a process that stops or handed over (`drain`), the kernel's listen-queue
//! losses said out loud (`kernel_watch`), certificate files watched for changes
//! (`certificate_watch`), and its own log's lines, each naming the process (`log_lines`).
//!
//! Nothing here knows the admin API: it reaches these through `notify` (a reload announced),
//! `drain::Predecessors` (the old processes it reports) and `kernel_watch` (run on its thread).

pub mod certificate_watch;
pub mod descriptors;
pub mod drain;
pub mod kernel_watch;
pub mod log_lines;
pub mod notify;
pub mod signals;
pub mod upgrade;
