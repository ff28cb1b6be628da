//! `herdsman-bench rules` (issue 42, operator rules): what herdsman's rules cost beside the same
//! rules in HAProxy 2.6, nginx 1.22 and Caddy 2.6, in three parts, each on proxies of its own in
//! front of one origin (a server on a thread of this program, `origin`):
//!
//! - `headers`: ten header rules (request fields set from variables, added, removed; security
//!   fields set on answers; the server's `Server` and `X-Powered-By` removed) and a rate limit
//!   per client that is never reached, through herdsman, HAProxy (`http-request set-header`, a
//!   stick table's `http_req_rate`), nginx (`proxy_set_header`, `add_header … always`,
//!   `proxy_hide_header`, `limit_req`) and Caddy (`request_header`, `header`; it has no rate
//!   limit), and herdsman without rules: CPU per request (user and kernel apart), requests/s,
//!   p50/p99, judged against the issue's targets.
//! - `compression`: the compression corpus's 592 KiB API JSON, many times: herdsman's zstd,
//!   brotli and gzip at `[compression]`'s default levels against nginx's gzip at levels 1 and 5
//!   and Caddy's `encode gzip zstd`: CPU per MiB and the bytes out, judged against the target.
//! - `redis`: a limit counted in Redis on loopback against the local limit alone (CPU per
//!   request), and with Redis 1 ms away (`redis`: a network namespace and netem) the requests/s.
//!
//! Per part and worker count, every row's proxy is started, checked by one request (the rules
//! did what they say, the encoding is the one asked for), warmed up, then measured round after
//! round by wrk, the rows in an order that turns each round. Everything it starts is stopped when
//! it returns, on success or error.
//!
//! Layout:
//! - `settings` — the options, the full and the short defaults
//! - `origin`   — the server behind the proxies: a small answer, or the API JSON
//! - `rows`     — each part's rows, their configurations, and starting them
//! - `redis`    — the Redis servers, one on loopback and one 1 ms away
//! - `report`   — the targets, the tables and the results file

mod origin;
mod redis;
mod report;
pub mod rows;
mod settings;

pub use settings::RulesArgs;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::environment;
use crate::kit::markdown::worker_count;
use crate::kit::paired::turn_order;
use crate::kit::process::{free_port, raise_descriptor_limit};
use crate::kit::progress::Progress;
use crate::kit::proxies::Plan;
use crate::kit::results::{self, RunFacts};
use crate::kit::scratch::ScratchDir;
use crate::kit::tools;
use crate::kit::wrk::{self, Load};
use origin::Body;
use report::{Probe, RulesRun, Session};
use rows::{Programs, Row, Running, Setup};
use settings::{Part, Settings};

/// Seconds of unrecorded load each proxy takes once started (not with --short).
const WARM_UP_SECONDS: u32 = 1;

/// Beyond wrk's own seconds, what a run takes (starting wrk, reading /proc): for the progress.
const RUN_OVERHEAD_SECONDS: f64 = 0.3;

pub fn run(args: RulesArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace)?;
    let herdsman = match &args.herdsman_bin {
        Some(path) => Path::new(path)
            .canonicalize()
            .with_context(|| format!("--herdsman-bin {path}"))?,
        None => tools::herdsman_binary_in_target_dir(&workspace, args.output.no_build)?,
    };
    let programs = find_programs(&settings.parts, herdsman)?;
    let wrk = tools::ensure_installed(&[&tools::WRK])?.remove(0);
    let descriptor_limit = raise_descriptor_limit()?;
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let mut setup = environment::machine_lines(&programs.herdsman, busy);
    for (name, program, flag) in [
        ("HAProxy", &programs.haproxy, "-v"),
        ("nginx", &programs.nginx, "-v"),
        ("Caddy", &programs.caddy, "version"),
        ("Redis", &programs.redis, "--version"),
    ] {
        if !program.as_os_str().is_empty() {
            setup.push((name.into(), tools::version_line(program, &[flag])));
        }
    }
    setup.push(("wrk".into(), tools::version_line(&wrk, &["-v"])));
    setup.push(environment::descriptor_limit_line(descriptor_limit));
    let mut session = Session::new(RunFacts::new(setup), settings.clone());
    let scratch = ScratchDir::create()?;
    let started = Instant::now();
    let outcome = (|| {
        let mut bench = Bench {
            settings: &settings,
            wrk: &wrk,
            programs: &programs,
            scratch: scratch.path(),
            descriptor_limit,
            progress: Progress::new(planned_runs(&settings)),
        };
        for &part in &settings.parts {
            for &workers in &settings.workers {
                bench.part(part, workers, &mut session)?;
            }
        }
        Ok(())
    })();
    results::finish("rules", &settings.out, started, &mut session, outcome)
}

