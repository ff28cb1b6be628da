//! `herdsman-bench h2-attacks`: what HTTP/2 attacks from one connection cost herdsman's other
//! clients and its servers. herdsman (release build, one worker, its defaults plus `h2c = true`
//! and a request limit per connection h2load does not meet) in front of this program's fast
//! HTTP/1.1 backend; h2load's 50 HTTP/2 clients measured alone (the baseline), then beside each
//! attack in turn, for three rounds (`attacks`: connections alone as a control; rapid reset, at
//! once and after the request reached the server; CONTINUATION, SETTINGS, PING, empty-DATA,
//! WINDOW_UPDATE and PRIORITY floods; HPACK table-size abuse and an HPACK bomb; a stream never
//! read and a slow reader of 1 MiB), each from one connection at a time, opened again whenever
//! herdsman ends it, at most 100 a second; then each attack alone, for what its connections cost
//! herdsman. Reported per attack: the legitimate requests/s and p99 against the baseline (medians
//! over the rounds), how the attacker's connections ended (GOAWAY and its code, a reset stream)
//! after how many frames and how long, the requests the attack caused at a server (its requests
//! go, by `:authority`, to a backend of their own), the floods herdsman counted, where the CPU
//! went and herdsman's CPU per attacking connection. Everything on 127.0.0.1; every process it
//! starts is stopped when it returns.
//!
//! Layout:
//! - `settings` — the options, the full and the short defaults
//! - `frames`   — HTTP/2 frames and HPACK blocks written by hand, and read back
//! - `attacks`  — each attack's frames and the attacking connections' loop
//! - `legit`    — the legitimate clients (h2load) and their figures
//! - `report`   — the table and the results file

mod attacks;
mod frames;
mod legit;
mod report;
mod settings;

pub use settings::H2AttacksArgs;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::kit::cpu::{CpuClock, Measured};
use crate::kit::process::{free_port, probe, raise_descriptor_limit, Supervised};
use crate::kit::results::RunFacts;
use crate::kit::scratch::ScratchDir;
use crate::kit::{admin_api, backend, environment, procstat, server_status, tools};
use attacks::AttackTally;
use report::{Alone, AttackRun, Periods, Session};
use settings::Settings;

/// Where herdsman listens and forwards.
#[derive(Debug, Clone, Copy)]
struct Ports {
    listener: u16,
    admin: u16,
    /// The legitimate clients' server.
    backend: u16,
    /// The server the attacks' requests are routed to.
    attacked: u16,
}

pub fn run(args: H2AttacksArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    raise_descriptor_limit()?;
    let settings = Settings::resolve(&args, &workspace);
    let herdsman = match &args.herdsman {
        Some(path) => path.clone(),
        None => tools::herdsman_binary_in_target_dir(&workspace, args.output.no_build)?,
    };
    let h2load = tools::ensure_installed(&[&tools::H2LOAD])?.remove(0);
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let mut setup = environment::machine_lines(&herdsman, busy);
    setup.push((
        "h2load".into(),
        tools::version_line(&h2load, &["--version"]),
    ));
    let mut session = Session {
        facts: RunFacts::new(setup),
        settings: settings.clone(),
        baseline: Periods::default(),
        idle_cpu: None,
        runs: Vec::new(),
        failure: None,
    };
    let scratch = ScratchDir::create()?;
    let started = Instant::now();
    eprintln!(
        "h2-attacks: {} legitimate clients, {} s alone and beside each of {} attacks",
        settings.clients,
        settings.seconds,
        settings.attacks.len()
    );
    let outcome = measure(&settings, &herdsman, &h2load, scratch.path(), &mut session);
    if let Err(e) = &outcome {
        eprintln!("h2-attacks: stopped: {e:#}");
        session.failure = Some(format!("{e:#}"));
    }
    if session.baseline.legit.is_empty() {
        // Nothing measured: an earlier results file is worth more than an empty one.
        return outcome;
    }
    session.facts.end(started);
    print!("{}\n{}", session.table(), session.cpu_table());
    if let Some(dir) = settings.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&settings.out, session.markdown())
        .with_context(|| format!("writing {}", settings.out.display()))?;
    eprintln!(
        "wrote {} in {:.0} s",
        settings.out.display(),
        started.elapsed().as_secs_f64()
    );
    outcome
}

