//! A listener's `[listener.tls]`: its certificates loaded now, so that a chain that does not
//! parse, a key that is not its certificate's or a file that cannot be read is refused with the
//! file and the reason — by `herdsman check`, at start, and on reload (where the certificates
//! already serving go on serving) — and the version and unknown-name settings.

use std::path::Path;
use std::sync::Arc;

use toml::Spanned;

use super::primitives::quoted;
use super::words::{CLIENT_AUTH, TLS_VERSIONS, UNKNOWN_NAMES};
use super::{Checker, Table};
use crate::config::certificates::{Certificate, CertificateError, CertificateStore};
use crate::config::raw::{RawCertificate, RawListenerTls, RawTls};
use crate::config::ticket_keys::{read_key_file, TicketKeySource};
use crate::config::tls::{provider, ClientCertificates, ListenerTls};

impl Checker {
    /// `[listener.tls]` of the listener `table` names; `None` when any problem was found.
    pub(super) fn listener_tls(
        &mut self,
        table: &Table,
        raw: &Spanned<RawListenerTls>,
        http2: bool,
    ) -> Option<ListenerTls> {
        let tls = Table {
            path: table.key("tls"),
            line: self.lines.line_of(raw.span().start),
        };
        let raw = raw.get_ref();
        let unknown = self.word(&tls.key("unknown_name"), &raw.unknown_name, &UNKNOWN_NAMES);
        let min_version = self.word(&tls.key("min_version"), &raw.min_version, &TLS_VERSIONS);
        let hsts = self.hsts(&tls.key("hsts"), &raw.hsts);
        let clients = self.client_certificates(&tls, raw);
        let acme = raw.acme.as_ref().map(|acme| self.acme(&tls, acme));
        let key = tls.key("certificates");
        let listed = raw.certificates.as_ref().map_or(&[][..], |c| c.get_ref());
        // A listener with ACME may have no certificate of its own: ACME's is its default.
        if listed.is_empty() && acme.is_none() {
            let line = raw
                .certificates
                .as_ref()
                .map_or(tls.line, |c| self.lines.line_of(c.span().start));
            self.report(
                &key,
                Some(line),
                &format!(
                    r#"{key}: none; a TLS listener needs at least one (or acme), e.g. certificates = [{{ chain = "/etc/herdsman/example.com.pem", key = "/etc/herdsman/example.com.key" }}]"#
                ),
            );
            return None;
        }
        let mut loaded = Vec::with_capacity(listed.len());
        for (index, raw) in listed.iter().enumerate() {
            let entry = Table {
                path: format!("{key}[{index}]"),
                line: self.lines.line_of(raw.span().start),
            };
            if let Some(certificate) = self.certificate(&entry, raw.get_ref()) {
                loaded.push(certificate);
            }
        }
        if loaded.len() < listed.len() {
            return None;
        }
        let store = CertificateStore::new(loaded, unknown);
        let clients = clients.ok()?;
        let acme = match acme {
            Some(checked) => Some(checked.ok()?),
            None => None,
        };
        Some(ListenerTls::new(
            Arc::new(store),
            min_version,
            hsts,
            clients,
            acme,
            http2,
        ))
    }

    /// `client_ca` and `client_auth`: `Ok(None)` when neither is written; `Err` when either was
    /// refused.
    fn client_certificates(
        &mut self,
        tls: &Table,
        raw: &RawListenerTls,
    ) -> Result<Option<ClientCertificates>, ()> {
        let auth = self.word(&tls.key("client_auth"), &raw.client_auth, &CLIENT_AUTH);
        let Some(ca) = &raw.client_ca else {
            if let Some(auth) = &raw.client_auth {
                let why = r#"needs client_ca, the CA certificates (PEM) a client's must chain to, e.g. client_ca = "/etc/herdsman/clients-ca.pem""#;
                self.reject(
                    &tls.key("client_auth"),
                    auth.span(),
                    &quoted(auth.get_ref()),
                    why,
                );
                return Err(());
            }
            return Ok(None);
        };
        let key = tls.key("client_ca");
        let path = self.absolute_path(&key, ca, "clients-ca.pem").ok_or(())?;
        match ClientCertificates::load(path, auth) {
            Ok(clients) => Ok(Some(clients)),
            Err(why) => {
                self.reject(&key, ca.span(), &quoted(ca.get_ref()), why);
                Err(())
            }
        }
    }

