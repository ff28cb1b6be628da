//! `herdsman-bench cache-disk` (issue 38, "Warm after a restart"): the two figures the issue asks
//! of herdsman's optional disk tier (`[cache.disk]`), in front of `cache`'s origin, with wrk:
//!
//! - **memory hits beside disk reads**: herdsman (one worker by default) with 8 MiB of memory and
//!   1 GiB of disk. A few hot objects (1 KiB, always in memory), a few warm ones and many cold ones
//!   (32 KiB each; the cold ones many times what memory holds) are all stored first. wrk asks only
//!   for the hot ones, alone, beside a second wrk asking for the warm ones (memory hits: what a
//!   second load costs on this machine) and beside one asking for the cold ones (each a read from
//!   the disk), in turns, round after round: the hot load's requests/s and p50/p99 each way, and
//!   the disk reads a second by `herdsman_cache_disk_reads_total`. A read that held a worker's
//!   event loop would hold the hot requests behind it and show in their p99.
//! - **the hit ratio across a binary upgrade**: a steady Zipf(1.0) load (paced to 2,000 requests a
//!   second by default) over a few thousand 4 KiB objects on herdsman started empty: a warm-up, the minute before SIGUSR2, and the minute after it (the
//!   new process starts with an empty memory and indexes the disk folder in the background), in
//!   intervals. The share of requests answered without the origin is counted at the origin (the
//!   old process's counters go with it); with `[cache.disk]`, and for comparison memory only
//!   (cold after the upgrade).
//!
//! Every process it starts is stopped when it returns, on success or error.
//!
//! Layout:
//! - `settings` — the options, the full and the short defaults, the plan
//! - `scripts`  — wrk's Lua scripts: objects asked for uniformly, or by a Zipf popularity
//! - `report`   — the tables, the results file and its plot

mod report;
mod scripts;
mod settings;

pub use settings::CacheDiskArgs;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use tokio::net::TcpStream;

use super::caches::{herdsman_config_with, CACHE_MIB};
use super::origin::Origin;
use super::stampede::get;
use crate::kit::admin_api::{self, metric_sum};
use crate::kit::environment;
use crate::kit::paired::turn_order;
use crate::kit::process::{poll_until, GroupGuard, Supervised};
use crate::kit::progress::Progress;
use crate::kit::proxies::{self, Plan};
use crate::kit::results::{self, RunFacts};
use crate::kit::scratch::ScratchDir;
use crate::kit::stack::listener_and_admin_ports;
use crate::kit::tools;
use crate::kit::workers_api::serving_pid;
use crate::kit::wrk::{self, Load};
use report::{Beside, HotRun, Interval, Phase, Session, Stored, Tier, Upgrade};
use scripts::Objects;
use settings::{
    Settings, COLD_BYTES, COLD_CONNECTIONS, COLD_LEAD_SECONDS, DISK_SIZE, HOT_BYTES,
    HOT_CONNECTIONS, HOT_OBJECTS, SMALL_MEMORY, ZIPF_BYTES, ZIPF_CONNECTIONS, ZIPF_EXPONENT,
};

/// Keep-alive connections that store every object of the first part, each once.
const FILL_CONNECTIONS: usize = 8;

/// How long the writer thread may take to have every stored object's file written, and the new
/// process of an upgrade to serve.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);

/// How long herdsman may take to stop after SIGTERM: an old process still draining after the
/// upgrade has its `shutdown_grace` (10 s).
const STOP_LIMIT: Duration = Duration::from_secs(20);

/// wrk's `--timeout`: a request slower than its default 2 s would be left out of the latencies.
const WRK_TIMEOUT_SECONDS: u32 = 10;

/// Seconds of hot requests, unrecorded, before the rounds.
const HOT_WARM_UP_SECONDS: u32 = 1;

pub fn run(args: CacheDiskArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace)?;
    let program = tools::herdsman_binary(&workspace, args.output.no_build)?;
    let wrk = tools::ensure_installed(&[&tools::WRK])?.remove(0);
    let busy = environment::busy_share(Duration::from_secs(1));
    environment::warn_if_busy(busy);
    let mut setup = environment::machine_lines(&program, busy);
    setup.push(("wrk".into(), tools::version_line(&wrk, &["-v"])));
    let mut session = Session::new(RunFacts::new(setup), settings.clone());
    let scratch = ScratchDir::create()?;
    let started = Instant::now();
    let outcome = (|| {
        let origin = Origin::start()?;
        let mut bench = Bench {
            settings: &settings,
            wrk: &wrk,
            program: &program,
            origin: &origin,
            scratch: scratch.path(),
            progress: Progress::new(settings.planned_steps()),
        };
        bench.beside_disk_reads(&mut session)?;
        for tier in Tier::ALL {
            bench.across_an_upgrade(tier, &mut session)?;
        }
        Ok(())
    })();
    results::finish("cache-disk", &settings.out, started, &mut session, outcome)
}

