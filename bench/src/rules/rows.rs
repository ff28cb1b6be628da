//! The rows of each part: which program, configured how, asked with which request fields; their
//! configurations (herdsman's in issue 42's syntax, HAProxy's, nginx's and Caddy's written to do
//! the same), and starting them. A row whose proxy does not start ends the run, saying why; the
//! one likely refusal, herdsman's of `[headers]` before the header rules are in its build, is
//! said as such.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};

use super::settings::Part;
use crate::kit::process::Supervised;
use crate::kit::proxies::{self, Plan, ProxyKind, Target, CLIENT_IDLE_SECONDS};

/// The program behind a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    Herdsman,
    Haproxy,
    Nginx,
    Caddy,
}

impl Program {
    pub fn written(self) -> &'static str {
        match self {
            Program::Herdsman => "herdsman",
            Program::Haproxy => "HAProxy",
            Program::Nginx => "nginx",
            Program::Caddy => "Caddy",
        }
    }
}

/// How a proxy of a part is configured (several rows may share one proxy, asking it for
/// different encodings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setup {
    /// herdsman with its defaults: no rules, no limit, no compression.
    HerdsmanPlain,
    /// The ten header rules and the rate limit (`headers`).
    HerdsmanRules,
    HaproxyRules,
    NginxRules,
    CaddyRules,
    /// `[compression] enabled = true`, its other keys at their defaults.
    HerdsmanCompressing,
    /// The same with `gzip_level` at this level instead of its default, 5.
    HerdsmanGzipAt(u32),
    /// nginx's `gzip` at this level.
    NginxGzip(u32),
    /// `encode gzip zstd`.
    CaddyEncode,
    /// The rate limit alone, counted here (`redis`).
    HerdsmanLocalLimit,
    /// The rate limit counted in the Redis at this address too.
    HerdsmanSharedLimit(std::net::SocketAddr),
}

impl Setup {
    pub fn program(self) -> Program {
        match self {
            Setup::HaproxyRules => Program::Haproxy,
            Setup::NginxRules | Setup::NginxGzip(_) => Program::Nginx,
            Setup::CaddyRules | Setup::CaddyEncode => Program::Caddy,
            _ => Program::Herdsman,
        }
    }
}

/// One row of the results: a proxy (by its index in the part's proxies) and the request fields
/// wrk sends it.
#[derive(Debug, Clone)]
pub struct Row {
    pub name: String,
    pub proxy: usize,
    /// `Accept-Encoding` asked for (`compression`); `None`: identity.
    pub encoding: Option<&'static str>,
}

/// The request field every request of `headers` carries, which the rules remove.
pub const DEBUG_FIELD: &str = "X-Debug: 1";

/// The rate every limit of the benchmark allows, per client address: never reached (wrk sends
/// from one address), so that a limit's cost is measured, not its refusals.
const RATE: &str = "1000000/s";

/// A part's proxies, in the order rows name them, and its rows; the Redis addresses of `redis`'s
/// two shared rows (on loopback, far).
pub fn of_part(
    part: Part,
    redis: Option<(std::net::SocketAddr, std::net::SocketAddr)>,
) -> (Vec<Setup>, Vec<Row>) {
    let row = |name: &str, proxy: usize, encoding| Row {
        name: name.to_string(),
        proxy,
        encoding,
    };
    match part {
        Part::Headers => {
            // herdsman's rules last: a build without them refuses its config, once the peers'
            // have been checked.
            let setups = vec![
                Setup::HaproxyRules,
                Setup::NginxRules,
                Setup::CaddyRules,
                Setup::HerdsmanPlain,
                Setup::HerdsmanRules,
            ];
            let rows = vec![
                row("herdsman, rules", 4, None),
                row("HAProxy, rules", 0, None),
                row("nginx, rules", 1, None),
                row("Caddy, rules (no limit)", 2, None),
                row("herdsman, no rules", 3, None),
            ];
            (setups, rows)
        }
        Part::Compression => {
            let setups = vec![
                Setup::HerdsmanCompressing,
                Setup::NginxGzip(1),
                Setup::NginxGzip(5),
                Setup::CaddyEncode,
                Setup::HerdsmanGzipAt(2),
                Setup::HerdsmanGzipAt(4),
            ];
            // gzip 2 and 4 beside the default 5: by benches/compression_levels.rs, level 4 makes
            // Caddy's ratio of this JSON and level 2 a better one than nginx's gzip 1, each for
            // less CPU than level 5.
            let rows = vec![
                row("herdsman zstd", 0, Some("zstd")),
                row("herdsman br", 0, Some("br")),
                row("herdsman gzip", 0, Some("gzip")),
                row("herdsman gzip 2", 4, Some("gzip")),
                row("herdsman gzip 4", 5, Some("gzip")),
                row("nginx gzip 1", 1, Some("gzip")),
                row("nginx gzip 5", 2, Some("gzip")),
                row("Caddy gzip", 3, Some("gzip")),
                row("Caddy zstd", 3, Some("zstd")),
                row("herdsman, identity", 0, None),
            ];
            (setups, rows)
        }
        Part::Redis => {
            let (near, far) = redis.expect("the redis part has its Redis servers");
            let setups = vec![
                Setup::HerdsmanLocalLimit,
                Setup::HerdsmanSharedLimit(near),
                Setup::HerdsmanSharedLimit(far),
            ];
            let rows = vec![
                row("herdsman, local limit", 0, None),
                row("herdsman, Redis on loopback", 1, None),
                row("herdsman, Redis 1 ms away", 2, None),
            ];
            (setups, rows)
        }
    }
}

