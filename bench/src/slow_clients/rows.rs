//! The rows of `slow-clients` and what each runs: herdsman with its buffering defaults, nginx with
//! its own (`proxy_request_buffering on; proxy_buffering on;`), and the control, herdsman with
//! buffering off, which must lose. Each run gets a fresh stack: the sync server, then the row's
//! proxy in front of it with the configuration written for it; both stop when it is dropped.

use std::fmt;
use std::path::Path;

use super::server::{self, SyncServerArgs};
use super::settings::Settings;
use crate::kit::admin_api;
use crate::kit::process::{free_port, Supervised};
use crate::kit::proxies::{self, Plan, ProxyKind, Target};
use crate::kit::stack::listener_and_admin_ports;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Row {
    Herdsman,
    Nginx,
    Control,
}

impl Row {
    pub const ALL: [Row; 3] = [Row::Herdsman, Row::Nginx, Row::Control];

    /// The row's name in the tables.
    pub fn label(self) -> &'static str {
        match self {
            Row::Herdsman => "herdsman",
            Row::Nginx => "nginx",
            Row::Control => "control: herdsman, buffering off",
        }
    }

    /// "herdsman, nginx, …".
    pub fn names(rows: &[Row]) -> String {
        let names: Vec<&str> = rows.iter().map(|r| r.label()).collect();
        names.join(", ")
    }

    /// The program the row runs.
    pub fn kind(self) -> ProxyKind {
        match self {
            Row::Nginx => ProxyKind::Nginx,
            Row::Herdsman | Row::Control => ProxyKind::Herdsman,
        }
    }
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// herdsman's `[buffering]` table for a row: the one place that says what each herdsman row
/// buffers.
///
/// herdsman's `[buffering]` for `row`: its defaults with temporary files in the run's own
/// directory (`temp_dir`, made with it and removed with it) for herdsman; request and response
/// buffering off for the control.
pub fn buffering_table(row: Row, temp_dir: &Path) -> String {
    let temp_dir = format!("temp_dir = \"{}\"", temp_dir.display());
    match row {
        Row::Herdsman => format!("\n[buffering]\n{temp_dir}\n"),
        Row::Control => format!(
            "\n[buffering]\nrequest_buffer_memory = 0\nresponse_buffer_memory = 0\n{temp_dir}\n"
        ),
        Row::Nginx => String::new(),
    }
}

/// nginx's buffering, its defaults spelled out, in its `http` block.
const NGINX_BUFFERING: &str =
    "    # nginx's defaults, spelled out: a request body is read whole before the server is\n    \
     # involved, and an answer as fast as the server sends it (memory, then proxy_temp_path).\n    \
     proxy_request_buffering on;\n    proxy_buffering on;\n";

/// The line of `proxies::nginx_config`'s `http` block the buffering lines follow.
const NGINX_HTTP_FIRST_LINE: &str = "    access_log off;\n";

/// What a row's proxy is planned for: `proxies::Plan` sized for every slow client and wrk's.
fn plan(settings: &Settings, port: u16, server_port: u16, descriptor_limit: u64) -> Plan {
    Plan {
        workers: settings.workers,
        port,
        backend_port: server_port,
        backend_idle: 64,
        client_connections: u32::try_from(settings.proxy_connections()).unwrap_or(u32::MAX),
        descriptor_limit,
    }
}

/// The row's configuration file name and text, for a proxy on `port` (with herdsman's admin API
/// on `admin_port`) in front of the server on `server_port`; `dir` is the run's own directory.
pub fn config(row: Row, plan: Plan, admin_port: u16, dir: &Path) -> (&'static str, String) {
    match row {
        Row::Herdsman | Row::Control => {
            let mut text = proxies::herdsman_config(plan, None);
            text.push_str(&buffering_table(row, &dir.join("temp")));
            text.push_str(&format!("\n[admin]\nbind = \"127.0.0.1:{admin_port}\"\n"));
            ("herdsman.toml", text)
        }
        Row::Nginx => {
            let text = proxies::nginx_config(plan, dir).replacen(
                NGINX_HTTP_FIRST_LINE,
                &format!("{NGINX_HTTP_FIRST_LINE}{NGINX_BUFFERING}"),
                1,
            );
            ("nginx.conf", text)
        }
    }
}

/// One run's server and proxy.
pub struct Stack {
    /// The proxy's listener on 127.0.0.1.
    pub port: u16,
    /// herdsman's admin API on 127.0.0.1; None for nginx.
    pub admin_port: Option<u16>,
    /// The proxy's configuration file, as written.
    pub config: String,
    /// Declared before the server so that it stops first.
    pub proxy: Supervised,
    pub server: Supervised,
}

