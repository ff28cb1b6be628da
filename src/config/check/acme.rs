//! A TLS listener's `acme = { directory, contact, names, challenge, directory_ca }` and the
//! process's `[tls] acme_state_dir`: checked here, so that a certificate herdsman could never
//! obtain (a wildcard, an HTTP-01 challenge with no cleartext listener to answer it, a directory
//! CA file that does not load) is refused at `herdsman check` with its key and line rather than
//! failing at the CA hours later.

use std::path::{Path, PathBuf};

use toml::Spanned;

use super::primitives::quoted;
use super::words::ACME_CHALLENGES;
use super::{Checker, Table};
use crate::config::acme::{AcmeBoard, AcmeSettings, ChallengeKind};
use crate::config::raw::{RawAcme, RawTls};
use crate::config::tls::CaFile;

/// `[tls] acme_state_dir` when not written.
pub(in crate::config) const DEFAULT_ACME_STATE_DIR: &str = "/var/lib/herdsman/acme";

impl Checker {
    /// `acme` of the TLS table `tls`; `Err` when any of it was refused (each problem recorded).
    pub(super) fn acme(&mut self, tls: &Table, raw: &Spanned<RawAcme>) -> Result<AcmeSettings, ()> {
        let acme = Table {
            path: tls.key("acme"),
            line: self.lines.line_of(raw.span().start),
        };
        let raw = raw.get_ref();
        let problems_before = self.problems.len();
        let challenge = self.word(&acme.key("challenge"), &raw.challenge, &ACME_CHALLENGES);
        let directory = self.acme_directory(&acme, &raw.directory);
        let contact = self.acme_contact(&acme, &raw.contact);
        let names = self.acme_names(&acme, &raw.names, challenge);
        let directory_ca = self.acme_directory_ca(&acme, &raw.directory_ca);
        if challenge == ChallengeKind::Http01 && !self.has_cleartext_listener {
            if let Some(written) = &raw.challenge {
                let why = "needs a cleartext listener (no [listener.tls]) for the CA's request to port 80; add one, or use \"tls-alpn-01\", answered on this listener";
                self.reject(
                    &acme.key("challenge"),
                    written.span(),
                    &quoted(written.get_ref()),
                    why,
                );
            }
        }
        if self.problems.len() > problems_before {
            return Err(());
        }
        let managed = AcmeBoard::global().managed(&directory, &names);
        Ok(AcmeSettings {
            directory,
            contact,
            names,
            challenge,
            directory_ca,
            managed,
        })
    }

    /// `directory`: the CA's ACME directory, an https URL.
    fn acme_directory(&mut self, acme: &Table, raw: &Option<Spanned<String>>) -> String {
        let how = r#"write the CA's directory URL, e.g. directory = "https://acme-v02.api.letsencrypt.org/directory""#;
        let Some(raw) = self.required(acme, "directory", raw, how) else {
            return String::new();
        };
        let url = raw.get_ref();
        let host = url.strip_prefix("https://").unwrap_or("");
        let visible = url.bytes().all(|b| b.is_ascii_graphic());
        if host.is_empty() || host.starts_with('/') || !visible {
            let why =
                r#"not an https URL; write e.g. "https://acme-v02.api.letsencrypt.org/directory""#;
            self.reject(&acme.key("directory"), raw.span(), &quoted(url), why);
        }
        url.clone()
    }

    /// `contact`: `mailto:` addresses (RFC 8555 §7.3 lets a CA refuse other schemes).
    fn acme_contact(
        &mut self,
        acme: &Table,
        raw: &Option<Spanned<Vec<Spanned<String>>>>,
    ) -> Vec<String> {
        let listed = raw.as_ref().map_or(&[][..], |l| l.get_ref());
        let mut contact = Vec::with_capacity(listed.len());
        for (index, address) in listed.iter().enumerate() {
            let text = address.get_ref();
            let mailbox = text.strip_prefix("mailto:").unwrap_or("");
            if mailbox.contains('@') && text.bytes().all(|b| b.is_ascii_graphic()) {
                contact.push(text.clone());
            } else {
                let why = r#"not a mailto: address; write e.g. "mailto:ops@example.com""#;
                let key = format!("{}[{index}]", acme.key("contact"));
                self.reject(&key, address.span(), &quoted(text), why);
            }
        }
        contact
    }