/// The configuration file's name and text for `setup` under `plan`; `dir` is the proxy's own.
pub fn config(setup: Setup, plan: Plan, dir: &Path) -> (&'static str, String) {
    let herdsman = |extra: &str| {
        (
            "herdsman.toml",
            format!("{}{extra}", proxies::herdsman_config(plan, None)),
        )
    };
    match setup {
        Setup::HerdsmanPlain => herdsman(""),
        Setup::HerdsmanRules => herdsman(&format!("{HERDSMAN_HEADER_RULES}{}", herdsman_limit(""))),
        Setup::HerdsmanCompressing => herdsman("\n[compression]\nenabled = true\n"),
        Setup::HerdsmanGzipAt(level) => herdsman(&format!(
            "\n[compression]\nenabled = true\ngzip_level = {level}\n"
        )),
        Setup::HerdsmanLocalLimit => herdsman(&herdsman_limit("")),
        Setup::HerdsmanSharedLimit(redis) => herdsman(&herdsman_limit(&format!(
            "\n[rate_limit]\nredis = \"redis://{redis}\"\n"
        ))),
        Setup::HaproxyRules => (
            "haproxy.cfg",
            proxies::haproxy_config_adding(plan, HAPROXY_RULES),
        ),
        Setup::NginxRules => (
            "nginx.conf",
            proxies::nginx_config_adding(plan, dir, NGINX_LIMIT_ZONE, NGINX_RULES),
        ),
        Setup::NginxGzip(level) => (
            "nginx.conf",
            proxies::nginx_config_adding(plan, dir, &nginx_gzip(level), ""),
        ),
        Setup::CaddyRules => ("Caddyfile", caddyfile(plan, CADDY_RULES)),
        Setup::CaddyEncode => ("Caddyfile", caddyfile(plan, "\tencode gzip zstd\n")),
    }
}

/// The ten header rules in issue 42's syntax (`[headers.request]`, `[headers.response]`): three
/// request fields set from variables, one added, one removed; three security fields set on
/// answers, and the server's `Server` and `X-Powered-By` removed.
pub const HERDSMAN_HEADER_RULES: &str = r#"
[headers.request]
set = { "X-Client-Ip" = "{client}", "X-Original-Host" = "{host}", "X-Original-Method" = "{method}" }
add = { "X-Via" = "bench" }
remove = ["X-Debug"]

[headers.response]
set = { "X-Frame-Options" = "DENY", "X-Content-Type-Options" = "nosniff", "Referrer-Policy" = "no-referrer" }
remove = ["Server", "X-Powered-By"]
"#;

/// herdsman's route for every path with a limit per client address that is never reached,
/// `after` it (a `[rate_limit]` table).
pub fn herdsman_limit(after: &str) -> String {
    format!(
        "\n[[route]]\npath_prefix = \"/\"\npool = \"backend\"\n[route.rate_limit]\n\
         rate = \"{RATE}\"\nburst = 1000000\nkey = \"client\"\n{after}"
    )
}

