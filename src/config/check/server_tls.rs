//! A pool's `[pool.tls]`: the servers' CA file (or the system's roots) and the client
//! certificate loaded now, so that a file that does not load is refused with the key and the
//! reason; the names sent in SNI checked to be names; `verify = false` allowed, with a warning.

use toml::Spanned;

use super::primitives::quoted;
use super::{Checker, Table};
use crate::config::problem::ConfigProblem;
use crate::config::raw::{RawPool, RawPoolTls};
use crate::config::server_tls::{is_server_name, load_system_roots, PoolTls, Roots};
use crate::config::tls::CaFile;
use crate::config::{PoolConfig, ServerProtocol};

impl Checker {
    /// `[pool.tls]` of the pool `table` names; `None` when any problem was found.
    /// `protocol` decides what ALPN offers.
    pub(super) fn pool_tls(
        &mut self,
        table: &Table,
        raw: &RawPoolTls,
        protocol: ServerProtocol,
    ) -> Option<PoolTls> {
        let verify = raw.verify.as_ref().is_none_or(|verify| *verify.get_ref());
        let sni = raw.sni.as_ref().and_then(|sni| {
            self.server_name(&table.key("sni"), sni)
                .then(|| sni.get_ref().clone())
        });
        let mut ca_pem = Vec::new();
        let roots = match &raw.ca {
            Some(ca) => {
                let key = table.key("ca");
                let path = self.absolute_path(&key, ca, "servers-ca.pem")?;
                match CaFile::read(path) {
                    Ok(ca) => {
                        ca_pem = ca.pem;
                        Some((Roots::File(path.to_path_buf()), ca.roots))
                    }
                    Err(why) => {
                        self.reject(&key, ca.span(), &quoted(ca.get_ref()), why);
                        None
                    }
                }
            }
            // Not needed, and not read, when nothing is verified.
            None if !verify => Some((Roots::System, rustls::RootCertStore::empty())),
            None => match load_system_roots() {
                Ok(roots) => Some((Roots::System, roots)),
                Err(why) => {
                    let key = table.key("ca");
                    self.report(
                        &key,
                        Some(table.line),
                        &format!("{key}: missing, and {why}"),
                    );
                    None
                }
            },
        };
        let client_certificate = match &raw.certificate {
            Some(certificate) => {
                let entry = Table {
                    path: table.key("certificate"),
                    line: self.lines.line_of(certificate.span().start),
                };
                Some(self.certificate(&entry, certificate.get_ref())?)
            }
            None => None,
        };
        if !verify {
            self.warnings.push(ConfigProblem {
                key: table.key("verify"),
                line: raw
                    .verify
                    .as_ref()
                    .map(|v| self.lines.line_of(v.span().start)),
                message: format!(
                    "{}: false: the servers' certificates are not checked, so anyone on the path \
                     to them can pose as them and read every request",
                    table.key("verify")
                ),
            });
        }
        if sni.is_none() && raw.sni.is_some() {
            return None;
        }
        Some(PoolTls::new(
            roots?,
            sni,
            verify,
            client_certificate,
            &ca_pem,
            protocol.is_http2(),
        ))
    }

    /// Each server's own `sni`: a name a certificate can be verified against, in a pool that
    /// speaks TLS.
    pub(super) fn server_names(&mut self, table: &Table, raw: &RawPool, pool: &PoolConfig) {
        let Some(servers) = &raw.servers else {
            return;
        };
        let tls = raw.tls.is_some() || pool.tls.is_some();
        for (index, server) in servers.get_ref().iter().enumerate() {
            let on_unix_socket = pool.servers.get(index).is_some_and(|s| s.addr.is_unix());
            if let (true, true, Some(addr)) = (tls, on_unix_socket, &server.get_ref().addr) {
                let key = format!("{}[{index}].addr", table.key("servers"));
                let why = "a server on a UNIX socket is spoken to in cleartext (the socket never \
                           leaves the machine); put it in a pool without [pool.tls]";
                self.reject(&key, addr.span(), &quoted(addr.get_ref()), why);
            }
            let Some(sni) = &server.get_ref().sni else {
                continue;
            };
            let key = format!("{}[{index}].sni", table.key("servers"));
            if raw.tls.is_none() && pool.tls.is_none() {
                let why = "a server's sni is for TLS; add [pool.tls] to the pool, or remove it";
                self.reject(&key, sni.span(), &quoted(sni.get_ref()), why);
            } else {
                self.server_name(&key, sni);
            }
        }
    }

    /// Whether `raw` is a DNS name or an IP address, as SNI and verification need; refused
    /// with an example when not.
    fn server_name(&mut self, key: &str, raw: &Spanned<String>) -> bool {
        if is_server_name(raw.get_ref()) {
            return true;
        }
        let why = r#"not a host name or IP address; write e.g. "app.internal""#;
        self.reject(key, raw.span(), &quoted(raw.get_ref()), why);
        false
    }
}

#[cfg(test)]
mod tests {
    use crate::config::fixtures::{certificate_files, only_problem, problems, MINIMAL};
    use crate::config::load::from_toml;
    use crate::config::server_tls::Roots;

