//! The command-line clients of a running herdsman, built into the binary only (the library is the
//! proxy and holds none of this): `ctl` changes and shows the pools, `top` watches workers and
//! servers live. Both reach the admin API from outside, as any client would; they use the
//! library for its config file and its names, never for the running proxy.

pub mod ctl;
pub mod top;
