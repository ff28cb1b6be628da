//! The four caches and their equivalent configurations: each proxy's own cache in memory (nginx's
//! on disk, as it only has, in the scratch directory and so in the page cache), 256 MiB, in front
//! of the one origin, with the kit's configuration of each otherwise (the same worker count,
//! keep-alive both sides, no access log, room for every client connection). Where a cache would
//! otherwise do what RFC 9111 does not allow, or not do what users turn on for the case measured,
//! the line that changes it is here, with why:
//!
//! - **herdsman**: `[cache] memory = "256MiB"` (its default, written out) and the pool's
//!   `[pool.cache] enabled = true`, nothing else; a second listener on a pool without a cache in
//!   front of the same origin gives a *proxied* request of the same object, in the same process.
//! - **Varnish**: `-s malloc,256m`, a VCL that names the origin and nothing else (the built-in VCL
//!   decides), `-p thread_pools=N` for N workers (Varnish serves each busy connection on a thread
//!   of its own and cannot be held to N threads; its pools are what it has for "workers"), and
//!   `-p default_grace=0`: by default Varnish serves any object up to 10 s stale while it fetches
//!   a fresh one, which RFC 9111 does not allow for an object whose answer did not say
//!   `stale-while-revalidate` (Varnish takes that one as grace, so the SWR case still gets it).
//! - **nginx**: `proxy_cache` on a 256 MB `proxy_cache_path`, `proxy_cache_lock on` (one request
//!   per key to the server at a time), and `proxy_cache_background_update on` (a stale answer
//!   that may be served — `stale-while-revalidate` — is refreshed by a background request; without
//!   it the client whose request refreshes waits for the server).
//! - **HAProxy**: a 256 MB `cache` used and stored by the backend (`http-request cache-use`,
//!   `http-response cache-store`), `max-age 86400` (its default, 60, would cap every object's
//!   freshness at a minute) and `max-object-size` 1 MiB (its default for that size, written out).

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;

use crate::kit::environment;
use crate::kit::process::{free_port, probe, Supervised};
use crate::kit::proxies::{self, Plan, ProxyKind, Target};
use crate::kit::tools;

/// The memory each cache may hold: herdsman's default.
pub const CACHE_MIB: u32 = 256;

/// A cache measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Cacher {
    Herdsman,
    Varnish,
    Nginx,
    Haproxy,
}

impl Cacher {
    pub const ALL: [Cacher; 4] = [
        Cacher::Herdsman,
        Cacher::Varnish,
        Cacher::Nginx,
        Cacher::Haproxy,
    ];

    /// Its name as the results write it.
    pub fn written(self) -> &'static str {
        match self {
            Cacher::Herdsman => "herdsman",
            Cacher::Varnish => "Varnish",
            Cacher::Nginx => "nginx",
            Cacher::Haproxy => "HAProxy",
        }
    }

    /// The kit's kind for the three it already starts.
    fn kind(self) -> Option<ProxyKind> {
        match self {
            Cacher::Herdsman => Some(ProxyKind::Herdsman),
            Cacher::Nginx => Some(ProxyKind::Nginx),
            Cacher::Haproxy => Some(ProxyKind::Haproxy),
            Cacher::Varnish => None,
        }
    }

    /// The peer's program, installed if missing; herdsman's is the caller's.
    pub fn peer_program(self) -> anyhow::Result<PathBuf> {
        let tool = match self {
            Cacher::Herdsman => anyhow::bail!("herdsman is built, not installed"),
            Cacher::Varnish => &tools::VARNISH,
            Cacher::Nginx => &tools::NGINX,
            Cacher::Haproxy => &tools::HAPROXY,
        };
        Ok(tools::ensure_installed(&[tool])?.remove(0))
    }

    /// Its setup line for the results: version (and for herdsman where and when it was built).
    pub fn version_line(self, program: &Path) -> (String, String) {
        match self {
            Cacher::Herdsman => environment::herdsman_line("herdsman", program),
            Cacher::Varnish => (self.written().into(), tools::version_line(program, &["-V"])),
            Cacher::Nginx | Cacher::Haproxy => {
                (self.written().into(), tools::version_line(program, &["-v"]))
            }
        }
    }
}

/// Its name as `--caches` takes it.
impl fmt::Display for Cacher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cacher::Herdsman => "herdsman",
            Cacher::Varnish => "varnish",
            Cacher::Nginx => "nginx",
            Cacher::Haproxy => "haproxy",
        })
    }
}