/// The programs `parts` run, each installed first when missing (an empty path: not needed).
fn find_programs(parts: &[Part], herdsman: PathBuf) -> anyhow::Result<Programs> {
    let needs = |wanted: &[Part]| parts.iter().any(|part| wanted.contains(part));
    let find = |needed: bool, tool: &tools::Tool| -> anyhow::Result<PathBuf> {
        Ok(match needed {
            true => tools::ensure_installed(&[tool])?.remove(0),
            false => PathBuf::new(),
        })
    };
    Ok(Programs {
        herdsman,
        haproxy: find(needs(&[Part::Headers]), &tools::HAPROXY)?,
        nginx: find(needs(&[Part::Headers, Part::Compression]), &tools::NGINX)?,
        caddy: find(needs(&[Part::Headers, Part::Compression]), &tools::CADDY)?,
        redis: find(needs(&[Part::Redis]), &tools::REDIS)?,
    })
}

/// The planned seconds of every measured run, for the progress line.
fn planned_runs(settings: &Settings) -> Vec<f64> {
    let anywhere = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let rows: usize = settings
        .parts
        .iter()
        .map(|&part| rows::of_part(part, Some((anywhere, anywhere))).1.len())
        .sum();
    let runs = rows * settings.workers.len() * settings.rounds as usize;
    vec![f64::from(settings.duration) + RUN_OVERHEAD_SECONDS; runs]
}

/// What every part's pass shares.
struct Bench<'a> {
    settings: &'a Settings,
    wrk: &'a Path,
    programs: &'a Programs,
    scratch: &'a Path,
    descriptor_limit: u64,
    progress: Progress,
}

impl Bench<'_> {
    /// `part` with `workers` workers: its origin (and Redis servers), its proxies started and
    /// checked, warmed up, then measured round after round.
    fn part(&mut self, part: Part, workers: u32, session: &mut Session) -> anyhow::Result<()> {
        let body = match part {
            Part::Compression => Body::Json,
            _ => Body::Small,
        };
        let origin = origin::start(body).context("starting the origin")?;
        let dir = self.scratch.join(format!("{part}-{workers}w"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let redis = match part {
            Part::Redis => {
                let near = redis::start_near(&self.programs.redis, &dir)?;
                let far = redis::start_far(&self.programs.redis, &dir)?;
                let round_trip = redis::round_trip(far.addr)?;
                session.far_redis = Some((far.how.clone(), round_trip));
                Some((near, far))
            }
            _ => None,
        };
        let addresses = redis.as_ref().map(|(near, far)| (near.addr, far.addr));
        let (setups, rows) = rows::of_part(part, addresses);
        let mut running = Vec::new();
        for (index, &setup) in setups.iter().enumerate() {
            let own = dir.join(format!("{index}-{}", setup.program().written()));
            std::fs::create_dir_all(&own)?;
            let port = free_port()?;
            let plan = Plan {
                workers,
                port,
                backend_port: origin.port,
                backend_idle: self.settings.connections.max(64),
                client_connections: self.settings.connections + 10,
                descriptor_limit: self.descriptor_limit,
            };
            let (file, text) = rows::config(setup, plan, &own);
            let title = format!(
                "{part}: {} ({setup:?}), {}",
                setup.program().written(),
                worker_count(workers)
            );
            session.configs.record(&title, file, &text, self.scratch);
            let process = rows::start(setup, (file, &text), port, &own, self.programs, workers)
                .with_context(|| format!("starting {title}"))?;
            let proxy = Running {
                setup,
                port,
                process,
            };
            for (row_index, row) in rows
                .iter()
                .enumerate()
                .filter(|(_, row)| row.proxy == index)
            {
                let probe = check_row(part, row, &proxy)?;
                session.probes.push((part, workers, row_index, probe));
            }
            running.push(proxy);
        }
        if !self.settings.short {
            for row in &rows {
                let load = Load {
                    connections: self.settings.connections,
                    seconds: WARM_UP_SECONDS,
                };
                let one = &running[row.proxy];
                wrk::run_with_headers(self.wrk, one.port, load, &fields(part, row))
                    .with_context(|| format!("warming {} up", row.name))?;
            }
        }
        if !session.rows.iter().any(|(known, _)| *known == part) {
            session.rows.push((part, rows.clone()));
        }
        for round in 1..=self.settings.rounds {
            for index in turn_order(rows.len(), round) {
                let row = &rows[index];
                let one = &mut running[row.proxy];
                let load = Load {
                    connections: self.settings.connections,
                    seconds: self.settings.duration,
                };
                let (cpu, report) = wrk::run_costing(
                    self.wrk,
                    one.port,
                    load,
                    &fields(part, row),
                    one.process.pid(),
                )
                .with_context(|| format!("measuring {}, {}", row.name, worker_count(workers)))?;
                one.process
                    .check_running()
                    .with_context(|| format!("{} after its run", row.name))?;
                let run = RulesRun {
                    part,
                    workers,
                    round,
                    row: index,
                    cpu,
                    wrk: report,
                };
                self.progress.report(
                    f64::from(self.settings.duration) + RUN_OVERHEAD_SECONDS,
                    &format!(
                        "{part}, {}, round {round}/{}",
                        worker_count(workers),
                        self.settings.rounds
                    ),
                    &format!("{}: {:.0} requests/s", row.name, run.wrk.requests_per_sec),
                );
                session.runs.push(run);
            }
        }
        drop(running);
        Ok(())
    }
}

/// The request fields wrk sends `row` of `part` (besides its own).
fn fields(part: Part, row: &Row) -> Vec<&'static str> {
    match (part, row.encoding) {
        (Part::Headers, _) => vec![rows::DEBUG_FIELD],
        (_, Some("zstd")) => vec!["Accept-Encoding: zstd"],
        (_, Some("br")) => vec!["Accept-Encoding: br"],
        (_, Some("gzip")) => vec!["Accept-Encoding: gzip"],
        _ => vec![],
    }
}

