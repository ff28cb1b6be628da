//! The operator's rules on a request, besides routing by host and path: conditions a route's
//! requests must meet (`when`), the client's address a request is served as (`[real_ip]`),
//! which the access rules test, the fields heads lose and gain (`[headers]`), request ids
//! (`[request_id]`), a route's own answer (`route_answer`: redirect, fixed response) and the
//! target its server is sent (`rewrite`); header values and a redirect's Location are rendered by
//! one renderer (`template`). The exchange (`proxy/`) calls in; what the rules are is
//! checked and compiled in `config/` (`config::condition`, `config::access`, `config::headers`,
//! `config::answers`), once per config.

pub mod client_address;
pub mod condition;
pub mod headers;
pub mod request_id;
pub mod rewrite;
pub mod route_answer;
pub mod template;
