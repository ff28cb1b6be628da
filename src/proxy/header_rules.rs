//! The exchange's side of header rules and request ids (`rules::headers`,
//! `rules::request_id`): what of a request they need is kept while its head is at hand, the
//! request's head to a server is edited once written, and an answer's head to the client once
//! written (proxied or from the cache). Reached only when the snapshot has rules or request ids
//! (`Snapshot::edits_heads`): other configs pay one test per side.

use super::downstream::Downstream;
use super::failure::Failure;
use super::Client;
use crate::config::headers::HeaderRules;
use crate::http1::Request;
use crate::rules::headers::{edit_head, OwnField, RequestText};
use crate::rules::route_answer::path_and_query;
use crate::rules::template::Values;
use crate::upstream::Snapshot;

/// Largest answer head the rules may make (a server's is held to the same, `respond.rs`).
const MAX_ANSWER_HEAD: usize = 64 * 1024;

/// While `request`'s head is at hand: keeps its host, target and method where the rules of
/// `route` render them (after the head is consumed, or in its answer).
#[cold]
#[inline(never)]
pub(super) fn keep_request_text(
    text: &mut RequestText,
    snapshot: &Snapshot,
    route: Option<usize>,
    request: &Request<'_, '_>,
) {
    let reads = snapshot
        .header_rules(route)
        .is_some_and(|rules| rules.request.reads_request_head || rules.response.reads_request_head);
    match reads {
        true => text.keep(
            request.host.unwrap_or_default(),
            request.target.as_bytes(),
            request.method_text.as_bytes(),
        ),
        false => text.forget(),
    }
}

/// The request's head to the server, in `client.out`, after the rules of `route` (and with
/// its id, where requests get ids). A head they make too large is the client's 431, as one
/// herdsman's own fields make too large is.
#[cold]
#[inline(never)]
pub(super) fn edit_request<D: Downstream>(
    client: &mut Client<D>,
    snapshot: &Snapshot,
    route: Option<usize>,
) -> Result<(), Failure> {
    let rules = snapshot.header_rules(route).map(|rules| &rules.request);
    let own = snapshot.request_id.as_ref().map(|settings| OwnField {
        name: &settings.header,
        value: client.request_id.as_bytes(),
    });
    if rules.is_none_or(|rules| rules.is_empty()) && own.is_none() {
        return Ok(());
    }
    // Taken out while the values borrow the rest of the client (a move, not a copy).
    let mut out = std::mem::take(&mut client.out);
    let values = values(client, route, b"");
    let max_head = snapshot.limits.max_header_bytes;
    let edited = edit_head(&mut out, 0, rules, own, &values, max_head);
    client.out = out;
    edited.map_err(Failure::from_request_head)
}

/// The answer's head to the client, in `client.out` (nothing after it yet), after the rules
/// of `route`, and with the request's id where `[request_id] respond` asks. `server`: the one
/// that answered; `None` for an answer from the cache.
#[cold]
#[inline(never)]
pub(super) fn edit_answer<D: Downstream>(
    client: &mut Client<D>,
    snapshot: &Snapshot,
    route: Option<usize>,
    server: Option<&str>,
) -> Result<(), Failure> {
    let rules = snapshot
        .header_rules(route)
        .map(|rules: &HeaderRules| &rules.response);
    let own = snapshot
        .request_id
        .as_ref()
        .filter(|settings| settings.respond && !client.request_id.is_empty())
        .map(|settings| OwnField {
            name: &settings.header,
            value: client.request_id.as_bytes(),
        });
    if rules.is_none_or(|rules| rules.is_empty()) && own.is_none() {
        return Ok(());
    }
    let mut out = std::mem::take(&mut client.out);
    let values = values(client, route, server.unwrap_or_default().as_bytes());
    let edited = edit_head(&mut out, 0, rules, own, &values, MAX_ANSWER_HEAD);
    client.out = out;
    edited.map_err(|_| Failure::BadResponse("response head too large once header rules applied"))
}

/// herdsman's own answer in `client.out` (an error, a redirect, a 429; its body may follow its
/// head): the request's id added to its head where `[request_id] respond` asks, so that a client
/// can name the request that failed. Header rules are not applied to herdsman's own answers.
#[cold]
#[inline(never)]
pub(super) fn id_on_own_answer<D: Downstream>(client: &mut Client<D>, snapshot: &Snapshot) {
    let asked = snapshot
        .request_id
        .as_ref()
        .filter(|settings| settings.respond);
    let (Some(settings), false) = (asked, client.request_id.is_empty()) else {
        return;
    };
    let out = &mut client.out;
    let Some(blank) = out.windows(4).position(|four| four == b"\r\n\r\n") else {
        return;
    };
    // Written in place before the blank line: no line built apart.
    let (name, id) = (settings.header.as_bytes(), client.request_id.as_bytes());
    let at = blank + 2;
    let length = name.len() + 2 + id.len() + 2;
    let end = out.len();
    out.resize(end + length, 0);
    out.copy_within(at..end, at + length);
    let line = &mut out[at..at + length];
    line[..name.len()].copy_from_slice(name);
    line[name.len()..name.len() + 2].copy_from_slice(b": ");
    line[name.len() + 2..length - 2].copy_from_slice(id);
    line[length - 2..].copy_from_slice(b"\r\n");
}

/// What the rules' variables stand for on `client`'s current request.
fn values<'c, D: Downstream>(
    client: &'c Client<D>,
    route: Option<usize>,
    server: &'c [u8],
) -> Values<'c> {
    let tls = client.downstream.tls();
    let target = client.request_text.target();
    let (path, query) = path_and_query(target);
    Values {
        client: client.address_text.as_bytes(),
        client_port: client.peer().port(),
        request_id: client.request_id.as_bytes(),
        host: client.request_text.host(),
        target,
        path,
        query,
        path_rest: b"",
        method: client.request_text.method(),
        secure: tls.is_some(),
        route,
        server,
        tls_version: tls.map_or("", |tls| tls.version),
        tls_cipher: tls.map_or("", |tls| tls.cipher),
        sni: tls
            .and_then(|tls| tls.server_name.as_deref())
            .unwrap_or_default(),
    }
}
