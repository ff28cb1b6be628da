//! Client-address rules: `[real_ip]` (the proxies trusted to name the client) and a listener's
//! or route's `[… .access]` (allow and deny lists, how a refusal is told). Each address or network
//! is checked on its own line.

use toml::Spanned;

use super::primitives::quoted;
use super::{Checker, Table};
use crate::config::access::{Access, ClientHeader, RealIp, Refusal};
use crate::config::cidr::AddressSet;
use crate::config::raw::{RawAccess, RawRealIp};

impl Checker {
    /// `[real_ip]`, if the config has one.
    pub(super) fn real_ip(&mut self, raw: &Option<Spanned<RawRealIp>>) -> Option<RealIp> {
        let raw = raw.as_ref()?;
        let table = Table {
            path: "real_ip".to_string(),
            line: self.lines.line_of(raw.span().start),
        };
        let how = r#"list the proxies in front whose word is taken, e.g. trusted = ["10.0.0.0/8"]"#;
        let trusted = match self.required(&table, "trusted", &raw.get_ref().trusted, how) {
            Some(list) => self.addresses(&table.key("trusted"), list),
            None => AddressSet::default(),
        };
        let header = match &raw.get_ref().header {
            None => ClientHeader::XForwardedFor,
            Some(name) => match name.get_ref().to_ascii_lowercase().as_str() {
                "x-forwarded-for" => ClientHeader::XForwardedFor,
                "forwarded" => ClientHeader::Forwarded,
                _ => {
                    let why = "accepted: \"X-Forwarded-For\" (the default), \"Forwarded\"";
                    self.reject(
                        &table.key("header"),
                        name.span(),
                        &quoted(name.get_ref()),
                        why,
                    );
                    ClientHeader::XForwardedFor
                }
            },
        };
        Some(RealIp { trusted, header })
    }

    /// A listener's or route's `access` table, `table` being the listener or route.
    pub(super) fn access(&mut self, table: &Table, raw: &Spanned<RawAccess>) -> Access {
        let path = table.key("access");
        let access = raw.get_ref();
        if access.allow.is_none() && access.deny.is_none() {
            let line = self.lines.line_of(raw.span().start);
            let message = format!("{path}: neither allow nor deny; list the addresses of one");
            self.report(&path, Some(line), &message);
        }
        let allow = access
            .allow
            .as_ref()
            .map(|list| self.addresses(&format!("{path}.allow"), list));
        let deny = access
            .deny
            .as_ref()
            .map(|list| self.addresses(&format!("{path}.deny"), list))
            .unwrap_or_default();
        let refuse = match &access.refuse {
            None => Refusal::Forbidden,
            Some(word) => match word.get_ref().as_str() {
                "403" => Refusal::Forbidden,
                "close" => Refusal::Close,
                _ => {
                    let why = "accepted: \"403\" (the default), \"close\"";
                    self.reject(
                        &format!("{path}.refuse"),
                        word.span(),
                        &quoted(word.get_ref()),
                        why,
                    );
                    Refusal::Forbidden
                }
            },
        };
        Access {
            allow,
            deny,
            refuse,
        }
    }

    /// A list of addresses and networks at `key`, each bad one refused on its own line.
    pub(super) fn addresses(
        &mut self,
        key: &str,
        list: &Spanned<Vec<Spanned<String>>>,
    ) -> AddressSet {
        let entries = list.get_ref();
        for entry in entries {
            if let Err(why) = AddressSet::parse([entry.get_ref().as_str()]) {
                self.reject(key, entry.span(), &quoted(entry.get_ref()), why);
            }
        }
        AddressSet::parse(entries.iter().map(|entry| entry.get_ref().as_str())).unwrap_or_default()
    }
}