/// The baseline and every attack, into `session`.
fn measure(
    settings: &Settings,
    herdsman: &Path,
    h2load: &Path,
    dir: &Path,
    session: &mut Session,
) -> anyhow::Result<()> {
    let ports = Ports {
        listener: free_port()?,
        admin: free_port()?,
        backend: free_port()?,
        attacked: free_port()?,
    };
    let (legit_dir, attacked_dir) = (dir.join("backend"), dir.join("attacked"));
    std::fs::create_dir_all(&legit_dir)?;
    std::fs::create_dir_all(&attacked_dir)?;
    let backend = backend::start(ports.backend, &legit_dir)?;
    let attacked = backend::start(ports.attacked, &attacked_dir)?;
    let config = dir.join("herdsman.toml");
    std::fs::write(&config, herdsman_config(ports, settings.slow_reader_window))?;
    let mut command = Command::new(herdsman);
    command.arg("run").arg("-c").arg(&config).current_dir(dir);
    let mut proxy = Supervised::spawn("herdsman", command, &dir.join("herdsman.log"))?;
    proxy.wait_until_answering(ports.listener, Duration::from_secs(15), probe)?;

    let log = dir.join("h2load.log");
    let legit = |seconds| legit::run(h2load, ports.listener, settings.clients, seconds, &log);
    // h2load is the reaped child ("wrk"), the attacker this program's own threads.
    let attacked_pid = [attacked.pid()];
    let processes = Measured {
        herdsman: proxy.pid(),
        backend: backend.pid(),
        slow_clients: &attacked_pid,
    };
    let gap = Duration::from_secs(1) / settings.reconnects_per_second;
    session.runs = settings
        .attacks
        .iter()
        .map(|&attack| AttackRun {
            attack,
            periods: Periods::default(),
            before: Vec::new(),
            tally: AttackTally::default(),
            server_requests: 0,
            floods: 0.0,
            alone: None,
        })
        .collect();
    for round in 1..=settings.rounds {
        let clock = CpuClock::start(&processes);
        let baseline =
            legit(settings.seconds).with_context(|| format!("round {round}'s baseline"))?;
        session.baseline.legit.push(baseline);
        session.baseline.cpu.push(clock.stop(&processes));
        for (index, run) in session.runs.iter_mut().enumerate() {
            let attack = run.attack;
            // The control: the clients alone just before (the round's baseline for the first).
            let control = match index {
                0 => baseline,
                _ => legit(settings.seconds)
                    .with_context(|| format!("round {round}, before {}", attack.name()))?,
            };
            run.before.push(control);
            let served_before = server_status::read(ports.attacked)?;
            let floods_before = floods(ports.admin)?;
            let until = Instant::now() + Duration::from_secs(u64::from(settings.seconds));
            let clock = CpuClock::start(&processes);
            let attacker =
                std::thread::spawn(move || attacks::run(attack, ports.listener, until, gap));
            let measured = legit(settings.seconds);
            let tally = attacker
                .join()
                .map_err(|_| anyhow::anyhow!("the attacker of {} panicked", attack.name()))?;
            run.periods.cpu.push(clock.stop(&processes));
            let legit =
                measured.with_context(|| format!("round {round}, beside {}", attack.name()))?;
            proxy
                .check_running()
                .with_context(|| format!("herdsman after {}", attack.name()))?;
            run.periods.legit.push(legit);
            run.tally.endings.extend(tally.endings);
            run.server_requests += server_status::read(ports.attacked)?
                .since(served_before)
                .requests;
            run.floods += floods(ports.admin)? - floods_before;
            eprintln!(
                "round {round}: {} beside {}: {:.0} requests/s, p99 {:.2} ms",
                settings.clients,
                attack.name(),
                legit.per_second,
                legit.p99_ms
            );
        }
    }
    // Each attack alone: what its connections cost herdsman, less what it spends as long with
    // nothing to do (its timers, the admin API's scrapes of it: none here).
    let alone = Duration::from_secs(u64::from(settings.alone_seconds));
    let before = procstat::tree_cpu_time(proxy.pid())?;
    std::thread::sleep(alone);
    session.idle_cpu = Some(procstat::tree_cpu_time(proxy.pid())?.saturating_sub(before));
    let idle_cpu = session.idle_cpu.unwrap_or_default();
    for run in &mut session.runs {
        let attack = run.attack;
        let until = Instant::now() + alone;
        let before = procstat::tree_cpu_time(proxy.pid())?;
        let tally = attacks::run(attack, ports.listener, until, gap);
        // The last connection's end reaches herdsman a moment after the attacker's.
        std::thread::sleep(Duration::from_millis(100));
        run.alone = Some(Alone {
            connections: tally.endings.len(),
            herdsman_cpu: procstat::tree_cpu_time(proxy.pid())?
                .saturating_sub(before)
                .saturating_sub(idle_cpu),
        });
    }
    Ok(())
}

