//! A route's `when`, as checked and compiled at load: what a request must also show, besides its
//! host and path, for the route to take it. Regexes are compiled and address lists merged here,
//! once per config; `rules::condition` evaluates them against a request.

use std::fmt;

use super::cidr::AddressSet;

/// One condition (`when = { … }`), or several combined.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// The request's method is one of these (as sent: uppercase, compared exactly).
    Method(Box<[Box<str>]>),
    /// A header field (name lowercase; the first field of that name is tested).
    Header(Box<str>, FieldTest),
    /// A query parameter by its name as sent (not percent-decoded), the first of that name.
    Query(Box<str>, FieldTest),
    /// A cookie by its name (case-sensitive), the first of that name.
    Cookie(Box<str>, FieldTest),
    /// The client's address is in one of the networks.
    Client(AddressSet),
    All(Box<[Condition]>),
    Any(Box<[Condition]>),
    Not(Box<Condition>),
}

/// What is asked of a header, query parameter or cookie.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldTest {
    /// `present = true`: it is there (with any value); `present = false`: it is not.
    Present(bool),
    /// Its value is exactly this.
    Equals(Box<[u8]>),
    /// Its value starts with this.
    Prefix(Box<[u8]>),
    /// The regex finds a match in its value (anchor with `^…$` for all of it).
    Matches(Pattern),
}

/// A regex compiled at load, on bytes (a value need not be UTF-8). Two are equal when their
/// sources are: what tells a reload whether the routes changed.
#[derive(Clone)]
pub struct Pattern(pub regex::bytes::Regex);

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pattern({:?})", self.0.as_str())
    }
}