/// One request to `row`'s proxy, as wrk will send them: what came back, once checked that the
/// rules did what they say (`headers`) or that the encoding is the one asked for
/// (`compression`).
fn check_row(part: Part, row: &Row, proxy: &Running) -> anyhow::Result<Probe> {
    let probe = Probe::get(proxy.port, &fields(part, row))
        .with_context(|| format!("one request to {}", row.name))?;
    let trouble = |what: &str| -> anyhow::Result<Probe> {
        bail!("{} {what}; it answered {probe:?}", row.name)
    };
    if probe.status != 200 {
        return trouble("did not answer 200");
    }
    match part {
        Part::Headers if proxy.setup == Setup::HerdsmanPlain => {
            if probe.field("x-powered-by").is_none() {
                return trouble("(no rules) lost the server's X-Powered-By");
            }
        }
        Part::Headers => {
            if probe.field("x-frame-options") != Some("DENY") {
                return trouble("did not set X-Frame-Options: DENY");
            }
            if probe.field("x-powered-by").is_some() {
                return trouble("kept the server's X-Powered-By");
            }
            // nginx's own Server field stays (see `rows`); the server's must not.
            if probe
                .field("server")
                .is_some_and(|server| server.contains("bench-origin"))
            {
                return trouble("kept the server's Server field");
            }
        }
        Part::Compression => {
            if probe.field("content-encoding") != row.encoding {
                return trouble(&format!("did not answer in {:?}", row.encoding));
            }
            let whole = origin::json().len();
            if row.encoding.is_none() && probe.body_bytes != whole {
                return trouble(&format!("did not answer the {whole} bytes of the JSON"));
            }
        }
        Part::Redis => {}
    }
    Ok(probe)
}

impl Probe {
    /// `GET /` on 127.0.0.1:`port` with `fields` and `Connection: close`, read to the end; a
    /// chunked body is counted without its framing.
    fn get(port: u16, fields: &[&str]) -> anyhow::Result<Probe> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut request =
            format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
        for field in fields {
            request.push_str(field);
            request.push_str("\r\n");
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes())?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer)?;
        Probe::parse(&answer)
    }
}