/// Requests an HTTP/2 connection may make, raised from herdsman's 1,000: h2load neither
/// reconnects after a GOAWAY nor replaces the connection, so with the default each legitimate
/// client would stop after 1,000 requests (as `compare` raises nginx's `keepalive_requests`).
const REQUESTS_PER_CONNECTION: u32 = 1_000_000_000;

/// herdsman's configuration: its defaults, one worker, an h2c listener, the admin API, the
/// attacks' requests (`:authority: attack`) routed to a server of their own, and
/// `max_requests_per_connection` raised for h2load.
fn herdsman_config(ports: Ports, slow_reader_window: Option<&str>) -> String {
    let Ports {
        listener,
        admin,
        backend,
        attacked,
    } = ports;
    let buffering = slow_reader_window
        .map(|window| format!("\n[buffering]\nresponse_min_rate_window = \"{window}\"\n"))
        .unwrap_or_default();
    format!(
        r#"workers = 1

[[listener]]
name = "web"
bind = "127.0.0.1:{listener}"
pool = "app"
h2c = true

[admin]
bind = "127.0.0.1:{admin}"

[[pool]]
name = "app"
servers = [{{ name = "app1", addr = "127.0.0.1:{backend}" }}]

[[pool]]
name = "attacked"
servers = [{{ name = "attacked1", addr = "127.0.0.1:{attacked}" }}]

[[route]]
host = "attack"
pool = "attacked"

[http2]
max_requests_per_connection = {REQUESTS_PER_CONNECTION}
{buffering}"#
    )
}

/// herdsman's count of floods it ended, summed over workers.
fn floods(admin: u16) -> anyhow::Result<f64> {
    let text = String::from_utf8_lossy(&admin_api::get(admin, "/metrics")?).into_owned();
    Ok(text
        .lines()
        .filter(|line| line.starts_with("herdsman_worker_http2_floods_total"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_routes_the_attack_apart_and_sets_the_window_only_when_asked() {
        let ports = Ports {
            listener: 4100,
            admin: 4101,
            backend: 4200,
            attacked: 4201,
        };
        let full = herdsman_config(ports, None);
        assert!(full.contains("h2c = true"));
        assert!(full.contains("host = \"attack\"\npool = \"attacked\""));
        assert!(!full.contains("[buffering]"));
        let short = herdsman_config(ports, Some("1s"));
        assert!(short.contains("response_min_rate_window = \"1s\""));
    }
}