    /// `MINIMAL` with `[pool.tls]` holding `keys`, its server with the `server` keys added.
    fn with_pool_tls(keys: &str, server: &str) -> String {
        let text = MINIMAL.replace(
            r#"addr = "127.0.0.1:9001" }"#,
            &format!(r#"addr = "127.0.0.1:9001"{server} }}"#),
        );
        format!("{text}[pool.tls]\n{keys}\n")
    }

    #[test]
    fn a_pool_with_a_ca_file_and_names_becomes_that_tls() {
        let dir = certificate_files("pool-ca", &["app.internal"]);
        let text = with_pool_tls(
            &format!(
                "ca = \"{0}/chain.pem\"\nsni = \"app.internal\"\ncertificate = {{ chain = \"{0}/chain.pem\", key = \"{0}/key.pem\" }}",
                dir.display()
            ),
            r#", sni = "a.internal""#,
        );
        let config = from_toml(&text, "t.toml").unwrap();
        let tls = config.pools[0].tls.as_ref().unwrap();
        assert_eq!(tls.roots, Roots::File(dir.join("chain.pem")));
        assert_eq!(tls.sni.as_deref(), Some("app.internal"));
        assert!(tls.verify && tls.client_certificate.is_some());
        assert_eq!(
            config.pools[0].servers[0].sni.as_deref(),
            Some("a.internal")
        );
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
        // The same files read again make the same TLS; another sni, another.
        assert_eq!(
            from_toml(&text, "t.toml").unwrap().pools[0].tls,
            config.pools[0].tls
        );
        let other = from_toml(&text.replace("sni = \"app", "sni = \"web"), "t.toml").unwrap();
        assert_ne!(other.pools[0].tls, config.pools[0].tls);
    }

    #[test]
    fn a_pools_protocol_decides_its_tls_and_h2c_with_tls_is_refused_by_line() {
        let with_protocol = |protocol: &str| {
            MINIMAL.replace(
                "name = \"app\"\n",
                &format!("name = \"app\"\nprotocol = \"{protocol}\"\n"),
            )
        };
        let h2 = from_toml(&with_protocol("h2"), "t.toml").unwrap();
        let tls = h2.pools[0]
            .tls
            .as_ref()
            .expect("h2 speaks TLS without [pool.tls]");
        assert_eq!(tls.client_config.alpn_protocols, [b"h2".to_vec()]);
        assert_eq!(h2.pools[0].protocol, crate::config::ServerProtocol::H2);
        let h2c = from_toml(&with_protocol("h2c"), "t.toml").unwrap();
        assert!(h2c.pools[0].tls.is_none());
        let plain = from_toml(MINIMAL, "t.toml").unwrap();
        assert_eq!(
            plain.pools[0].protocol,
            crate::config::ServerProtocol::Http1
        );
        let found = problems(&format!("{}[pool.tls]\n", with_protocol("h2c")));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].key, "pool[0].protocol");
        assert_eq!(found[0].line, Some(9));
        assert!(found[0].message.contains("\"h2\""), "{}", found[0].message);
        let unknown = problems(&with_protocol("http3"));
        assert!(
            unknown[0].message.contains("http1, h2, h2c"),
            "{}",
            unknown[0].message
        );
    }

    #[test]
    fn verify_false_is_taken_with_a_warning_naming_its_line() {
        let config = from_toml(&with_pool_tls("verify = false", ""), "t.toml").unwrap();
        assert!(!config.pools[0].tls.as_ref().unwrap().verify);
        assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
        assert_eq!(config.warnings[0].key, "pool[0].tls.verify");
        assert_eq!(config.warnings[0].line, Some(11));
        assert!(config.warnings[0].message.contains("not checked"));
    }

    #[test]
    fn bad_files_names_and_a_stray_server_sni_are_each_named() {
        let dir = certificate_files("pool-bad", &["app.internal"]);
        std::fs::write(dir.join("empty.pem"), "").unwrap();
        let text = with_pool_tls(
            &format!(
                "ca = \"{0}/empty.pem\"\nsni = \"not a name\"\ncertificate = {{ chain = \"{0}/chain.pem\", key = \"relative.key\" }}",
                dir.display()
            ),
            r#", sni = "under_score!""#,
        );
        let found = problems(&text);
        let keys: Vec<&str> = found.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "pool[0].servers[0].sni",
                "pool[0].tls.ca",
                "pool[0].tls.sni",
                "pool[0].tls.certificate.key",
            ],
            "{found:?}"
        );
        assert!(
            found[1].message.contains("holds no certificate"),
            "{found:?}"
        );
        assert!(
            found[3].message.contains("not an absolute path"),
            "{found:?}"
        );
        let stray = problems(&MINIMAL.replace(
            r#"addr = "127.0.0.1:9001" }"#,
            r#"addr = "127.0.0.1:9001", sni = "a.internal" }"#,
        ));
        assert_eq!(stray[0].key, "pool[0].servers[0].sni");
        assert!(stray[0].message.contains("[pool.tls]"), "{stray:?}");
    }

    #[test]
    fn a_server_on_a_unix_socket_in_a_pool_with_tls_is_refused_by_key_and_line() {
        let text = with_pool_tls("", "").replace("127.0.0.1:9001", "unix:/run/app.sock");
        let found = only_problem(&text);
        assert_eq!(found.key, "pool[0].servers[0].addr");
        assert!(found.line.is_some());
        assert!(found.message.contains("cleartext"), "{}", found.message);
        let cleartext = MINIMAL.replace("127.0.0.1:9001", "unix:/run/app.sock");
        let config = from_toml(&cleartext, "test.toml").unwrap();
        assert_eq!(
            config.pools[0].servers[0].addr.to_string(),
            "unix:/run/app.sock"
        );
    }
}