/// What both parts share.
struct Bench<'a> {
    settings: &'a Settings,
    wrk: &'a Path,
    program: &'a Path,
    origin: &'a Origin,
    scratch: &'a Path,
    progress: Progress,
}

impl Bench<'_> {
    /// The first part: every object stored, the hot objects warmed, then round after round the
    /// hot load alone and beside the cold load, in turns.
    fn beside_disk_reads(&mut self, session: &mut Session) -> anyhow::Result<()> {
        let hot = Objects {
            size: HOT_BYTES,
            prefix: "hot-",
            count: HOT_OBJECTS,
        };
        let warm = Objects {
            size: COLD_BYTES,
            prefix: "warm-",
            count: HOT_OBJECTS,
        };
        let cold = Objects {
            size: COLD_BYTES,
            prefix: "cold-",
            count: self.settings.cold_objects,
        };
        let mut herdsman = self.start("disk-reads", Tier::Disk, SMALL_MEMORY, session)?;
        let began = Instant::now();
        fill(herdsman.port, &[&hot, &warm, &cold])?;
        let objects = u64::from(hot.count + warm.count + cold.count);
        let files = wait_for(|| {
            let files = read_disk(herdsman.admin_port).ok()?.objects;
            (files >= objects).then_some(files)
        })
        .with_context(|| format!("the {objects} objects stored were not all on disk"))?;
        session.stored = Some(Stored {
            objects,
            files,
            seconds: began.elapsed().as_secs_f64(),
        });
        let hot_script = self.script("hot.lua", &hot.uniform_script())?;
        let warm_script = self.script("warm.lua", &warm.uniform_script())?;
        let cold_script = self.script("cold.lua", &cold.uniform_script())?;
        // The objects of the loads that hit memory, asked for often (the cold ones were asked
        // for once): the store's admission keeps the frequent ones.
        let warm_up = Load {
            connections: HOT_CONNECTIONS,
            seconds: HOT_WARM_UP_SECONDS,
        };
        for script in [&hot_script, &warm_script] {
            let args = warm_up.script_args(&herdsman.url(), script, WRK_TIMEOUT_SECONDS);
            wrk::run_script(self.wrk, args, warm_up.seconds).context("warming objects up")?;
        }
        self.progress.report(
            settings::FILL_SECONDS,
            "stored",
            &format!("{objects} objects, {files} files on disk"),
        );
        for round in 1..=self.settings.rounds {
            for turn in turn_order(Beside::ALL.len(), round) {
                let beside = Beside::ALL[turn];
                let second = match beside {
                    Beside::Nothing => None,
                    Beside::MemoryHits => Some(warm_script.as_path()),
                    Beside::DiskReads => Some(cold_script.as_path()),
                };
                let run = self
                    .hot_run(&mut herdsman, &hot_script, second)
                    .with_context(|| format!("round {round}, {}", beside.text()))?;
                let run = HotRun {
                    round,
                    beside,
                    ..run
                };
                self.progress.report(
                    self.settings.hot_run_seconds(second.is_some()),
                    &format!("round {round}/{}", self.settings.rounds),
                    &run.progress_text(),
                );
                session.hot_runs.push(run);
            }
        }
        herdsman.stop()
    }

    /// One hot run, beside a second load of the `second` script when there is one (started
    /// `COLD_LEAD_SECONDS` before and running as long after).
    fn hot_run(
        &self,
        herdsman: &mut Herdsman,
        hot_script: &Path,
        second: Option<&Path>,
    ) -> anyhow::Result<HotRun> {
        let seconds = self.settings.duration;
        let hot = Load {
            connections: HOT_CONNECTIONS,
            seconds,
        };
        let beside = Load {
            connections: COLD_CONNECTIONS,
            seconds: seconds + 2 * COLD_LEAD_SECONDS,
        };
        let url = herdsman.url();
        let at_origin = self.origin.requests_under("/object/");
        let (hot_report, second_report, reads) = thread::scope(|scope| {
            let second_load = second.map(|script| {
                let args = beside.script_args(&url, script, WRK_TIMEOUT_SECONDS);
                scope.spawn(move || wrk::run_script(self.wrk, args, beside.seconds))
            });
            if second_load.is_some() {
                thread::sleep(Duration::from_secs(u64::from(COLD_LEAD_SECONDS)));
            }
            let before = read_disk(herdsman.admin_port)?.reads;
            let args = hot.script_args(&url, hot_script, WRK_TIMEOUT_SECONDS);
            let hot_report = wrk::run_script(self.wrk, args, seconds).context("the hot load")?;
            let reads = read_disk(herdsman.admin_port)?.reads.saturating_sub(before);
            let second_report = match second_load {
                Some(thread) => Some(
                    thread
                        .join()
                        .map_err(|_| anyhow!("the second load's thread panicked"))?
                        .context("the second load")?,
                ),
                None => None,
            };
            anyhow::Ok((hot_report, second_report, reads))
        })?;
        herdsman.process.check_running()?;
        Ok(HotRun {
            round: 0,
            beside: Beside::Nothing,
            hot: hot_report,
            second: second_report,
            disk_reads: reads,
            origin_requests: self.origin.requests_under("/object/") - at_origin,
        })
    }

    /// The second part for `tier`: herdsman started empty, the Zipf load's warm-up and the minute
    /// before, SIGUSR2 and at once the minute after, interval by interval.
    fn across_an_upgrade(&mut self, tier: Tier, session: &mut Session) -> anyhow::Result<()> {
        let objects = Objects {
            size: ZIPF_BYTES,
            prefix: tier.prefix(),
            count: self.settings.zipf_objects,
        };
        let memory = format!("{CACHE_MIB}MiB");
        let herdsman = self.start(tier.name(), tier, &memory, session)?;
        let script = self.script(
            &format!("zipf-{}.lua", tier.name()),
            &objects.zipf_script(ZIPF_EXPONENT, self.settings.pause_ms()),
        )?;
        let intervals = self.settings.intervals();
        let mut phases = vec![Phase::WarmUp];
        phases.extend((0..intervals).map(Phase::Before));
        phases.extend((0..intervals).map(Phase::After));
        let mut waiting = None;
        for phase in phases {
            if phase == Phase::After(0) {
                // The first process serves until the upgrade; the next interval's load starts at
                // once, while its successor comes up.
                let old = herdsman.process.pid();
                let signalled = Instant::now();
                herdsman.process.signal(libc::SIGUSR2)?;
                let admin_port = herdsman.admin_port;
                waiting = Some(thread::spawn(move || {
                    wait_for(|| serving_pid(admin_port).ok().filter(|&pid| pid != old))
                        .map(|pid| (pid, signalled.elapsed()))
                }));
            }
            let seconds = match phase {
                Phase::WarmUp => self.settings.warm_up,
                _ => self.settings.interval,
            };
            let interval = self
                .interval(&herdsman, &objects, &script, tier, phase, seconds)
                .with_context(|| format!("{}, {}", tier.name(), phase.text(self.settings)))?;
            self.progress.report(
                f64::from(seconds) + settings::RUN_OVERHEAD_SECONDS,
                &format!("{}, {}", tier.written(), phase.text(self.settings)),
                &interval.progress_text(),
            );
            session.intervals.push(interval);
        }
        let (pid, took) = waiting
            .context("no upgrade was made")?
            .join()
            .map_err(|_| anyhow!("the thread waiting for the upgrade panicked"))?
            .with_context(|| format!("no new process served within {SETTLE_LIMIT:?} of SIGUSR2"))?;
        session.upgrades.push(Upgrade {
            tier,
            old_pid: herdsman.process.pid(),
            new_pid: pid,
            serving_after: took,
        });
        herdsman.stop()
    }

    /// One interval of the Zipf load: its requests, and those that reached the origin meanwhile.
    fn interval(
        &self,
        herdsman: &Herdsman,
        objects: &Objects,
        script: &Path,
        tier: Tier,
        phase: Phase,
        seconds: u32,
    ) -> anyhow::Result<Interval> {
        let load = Load {
            connections: ZIPF_CONNECTIONS,
            seconds,
        };
        let prefix = objects.path_prefix();
        let before = self.origin.requests_under(&prefix);
        let args = load.script_args(&herdsman.url(), script, WRK_TIMEOUT_SECONDS);
        let report = wrk::run_script(self.wrk, args, seconds)?;
        let origin_requests = self.origin.requests_under(&prefix) - before;
        // After the upgrade the admin API is the new process's once it serves.
        let files = match tier {
            Tier::Disk => read_disk(herdsman.admin_port).ok().map(|d| d.objects),
            Tier::Memory => None,
        };
        Ok(Interval {
            tier,
            phase,
            wrk: report,
            origin_requests,
            files,
        })
    }

    /// herdsman started in a folder `name` of the scratch directory with `memory` for its cache
    /// and, for `Tier::Disk`, `[cache.disk]` in that folder; its configuration recorded.
    fn start(
        &self,
        name: &str,
        tier: Tier,
        memory: &str,
        session: &mut Session,
    ) -> anyhow::Result<Herdsman> {
        let dir = self.scratch.join(name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let (port, admin_port) = listener_and_admin_ports()?;
        let plan = Plan::herdsman_alone(self.settings.workers, port, self.origin.port);
        let mut tables = format!(
            "\n[admin]\nbind = \"127.0.0.1:{admin_port}\"\n\n[cache]\nmemory = \"{memory}\"\n"
        );
        if tier == Tier::Disk {
            let folder = dir.join("cache");
            tables.push_str(&format!(
                "\n[cache.disk]\npath = \"{}\"\nsize = \"{DISK_SIZE}\"\n",
                folder.display()
            ));
        }
        let text = herdsman_config_with(plan, None, &tables);
        session
            .configs
            .record(name, "herdsman.toml", &text, self.scratch);
        let mut process = proxies::start_herdsman(self.program, &text, port, &dir)
            .with_context(|| format!("starting herdsman for {name}"))?;
        admin_api::wait_for_admin(&mut process, admin_port)?;
        let guard = GroupGuard::start(process.pid())?;
        Ok(Herdsman {
            process,
            port,
            admin_port,
            _guard: guard,
        })
    }

    /// Writes a wrk script into the scratch directory.
    fn script(&self, name: &str, lua: &str) -> anyhow::Result<PathBuf> {
        let path = self.scratch.join(name);
        std::fs::write(&path, lua).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}

/// herdsman for one part. Its successor after an upgrade stays in its process group, which the
/// guard stops should this program end first.
struct Herdsman {
    process: Supervised,
    port: u16,
    admin_port: u16,
    /// Declared after `process`: the group is stopped by `process`'s drop first.
    _guard: GroupGuard,
}

impl Herdsman {
    /// Where wrk asks (its script names each path).
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    /// A graceful stop of every process of its group.
    fn stop(mut self) -> anyhow::Result<()> {
        self.process.stop_group_gracefully(STOP_LIMIT)
    }
}

/// The disk tier's figures, from `/metrics`.
#[derive(Debug, Clone, Copy)]
struct DiskFigures {
    /// `herdsman_cache_disk_reads_total`: entries read back, since this process started.
    reads: u64,
    /// `herdsman_cache_disk_objects`: entries indexed on disk.
    objects: u64,
}

fn read_disk(admin_port: u16) -> anyhow::Result<DiskFigures> {
    let body = admin_api::get(admin_port, "/metrics")?;
    let text = String::from_utf8_lossy(&body);
    let value = |name: &str| {
        metric_sum(&text, name)
            .map(|v| v as u64)
            .with_context(|| format!("/metrics has no {name}"))
    };
    Ok(DiskFigures {
        reads: value("herdsman_cache_disk_reads_total")?,
        objects: value("herdsman_cache_disk_objects")?,
    })
}

/// Every object of `sets` asked for once, in order, over `FILL_CONNECTIONS` keep-alive
/// connections: each a miss, stored (and written to disk by the writer thread, in its time).
fn fill(port: u16, sets: &[&Objects]) -> anyhow::Result<()> {
    let paths: Vec<String> = sets
        .iter()
        .flat_map(|objects| (1..=objects.count).map(|n| objects.path(n)))
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for part in paths.chunks(paths.len().div_ceil(FILL_CONNECTIONS)) {
            let part = part.to_vec();
            tasks.spawn(async move {
                let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await?;
                for path in &part {
                    let status = get(&mut stream, path).await?;
                    if status != 200 {
                        bail!("GET {path} was answered {status}");
                    }
                }
                anyhow::Ok(())
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.context("a fill connection's task")?
                .context("storing the objects")?;
        }
        anyhow::Ok(())
    })
}

/// Polls `check` every 50 ms until it gives a value, at most `SETTLE_LIMIT`.
fn wait_for<T>(check: impl FnMut() -> Option<T>) -> Option<T> {
    poll_until(SETTLE_LIMIT, Duration::from_millis(50), check)
}
