//! Which of a request's Upgrade offers go on to the server: those its listener allows
//! (`config::UpgradeProtocols`), and then a 101 may answer it.

use super::head::Request;
use super::tokens::list_elements;
use crate::config::UpgradeProtocols;

/// Whether `request` asks to upgrade to a protocol allowed here: then, and only then, its
/// Upgrade goes on (with only those protocols, [`write_allowed`]) and a
/// 101 may answer it.
pub fn forwards(allowed: &UpgradeProtocols, request: &Request<'_, '_>) -> bool {
    request.upgrade && allowed_offers(allowed, request).next().is_some()
}

/// Appends the protocols `request` offers that are allowed here, in the order offered,
/// comma-separated.
pub fn write_allowed(allowed: &UpgradeProtocols, request: &Request<'_, '_>, out: &mut Vec<u8>) {
    for (index, offer) in allowed_offers(allowed, request).enumerate() {
        if index > 0 {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(offer);
    }
}

fn allowed_offers<'r>(
    allowed: &'r UpgradeProtocols,
    request: &'r Request<'_, '_>,
) -> impl Iterator<Item = &'r [u8]> + 'r {
    request
        .headers
        .iter()
        .filter(|field| field.name.eq_ignore_ascii_case("upgrade"))
        .flat_map(|field| list_elements(field.value))
        .filter(|offer| allowed.allows(offer))
}