/// The same rules as HAProxy says them, and a stick table counting each source address's
/// request rate, checked against a limit never reached.
const HAPROXY_RULES: &str = r#"    stick-table type ip size 100k expire 10s store http_req_rate(1s)
    http-request track-sc0 src
    http-request deny deny_status 429 if { sc_http_req_rate(0) gt 1000000 }
    http-request set-header X-Client-Ip %[src]
    http-request set-header X-Original-Host %[req.hdr(host)]
    http-request set-header X-Original-Method %[method]
    http-request add-header X-Via bench
    http-request del-header X-Debug
    http-response set-header X-Frame-Options DENY
    http-response set-header X-Content-Type-Options nosniff
    http-response set-header Referrer-Policy no-referrer
    http-response del-header Server
    http-response del-header X-Powered-By
"#;

/// nginx's zone for `limit_req`, per client address.
const NGINX_LIMIT_ZONE: &str =
    "    limit_req_zone $binary_remote_addr zone=bench:10m rate=1000000r/s;\n";

/// The same rules as nginx says them. nginx cannot append to a field the client sent
/// (`proxy_set_header` replaces it), an empty value removes one, and its own `Server` field
/// stays (`proxy_hide_header Server` hides the server's; removing nginx's needs a module
/// nginx-light lacks).
const NGINX_RULES: &str = r#"            limit_req zone=bench burst=1000000 nodelay;
            proxy_set_header X-Client-Ip $remote_addr;
            proxy_set_header X-Original-Host $host;
            proxy_set_header X-Original-Method $request_method;
            proxy_set_header X-Via bench;
            proxy_set_header X-Debug "";
            add_header X-Frame-Options DENY always;
            add_header X-Content-Type-Options nosniff always;
            add_header Referrer-Policy no-referrer always;
            proxy_hide_header Server;
            proxy_hide_header X-Powered-By;
"#;

/// nginx's gzip at `level` for the JSON answer (`gzip_proxied any`: whatever the request says).
fn nginx_gzip(level: u32) -> String {
    format!(
        "    gzip on;\n    gzip_comp_level {level};\n    gzip_types application/json;\n    \
         gzip_proxied any;\n    gzip_min_length 1024;\n"
    )
}

/// The same rules as Caddy says them. Caddy has no rate limit of its own (only a third-party
/// module, not in Debian's build): its row has none.
const CADDY_RULES: &str = "\trequest_header X-Client-Ip {remote_host}
\trequest_header X-Original-Host {host}
\trequest_header X-Original-Method {method}
\trequest_header +X-Via bench
\trequest_header -X-Debug
\theader X-Frame-Options DENY
\theader X-Content-Type-Options nosniff
\theader Referrer-Policy no-referrer
\theader -Server
\theader -X-Powered-By
";

/// Caddy in front of the plan's server with `site_lines` (each ending in a newline): no admin
/// endpoint, no automatic HTTPS, no access log (its default), server connections kept (as many
/// idle as the run has clients) and clients' kept as long as the other proxies keep them.
fn caddyfile(plan: Plan, site_lines: &str) -> String {
    let Plan {
        port,
        backend_port,
        backend_idle,
        ..
    } = plan;
    format!(
        "{{\n\tadmin off\n\tauto_https off\n\tservers {{\n\t\ttimeouts {{\n\t\t\tidle {CLIENT_IDLE_SECONDS}s\n\t\t}}\n\t}}\n}}\n\n\
         http://:{port} {{\n\tbind 127.0.0.1\n{site_lines}\
         \treverse_proxy 127.0.0.1:{backend_port} {{\n\t\ttransport http {{\n\
         \t\t\tkeepalive 5m\n\t\t\tkeepalive_idle_conns {backend_idle}\n\
         \t\t\tkeepalive_idle_conns_per_host {backend_idle}\n\t\t}}\n\t}}\n}}\n"
    )
}

/// A proxy of a part, started.
pub struct Running {
    pub setup: Setup,
    pub port: u16,
    pub process: Supervised,
}

/// The programs, found (and installed when missing).
pub struct Programs {
    pub herdsman: PathBuf,
    pub haproxy: PathBuf,
    pub nginx: PathBuf,
    pub caddy: PathBuf,
    pub redis: PathBuf,
}