    /// `names`: at least one DNS name, no wildcard (a CA validates those only by DNS-01), no IP
    /// address; lowercase, without a trailing dot, each once.
    fn acme_names(
        &mut self,
        acme: &Table,
        raw: &Option<Spanned<Vec<Spanned<String>>>>,
        challenge: ChallengeKind,
    ) -> Vec<String> {
        let how = r#"write the names the certificate is for, e.g. names = ["example.com", "www.example.com"]"#;
        let Some(raw) = self.required(acme, "names", raw, how) else {
            return Vec::new();
        };
        if raw.get_ref().is_empty() {
            let why = r#"empty; list the names the certificate is for, e.g. ["example.com"]"#;
            self.reject(&acme.key("names"), raw.span(), "[]", why);
        }
        let mut names: Vec<String> = Vec::new();
        for (index, name) in raw.get_ref().iter().enumerate() {
            let text = name.get_ref();
            let lowered = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
            let why = if lowered.starts_with("*.") {
                Some(format!(
                    "a wildcard, which a CA validates only by DNS-01; {} cannot prove it: list the names themselves",
                    challenge.name()
                ))
            } else if !is_dns_name(&lowered) {
                Some(r#"not a DNS name; write e.g. "www.example.com""#.to_string())
            } else {
                None
            };
            match why {
                Some(why) => {
                    let key = format!("{}[{index}]", acme.key("names"));
                    self.reject(&key, name.span(), &quoted(text), why);
                }
                None if !names.contains(&lowered) => names.push(lowered),
                None => {}
            }
        }
        names
    }

    /// `directory_ca`: a CA certificate (PEM) trusted for the directory's HTTPS.
    fn acme_directory_ca(
        &mut self,
        acme: &Table,
        raw: &Option<Spanned<String>>,
    ) -> Option<PathBuf> {
        let raw = raw.as_ref()?;
        let key = acme.key("directory_ca");
        let path = self.absolute_path(&key, raw, "acme-ca.pem")?;
        match CaFile::read(path) {
            Ok(_) => Some(path.to_path_buf()),
            Err(why) => {
                self.reject(&key, raw.span(), &quoted(raw.get_ref()), why);
                None
            }
        }
    }

    /// `[tls] acme_state_dir`: an absolute path ([`DEFAULT_ACME_STATE_DIR`] when not written).
    /// Not made here: `herdsman check` changes nothing on disk.
    pub(super) fn acme_state_dir(&mut self, raw: &RawTls) -> PathBuf {
        let Some(raw) = &raw.acme_state_dir else {
            return PathBuf::from(DEFAULT_ACME_STATE_DIR);
        };
        let path = Path::new(raw.get_ref());
        if !path.is_absolute() {
            let why = format!(r#"not an absolute path; write e.g. "{DEFAULT_ACME_STATE_DIR}""#);
            self.reject(
                "tls.acme_state_dir",
                raw.span(),
                &quoted(raw.get_ref()),
                why,
            );
        }
        path.to_path_buf()
    }
}

/// Whether `name` (lowercase) is a DNS host name: dot-separated labels of letters, digits and
/// `-` (not at either end), at most 63 bytes each and 253 in all, the last not all digits (which
/// would make it an IPv4 address).
fn is_dns_name(name: &str) -> bool {
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let last_not_numeric = name
        .rsplit('.')
        .next()
        .is_some_and(|last| !last.bytes().all(|b| b.is_ascii_digit()));
    name.len() <= 253 && name.split('.').all(label_ok) && last_not_numeric
}

#[cfg(test)]
mod tests {
    use crate::config::acme::ChallengeKind;
    use crate::config::fixtures::MINIMAL;
    use crate::config::load::from_toml;

    /// `MINIMAL` with a TLS listener `secure` holding `acme` (and `MINIMAL`'s cleartext one
    /// unless `cleartext` is false), and `extra` at the end.
    fn config(acme: &str, cleartext: bool, extra: &str) -> String {
        let tls_listener = format!(
            "[[listener]]\nname = \"secure\"\nbind = \"127.0.0.1:8443\"\npool = \"app\"\n[listener.tls]\nacme = {acme}\n\n[[pool]]"
        );
        let mut text = MINIMAL.replacen("[[pool]]", &tls_listener, 1);
        if !cleartext {
            let start = text.find("[[listener]]").unwrap();
            let end = text[start + 1..].find("[[listener]]").unwrap() + start + 1;
            text.replace_range(start..end, "");
        }
        text + "\n" + extra
    }

    fn problems(text: &str) -> Vec<(String, Option<usize>, String)> {
        match from_toml(text, "t.toml") {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(error) => error
                .problems
                .into_iter()
                .map(|p| (p.key, p.line, p.message))
                .collect(),
        }
    }

    #[test]
    fn a_listener_with_acme_alone_is_served_its_names() {
        let text = config(
            r#"{ directory = "https://ca.test/dir", contact = ["mailto:ops@example.com"], names = ["Example.com.", "www.example.com", "example.com"] }"#,
            false,
            "[tls]\nacme_state_dir = \"/var/lib/h/acme\"\n",
        );
        let config = from_toml(&text, "t.toml").unwrap();
        let tls = config.listeners[0].tls.as_ref().unwrap();
        let acme = tls.acme.as_ref().unwrap();
        assert_eq!(acme.names, ["example.com", "www.example.com"]);
        assert_eq!(acme.challenge, ChallengeKind::TlsAlpn01);
        assert_eq!(acme.contact, ["mailto:ops@example.com"]);
        assert_eq!(
            config.acme_state_dir,
            std::path::Path::new("/var/lib/h/acme")
        );
        assert!(tls.certificates.certificates().is_empty());
        assert!(tls
            .server_config
            .alpn_protocols
            .contains(&b"acme-tls/1".to_vec()));
    }

    #[test]
    fn what_acme_could_never_obtain_is_refused_by_key_and_line() {
        let text = config(
            r#"{ directory = "http://ca.test/dir", contact = ["ops@example.com"], names = ["*.example.com", "10.0.0.1", "ok.example.com"], challenge = "dns-01" }"#,
            true,
            "[tls]\nacme_state_dir = \"relative\"\n",
        );
        let found = problems(&text);
        let keys: Vec<&str> = found.iter().map(|(key, _, _)| key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "listener[1].tls.acme.challenge",
                "listener[1].tls.acme.directory",
                "listener[1].tls.acme.contact[0]",
                "listener[1].tls.acme.names[0]",
                "listener[1].tls.acme.names[1]",
                "tls.acme_state_dir",
            ]
        );
        let acme_line = text.lines().position(|l| l.starts_with("acme =")).unwrap() + 1;
        assert!(found[..5]
            .iter()
            .all(|(_, line, _)| *line == Some(acme_line)));
        assert!(found[3].2.contains("DNS-01"), "{}", found[3].2);
    }

    #[test]
    fn http01_needs_a_cleartext_listener() {
        let acme = r#"{ directory = "https://ca.test/dir", names = ["a.example.com"], challenge = "http-01" }"#;
        let found = problems(&config(acme, false, ""));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, "listener[0].tls.acme.challenge");
        assert!(found[0].2.contains("cleartext listener"), "{}", found[0].2);
        let config = from_toml(&config(acme, true, ""), "t.toml").unwrap();
        let settings = config.listeners[1].tls.as_ref().unwrap().acme.as_ref();
        assert_eq!(settings.unwrap().challenge, ChallengeKind::Http01);
    }

    #[test]
    fn a_missing_directory_or_names_is_named() {
        let found = problems(&config("{ contact = [] }", true, ""));
        let keys: Vec<&str> = found.iter().map(|(key, _, _)| key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "listener[1].tls.acme.directory",
                "listener[1].tls.acme.names"
            ]
        );
    }
}
