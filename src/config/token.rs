//! RFC 9110 tokens (§5.6.2): the grammar of header field names, cookie names and protocol names,
//! which the config check and the HTTP/1 parser share.

/// A token character.
pub fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// A whole token: one or more token characters.
pub fn is_token(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(is_token_byte)
}
