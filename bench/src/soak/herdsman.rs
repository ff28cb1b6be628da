//! herdsman under the soak: the issue's configuration (three servers, HTTP health checks every
//! second with fall 2 and rise 2, `retries = 2`, an access log, the admin API on loopback), and
//! the chaos done the way an operator does it: `herdsman ctl` for states and the upgrade, SIGHUP
//! after editing the file, rename and SIGUSR1 for the log. After an upgrade the serving process is
//! another (the old one's child, in the same process group): its pid is read from
//! `GET /api/workers`, and a guard stops the group should this program die first.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::plan::{Balance, Plan, ServerState, POOL};
use crate::kit::admin_api;
use crate::kit::process::{poll_until, run_with_timeout, GroupGuard, Supervised};
use crate::kit::workers_api::serving_pid;
use crate::kit::{procstat, proxies};

/// How long a `herdsman ctl` command may take.
const CTL_LIMIT: Duration = Duration::from_secs(10);
/// How long a reload may take to show in the metrics, and an upgrade to bring a new pid.
const APPLY_LIMIT: Duration = Duration::from_secs(15);
/// How long herdsman may take to stop after SIGTERM: its `shutdown_grace` (10 s) and more.
const STOP_LIMIT: Duration = Duration::from_secs(20);

/// herdsman, started for one soak.
pub struct Herdsman {
    pub plan: Plan,
    /// The configuration as first written.
    pub first_config: String,
    program: PathBuf,
    balance: Balance,
    /// Rotations so far: the n-th renames the log to `access.log.n`.
    rotations: u32,
    /// The first process, leader of the group every later one stays in.
    process: Supervised,
    /// Declared after `process`: the group is stopped by `process`'s drop first.
    _guard: GroupGuard,
}

impl Herdsman {
    /// Writes the configuration into the plan's directory, starts `program` with it and waits
    /// until both its listener and its admin API answer.
    pub fn start(program: &Path, plan: Plan) -> anyhow::Result<Herdsman> {
        let balance = Balance::RoundRobin;
        let config = config(&plan, balance);
        let mut process = proxies::start_herdsman(program, &config, plan.port, &plan.dir)?;
        admin_api::wait_for_admin(&mut process, plan.admin_port)?;
        let guard = GroupGuard::start(process.pid())?;
        Ok(Herdsman {
            plan,
            first_config: config,
            program: program.to_path_buf(),
            balance,
            rotations: 0,
            process,
            _guard: guard,
        })
    }

    /// The process group: the first process's pid (it was started as the group's leader).
    pub fn group(&self) -> u32 {
        self.process.pid()
    }

    /// The pid of the process serving now, from `GET /api/workers`.
    pub fn serving_pid(&self) -> anyhow::Result<u32> {
        serving_pid(self.plan.admin_port)
    }

    /// `herdsman ctl STATE app/SERVER`.
    pub fn set_state(&mut self, server: &str, state: ServerState) -> anyhow::Result<String> {
        self.ctl(&[&state.to_string(), &format!("{POOL}/{server}")])
    }

    /// Writes the configuration with the other balance algorithm and sends SIGHUP; waits until
    /// `herdsman_config_reloads_total` says it was applied.
    pub fn reload_with_other_balance(&mut self) -> anyhow::Result<String> {
        let pid = self.serving_pid()?;
        let before = read_counters(self.plan.admin_port)?;
        let next = self.balance.other();
        let file = self.plan.dir.join("herdsman.toml");
        std::fs::write(&file, config(&self.plan, next))
            .with_context(|| format!("writing {}", file.display()))?;
        let started = Instant::now();
        signal(pid, libc::SIGHUP)?;
        let after = wait_for(|| {
            let now = read_counters(self.plan.admin_port).ok()?;
            (now.reloads + now.reload_failures > before.reloads + before.reload_failures)
                .then_some(now)
        })
        .context("the reload did not show in herdsman_config_reloads_total")?;
        if after.reload_failures > before.reload_failures {
            bail!(
                "herdsman refused the reload; its log ends: {}",
                self.process.log_tail(3)
            );
        }
        let from = self.balance;
        self.balance = next;
        Ok(format!(
            "{} → {}, applied after {} ms (pid {pid})",
            from.herdsman(),
            next.herdsman(),
            started.elapsed().as_millis()
        ))
    }