    /// `hsts`: the value of the `Strict-Transport-Security` field, as RFC 6797 has it — a
    /// `max-age=SECONDS` first, then `; includeSubDomains` or `; preload` if wanted — in
    /// visible ASCII.
    fn hsts<'a>(&mut self, key: &str, raw: &'a Option<Spanned<String>>) -> Option<&'a str> {
        let raw = raw.as_ref()?;
        let value = raw.get_ref().as_str();
        let seconds = value
            .strip_prefix("max-age=")
            .map(|rest| rest.split(';').next().unwrap_or("").trim());
        let digits =
            seconds.is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
        let visible = value.bytes().all(|b| b == b' ' || b.is_ascii_graphic());
        if digits && visible {
            return Some(value);
        }
        let why = r#"not a Strict-Transport-Security value; write e.g. "max-age=31536000; includeSubDomains""#;
        self.reject(key, raw.span(), &quoted(value), why);
        None
    }

    /// One certificate's `chain` and `key`, loaded and checked to match.
    pub(super) fn certificate(
        &mut self,
        entry: &Table,
        raw: &RawCertificate,
    ) -> Option<Certificate> {
        let chain = self.pem_path(entry, "chain", &raw.chain, "example.com.pem");
        let key = self.pem_path(entry, "key", &raw.key, "example.com.key");
        let (chain, key) = (chain?, key?);
        let (chain_path, key_path) = (Path::new(chain.get_ref()), Path::new(key.get_ref()));
        match Certificate::load(chain_path, key_path, &provider()) {
            Ok(certificate) => Some(certificate),
            Err(error) => {
                // The file at fault, and the key that names it.
                let (field, raw) = match &error {
                    CertificateError::File { path, .. } if path == key_path => ("key", key),
                    _ => ("chain", chain),
                };
                let reason = match &error {
                    CertificateError::File { reason, .. } => reason.clone(),
                    CertificateError::Mismatch { .. } => error.to_string(),
                };
                self.reject(
                    &entry.key(field),
                    raw.span(),
                    &quoted(raw.get_ref()),
                    reason,
                );
                None
            }
        }
    }

    /// `[tls] ticket_key_file`: one or more 48-byte keys in a file, read now.
    pub(super) fn ticket_keys(&mut self, raw: &RawTls) -> TicketKeySource {
        let Some(raw) = &raw.ticket_key_file else {
            return TicketKeySource::Generated;
        };
        let key = "tls.ticket_key_file";
        let Some(path) = self.absolute_path(key, raw, "ticket.key") else {
            return TicketKeySource::Generated;
        };
        match read_key_file(path) {
            Ok(keys) => TicketKeySource::File {
                path: path.to_path_buf(),
                keys,
            },
            Err(why) => {
                self.reject(key, raw.span(), &quoted(raw.get_ref()), why);
                TicketKeySource::Generated
            }
        }
    }

    /// A certificate's `chain` or `key`: present, and an absolute path.
    fn pem_path<'a>(
        &mut self,
        entry: &Table,
        field: &str,
        raw: &'a Option<Spanned<String>>,
        example: &str,
    ) -> Option<&'a Spanned<String>> {
        let key = entry.key(field);
        let Some(raw) = raw else {
            self.report(
                &key,
                Some(entry.line),
                &format!(r#"{key}: missing; write the file's absolute path, e.g. {field} = "/etc/herdsman/{example}""#),
            );
            return None;
        };
        self.absolute_path(&key, raw, example)?;
        Some(raw)
    }

    /// A file named in the config: an absolute path (a relative one would depend on the
    /// directory herdsman was started in, and a reload could read another file); refused with
    /// an example (`/etc/herdsman/{example}`) when not.
    pub(super) fn absolute_path<'a>(
        &mut self,
        key: &str,
        raw: &'a Spanned<String>,
        example: &str,
    ) -> Option<&'a Path> {
        let path = Path::new(raw.get_ref());
        if path.is_absolute() {
            return Some(path);
        }
        let why = format!(r#"not an absolute path; write e.g. "/etc/herdsman/{example}""#);
        self.reject(key, raw.span(), &quoted(raw.get_ref()), why);
        None
    }
}

#[cfg(test)]
mod tests {
    use crate::config::fixtures::certificate_files;
    use crate::config::fixtures::MINIMAL;
    use crate::config::load::from_toml;
    use crate::config::ticket_keys::TicketKeySource;
    use crate::config::tls::TlsVersion;
    use crate::config::ConfigProblem;

