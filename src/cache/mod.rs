//! The cache tier: responses kept and served again without a server, as a shared cache
//! (RFC 9111, RFC 5861). `control.rs` reads `Cache-Control`; `disk.rs` keeps the entries on disk
//! as well (`[cache.disk]`), checked by a checksum on every read; `fields.rs` the other fields a
//! cache reads of a request and a response; `freshness.rs` decides what may be stored, for how
//! long, and what a stored response may answer; `head.rs` is the head an object keeps and the
//! head a hit sends; `key.rs` what a request is stored and found under; `flight.rs` makes one
//! fetch of a herd of misses; `gather.rs` takes a stored answer's body as it comes (out of its
//! chunked framing); `object.rs` is one stored response; `range.rs` the part of one a `Range`
//! asks for; `store.rs` is the process's store, shared by every worker, within its memory
//! budget; `index.rs` finds its entries by key prefix, by tag and by pool, for purges and
//! per-pool figures; `validate.rs` asks a server whether a stale object is current and
//! refreshes it from a 304. It sits beside the exchange (`proxy/`),
//! which imports it; it imports http1's heads and the transport's clock below it.

pub mod control;
pub mod disk;
pub mod fields;
pub mod flight;
pub mod freshness;
pub mod gather;
pub mod head;
pub mod index;
pub mod key;
pub mod object;
pub mod range;
pub mod shared;
pub mod store;
pub mod validate;

pub use control::{RequestControl, ResponseControl};
pub use freshness::{Freshness, FreshnessRules, NotStored, ResponseFacts, Verdict};
pub use object::Object;
pub use store::{Entry, Store};