/// A cache to start: which, and its program.
#[derive(Debug, Clone)]
pub struct CacheTarget {
    pub cacher: Cacher,
    pub program: PathBuf,
}

/// A cache running in front of the origin.
pub struct Running {
    pub cacher: Cacher,
    pub process: Supervised,
    /// Where its cache answers.
    pub port: u16,
    /// herdsman only: its listener on a pool without a cache, in front of the same origin.
    pub proxied_port: Option<u16>,
}

/// A configuration as the results show it: its file's name and text.
pub type ConfigFile = (String, String);

impl CacheTarget {
    /// Writes its configuration into `dir`, starts it with `plan` (whose `port` it listens on) and
    /// waits until it answers. Returns it, and its configuration.
    pub fn start(&self, plan: Plan, dir: &Path) -> anyhow::Result<(Running, ConfigFile)> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let cacher = self.cacher;
        let (process, proxied_port, config) = match cacher.kind() {
            Some(kind) => {
                let target = Target {
                    label: cacher.written().to_string(),
                    kind,
                    program: self.program.clone(),
                    intake: None,
                };
                let proxied_port = (cacher == Cacher::Herdsman).then(free_port).transpose()?;
                let (file, text) = match cacher {
                    Cacher::Herdsman => ("herdsman.toml", herdsman_config(plan, proxied_port)),
                    Cacher::Nginx => ("nginx.conf", nginx_config(plan, dir)),
                    _ => ("haproxy.cfg", haproxy_config(plan)),
                };
                let process = target.start(file, &text, plan.port, dir)?;
                (process, proxied_port, (file.to_string(), text))
            }
            None => {
                let (process, config) = start_varnish(&self.program, plan, dir)?;
                (process, None, config)
            }
        };
        let running = Running {
            cacher,
            process,
            port: plan.port,
            proxied_port,
        };
        Ok((running, config))
    }
}

/// herdsman's: the kit's, its pool cached, and a second listener (`proxied_port`) on a pool of
/// the same origin without a cache.
pub fn herdsman_config(plan: Plan, proxied_port: Option<u16>) -> String {
    herdsman_config_with(
        plan,
        proxied_port,
        &format!("\n[cache]\nmemory = \"{CACHE_MIB}MiB\"\n"),
    )
}

/// `herdsman_config` with `tables` (`[cache]` and what else the run sets) at its end in place of
/// the 256 MiB `[cache]`.
pub fn herdsman_config_with(plan: Plan, proxied_port: Option<u16>, tables: &str) -> String {
    let mut text = proxies::herdsman_config(plan, None);
    // The kit's config ends with its one pool, so this table is that pool's.
    text.push_str("\n[pool.cache]\nenabled = true\n");
    if let Some(port) = proxied_port {
        text.push_str(&format!(
            r#"
[[listener]]
name = "proxied"
bind = "127.0.0.1:{port}"
pool = "uncached"

[[pool]]
name = "uncached"
servers = [{{ name = "b1", addr = "127.0.0.1:{backend}" }}]
"#,
            backend = plan.backend_port
        ));
    }
    text.push_str(tables);
    text
}

/// nginx's: the kit's, with a cache zone and its use in the `location /`.
pub fn nginx_config(plan: Plan, dir: &Path) -> String {
    let http = format!(
        "    proxy_cache_path {}/cache levels=1:2 keys_zone=bench:10m max_size={CACHE_MIB}m \
         inactive=1d use_temp_path=off;\n",
        dir.display()
    );
    let location = "            proxy_cache bench;\n            proxy_cache_lock on;\n            \
                    proxy_cache_background_update on;\n";
    proxies::nginx_config_adding(plan, dir, &http, location)
}

/// HAProxy's: the kit's, whose last section is the backend, with the cache's two rules added to
/// it and the cache defined after it.
pub fn haproxy_config(plan: Plan) -> String {
    let mut text = proxies::haproxy_config(plan);
    text.push_str(&format!(
        "    http-request cache-use bench\n    http-response cache-store bench\n\n\
         cache bench\n    total-max-size {CACHE_MIB}\n    max-object-size 1048576\n    \
         max-age 86400\n"
    ));
    text
}

/// Varnish's VCL: the origin, and the built-in VCL for everything else.
pub fn varnish_vcl(plan: Plan) -> String {
    format!(
        "vcl 4.1;\n\nbackend origin {{\n    .host = \"127.0.0.1\";\n    .port = \"{}\";\n}}\n",
        plan.backend_port
    )
}

