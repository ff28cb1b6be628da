//! herdsman for `health-checks`: one pool of every server, each at its own loopback address on the
//! in-bench server's port, checked over HTTP at the interval asked; one worker, no traffic; the
//! admin API on loopback. And what is read of it: its CPU and its checker thread's from /proc, the
//! checker's CPU and the snapshot generation from `/metrics`, the state changes it logged.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::server::address;
use super::settings::{Scenario, Settings};
use crate::kit::admin_api::{self, metric_sum};
use crate::kit::process::Supervised;
use crate::kit::procstat::{self, CpuTime};
use crate::kit::proxies;
use crate::kit::stack::listener_and_admin_ports;

/// The checker thread's name (`herdsman-health`, as `health_check.rs` names it).
const CHECKER_THREAD: &str = "herdsman-health";

/// The metric of the checker thread's CPU (absent from builds before it).
const CHECKER_METRIC: &str = "herdsman_health_checker_cpu_seconds_total";

/// The metric that grows with every snapshot published.
const GENERATION_METRIC: &str = "herdsman_config_generation";

/// What herdsman logs when checks take a server out, and bring it back.
const DOWN: &str = "server down";
const UP: &str = "server up again";

/// The configuration: a listener (its pool is the checked one, so `GET /` reaches a server), the
/// pool with `[pool.health]` as `scenario` checks, and the admin API.
pub fn config(
    settings: &Settings,
    scenario: Scenario,
    port: u16,
    admin_port: u16,
    health_port: u16,
) -> String {
    let mut text = format!(
        "workers = 1\n\n[[listener]]\nname = \"bench\"\nbind = \"127.0.0.1:{port}\"\n\
         pool = \"checked\"\n\n[[pool]]\nname = \"checked\"\nservers = [\n"
    );
    for index in 0..settings.servers {
        let _ = writeln!(
            text,
            "  {{ name = \"s{index}\", addr = \"{}:{health_port}\" }},",
            address(index)
        );
    }
    let _ = write!(
        text,
        "]\n\n[pool.health]\ncheck = \"{}\"\npath = \"/healthz\"\ninterval = \"{}ms\"\n\n\
         [admin]\nbind = \"127.0.0.1:{admin_port}\"\n",
        scenario.check(),
        settings.interval.as_millis()
    );
    text
}

/// The configuration as the results file shows it: the server list cut to its first three.
pub fn config_shown(config: &str, servers: u32) -> String {
    let mut shown = String::new();
    let mut listed = 0;
    for line in config.lines() {
        if line.starts_with("  { name = \"s") {
            listed += 1;
            if listed == 4 {
                let _ = writeln!(shown, "  # … {servers} servers in all, to 127.0.x.y");
            }
            if listed > 3 {
                continue;
            }
        }
        let _ = writeln!(shown, "{line}");
    }
    shown
}

/// One herdsman, started for one run.
pub struct Herdsman {
    pub admin_port: u16,
    pub config: String,
    log: PathBuf,
    process: Supervised,
}

/// What is read of herdsman at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    pub at: Instant,
    pub process: CpuTime,
    /// The checker thread's, from /proc.
    pub checker: Option<CpuTime>,
    /// Servers taken out, and brought back, by checks so far (herdsman's log).
    pub downs: usize,
    pub ups: usize,
}

/// What `/metrics` says at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scrape {
    /// The checker's CPU seconds, user and system together; None from a build without it.
    pub checker_seconds: Option<f64>,
    pub generation: Option<f64>,
    /// How long the scrape took: `/metrics` has a series per server.
    pub took: Duration,
}

impl Herdsman {
    /// Starts `program` with `settings`' pool on `health_port`, checked as `scenario` says, its
    /// files in `dir`; returns once
    /// both its listener and its admin API answer.
    pub fn start(
        program: &Path,
        settings: &Settings,
        scenario: Scenario,
        health_port: u16,
        dir: &Path,
    ) -> anyhow::Result<Herdsman> {
        let (port, admin_port) = listener_and_admin_ports()?;
        let config = config(settings, scenario, port, admin_port, health_port);
        let mut process = proxies::start_herdsman(program, &config, port, dir)?;
        admin_api::wait_for_admin(&mut process, admin_port)?;
        Ok(Herdsman {
            admin_port,
            config,
            log: dir.join("herdsman.log"),
            process,
        })
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Fails with the reason if herdsman has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        self.process.check_running()
    }

    /// Its CPU, its checker's, and the state changes logged, now.
    pub fn read(&self) -> anyhow::Result<Reading> {
        let pid = self.pid();
        let at = Instant::now();
        let process = procstat::process_cpu(pid)
            .ok_or_else(|| anyhow::anyhow!("herdsman (pid {pid}) has gone"))?;
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        Ok(Reading {
            at,
            process,
            checker: procstat::thread_cpu(pid, CHECKER_THREAD),
            downs: log.matches(DOWN).count(),
            ups: log.matches(UP).count(),
        })
    }

    /// `GET /metrics`, and the checker's CPU and the generation in it.
    pub fn scrape(&self) -> anyhow::Result<Scrape> {
        let started = Instant::now();
        let body = admin_api::get(self.admin_port, "/metrics")?;
        let took = started.elapsed();
        let text = String::from_utf8_lossy(&body);
        Ok(Scrape {
            checker_seconds: metric_sum(&text, CHECKER_METRIC),
            generation: metric_sum(&text, GENERATION_METRIC),
            took,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::settings::parse_args;

    #[test]
    fn the_pool_lists_every_address_on_the_one_port() {
        let args = parse_args::<super::super::HealthChecksArgs>(
            "health-checks",
            &["--servers", "5", "--interval-ms", "500"],
        )
        .unwrap();
        let settings = Settings::resolve(&args, Path::new("/w"));
        let text = config(&settings, Scenario::Steady, 4100, 4200, 4300);
        assert!(text.contains("  { name = \"s0\", addr = \"127.0.1.1:4300\" },\n"));
        assert!(text.contains("  { name = \"s4\", addr = \"127.0.1.5:4300\" },\n]"));
        assert!(text.contains(
            "[pool.health]\ncheck = \"http\"\npath = \"/healthz\"\ninterval = \"500ms\"\n"
        ));
        let tcp = config(&settings, Scenario::Tcp, 4100, 4200, 4300);
        assert!(tcp.contains("check = \"tcp\""));
        assert!(text.contains("bind = \"127.0.0.1:4200\""));
        let shown = config_shown(&text, 5);
        assert!(shown.contains("s2\"") && !shown.contains("s3\""), "{shown}");
        assert!(shown.contains("# … 5 servers in all"), "{shown}");
    }
}
