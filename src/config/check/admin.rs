//! `[admin]`: where the admin API listens (an address, a UNIX socket with its mode and owner),
//! which host names it answers, and where its token comes from.

use toml::Spanned;

use super::primitives::quoted;
use super::{Checker, Table};
use crate::config::raw::RawAdmin;
use crate::config::{AdminSettings, AdminSocket};

impl Checker {
    pub(super) fn admin(&mut self, raw: &Spanned<RawAdmin>) -> AdminSettings {
        let table = Table {
            path: "admin".to_string(),
            line: self.lines.line_of(raw.span().start),
        };
        let admin = raw.get_ref();
        // `bind` is required unless the API is on a socket only.
        let bind = (admin.bind.is_some() || admin.socket.is_none())
            .then(|| self.socket_addr(&table, "bind", &admin.bind, "127.0.0.1:9900"));
        let socket = admin.socket.as_ref().map(|path| AdminSocket {
            path: self.socket_path(&table.key("socket"), path),
            mode: self.file_mode(&table.key("socket_mode"), &admin.socket_mode),
            owner: self.account(&table.key("socket_owner"), &admin.socket_owner),
            group: self.account(&table.key("socket_group"), &admin.socket_group),
        });
        if socket.is_none() {
            for key in ["socket_mode", "socket_owner", "socket_group"] {
                let present = match key {
                    "socket_mode" => &admin.socket_mode,
                    "socket_owner" => &admin.socket_owner,
                    _ => &admin.socket_group,
                };
                if let Some(raw) = present {
                    self.reject(
                        &table.key(key),
                        raw.span(),
                        &quoted(raw.get_ref()),
                        r#"applies to a socket: set socket = "/run/herdsman/admin.sock" too"#,
                    );
                }
            }
        }
        let allowed_hosts = self.allowed_hosts(&table.key("allowed_hosts"), &admin.allowed_hosts);
        let token_env = self.env_name(
            &table.key("token_env"),
            &admin.token_env,
            "HERDSMAN_ADMIN_TOKEN",
        );
        AdminSettings {
            bind,
            socket,
            allowed_hosts,
            token_env,
        }
    }

    /// `[admin] socket`: an absolute path.
    fn socket_path(&mut self, key: &str, raw: &Spanned<String>) -> std::path::PathBuf {
        let path = std::path::PathBuf::from(raw.get_ref());
        if !path.is_absolute() || raw.get_ref().ends_with('/') {
            self.reject(
                key,
                raw.span(),
                &quoted(raw.get_ref()),
                r#"not an absolute file path; write e.g. socket = "/run/herdsman/admin.sock""#,
            );
        }
        path
    }

    /// `[admin] socket_mode`: octal permission bits, default 0600.
    fn file_mode(&mut self, key: &str, raw: &Option<Spanned<String>>) -> u32 {
        const DEFAULT: u32 = 0o600;
        let Some(raw) = raw else {
            return DEFAULT;
        };
        let text = raw.get_ref();
        match u32::from_str_radix(text, 8) {
            Ok(mode) if mode <= 0o777 && !text.is_empty() => mode,
            _ => {
                self.reject(
                    key,
                    raw.span(),
                    &quoted(text),
                    r#"not a file mode; write octal permission bits, e.g. "0600" (the default) or "0660" for the socket's group too"#,
                );
                DEFAULT
            }
        }
    }

    /// `[admin] socket_owner` or `socket_group`: a user or group name, or a number. Whether it
    /// exists is checked when the socket is made, on the machine that runs herdsman.
    fn account(&mut self, key: &str, raw: &Option<Spanned<String>>) -> Option<String> {
        let raw = raw.as_ref()?;
        let text = raw.get_ref();
        let valid = !text.is_empty()
            && text.len() <= 32
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid {
            self.reject(
                key,
                raw.span(),
                &quoted(text),
                r#"not a user or group name; write e.g. "herdsman" or a number such as "998""#,
            );
        }
        Some(text.clone())
    }

    /// `[admin] allowed_hosts`: host names, lowercased, without ports.
    fn allowed_hosts(
        &mut self,
        key: &str,
        raw: &Option<Spanned<Vec<Spanned<String>>>>,
    ) -> Vec<String> {
        let Some(raw) = raw else {
            return Vec::new();
        };
        let is_host_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.');
        raw.get_ref()
            .iter()
            .filter_map(|name| {
                let text = name.get_ref().to_ascii_lowercase();
                if text.is_empty() || !text.chars().all(is_host_char) {
                    self.reject(
                        key,
                        name.span(),
                        &quoted(name.get_ref()),
                        r#"not a host name (no port, no wildcard); write e.g. allowed_hosts = ["herdsman-admin.internal"]"#,
                    );
                    return None;
                }
                Some(text)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures::{addr, only_problem, MINIMAL};
    use crate::config::load::from_toml;

    #[test]
    fn the_admin_table_names_its_bind_and_token_variable() {
        let with_admin = |table: &str| format!("{MINIMAL}\n[admin]\n{table}\n");
        let config = from_toml(
            &with_admin("bind = \"127.0.0.1:9900\"\ntoken_env = \"HERDSMAN_ADMIN_TOKEN\""),
            "test.toml",
        )
        .unwrap();
        assert_eq!(
            config.admin,
            Some(AdminSettings {
                bind: Some(addr("127.0.0.1:9900")),
                socket: None,
                allowed_hosts: Vec::new(),
                token_env: Some("HERDSMAN_ADMIN_TOKEN".to_string()),
            })
        );
        assert_eq!(from_toml(MINIMAL, "test.toml").unwrap().admin, None);
        let bad = only_problem(&with_admin(
            "bind = \"127.0.0.1:9900\"\ntoken_env = \"my token\"",
        ));
        assert_eq!(bad.key, "admin.token_env");
        assert!(
            bad.message.contains("not an environment variable name"),
            "{}",
            bad.message
        );
        let missing = only_problem(&with_admin("token_env = \"T\""));
        assert_eq!(missing.key, "admin.bind");
        // A socket alone will do; its mode, owner and group; hosts lowercased.
        let socket = from_toml(
            &with_admin(
                "socket = \"/run/herdsman/admin.sock\"\nsocket_mode = \"0660\"\n\
                 socket_group = \"adm\"\nallowed_hosts = [\"Admin.Internal\"]",
            ),
            "t",
        )
        .unwrap()
        .admin
        .unwrap();
        assert_eq!(socket.bind, None);
        assert_eq!(
            socket.socket,
            Some(AdminSocket {
                path: "/run/herdsman/admin.sock".into(),
                mode: 0o660,
                owner: None,
                group: Some("adm".into()),
            })
        );
        assert_eq!(socket.allowed_hosts, ["admin.internal"]);
        for (table, key, why) in [
            (
                "socket = \"admin.sock\"",
                "admin.socket",
                "not an absolute file path",
            ),
            (
                "socket = \"/run/a.sock\"\nsocket_mode = \"0999\"",
                "admin.socket_mode",
                "not a file mode",
            ),
            (
                "bind = \"127.0.0.1:9900\"\nsocket_mode = \"0600\"",
                "admin.socket_mode",
                "applies to a socket",
            ),
            (
                "bind = \"127.0.0.1:9900\"\nallowed_hosts = [\"evil.example:80\"]",
                "admin.allowed_hosts",
                "not a host name",
            ),
        ] {
            let problem = only_problem(&with_admin(table));
            assert_eq!(problem.key, key, "{table}");
            assert!(problem.message.contains(why), "{}", problem.message);
        }
    }
}