    /// `MINIMAL` with a `[listener.tls]` table holding `keys` after its listener.
    fn with_tls(keys: &str) -> String {
        let end_of_listener = "pool = \"app\"\n\n[[pool]]";
        MINIMAL.replace(
            end_of_listener,
            &format!("pool = \"app\"\n[listener.tls]\n{keys}\n\n[[pool]]"),
        )
    }

    fn problems(text: &str) -> Vec<ConfigProblem> {
        match from_toml(text, "t.toml") {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(error) => error.problems,
        }
    }

    #[test]
    fn a_listener_with_certificates_serves_them_on_the_chosen_versions() {
        let dir = certificate_files("ok", &["example.test", "*.example.test"]);
        let text = with_tls(&format!(
            "certificates = [{{ chain = \"{0}/chain.pem\", key = \"{0}/key.pem\" }}]\nmin_version = \"1.3\"\nunknown_name = \"refuse\"",
            dir.display()
        ));
        let config = from_toml(&text, "t.toml").unwrap();
        let tls = config.listeners[0].tls.as_ref().expect("a TLS listener");
        assert_eq!(tls.min_version, TlsVersion::Tls13);
        let names = &tls.certificates.certificates()[0].names;
        assert_eq!(names, &["example.test", "*.example.test"]);
        assert!(tls.certificates.select(Some("a.example.test")).is_some());
        assert!(tls.certificates.select(Some("other.test")).is_none());
        // HTTP/2 unless told otherwise: ALPN offers h2 first.
        assert_eq!(
            tls.server_config.alpn_protocols,
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        // The same files read again make an equal config (a reload that changes nothing).
        assert_eq!(config, from_toml(&text, "t.toml").unwrap());
        // With `http2 = false`, ALPN offers HTTP/1.1 alone.
        let http1 = text.replacen("[listener.tls]", "http2 = false\n[listener.tls]", 1);
        let config = from_toml(&http1, "t.toml").unwrap();
        let tls = config.listeners[0].tls.as_ref().expect("a TLS listener");
        assert_eq!(tls.server_config.alpn_protocols, [b"http/1.1".to_vec()]);
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused_naming_both_files_and_the_line() {
        let one = certificate_files("one", &["one.test"]);
        let two = certificate_files("two", &["two.test"]);
        let text = with_tls(&format!(
            "certificates = [\n  {{ chain = \"{}/chain.pem\", key = \"{}/key.pem\" }},\n]",
            one.display(),
            two.display()
        ));
        let found = problems(&text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].key, "listener[0].tls.certificates[0].chain");
        assert_eq!(found[0].line, Some(8));
        assert!(
            found[0]
                .message
                .contains("the key does not match the certificate")
                && found[0].message.contains("one")
                && found[0].message.contains("two"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn missing_unreadable_relative_and_empty_certificates_are_each_named() {
        let dir = certificate_files("bad", &["bad.test"]);
        std::fs::write(dir.join("garbage.pem"), "not pem at all\n").unwrap();
        let text = with_tls(&format!(
            "certificates = [\n  {{ chain = \"{0}/absent.pem\", key = \"{0}/key.pem\" }},\n  {{ chain = \"{0}/garbage.pem\", key = \"{0}/key.pem\" }},\n  {{ chain = \"chain.pem\", key = \"{0}/key.pem\" }},\n  {{ chain = \"{0}/chain.pem\" }},\n]\nmin_version = \"1.1\"",
            dir.display()
        ));
        let found = problems(&text);
        let keys: Vec<&str> = found.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "listener[0].tls.certificates[0].chain",
                "listener[0].tls.certificates[1].chain",
                "listener[0].tls.certificates[2].chain",
                "listener[0].tls.certificates[3].key",
                "listener[0].tls.min_version",
            ]
        );
        let says = |index: usize, text: &str| {
            assert!(found[index].message.contains(text), "{found:?}");
        };
        says(0, "cannot be read");
        says(1, "holds no certificate");
        says(2, "not an absolute path");
        says(3, "missing");
        says(4, "accepted: 1.2, 1.3");
        let none = problems(&with_tls("certificates = []"));
        assert_eq!(none[0].key, "listener[0].tls.certificates");
        assert!(none[0].message.contains("at least one"));
    }

    #[test]
    fn hsts_must_be_a_strict_transport_security_value() {
        let dir = certificate_files("hsts", &["h.test"]);
        let certificates = format!(
            "certificates = [{{ chain = \"{0}/chain.pem\", key = \"{0}/key.pem\" }}]",
            dir.display()
        );
        let text = with_tls(&format!(
            "{certificates}\nhsts = \"max-age=63072000; preload\""
        ));
        let config = from_toml(&text, "t.toml").unwrap();
        let tls = config.listeners[0].tls.as_ref().unwrap();
        assert_eq!(
            &*tls.hsts_line,
            b"Strict-Transport-Security: max-age=63072000; preload\r\n"
        );
        for bad in ["1 year", "max-age=", "max-age=1; é"] {
            let text = with_tls(&format!("{certificates}\nhsts = {bad:?}"));
            let found = problems(&text);
            assert_eq!(found[0].key, "listener[0].tls.hsts", "{bad}: {found:?}");
            assert!(found[0].message.contains("max-age=31536000"), "{found:?}");
        }
    }

    #[test]
    fn redirect_https_belongs_on_a_cleartext_listener() {
        let plain = MINIMAL.replace(
            "pool = \"app\"\n\n[[pool]]",
            "pool = \"app\"\nredirect_https = true\nredirect_https_port = 8443\n\n[[pool]]",
        );
        let config = from_toml(&plain, "t.toml").unwrap();
        assert_eq!(config.listeners[0].redirect_https, Some(8443));
        let dir = certificate_files("redirect", &["r.test"]);
        let on_tls = with_tls(&format!(
            "certificates = [{{ chain = \"{0}/chain.pem\", key = \"{0}/key.pem\" }}]",
            dir.display()
        ))
        .replace(
            "pool = \"app\"\n[listener.tls]",
            "pool = \"app\"\nredirect_https = true\n[listener.tls]",
        );
        let found = problems(&on_tls);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].key, "listener[0].redirect_https");
        assert!(found[0].message.contains("cleartext listener"), "{found:?}");
    }