    /// Renames the access log to `access.log.N` and sends SIGUSR1 to the serving process.
    pub fn rotate_log(&mut self) -> anyhow::Result<String> {
        let pid = self.serving_pid()?;
        let log = access_log(&self.plan.dir);
        self.rotations += 1;
        let rotated = log.with_extension(format!("log.{}", self.rotations));
        std::fs::rename(&log, &rotated)
            .with_context(|| format!("renaming {} to {}", log.display(), rotated.display()))?;
        signal(pid, libc::SIGUSR1)?;
        Ok(format!(
            "access.log → {} (pid {pid})",
            rotated.file_name().unwrap_or_default().to_string_lossy()
        ))
    }

    /// `herdsman ctl upgrade`, then waits until `/api/workers` names another pid.
    pub fn upgrade(&mut self) -> anyhow::Result<String> {
        let old = self.serving_pid()?;
        let started = Instant::now();
        self.ctl(&["upgrade"])?;
        let new = wait_for(|| self.serving_pid().ok().filter(|&pid| pid != old))
            .with_context(|| format!("no new process serves after `ctl upgrade` (pid {old})"))?;
        Ok(format!(
            "pid {old} → {new}, serving after {} ms",
            started.elapsed().as_millis()
        ))
    }

    /// Fails if no process of herdsman's group is left.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if procstat::group_members(self.group()).is_empty() {
            bail!(
                "no herdsman process is left; its log ends: {}",
                self.process.log_tail(8)
            );
        }
        Ok(())
    }

    /// SIGTERM to every process of the group (the serving one, and an old one still finishing
    /// after an upgrade), and waits until none is left: a graceful stop, after which every
    /// access log line is in its file.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        self.process.stop_group_gracefully(STOP_LIMIT)
    }

    /// Runs `herdsman ctl --admin ADDR ARGS…`; its one line of confirmation, or why it failed.
    fn ctl(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut command = Command::new(&self.program);
        command
            .arg("ctl")
            .arg("--admin")
            .arg(format!("127.0.0.1:{}", self.plan.admin_port))
            .args(args);
        let output = run_with_timeout(command, CTL_LIMIT)?;
        let said = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim().replace('\n', " | ");
        if !output.status.success() {
            bail!(
                "herdsman ctl {} failed: {}",
                args.join(" "),
                said(&output.stderr)
            );
        }
        Ok(said(&output.stdout))
    }
}

/// The access log's path in `dir`; rotated files are beside it as `access.log.N`.
pub fn access_log(dir: &Path) -> PathBuf {
    dir.join("access.log")
}

/// The access log and every rotated file of it in `dir`.
pub fn access_log_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("access.log"))
        })
        .collect();
    files.sort();
    files
}

fn signal(pid: u32, signal: libc::c_int) -> anyhow::Result<()> {
    // SAFETY: kill(2) on a pid herdsman's admin API just gave as its own.
    if unsafe { libc::kill(pid as libc::pid_t, signal) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("signal {signal} to herdsman (pid {pid})"));
    }
    Ok(())
}

/// Polls `check` every 20 ms until it gives a value, at most `APPLY_LIMIT`.
fn wait_for<T>(check: impl FnMut() -> Option<T>) -> Option<T> {
    poll_until(APPLY_LIMIT, Duration::from_millis(20), check)
}

/// The counters of one herdsman process that the soak follows, from `/metrics`. Each process
/// counts from its start: a binary upgrade starts them again from zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// `herdsman_requests_total` of the pool, every status class and "none".
    pub requests: u64,
    /// `herdsman_retries_total` of the pool.
    pub retries: u64,
    pub reloads: u64,
    pub reload_failures: u64,
}

/// Reads `/metrics`.
pub fn read_counters(admin_port: u16) -> anyhow::Result<Counters> {
    let body = admin_api::get(admin_port, "/metrics")?;
    Ok(parse_counters(&String::from_utf8_lossy(&body)))
}

/// The counters in a `/metrics` text; a missing one is 0.
pub fn parse_counters(text: &str) -> Counters {
    let pool = format!("pool=\"{POOL}\"");
    let mut counters = Counters::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let value = value as u64;
        let name = series.split('{').next().unwrap_or(series);
        match name {
            "herdsman_requests_total" if series.contains(&pool) => counters.requests += value,
            "herdsman_retries_total" if series.contains(&pool) => counters.retries += value,
            "herdsman_config_reloads_total" => counters.reloads += value,
            "herdsman_config_reload_failures_total" => counters.reload_failures += value,
            _ => {}
        }
    }
    counters
}

