//! Helpers that more than one experiment needs, so that no experiment imports another:
//!
//! - `admin_api` — GET on herdsman's admin API (a whole 200 with a body), and waiting until it answers
//! - `json`      — just enough JSON to read the admin API's answers
//! - `logfile`   — an access log's lines and bytes, as the file stands
//! - `periodic`  — a thread that does one thing every period until told to finish
//! - `stats`     — percentiles by nearest rank

pub mod admin_api;
pub mod json;
pub mod logfile;
pub mod periodic;
pub mod stats;
