//! The suite's kit: frames (`frame`), HPACK and its Huffman code (`hpack`, `huffman`), the raw
//! client and what a case expects of herdsman (`conn`), herdsman and its server (`target`), and
//! `cases!`, which runs each case over both transports.

pub mod conn;
pub mod frame;
pub mod hpack;
pub mod huffman;
pub mod target;

pub use conn::Conn;
pub use frame::*;
pub use hpack::{Block, Literal};
pub use target::{Target, Transport, GREETING};

/// Each case once over h2c and once over TLS (ALPN `h2`): `fn name(transport) { body }`
/// becomes a module `name` with the tests `h2c` and `tls`, so `cargo test --test h2_conformance
/// s6_5` runs §6.5's cases over both. An `#[ignore = "why"]` line after the docs ignores both.
macro_rules! cases {
    ($(
        $(#[doc = $doc:literal])*
        $(#[ignore = $why:literal])?
        fn $name:ident($transport:ident) $body:block
    )*) => {$(
        $(#[doc = $doc])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn case($transport: Transport) $body

            #[test]
            $(#[ignore = $why])?
            fn h2c() {
                case(Transport::H2c)
            }

            #[test]
            $(#[ignore = $why])?
            fn tls() {
                case(Transport::Tls)
            }
        }
    )*};
}

pub(crate) use cases;
