//! The operator's rules on a request, besides routing by host and path: conditions a route's
//! requests must meet (`when`). The exchange (`proxy/`) calls in; what the rules are is checked
//! and compiled in `config/` (`config::condition`), once per config.

pub mod condition;