/// herdsman's configuration for the soak: `workers`, the listener with its access log, the pool
/// of three servers with `retries = 2` and HTTP health checks (interval 1 s, fall 2, rise 2),
/// the admin API; every other key at herdsman's default, but for the idle timeouts and the retry
/// budget's floor when the plan sets them.
pub fn config(plan: &Plan, balance: Balance) -> String {
    let timeouts = plan.idle.map_or(String::new(), |idle| {
        format!(
            "\n[timeouts]\nclient_idle = \"{}s\"\nbackend_idle = \"{}s\"\n",
            idle.client_seconds, idle.backend_seconds
        )
    });
    let floor = plan.retry_budget_floor.map_or(String::new(), |floor| {
        format!("retry_budget_floor = {floor}\n")
    });
    let servers: Vec<String> = plan
        .servers
        .iter()
        .map(|(name, port)| format!("  {{ name = \"{name}\", addr = \"127.0.0.1:{port}\" }},"))
        .collect();
    format!(
        r#"workers = {workers}
{timeouts}
[[listener]]
name = "soak"
bind = "127.0.0.1:{port}"
pool = "{POOL}"
access_log = "{access_log}"

[[pool]]
name = "{POOL}"
balance = "{balance}"
retries = 2
{floor}servers = [
{servers}
]

[pool.health]
check = "http"
interval = "1s"
fall = 2
rise = 2

[admin]
bind = "127.0.0.1:{admin_port}"
"#,
        workers = plan.workers,
        port = plan.port,
        access_log = access_log(&plan.dir).display(),
        balance = balance.herdsman(),
        servers = servers.join("\n"),
        admin_port = plan.admin_port,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::plan::Idle;

    fn plan() -> Plan {
        Plan {
            workers: 2,
            port: 4100,
            admin_port: 4101,
            servers: vec![("s1".into(), 4201), ("s2".into(), 4202)],
            idle: None,
            retry_budget_floor: None,
            dir: PathBuf::from("/tmp/x"),
        }
    }

    #[test]
    fn the_configuration_is_the_issue_s() {
        let text = config(&plan(), Balance::RoundRobin);
        for line in [
            "workers = 2\n",
            "bind = \"127.0.0.1:4100\"\n",
            "access_log = \"/tmp/x/access.log\"\n",
            "balance = \"round-robin\"\n",
            "retries = 2\n",
            "{ name = \"s2\", addr = \"127.0.0.1:4202\" },\n",
            "[pool.health]\ncheck = \"http\"\ninterval = \"1s\"\nfall = 2\nrise = 2\n",
            "[admin]\nbind = \"127.0.0.1:4101\"\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(!text.contains("[timeouts]") && !text.contains("retry_budget_floor"));
        let other = config(&plan(), Balance::RoundRobin.other());
        assert!(other.contains("balance = \"least-conn\"\n"));
    }

    #[test]
    fn idle_timeouts_and_the_floor_are_written_only_when_set() {
        let plan = Plan {
            idle: Some(Idle {
                client_seconds: 3,
                backend_seconds: 1,
            }),
            retry_budget_floor: Some(0),
            ..plan()
        };
        let text = config(&plan, Balance::LeastConn);
        assert!(text.contains("[timeouts]\nclient_idle = \"3s\"\nbackend_idle = \"1s\"\n"));
        assert!(text.contains("retries = 2\nretry_budget_floor = 0\nservers = ["));
        // Top-level keys before the first table.
        assert!(text.find("workers").unwrap() < text.find('[').unwrap());
    }

    #[test]
    fn counters_are_read_from_the_metrics_text() {
        let text = "\
# HELP herdsman_requests_total Requests routed to the pool.
# TYPE herdsman_requests_total counter
herdsman_requests_total{pool=\"app\",class=\"2xx\"} 1000
herdsman_requests_total{pool=\"app\",class=\"5xx\"} 7
herdsman_requests_total{pool=\"app\",class=\"none\"} 3
herdsman_requests_total{pool=\"other\",class=\"2xx\"} 99
herdsman_retries_total{pool=\"app\"} 12
herdsman_config_reloads_total 2
herdsman_config_reload_failures_total 0
";
        assert_eq!(
            parse_counters(text),
            Counters {
                requests: 1010,
                retries: 12,
                reloads: 2,
                reload_failures: 0
            }
        );
    }

    #[test]
    fn rotated_logs_are_found_beside_the_log() {
        let dir = std::env::temp_dir().join(format!("soak-logs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["access.log", "access.log.1", "access.log.2", "herdsman.log"] {
            std::fs::write(dir.join(name), "x\n").unwrap();
        }
        let names: Vec<String> = access_log_files(&dir)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["access.log", "access.log.1", "access.log.2"]);
        assert_eq!(
            access_log(&dir)
                .with_extension("log.3")
                .file_name()
                .unwrap(),
            "access.log.3"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
