//! HAProxy under the same soak, configured as herdsman is by default (see `config`), in
//! master-worker mode (`-W`): a reload is HAProxy's own (SIGUSR2 to the master, which starts new
//! workers with the file as it now is, the old ones finishing their connections), and so is its
//! binary upgrade (the master executes the binary again on that same signal). Server states go
//! through its runtime API on a stats socket (`set server app/s1 state drain|maint|ready`).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::plan::{Balance, Plan, ServerState, HERDSMAN_IDLE, POOL};
use crate::kit::process::Supervised;
use crate::kit::procstat;

/// How long HAProxy may take to serve once started.
const START_LIMIT: Duration = Duration::from_secs(15);
/// How long a reload may take to show a new worker.
const RELOAD_LIMIT: Duration = Duration::from_secs(15);
/// How long a runtime API command may take.
const SOCKET_LIMIT: Duration = Duration::from_secs(5);
/// How long HAProxy may take to stop after SIGUSR1 (soft stop) before it is made to.
const STOP_LIMIT: Duration = Duration::from_secs(20);

/// HAProxy, started for one soak.
pub struct Haproxy {
    pub plan: Plan,
    pub first_config: String,
    balance: Balance,
    /// The master; the workers are its children, in its process group.
    process: Supervised,
}

impl Haproxy {
    /// Writes the configuration into the plan's directory, starts `program -W -db` with it and
    /// waits until it serves and its stats socket answers.
    pub fn start(program: &Path, plan: Plan) -> anyhow::Result<Haproxy> {
        let balance = Balance::RoundRobin;
        let text = config(&plan, balance);
        let file = config_path(&plan.dir);
        std::fs::write(&file, &text).with_context(|| format!("writing {}", file.display()))?;
        let mut command = Command::new(program);
        command
            .arg("-W")
            .arg("-db")
            .arg("-f")
            .arg(&file)
            .current_dir(&plan.dir);
        let mut process = Supervised::spawn("haproxy", command, &plan.dir.join("haproxy.log"))?;
        process.wait_until_serving(plan.port, START_LIMIT)?;
        let haproxy = Haproxy {
            plan,
            first_config: text,
            balance,
            process,
        };
        haproxy
            .command("show info")
            .context("HAProxy's stats socket")?;
        Ok(haproxy)
    }

    pub fn group(&self) -> u32 {
        self.process.pid()
    }

    /// `set server app/SERVER state STATE` on the stats socket.
    pub fn set_state(&mut self, server: &str, state: ServerState) -> anyhow::Result<String> {
        let command = format!("set server {POOL}/{server} state {state}");
        let answer = self.command(&command)?;
        if !answer.trim().is_empty() {
            bail!("HAProxy answered {command:?} with: {}", answer.trim());
        }
        Ok(command)
    }

    /// Writes the configuration with the other balance algorithm and reloads.
    pub fn reload_with_other_balance(&mut self) -> anyhow::Result<String> {
        let next = self.balance.other();
        let file = config_path(&self.plan.dir);
        std::fs::write(&file, config(&self.plan, next))
            .with_context(|| format!("writing {}", file.display()))?;
        let note = self.reload("reload")?;
        let from = self.balance;
        self.balance = next;
        Ok(format!("{} → {}, {note}", from.haproxy(), next.haproxy()))
    }

