//! Which protocols a listener lets a request switch its connection to through herdsman (RFC 9110
//! §7.8): the names its `upgrade` lists, and never HTTP/2. The request side — which offers of a
//! request go on — is `http1::upgrade`.
//!
//! After a 101 herdsman only copies bytes, so whatever runs inside the tunnel is out of its
//! sight. For a WebSocket that is the point; for HTTP/2 cleartext (`Upgrade: h2c`) it is "h2c
//! smuggling": every request on that connection would reach the server without routing, access
//! logs, X-Forwarded-For, limits or access rules.

use super::token::is_token_byte;

/// Protocol names that are never passed on, whatever a listener lists: HTTP/2 in cleartext
/// (`h2c`, RFC 7540 §3.2), over TLS (`h2`, which RFC 7540 §3.3 says must not be upgraded to),
/// and `HTTP/2.0`-style version switches (name `HTTP`). Each would carry HTTP requests past
/// herdsman. Compared case-insensitively.
pub const NEVER_TUNNELLED: [&str; 3] = ["h2c", "h2", "http"];

/// The protocols a listener lets a request upgrade to, as protocol names (RFC 9110 §7.8:
/// `protocol-name ["/" protocol-version]`), lowercased. A request's offer matches by its name
/// alone, case-insensitively: `websocket` allows `WebSocket` and `websocket/13`. Versions are
/// left to the server to negotiate, as they are for a protocol offered without one; the name is
/// what says which protocol will run in the tunnel. Never holds a [`NEVER_TUNNELLED`] name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpgradeProtocols {
    names: Vec<String>,
}

/// Why a name cannot be in a listener's `upgrade` list, if it cannot.
pub fn refusal(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty; write a protocol name, e.g. \"websocket\"")
    } else if name.contains('/') {
        Some("write the protocol name without a version, e.g. \"websocket\"")
    } else if !name.bytes().all(is_token_byte) {
        Some("not a protocol name (letters, digits and !#$%&'*+-.^_`|~), e.g. \"websocket\"")
    } else if NEVER_TUNNELLED
        .iter()
        .any(|never| never.eq_ignore_ascii_case(name))
    {
        Some(
            "HTTP/2 is never tunnelled: requests inside it would bypass routing, access logs, \
             X-Forwarded-For and limits (h2c smuggling); remove it",
        )
    } else {
        None
    }
}

impl UpgradeProtocols {
    /// Allows no upgrade at all.
    pub const fn none() -> UpgradeProtocols {
        UpgradeProtocols { names: Vec::new() }
    }

    /// Allows the named protocols. Names [`refusal`] refuses are left out (config checking
    /// reports them first).
    pub fn new<'n>(names: impl IntoIterator<Item = &'n str>) -> UpgradeProtocols {
        let names = names
            .into_iter()
            .filter(|name| refusal(name).is_none())
            .map(str::to_ascii_lowercase)
            .collect();
        UpgradeProtocols { names }
    }

    /// The allowed names, lowercased, in the order given.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// Whether the offered protocol (`name` or `name/version`) may go on.
    pub fn allows(&self, offer: &[u8]) -> bool {
        let name = trim_spaces(offer.split(|&b| b == b'/').next().unwrap_or_default());
        let allowed = |allowed: &str| name.eq_ignore_ascii_case(allowed.as_bytes());
        // `new` keeps never-tunnelled names out; checked again so no path around it exists.
        self.names.iter().any(|n| allowed(n)) && !NEVER_TUNNELLED.iter().any(|n| allowed(n))
    }
}

/// Trims spaces and tabs at both ends (optional whitespace around a protocol's name).
fn trim_spaces(mut bytes: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = bytes {
        bytes = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = bytes {
        bytes = rest;
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offers_match_by_name_case_insensitively_and_http2_never() {
        let websocket = UpgradeProtocols::new(["WebSocket"]);
        assert_eq!(websocket.names().collect::<Vec<_>>(), ["websocket"]);
        assert!(websocket.allows(b"websocket"));
        assert!(websocket.allows(b"WEBSOCKET/13"));
        assert!(!websocket.allows(b"websockets"));
        assert!(!websocket.allows(b"h2c"));
        assert!(!UpgradeProtocols::none().allows(b"websocket"));
        // Even a list built around the config check cannot let HTTP/2 through.
        let forced = UpgradeProtocols {
            names: vec!["h2c".into(), "http".into()],
        };
        assert!(!forced.allows(b"h2c") && !forced.allows(b"H2C") && !forced.allows(b"HTTP/2.0"));
    }

    #[test]
    fn names_that_cannot_be_listed() {
        assert_eq!(refusal("websocket"), None);
        assert_eq!(refusal("my-proto.v2"), None);
        for refused in ["", "h2c", "H2C", "h2", "HTTP", "websocket/13", "a b"] {
            assert!(refusal(refused).is_some(), "{refused:?}");
        }
        assert_eq!(
            UpgradeProtocols::new(["h2c", "websocket"]),
            UpgradeProtocols::new(["websocket"])
        );
    }
}
