//! The bytes a connection runs on: the stream (an enum of transports: plain TCP, TLS, or a stream
//! multiplexed over a shared connection), the buffers that read from it and the per-worker free
//! lists behind them, a server connection that resets when an exchange abandons it, writes
//! bounded by a deadline, the request path's clock, the worker's timer wheel for the waits of the request path, listening
//! sockets, and the spools and temporary files that hold buffered bodies.
//! Of the data path, only this module names a socket type.

mod buffer;
mod client_tcp;
pub mod clock;
pub mod deadline;
mod listen;
mod multiplexed;
pub mod recycle;
mod server_stream;
mod splice;
mod spool;
mod stream;
mod sys;
mod temp_file;
mod tls;
mod tls_state;
mod write;

pub use buffer::{read_appending, Buffer, BUFFER_INITIAL};
pub use clock::Moment;
pub use listen::{ListenOptions, ListenSocket};
pub use multiplexed::Multiplexed;
pub use server_stream::{ConnectionsInUse, InUse, ServerStream};
pub use splice::{can_splice, Pipe};
pub use spool::{Spool, SpoolLimits};
pub use stream::{Detached, ReadHalf, Stream, WriteHalf};
pub use sys::{epoll_exclusive_supported, make_epoll_exclusive};
pub use temp_file::{prepare_temp_dir, TempFile};
pub use tls::{ClientCertificate, HandshakeFailure, TlsFacts};
pub use write::{write_all_by, write_two_by};