impl Stack {
    /// Starts the sync server, then `row`'s proxy (`program`) in front of it, in `dir`, and waits
    /// until both answer (and herdsman's admin API).
    pub fn start(
        row: Row,
        program: &Path,
        settings: &Settings,
        descriptor_limit: u64,
        dir: &Path,
    ) -> anyhow::Result<Stack> {
        std::fs::create_dir_all(dir.join("temp"))?;
        let server_args = SyncServerArgs {
            listen: ([127, 0, 0, 1], free_port()?).into(),
            workers: settings.server_workers,
            answer_bytes: settings.answer_bytes,
            send_buffer: settings.server_send_buffer,
        };
        let server = server::start(&server_args, dir)?;
        let (port, admin_port) = listener_and_admin_ports()?;
        let plan = plan(settings, port, server_args.listen.port(), descriptor_limit);
        let (file, config) = config(row, plan, admin_port, dir);
        let target = Target {
            label: row.kind().to_string(),
            kind: row.kind(),
            program: program.to_path_buf(),
            intake: None,
        };
        let mut proxy = target.start(file, &config, port, dir)?;
        let admin_port = (row.kind() == ProxyKind::Herdsman).then_some(admin_port);
        if let Some(admin_port) = admin_port {
            admin_api::wait_for_admin(&mut proxy, admin_port)?;
        }
        Ok(Stack {
            port,
            admin_port,
            config,
            proxy,
            server,
        })
    }

    /// Fails with the reason if either process has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        self.proxy.check_running()?;
        self.server.check_running()
    }

    /// herdsman's buffering counters from `/metrics` (every `herdsman_` series whose name speaks
    /// of buffers, spills, temporary files or slow bodies, summed over its labels), in the order
    /// they come; empty for nginx.
    pub fn buffering_metrics(&self) -> anyhow::Result<Vec<(String, f64)>> {
        let Some(admin_port) = self.admin_port else {
            return Ok(Vec::new());
        };
        let body = admin_api::get(admin_port, "/metrics")?;
        Ok(buffering_series(&String::from_utf8_lossy(&body)))
    }
}

/// The series of a Prometheus text page that speak of buffering, summed over their labels.
fn buffering_series(page: &str) -> Vec<(String, f64)> {
    let mut sums: Vec<(String, f64)> = Vec::new();
    for line in page.lines().filter(|l| l.starts_with("herdsman_")) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        // Summed over workers; kept apart by where the bytes are (memory or disk).
        let name = match series.contains("where=") {
            true => series,
            false => series.split('{').next().unwrap_or(series),
        };
        let about_buffering = ["buffer", "spill", "temp", "slow_re", "full"]
            .iter()
            .any(|word| name.contains(word));
        let (true, Ok(value)) = (about_buffering, value.parse::<f64>()) else {
            continue;
        };
        match sums.iter_mut().find(|(n, _)| n == name) {
            Some((_, sum)) => *sum += value,
            None => sums.push((name.to_string(), value)),
        }
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        super::super::settings::resolve(&[])
    }

    #[test]
    fn the_control_turns_request_buffering_off_and_herdsman_keeps_its_defaults() {
        let plan = plan(&settings(), 4100, 4200, 20_000);
        let dir = Path::new("/tmp/run");
        let (file, herdsman) = config(Row::Herdsman, plan, 4300, dir);
        assert_eq!(file, "herdsman.toml");
        assert!(!herdsman.contains("request_buffer_memory"), "{herdsman}");
        assert!(herdsman.contains("\n[admin]\nbind = \"127.0.0.1:4300\"\n"));
        let (_, control) = config(Row::Control, plan, 4300, dir);
        assert!(control.contains("[buffering]\nrequest_buffer_memory = 0\n"));
        assert!(control.contains("response_buffer_memory = 0\n"));
        for text in [&herdsman, &control] {
            assert!(text.contains("temp_dir = \"/tmp/run/temp\"\n"));
        }
        // Everything else is compare's configuration.
        for text in [&herdsman, &control] {
            assert!(text.starts_with(&proxies::herdsman_config(plan, None)));
            assert!(text.contains("addr = \"127.0.0.1:4200\""));
        }
    }

    #[test]
    fn nginx_buffers_as_by_default_and_has_room_for_every_connection() {
        let plan = plan(&settings(), 4100, 4200, 20_000);
        let (file, nginx) = config(Row::Nginx, plan, 0, Path::new("/tmp/run"));
        assert_eq!(file, "nginx.conf");
        let http = nginx.split("http {").nth(1).unwrap();
        assert!(http.contains("proxy_request_buffering on;\n    proxy_buffering on;\n"));
        assert!(http.contains("proxy_temp_path /tmp/run/proxy;"));
        // 4,100 connections, 64 idle server connections and spares, 16/15 of them.
        assert!(nginx.contains("worker_connections 4549;"), "{nginx}");
    }

    #[test]
    fn buffering_counters_are_summed_over_their_labels() {
        let page = "# HELP herdsman_worker_buffered_request_bodies_total …\n\
                    herdsman_worker_buffered_request_bodies_total{worker=\"0\"} 12\n\
                    herdsman_worker_buffered_request_bodies_total{worker=\"1\"} 30\n\
                    herdsman_worker_slow_request_bodies_total{worker=\"0\"} 5\n\
                    herdsman_requests_total{pool=\"backend\"} 900\n\
                    herdsman_buffer_reserved_bytes{where=\"disk\"} 1.5e9\n";
        assert_eq!(
            buffering_series(page),
            vec![
                (
                    "herdsman_worker_buffered_request_bodies_total".to_string(),
                    42.0
                ),
                ("herdsman_worker_slow_request_bodies_total".to_string(), 5.0),
                (
                    "herdsman_buffer_reserved_bytes{where=\"disk\"}".to_string(),
                    1.5e9
                ),
            ]
        );
    }
}