/// varnishd's arguments after the VCL file and the working directory: listen, storage, pools,
/// no grace beyond what an answer allows, no management port.
pub fn varnish_args(plan: Plan) -> Vec<String> {
    [
        "-a".to_string(),
        format!("127.0.0.1:{}", plan.port),
        "-s".into(),
        format!("malloc,{CACHE_MIB}m"),
        "-p".into(),
        format!("thread_pools={}", plan.workers),
        "-p".into(),
        "default_grace=0".into(),
        "-T".into(),
        "none".into(),
    ]
    .into()
}

/// How long varnishd may take to compile its VCL and answer.
const VARNISH_START: Duration = Duration::from_secs(30);

fn start_varnish(
    program: &Path,
    plan: Plan,
    dir: &Path,
) -> anyhow::Result<(Supervised, ConfigFile)> {
    let vcl = dir.join("default.vcl");
    let text = varnish_vcl(plan);
    std::fs::write(&vcl, &text).with_context(|| format!("writing {}", vcl.display()))?;
    let args = varnish_args(plan);
    let mut command = Command::new(program);
    // -F: in the foreground; -n: its working directory (shared memory log, compiled VCL) here.
    command
        .arg("-F")
        .arg("-f")
        .arg(&vcl)
        .arg("-n")
        .arg(dir.join("varnish"))
        .args(&args)
        .current_dir(dir);
    let mut process = Supervised::spawn("Varnish", command, &dir.join("output.log"))?;
    process.wait_until_answering(plan.port, VARNISH_START, probe)?;
    let shown = format!(
        "# varnishd -F -f default.vcl -n SCRATCH/varnish {}\n{text}",
        args.join(" ")
    );
    Ok((process, ("default.vcl".to_string(), shown)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::markdown::assert_contains_all;

    const PLAN: Plan = Plan {
        workers: 2,
        port: 4100,
        backend_port: 4200,
        backend_idle: 1000,
        client_connections: 1050,
        descriptor_limit: 20_000,
    };

    #[test]
    fn herdsman_caches_its_pool_and_proxies_the_same_origin_on_a_second_listener() {
        let text = herdsman_config(PLAN, Some(4300));
        assert_contains_all(
            &text,
            &[
                "workers = 2\n",
                "pool = \"backend\"\n",
                "servers = [{ name = \"b1\", addr = \"127.0.0.1:4200\" }]\n\n[pool.cache]\n\
                 enabled = true\n",
                "bind = \"127.0.0.1:4300\"\npool = \"uncached\"\n",
                "[cache]\nmemory = \"256MiB\"\n",
            ],
        );
        let parsed: toml::Table = text.parse().unwrap();
        let pools = parsed["pool"].as_array().unwrap();
        assert!(pools[0].get("cache").is_some());
        assert!(pools[1].get("cache").is_none());
        assert_eq!(parsed["listener"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn nginx_caches_with_its_lock_and_refreshes_in_the_background() {
        let text = nginx_config(PLAN, Path::new("/tmp/x"));
        assert_contains_all(
            &text,
            &[
                "proxy_cache_path /tmp/x/cache levels=1:2 keys_zone=bench:10m max_size=256m",
                "proxy_pass http://backend;\n",
                "proxy_cache bench;\n",
                "proxy_cache_lock on;\n",
                "proxy_cache_background_update on;\n",
                "worker_processes 2;",
            ],
        );
        assert_eq!(text.matches('{').count(), text.matches('}').count());
    }

    #[test]
    fn haproxy_uses_and_stores_in_the_backend() {
        let text = haproxy_config(PLAN);
        assert_contains_all(
            &text,
            &[
                "backend backend\n    server b1 127.0.0.1:4200\n    http-request cache-use bench\n    \
                 http-response cache-store bench\n\ncache bench\n    total-max-size 256\n",
                "max-age 86400\n",
                "nbthread 2\n",
            ],
        );
    }

    #[test]
    fn varnish_has_the_origin_its_pools_and_no_grace_of_its_own() {
        assert!(varnish_vcl(PLAN).contains(".port = \"4200\";"));
        let args = varnish_args(PLAN).join(" ");
        assert_eq!(
            args,
            "-a 127.0.0.1:4100 -s malloc,256m -p thread_pools=2 -p default_grace=0 -T none"
        );
    }
}