/// Writes `text` as `file` in `dir`, starts `setup`'s program with it in the foreground (its
/// output in `dir`/output.log; Caddy with `workers` Go threads) and waits until it answers
/// `GET /` on `port`.
pub fn start(
    setup: Setup,
    (file, text): (&str, &str),
    port: u16,
    dir: &Path,
    programs: &Programs,
    workers: u32,
) -> anyhow::Result<Supervised> {
    let program = setup.program();
    let kind = match program {
        Program::Herdsman => Some((ProxyKind::Herdsman, &programs.herdsman)),
        Program::Haproxy => Some((ProxyKind::Haproxy, &programs.haproxy)),
        Program::Nginx => Some((ProxyKind::Nginx, &programs.nginx)),
        Program::Caddy => None,
    };
    let started = match kind {
        Some((kind, program)) => {
            let target = Target {
                label: kind.written().to_string(),
                kind,
                program: program.clone(),
                intake: None,
            };
            target.start(file, text, port, dir)
        }
        None => {
            let config = dir.join(file);
            std::fs::write(&config, text)
                .with_context(|| format!("writing {}", config.display()))?;
            let mut command = Command::new(&programs.caddy);
            command
                .args(["run", "--adapter", "caddyfile", "--config"])
                .arg(&config)
                .env("GOMAXPROCS", workers.to_string())
                // Its data and config folders (never used without automatic HTTPS) in `dir`.
                .env("HOME", dir)
                .env("XDG_DATA_HOME", dir)
                .env("XDG_CONFIG_HOME", dir)
                .current_dir(dir);
            let mut process = Supervised::spawn("Caddy", command, &dir.join("output.log"))?;
            process
                .wait_until_serving(port, Duration::from_secs(15))
                .map(|()| process)
        }
    };
    match started {
        Ok(process) => Ok(process),
        Err(e) if setup == Setup::HerdsmanRules && format!("{e:#}").contains("headers") => bail!(
            "herdsman refused the header rules ([headers.request] and [headers.response] in \
             issue 42's syntax): this build has no header rules yet (they come with the \
             `headers` branch); run --parts compression,redis meanwhile. Its refusal: {e:#}"
        ),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            workers: 2,
            port: 8080,
            backend_port: 9000,
            backend_idle: 64,
            client_connections: 50,
            descriptor_limit: 20_000,
        }
    }

    #[test]
    fn every_rules_row_says_the_ten_rules() {
        let dir = Path::new("/tmp/rules-test");
        let (_, herdsman) = config(Setup::HerdsmanRules, plan(), dir);
        for line in [
            "[headers.request]",
            "{client}",
            "remove = [\"Server\", \"X-Powered-By\"]",
        ] {
            assert!(herdsman.contains(line), "{herdsman}");
        }
        assert!(
            herdsman.contains("[route.rate_limit]\nrate = \"1000000/s\""),
            "{herdsman}"
        );
        let (_, haproxy) = config(Setup::HaproxyRules, plan(), dir);
        // Ten header rules, and the stick table's two beside its own line.
        assert_eq!(HAPROXY_RULES.matches("    http-re").count(), 12);
        assert!(haproxy.contains(HAPROXY_RULES), "{haproxy}");
        assert!(haproxy.find("del-header X-Powered-By") < haproxy.find("default_backend"));
        let (_, nginx) = config(Setup::NginxRules, plan(), dir);
        assert!(nginx.contains("limit_req zone=bench") && nginx.contains("limit_req_zone"));
        let (file, caddy) = config(Setup::CaddyRules, plan(), dir);
        assert_eq!(file, "Caddyfile");
        assert_eq!(caddy.matches("header").count(), 10, "{caddy}");
        assert!(caddy.contains("reverse_proxy 127.0.0.1:9000"), "{caddy}");
        let (_, gzip_4) = config(Setup::HerdsmanGzipAt(4), plan(), dir);
        assert!(
            gzip_4.ends_with("[compression]\nenabled = true\ngzip_level = 4\n"),
            "{gzip_4}"
        );
        let shared = Setup::HerdsmanSharedLimit("10.0.0.2:6379".parse().unwrap());
        let (_, limited) = config(shared, plan(), dir);
        assert!(
            limited.ends_with("[rate_limit]\nredis = \"redis://10.0.0.2:6379\"\n"),
            "{limited}"
        );
    }
}