    /// SIGUSR2 to the master, and waits until a new worker serves (a process of the group that
    /// was not there before).
    pub fn reload(&mut self, what: &str) -> anyhow::Result<String> {
        let before = procstat::group_members(self.group());
        let started = Instant::now();
        self.process.signal(libc::SIGUSR2)?;
        loop {
            self.process.check_running()?;
            let now = procstat::group_members(self.group());
            if let Some(new) = now.iter().find(|pid| !before.contains(pid)) {
                return Ok(format!(
                    "new worker pid {new} after {} ms",
                    started.elapsed().as_millis()
                ));
            }
            if started.elapsed() >= RELOAD_LIMIT {
                bail!(
                    "no new worker {RELOAD_LIMIT:?} after the {what}; its log ends: {}",
                    self.process.log_tail(5)
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        self.process.check_running()
    }

    /// SIGUSR1 to the master, HAProxy's soft stop (workers finish their connections), and waits
    /// until it has exited; then the group is made sure of.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        self.process.signal(libc::SIGUSR1)?;
        let ended = self.process.wait_for_exit(STOP_LIMIT);
        self.process.stop();
        ended.map(|_| ())
    }

    /// One command on the stats socket; HAProxy's answer (empty when a `set` succeeded).
    fn command(&self, line: &str) -> anyhow::Result<String> {
        let path = socket_path(&self.plan.dir);
        let mut stream = UnixStream::connect(&path)
            .with_context(|| format!("connecting to {}", path.display()))?;
        stream.set_read_timeout(Some(SOCKET_LIMIT))?;
        stream.set_write_timeout(Some(SOCKET_LIMIT))?;
        stream.write_all(format!("{line}\n").as_bytes())?;
        // Without `prompt`, HAProxy answers one command and closes.
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .with_context(|| format!("reading HAProxy's answer to {line:?}"))?;
        Ok(answer)
    }
}

/// How HAProxy was made equivalent, for the results file (the reasons are at `config`).
pub const EQUIVALENCE: &str = "HAProxy 2.6 is configured as herdsman is by default where it has \
the same thing: `nbthread` = workers; keep-alive on both sides with `http-reuse always`; `retries 2` \
with `option redispatch 1` and `retry-on conn-failure empty-response` (herdsman's default \
`retry_on` is connect failures, empty responses and resets before a response, which HAProxy counts \
as empty responses; neither retries a response timeout); HTTP checks `GET /` with `inter 1s fall 2 \
rise 2`; herdsman's timeouts (connect 2 s, client header 10 s, server 60 s, queue 2 s, client idle); \
`hard-stop-after 10s` (herdsman's `shutdown_grace`). It runs in master-worker mode (`-W`) with \
`expose-fd listeners` on its stats socket: drain, maint and ready are `set server app/sN state …` \
on that socket; the reload rewrites `balance` (roundrobin ↔ leastconn) and sends the master \
SIGUSR2; the upgrade is the same signal without a change (the master executes the binary again and \
starts new workers, the old ones finishing their connections). It has no passive ejection \
(herdsman's `[pool.passive]` is on by default; HAProxy's `observe` is not) and no access log: it \
logs only to syslog, so the log rotation is skipped for it.";

fn config_path(dir: &Path) -> PathBuf {
    dir.join("haproxy.cfg")
}

fn socket_path(dir: &Path) -> PathBuf {
    dir.join("haproxy.sock")
}

/// HAProxy's configuration, equivalent to herdsman's defaults where HAProxy has the same thing:
///
/// - `nbthread` = herdsman's `workers`; keep-alive on both sides; idle server connections shared
///   by any request (`http-reuse always`), as herdsman's are;
/// - `retries 2` with `option redispatch 1` (each retry goes to another server, as herdsman's do)
///   and `retry-on conn-failure empty-response`: herdsman's default `retry_on` is connect
///   failures, empty responses and resets before a response, and HAProxy counts a reset before
///   any byte of response as an empty response; neither retries a response timeout by default;
/// - HTTP checks `GET /` every 1 s, fall 2, rise 2, like `[pool.health]`;
/// - herdsman's timeouts: connect 2 s, client header 10 s, server response 60 s, queue 2 s, and
///   the client idle timeout (60 s, or the short run's);
/// - the stats socket with `expose-fd listeners`, so that a reload hands the listening socket
///   over instead of closing it (herdsman's upgrade does the same), and old workers stopped 10 s
///   after a reload at the latest (`hard-stop-after`, herdsman's `shutdown_grace`).
///
/// No passive ejection: herdsman's `[pool.passive]` is on by default, HAProxy's `observe` is not.
/// No access log: HAProxy logs only to syslog; there is no file to count or rotate.
pub fn config(plan: &Plan, balance: Balance) -> String {
    let idle = plan.idle.unwrap_or(HERDSMAN_IDLE).client_seconds;
    let servers: Vec<String> = plan
        .servers
        .iter()
        .map(|(name, port)| format!("    server {name} 127.0.0.1:{port}"))
        .collect();
    format!(
        r#"global
    nbthread {workers}
    maxconn 4096
    stats socket {socket} mode 600 level admin expose-fd listeners
    hard-stop-after 10s

defaults
    mode http
    option http-keep-alive
    http-reuse always
    retries 2
    option redispatch 1
    retry-on conn-failure empty-response
    timeout connect 2s
    timeout http-request 10s
    timeout client {idle}s
    timeout http-keep-alive {idle}s
    timeout server 60s
    timeout queue 2s

frontend soak
    bind 127.0.0.1:{port}
    default_backend {POOL}

backend {POOL}
    balance {balance}
    option httpchk GET /
    default-server check inter 1s fall 2 rise 2
{servers}
"#,
        workers = plan.workers,
        socket = socket_path(&plan.dir).display(),
        port = plan.port,
        balance = balance.haproxy(),
        servers = servers.join("\n"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_matches_herdsman_s_defaults() {
        let plan = Plan {
            workers: 2,
            port: 4100,
            admin_port: 4101,
            servers: vec![("s1".into(), 4201), ("s3".into(), 4203)],
            idle: None,
            retry_budget_floor: None,
            dir: PathBuf::from("/tmp/x"),
        };
        let text = config(&plan, Balance::RoundRobin);
        for line in [
            "nbthread 2\n",
            "stats socket /tmp/x/haproxy.sock mode 600 level admin expose-fd listeners\n",
            "retries 2\n",
            "option redispatch 1\n",
            "retry-on conn-failure empty-response\n",
            "timeout client 60s\n",
            "bind 127.0.0.1:4100\n",
            "balance roundrobin\n",
            "default-server check inter 1s fall 2 rise 2\n",
            "server s3 127.0.0.1:4203\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(config(&plan, Balance::LeastConn).contains("balance leastconn\n"));
    }
}