    #[test]
    fn client_auth_needs_a_client_ca_that_loads() {
        let dir = certificate_files("client-ca", &["c.test"]);
        let certificates = format!(
            "certificates = [{{ chain = \"{0}/chain.pem\", key = \"{0}/key.pem\" }}]",
            dir.display()
        );
        // The server's own certificate serves as a CA file here: what is checked is the load.
        let good = with_tls(&format!(
            "{certificates}\nclient_ca = \"{}/chain.pem\"\nclient_auth = \"optional\"",
            dir.display()
        ));
        let config = from_toml(&good, "t.toml").unwrap();
        let clients = config.listeners[0]
            .tls
            .as_ref()
            .unwrap()
            .clients
            .as_ref()
            .unwrap();
        assert_eq!(clients.auth, crate::config::tls::ClientAuth::Optional);
        assert_eq!(clients.roots.len(), 1);
        let alone = problems(&with_tls(&format!(
            "{certificates}\nclient_auth = \"required\""
        )));
        assert_eq!(alone[0].key, "listener[0].tls.client_auth");
        assert!(alone[0].message.contains("needs client_ca"), "{alone:?}");
        let absent = problems(&with_tls(&format!(
            "{certificates}\nclient_ca = \"{}/absent.pem\"",
            dir.display()
        )));
        assert_eq!(absent[0].key, "listener[0].tls.client_ca");
        assert!(absent[0].message.contains("cannot be read"), "{absent:?}");
        let word = problems(&with_tls(&format!(
            "{certificates}\nclient_ca = \"{}/chain.pem\"\nclient_auth = \"sometimes\"",
            dir.display()
        )));
        assert!(
            word[0].message.contains("accepted: required, optional"),
            "{word:?}"
        );
    }

    #[test]
    fn a_ticket_key_file_must_hold_whole_48_byte_keys() {
        let dir =
            std::env::temp_dir().join(format!("herdsman-ticket-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (good, bad) = (dir.join("good.key"), dir.join("bad.key"));
        std::fs::write(&good, [7u8; 96]).unwrap();
        std::fs::write(&bad, [7u8; 50]).unwrap();
        let with =
            |path: &std::path::Path| format!("{MINIMAL}\n[tls]\nticket_key_file = {:?}\n", path);
        let config = from_toml(&with(&good), "t.toml").unwrap();
        match &config.ticket_keys {
            TicketKeySource::File { keys, .. } => assert_eq!(keys.len(), 2),
            other => panic!("{other:?}"),
        }
        let found = problems(&with(&bad));
        assert_eq!(found[0].key, "tls.ticket_key_file");
        assert!(found[0].message.contains("openssl rand 48"), "{found:?}");
        let relative = problems(&with(std::path::Path::new("ticket.key")));
        assert!(relative[0].message.contains("absolute"), "{relative:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
