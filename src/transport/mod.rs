//! The bytes a connection runs on: the stream (an enum of transports, plain TCP today), the
//! buffers that read from it and the per-worker free lists behind them, a server connection that
//! resets when an exchange abandons it, writes bounded by a deadline, and listening sockets.
//! Of the data path, only this module names a socket type.

mod buffer;
mod listen;
pub mod recycle;
mod server_stream;
mod stream;
mod sys;
mod write;

pub use buffer::{Buffer, BUFFER_INITIAL};
pub use listen::ListenSocket;
pub use server_stream::ServerStream;
pub use stream::{Detached, ReadHalf, Stream, WriteHalf};
pub use sys::{epoll_exclusive_supported, make_epoll_exclusive};
pub use write::write_all_by;
