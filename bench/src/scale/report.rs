//! What `scale` prints and writes: the targets and whether they were met; CPU per request for the
//! first route's host, the last's and an unknown one by route count and proxy (user and system
//! apart at the most routes); each proxy's start time and memory per route; reloads of the most
//! routes under load; least-conn against round-robin over the large pool; servers added and
//! removed; every run; a plot of CPU per request against route count.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use super::settings::{Balance, Host, Settings};
use crate::kit::markdown::{spread_cell, thousands, write_details_table};
use crate::kit::paired::PairedRatio;
use crate::kit::plot::{write_panels_png, LineChart, Series};
use crate::kit::procstat::CpuTime;
use crate::kit::proxies::ProxyKind;
use crate::kit::results::{write_plot_link, Results, RunFacts, Trouble};
use crate::kit::stats::{spread, Spread};
use crate::kit::wrk::WrkReport;

/// The issue's bound on CPU per request for the last route or an unknown host against the first
/// host's and a one-route config's.
const WITHIN: f64 = 1.03;

/// The bound on a start and a reload of the most routes.
const START_LIMIT: Duration = Duration::from_secs(1);

/// One proxy started with one route count.
#[derive(Debug, Clone)]
pub struct Instance {
    pub proxy: ProxyKind,
    pub routes: u32,
    /// From the process's start until it first answered.
    pub start: Duration,
    /// Resident memory once it served, before any load.
    pub rss_kib: u64,
    /// Resident memory after every round.
    pub rss_after_kib: u64,
}

/// One wrk run against one proxy for one host.
#[derive(Debug, Clone)]
pub struct RouteRun {
    pub round: u32,
    pub proxy: ProxyKind,
    pub routes: u32,
    pub host: Host,
    /// The proxy's CPU over the run.
    pub cpu: CpuTime,
    pub wrk: WrkReport,
}

impl RouteRun {
    pub fn cpu_us(&self) -> f64 {
        self.per_request(self.cpu.total())
    }

    fn per_request(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() * 1e6 / self.wrk.requests.max(1) as f64
    }

    fn errors(&self) -> u64 {
        self.wrk.socket_errors + self.wrk.bad_status
    }
}

/// One reload of the most routes.
#[derive(Debug, Clone)]
pub struct Reload {
    pub status: u16,
    /// From the request's first byte to its answer's last: parse, check, compile, publish.
    pub took: Duration,
    /// Resident memory just after it.
    pub rss_kib: u64,
}

/// The load the reloads ran under, and herdsman's memory around them.
#[derive(Debug, Clone)]
pub struct ReloadLoad {
    pub routes: u32,
    pub rss_before_kib: u64,
    pub peak_rss_kib: u64,
    pub wrk: WrkReport,
}

/// herdsman started with the large pool under one algorithm.
#[derive(Debug, Clone)]
pub struct PoolInstance {
    pub balance: Balance,
    pub start: Duration,
    pub rss_kib: u64,
}

/// One wrk run over the large pool.
#[derive(Debug, Clone)]
pub struct PoolRun {
    pub round: u32,
    pub balance: Balance,
    pub cpu: CpuTime,
    pub wrk: WrkReport,
}

impl PoolRun {
    pub fn cpu_us(&self) -> f64 {
        self.cpu.total().as_secs_f64() * 1e6 / self.wrk.requests.max(1) as f64
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Add,
    Remove,
}

/// One server added to or removed from the large pool through the admin API.
#[derive(Debug, Clone)]
pub struct Change {
    pub balance: Balance,
    pub kind: ChangeKind,
    pub under_load: bool,
    /// Until the answer, which comes once the new snapshot is published.
    pub took: Duration,
}

/// herdsman's own instructions while wrk asked for one host, under callgrind.
#[derive(Debug, Clone)]
pub struct InstructionRun {
    pub routes: u32,
    pub host: Host,
    pub requests: u64,
    pub instructions: u64,
}

impl InstructionRun {
    pub fn per_request(&self) -> f64 {
        self.instructions as f64 / self.requests.max(1) as f64
    }
}

/// Everything one `scale` session measured.
pub struct Session {
    pub facts: RunFacts,
    pub settings: Settings,
    pub failure: Option<String>,
    /// (what, text) of each configuration as the results show it.
    pub configs: Vec<(String, String)>,
    pub instances: Vec<Instance>,
    pub runs: Vec<RouteRun>,
    pub reloads: Vec<Reload>,
    pub reload_load: Option<ReloadLoad>,
    pub pool_instances: Vec<PoolInstance>,
    pub pool_runs: Vec<PoolRun>,
    pub changes: Vec<Change>,
    /// The load the changes under load ran under, by algorithm.
    pub change_loads: Vec<(Balance, WrkReport)>,
    /// herdsman's resident memory before and after every change, by algorithm.
    pub change_memory: Vec<(Balance, u64, u64)>,
    pub instructions: Vec<InstructionRun>,
    /// Why the instructions were not counted, when they were asked for.
    pub instructions_missing: Option<String>,
}

impl Session {
    pub fn new(facts: RunFacts, settings: Settings) -> Session {
        Session {
            facts,
            settings,
            failure: None,
            configs: Vec::new(),
            instances: Vec::new(),
            runs: Vec::new(),
            reloads: Vec::new(),
            reload_load: None,
            pool_instances: Vec::new(),
            pool_runs: Vec::new(),
            changes: Vec::new(),
            change_loads: Vec::new(),
            change_memory: Vec::new(),
            instructions: Vec::new(),
            instructions_missing: None,
        }
    }

    /// (round, CPU-µs per request) of every run of `proxy` with `routes` routes for `host`.
    fn side(&self, proxy: ProxyKind, routes: u32, host: Host) -> Vec<(u32, f64)> {
        self.runs
            .iter()
            .filter(|r| r.proxy == proxy && r.routes == routes && r.host == host)
            .map(|r| (r.round, r.cpu_us()))
            .collect()
    }

    fn cpu_spread(&self, proxy: ProxyKind, routes: u32, host: Host) -> Option<Spread> {
        let values: Vec<f64> = self
            .side(proxy, routes, host)
            .iter()
            .map(|&(_, v)| v)
            .collect();
        spread(&values)
    }

    fn median_of(
        &self,
        proxy: ProxyKind,
        routes: u32,
        host: Host,
        value: impl Fn(&RouteRun) -> f64,
    ) -> Option<f64> {
        let values: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r.proxy == proxy && r.routes == routes && r.host == host)
            .map(value)
            .collect();
        spread(&values).map(|s| s.median)
    }

    fn instance(&self, proxy: ProxyKind, routes: u32) -> Option<&Instance> {
        self.instances
            .iter()
            .find(|i| i.proxy == proxy && i.routes == routes)
    }

    /// Resident bytes per route of `proxy` with `routes` routes, against its one-route start.
    fn bytes_per_route(&self, proxy: ProxyKind, routes: u32) -> Option<f64> {
        let one = self.instance(proxy, 1)?;
        let many = self.instance(proxy, routes)?;
        (routes > 1)
            .then(|| (many.rss_kib as f64 - one.rss_kib as f64) * 1024.0 / f64::from(routes - 1))
    }

    fn pool_side(&self, balance: Balance, value: impl Fn(&PoolRun) -> f64) -> Vec<(u32, f64)> {
        self.pool_runs
            .iter()
            .filter(|r| r.balance == balance)
            .map(|r| (r.round, value(r)))
            .collect()
    }

    fn has(&self, proxy: ProxyKind) -> bool {
        self.runs.iter().any(|r| r.proxy == proxy)
    }

    fn write_targets(&self, md: &mut String) {
        let most = self.settings.most_routes();
        let herdsman = ProxyKind::Herdsman;
        let _ = writeln!(
            md,
            "## Targets\n\nRatios are taken per round (the two runs of a round are minutes apart \
             at most, and the proxy's runs for one route count back to back) and judged by their \
             median over rounds; the range follows. When the median misses a bound that its \
             95% interval (from the rounds' order statistics) still holds, the run did not tell \
             the two apart: on this machine CPU per request moves by a quarter from run to run, \
             far more than the few percent asked about, and herdsman's instruction count \
             (callgrind) decides.\n\n| target | measured | verdict |\n|---|---|---|"
        );
        if !self.runs.is_empty() {
            let cpu = |routes, host| self.side(herdsman, routes, host);
            let m = thousands(f64::from(most));
            ratio_row(
                md,
                format!("herdsman, last of {m} routes ÷ first host, ≤ {WITHIN}"),
                PairedRatio::of(&cpu(most, Host::Last), &cpu(most, Host::First)),
                WITHIN,
            );
            ratio_row(
                md,
                format!("herdsman, unknown host with {m} routes ÷ first host, ≤ {WITHIN}"),
                PairedRatio::of(&cpu(most, Host::Unknown), &cpu(most, Host::First)),
                WITHIN,
            );
            ratio_row(
                md,
                format!("herdsman, last of {m} routes ÷ a one-route config, ≤ {WITHIN}"),
                PairedRatio::of(&cpu(most, Host::Last), &cpu(1, Host::First)),
                WITHIN,
            );
            ratio_row(
                md,
                format!("herdsman, unknown host with {m} routes ÷ a one-route config, ≤ {WITHIN}"),
                PairedRatio::of(&cpu(most, Host::Unknown), &cpu(1, Host::First)),
                WITHIN,
            );
            for (what, numerator, denominator) in [
                (
                    "last of {m} routes ÷ first host",
                    (most, Host::Last),
                    (most, Host::First),
                ),
                (
                    "unknown host with {m} routes ÷ first host",
                    (most, Host::Unknown),
                    (most, Host::First),
                ),
                (
                    "last of {m} routes ÷ a one-route config",
                    (most, Host::Last),
                    (1, Host::First),
                ),
                (
                    "unknown host with {m} routes ÷ a one-route config",
                    (most, Host::Unknown),
                    (1, Host::First),
                ),
            ] {
                if let (Some(n), Some(d)) = (
                    self.instructions_of(numerator),
                    self.instructions_of(denominator),
                ) {
                    let ratio = n / d;
                    let _ = writeln!(
                    md,
                    "| herdsman's own instructions (callgrind), {}, ≤ {WITHIN} | {ratio:.3} ({n:.0} ÷ {d:.0}) | {} |",
                    what.replace("{m}", &m),
                    if ratio <= WITHIN { "met" } else { "**NOT MET**" }
                );
                }
            }
            if self.has(ProxyKind::Haproxy) {
                for host in [Host::Last, Host::Unknown] {
                    ratio_row(
                        md,
                        format!("herdsman ÷ HAProxy with its map, {host} host of {m} routes, ≤ 1"),
                        PairedRatio::of(
                            &cpu(most, host),
                            &self.side(ProxyKind::Haproxy, most, host),
                        ),
                        1.0,
                    );
                }
                let ours = self.bytes_per_route(herdsman, most);
                let theirs = self.bytes_per_route(ProxyKind::Haproxy, most);
                let _ = writeln!(
                    md,
                    "| resident memory per route, {m} routes: herdsman ≤ HAProxy's map | {} | {} |",
                    match (ours, theirs) {
                        (Some(o), Some(t)) => format!("{o:.0} bytes against {t:.0}"),
                        _ => "–".into(),
                    },
                    match (ours, theirs) {
                        (Some(o), Some(t)) if o <= t => "met",
                        (Some(_), Some(_)) => "**NOT MET**",
                        _ => "not measured",
                    }
                );
            }
            let start = self.instance(herdsman, most).map(|i| i.start);
            let _ = writeln!(
                md,
                "| herdsman starts with {m} routes in under 1 s | {} | {} |",
                start.map_or("–".into(), millis),
                verdict_under(start, START_LIMIT)
            );
            let slowest = self.reloads.iter().map(|r| r.took).max();
            let _ = writeln!(
                md,
                "| herdsman reloads {m} routes in under 1 s (the slowest of {}) | {} | {} |",
                self.reloads.len(),
                slowest.map_or("–".into(), millis),
                verdict_under(slowest, START_LIMIT)
            );
        }
        if !self.pool_runs.is_empty() {
            let servers = thousands(f64::from(self.settings.servers));
            let cpu = PairedRatio::of(
                &self.pool_side(Balance::LeastConn, PoolRun::cpu_us),
                &self.pool_side(Balance::RoundRobin, PoolRun::cpu_us),
            );
            let rate = PairedRatio::of(
                &self.pool_side(Balance::LeastConn, |r| r.wrk.requests_per_sec),
                &self.pool_side(Balance::RoundRobin, |r| r.wrk.requests_per_sec),
            );
            let _ = writeln!(
                md,
                "| least-conn over {servers} servers end to end no worse than round-robin: \
                 CPU per request ÷ round-robin's ≤ 1 | {} | {} |",
                ratio_text(&cpu),
                cpu.judged(1.0, true)
            );
            let _ = writeln!(
                md,
                "| … and requests/s ÷ round-robin's ≥ 1 | {} | {} |",
                ratio_text(&rate),
                rate.judged(1.0, false)
            );
        }
        let _ = writeln!(
            md,
            "| least-conn's pick over 10,000 servers within 10% of its pick over 10 | a \
             microbenchmark, not this run: `cargo bench --bench pick`, \
             [pick.md](pick.md) | see there |\n"
        );
    }

    fn write_cpu(&self, md: &mut String) {
        let proxies = &self.settings.proxies;
        let _ = writeln!(
            md,
            "## CPU per request by route count\n\nMedian CPU-µs per request of the proxy's \
             process (user + system, from /proc) over rounds, and in brackets its requests/s.\n"
        );
        let mut head = String::from("| routes |");
        let mut rule = String::from("|---:|");
        for &proxy in proxies {
            for host in Host::ALL {
                let _ = write!(head, " {} {host} |", proxy.written());
                rule.push_str("---:|");
            }
        }
        let _ = writeln!(md, "{head}\n{rule}");
        for &routes in &self.settings.routes {
            let _ = write!(md, "| {} |", thousands(f64::from(routes)));
            for &proxy in proxies {
                for host in Host::ALL {
                    let cpu = self.cpu_spread(proxy, routes, host);
                    let rate = self.median_of(proxy, routes, host, |r| r.wrk.requests_per_sec);
                    match (cpu, rate) {
                        (Some(cpu), Some(rate)) => {
                            let _ = write!(md, " {:.2} ({}) |", cpu.median, thousands(rate));
                        }
                        _ => md.push_str(" – |"),
                    }
                }
            }
            md.push('\n');
        }
        let most = self.settings.most_routes();
        let _ = writeln!(
            md,
            "\nAt {} routes, user and system apart (µs per request, medians), and p99 latency:\n\n\
             | proxy | host | user | system | total | p99 |\n|---|---|---:|---:|---:|---:|",
            thousands(f64::from(most))
        );
        for &proxy in proxies {
            for host in Host::ALL {
                let user = self.median_of(proxy, most, host, |r| r.per_request(r.cpu.user));
                let system = self.median_of(proxy, most, host, |r| r.per_request(r.cpu.system));
                let total = self.median_of(proxy, most, host, RouteRun::cpu_us);
                let p99 = self.median_of(proxy, most, host, |r| r.wrk.p99_us);
                let cell = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.2}"));
                let _ = writeln!(
                    md,
                    "| {} | {host} | {} | {} | {} | {} |",
                    proxy.written(),
                    cell(user),
                    cell(system),
                    cell(total),
                    p99.map_or("–".into(), |v| format!("{v:.0} µs"))
                );
            }
        }
        md.push('\n');
    }

    /// Instructions per request of herdsman with `routes` routes for `host`, when counted.
    fn instructions_of(&self, (routes, host): (u32, Host)) -> Option<f64> {
        self.instructions
            .iter()
            .find(|r| r.routes == routes && r.host == host)
            .map(InstructionRun::per_request)
    }

    fn write_instructions(&self, md: &mut String) {
        if let Some(why) = &self.instructions_missing {
            let _ = writeln!(
                md,
                "herdsman's instructions per request were not counted: {why}\n"
            );
        }
        if self.instructions.is_empty() {
            return;
        }
        let _ = writeln!(
            md,
            "## herdsman's own instructions per request\n\nherdsman under callgrind \
             (`valgrind --tool=callgrind --instr-atstart=no`), counting only while wrk ({} \
             connections, {} s) asked for one host, then dumped: user-space instructions ÷ the \
             requests wrk completed. The same for the same binary and inputs whatever else the \
             machine does. The kernel's work per request, most of the CPU, is the same for every \
             host.\n\n| routes | host | requests | instructions per request | ÷ one route's first \
             host |\n|---:|---|---:|---:|---:|",
            self.settings.connections,
            super::instructions::COUNTED_SECONDS
        );
        let base = self.instructions_of((1, Host::First));
        for run in &self.instructions {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.0} | {} |",
                thousands(f64::from(run.routes)),
                run.host,
                thousands(run.requests as f64),
                run.per_request(),
                base.map_or("–".into(), |b| format!("{:.3}", run.per_request() / b))
            );
        }
        md.push('\n');
    }

    fn write_memory(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## Start and memory by route count\n\nStart: from the process's start until it first \
             answered `GET /` (asked every 5 ms). Resident memory (VmRSS) once it served, before \
             any load, and after every round; per route: (RSS with N routes − RSS with one) ÷ \
             (N − 1), both at start.\n\n| proxy | routes | start | RSS at start | after the rounds \
             | bytes per route |\n|---|---:|---:|---:|---:|---:|"
        );
        for &proxy in &self.settings.proxies {
            for &routes in &self.settings.routes {
                let Some(instance) = self.instance(proxy, routes) else {
                    continue;
                };
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} |",
                    proxy.written(),
                    thousands(f64::from(routes)),
                    millis(instance.start),
                    mib(instance.rss_kib),
                    mib(instance.rss_after_kib),
                    self.bytes_per_route(proxy, routes)
                        .map_or("–".into(), |b| format!("{b:.0}"))
                );
            }
        }
        md.push('\n');
    }

    fn write_reloads(&self, md: &mut String) {
        let Some(load) = &self.reload_load else {
            return;
        };
        let _ = writeln!(
            md,
            "## Reloads of {routes} routes under load\n\nherdsman with {routes} routes, \
             `POST /api/reload` once a second, each time with the routes renamed (so that every \
             reload parses, checks and compiles a new index, rather than finding the routes \
             unchanged), while wrk asks for the last route's host ({c} connections). The time is \
             the request's, until its answer: the answer comes once the new snapshot serves.\n\n\
             | reload | status | took | RSS after |\n|---:|---:|---:|---:|",
            routes = thousands(f64::from(load.routes)),
            c = self.settings.connections
        );
        for (index, reload) in self.reloads.iter().enumerate() {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} |",
                index + 1,
                reload.status,
                millis(reload.took),
                mib(reload.rss_kib)
            );
        }
        let _ = writeln!(
            md,
            "\nRSS before the first reload {}, peak over the whole run (VmHWM) {}. wrk meanwhile: \
             {} requests at {} requests/s, {} socket errors, {} answers other than 2xx/3xx, p99 \
             {:.0} µs, slowest {:.1} ms.\n",
            mib(load.rss_before_kib),
            mib(load.peak_rss_kib),
            thousands(load.wrk.requests as f64),
            thousands(load.wrk.requests_per_sec),
            load.wrk.socket_errors,
            load.wrk.bad_status,
            load.wrk.p99_us,
            load.wrk.max_us / 1e3
        );
    }

    fn write_pool(&self, md: &mut String) {
        if self.pool_instances.is_empty() {
            return;
        }
        let servers = thousands(f64::from(self.settings.servers));
        let _ = writeln!(
            md,
            "## least-conn and round-robin over {servers} servers\n\nherdsman (one worker) with \
             one pool of {servers} servers, each at a loopback address of its own on one port of \
             a backend of its own (this program's, listening on 0.0.0.0); warmed until it holds \
             a connection to every server, then wrk with {} connections, the two in turns. \
             Medians over rounds, range in brackets.\n\n| balance | start | RSS at start | \
             CPU-µs per request | requests/s | p99 |\n|---|---:|---:|---:|---:|---:|",
            self.settings.connections
        );
        for instance in &self.pool_instances {
            let balance = instance.balance;
            let values = |value: fn(&PoolRun) -> f64| {
                spread(
                    &self
                        .pool_side(balance, value)
                        .iter()
                        .map(|&(_, v)| v)
                        .collect::<Vec<_>>(),
                )
            };
            let _ = writeln!(
                md,
                "| {balance} | {} | {} | {} | {} | {} |",
                millis(instance.start),
                mib(instance.rss_kib),
                spread_cell(values(PoolRun::cpu_us), |v| format!("{v:.2}")),
                spread_cell(values(|r| r.wrk.requests_per_sec), thousands),
                spread_cell(values(|r| r.wrk.p99_us), |v| format!("{v:.0} µs")),
            );
        }
        md.push('\n');
    }

    fn write_changes(&self, md: &mut String) {
        if self.changes.is_empty() {
            return;
        }
        let _ = writeln!(
            md,
            "## Adding and removing a server in a pool of {}\n\n`POST \
             /api/pools/large/servers` adds one (at an address after the pool's), `DELETE \
             /api/pools/large/servers/NAME` removes it again, one change at a time; the time is \
             the request's, until its answer, which comes once the new snapshot is published. \
             {} of each with no load, then as many under wrk ({} connections).\n\n| balance | \
             change | load | median | slowest |\n|---|---|---|---:|---:|",
            thousands(f64::from(self.settings.servers)),
            self.settings.changes,
            self.settings.connections
        );
        for balance in [Balance::LeastConn, Balance::RoundRobin] {
            for kind in [ChangeKind::Add, ChangeKind::Remove] {
                for under_load in [false, true] {
                    let times: Vec<f64> = self
                        .changes
                        .iter()
                        .filter(|c| {
                            c.balance == balance && c.kind == kind && c.under_load == under_load
                        })
                        .map(|c| c.took.as_secs_f64() * 1e3)
                        .collect();
                    let Some(s) = spread(&times) else {
                        continue;
                    };
                    let _ = writeln!(
                        md,
                        "| {balance} | {} | {} | {:.1} ms | {:.1} ms |",
                        match kind {
                            ChangeKind::Add => "add",
                            ChangeKind::Remove => "remove",
                        },
                        if under_load { "wrk" } else { "none" },
                        s.median,
                        s.max
                    );
                }
            }
        }
        md.push('\n');
        for (balance, wrk) in &self.change_loads {
            let _ = writeln!(
                md,
                "- {balance}, under the changes: {} requests at {} requests/s, {} socket errors, \
                 {} answers other than 2xx/3xx, slowest {:.1} ms.",
                thousands(wrk.requests as f64),
                thousands(wrk.requests_per_sec),
                wrk.socket_errors,
                wrk.bad_status,
                wrk.max_us / 1e3
            );
        }
        for (balance, before, after) in &self.change_memory {
            let _ = writeln!(
                md,
                "- {balance}: RSS {} before the changes, {} after.",
                mib(*before),
                mib(*after)
            );
        }
        md.push('\n');
    }

    fn write_runs(&self, md: &mut String) {
        let rows: Vec<String> = self
            .runs
            .iter()
            .map(|r| {
                format!(
                    "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {:.0} | {} |",
                    r.round,
                    r.proxy.written(),
                    thousands(f64::from(r.routes)),
                    r.host,
                    r.per_request(r.cpu.user),
                    r.per_request(r.cpu.system),
                    r.cpu_us(),
                    thousands(r.wrk.requests_per_sec),
                    r.wrk.p99_us,
                    r.errors()
                )
            })
            .chain(self.pool_runs.iter().map(|r| {
                format!(
                    "| {} | herdsman, {} | {} servers | – | {:.2} | {:.2} | {:.2} | {} | {:.0} | {} |",
                    r.round,
                    r.balance,
                    thousands(f64::from(self.settings.servers)),
                    r.cpu.user.as_secs_f64() * 1e6 / r.wrk.requests.max(1) as f64,
                    r.cpu.system.as_secs_f64() * 1e6 / r.wrk.requests.max(1) as f64,
                    r.cpu_us(),
                    thousands(r.wrk.requests_per_sec),
                    r.wrk.p99_us,
                    r.wrk.socket_errors + r.wrk.bad_status
                )
            }))
            .collect();
        write_details_table(
            md,
            "Every run",
            "| round | proxy | routes | host | user µs/req | system µs/req | CPU µs/req | req/s \
             | p99 µs | errors |",
            "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|",
            rows.into_iter(),
        );
    }
}

/// A target's row: what, the ratio over rounds, and whether its median is at most `bound`.
fn ratio_row(md: &mut String, what: String, ratio: PairedRatio, bound: f64) {
    let _ = writeln!(
        md,
        "| {what} | {} | {} |",
        ratio_text(&ratio),
        ratio.judged(bound, true)
    );
}

/// "1.012 (per round 0.998–1.020)"; "–" when no round has both runs.
fn ratio_text(ratio: &PairedRatio) -> String {
    match ratio.per_round() {
        None => "–".into(),
        Some(s) if s.count > 1 => format!("{:.3} (per round {:.3}–{:.3})", s.median, s.min, s.max),
        Some(s) => format!("{:.3}", s.median),
    }
}

fn verdict_under(time: Option<Duration>, limit: Duration) -> &'static str {
    match time {
        None => "not measured",
        Some(t) if t < limit => "met",
        Some(_) => "**NOT MET**",
    }
}

fn millis(time: Duration) -> String {
    format!("{:.0} ms", time.as_secs_f64() * 1e3)
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

impl Results for Session {
    fn measured_nothing(&self) -> bool {
        self.runs.is_empty() && self.pool_runs.is_empty()
    }

    fn facts_and_failure(&mut self) -> (&mut RunFacts, &mut Option<String>) {
        (&mut self.facts, &mut self.failure)
    }

    fn summary(&self) -> String {
        let most = self.settings.most_routes();
        let mut text = format!(
            "scale: CPU-µs per request (median over {} round(s) of {} s)\n{:<9} {:>9} {:>9} {:>9} {:>9}\n",
            self.settings.rounds, self.settings.seconds, "proxy", "routes", "first", "last", "unknown"
        );
        for &proxy in &self.settings.proxies {
            for routes in [1, most] {
                let cell = |host| {
                    self.cpu_spread(proxy, routes, host)
                        .map_or("–".into(), |s| format!("{:.2}", s.median))
                };
                let _ = writeln!(
                    text,
                    "{:<9} {:>9} {:>9} {:>9} {:>9}",
                    proxy.to_string(),
                    thousands(f64::from(routes)),
                    cell(Host::First),
                    cell(Host::Last),
                    cell(Host::Unknown)
                );
            }
        }
        if let Some(instance) = self.instance(ProxyKind::Herdsman, most) {
            let _ = writeln!(
                text,
                "herdsman with {} routes: start {}, slowest reload {}",
                thousands(f64::from(most)),
                millis(instance.start),
                self.reloads
                    .iter()
                    .map(|r| r.took)
                    .max()
                    .map_or("–".into(), millis)
            );
        }
        for balance in [Balance::LeastConn, Balance::RoundRobin] {
            let cpu: Vec<f64> = self
                .pool_side(balance, PoolRun::cpu_us)
                .iter()
                .map(|&(_, v)| v)
                .collect();
            if let Some(s) = spread(&cpu) {
                let _ = writeln!(
                    text,
                    "{balance} over {} servers: {:.2} CPU-µs per request",
                    thousands(f64::from(self.settings.servers)),
                    s.median
                );
            }
        }
        Trouble::new(&[], self.runs.len(), &self.failure).write_summary(&mut text);
        text
    }

    fn render(&self, plot: Option<&Path>) -> String {
        let s = &self.settings;
        let mut md = String::new();
        let _ = writeln!(
            md,
            "# Routing and balancing at scale\n\nEach proxy with one worker in front of one fast \
             backend (this program's, a 19-byte answer), configured as an operator with many \
             sites would: herdsman with a `[[route]]` per host, HAProxy with one map file \
             (`use_backend %[req.hdr(host),lower,map(hosts.map,backend)]`), nginx with a `server` \
             block per `server_name` and a `default_server`; every route leads to the one \
             backend, and so does an unknown host. Route counts {}; each proxy started with each \
             count, all running at once. Each round asks every one of them, in an order that \
             turns from round to round, for the first route's host, the last route's and an \
             unknown host, wrk with {} connections for {} s each; {} round(s). CPU per request \
             is the proxy process's user + system time (/proc) over the run ÷ the requests wrk \
             completed.\n",
            s.routes
                .iter()
                .map(|&r| thousands(f64::from(r)))
                .collect::<Vec<_>>()
                .join(", "),
            s.connections,
            s.seconds,
            s.rounds
        );
        self.facts.write_markdown(&mut md);
        Trouble::new(&[], self.runs.len(), &self.failure).write_markdown(&mut md);
        self.write_targets(&mut md);
        self.write_cpu(&mut md);
        write_plot_link(&mut md, plot, "CPU per request against route count");
        self.write_instructions(&mut md);
        self.write_memory(&mut md);
        self.write_reloads(&mut md);
        self.write_pool(&mut md);
        self.write_changes(&mut md);
        self.write_runs(&mut md);
        for (what, text) in &self.configs {
            let _ = writeln!(md, "## {what}\n\n```\n{text}```\n");
        }
        md
    }

    /// CPU per request against route count (log10), a line per proxy, for the last route's host
    /// and for an unknown one.
    fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let chart = |host: Host| LineChart {
            title: format!("CPU per request, {host} host, 1 worker"),
            x_label: "routes, log10 (0 = 1, 5 = 100,000)".into(),
            y_label: "CPU-µs per request".into(),
            series: self
                .settings
                .proxies
                .iter()
                .map(|&proxy| Series {
                    name: proxy.written().into(),
                    points: self
                        .settings
                        .routes
                        .iter()
                        .filter_map(|&routes| {
                            let s = self.cpu_spread(proxy, routes, host)?;
                            Some((f64::from(routes).log10(), s.median))
                        })
                        .collect(),
                })
                .collect(),
            log_y: false,
        };
        write_panels_png(path, &[chart(Host::Last), chart(Host::Unknown)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(requests: u64) -> WrkReport {
        WrkReport {
            requests,
            seconds: 1.0,
            requests_per_sec: requests as f64,
            p50_us: 100.0,
            p99_us: 300.0,
            max_us: 900.0,
            socket_errors: 0,
            bad_status: 0,
        }
    }

    fn run(round: u32, proxy: ProxyKind, routes: u32, host: Host, cpu_ms: u64) -> RouteRun {
        RouteRun {
            round,
            proxy,
            routes,
            host,
            cpu: CpuTime {
                user: Duration::from_millis(cpu_ms / 4),
                system: Duration::from_millis(cpu_ms - cpu_ms / 4),
            },
            wrk: report(100_000),
        }
    }

    #[test]
    fn targets_compare_per_round_and_name_what_was_missed() {
        let settings = Settings::resolve(
            &crate::kit::settings::parse_args::<super::super::ScaleArgs>(
                "scale",
                &["--routes", "1000", "--proxies", "herdsman,haproxy"],
            )
            .unwrap(),
            Path::new("/w"),
        );
        let mut session = Session::new(RunFacts::sample("scale"), settings);
        for round in 1..=2 {
            for (proxy, last) in [(ProxyKind::Herdsman, 1_420), (ProxyKind::Haproxy, 1_500)] {
                session.runs.push(run(round, proxy, 1, Host::First, 1_400));
                session
                    .runs
                    .push(run(round, proxy, 1000, Host::First, 1_400));
                session.runs.push(run(round, proxy, 1000, Host::Last, last));
                session
                    .runs
                    .push(run(round, proxy, 1000, Host::Unknown, 1_600));
            }
        }
        for (proxy, rss) in [(ProxyKind::Herdsman, 10_000), (ProxyKind::Haproxy, 10_100)] {
            for (routes, more) in [(1, 0), (1000, 100)] {
                session.instances.push(Instance {
                    proxy,
                    routes,
                    start: Duration::from_millis(30),
                    rss_kib: rss + more,
                    rss_after_kib: rss + more,
                });
            }
        }
        let md = session.render(None);
        // 14.2 ÷ 14.0 per round: within 3%.
        assert!(
            md.contains("| herdsman, last of 1,000 routes ÷ first host, ≤ 1.03 | 1.014 (per round 1.014–1.014) | met |"),
            "{md}"
        );
        // 16 ÷ 14: not.
        assert!(md.contains(
            "unknown host with 1,000 routes ÷ first host, ≤ 1.03 | 1.143 (per round 1.143–1.143) \
             | **NOT MET** (the median's 95% interval 1.143–1.143) |"
        ));
        assert!(md
            .contains("| herdsman ÷ HAProxy with its map, last host of 1,000 routes, ≤ 1 | 0.947"));
        // 100 KiB ÷ 999 routes each.
        assert!(md.contains("103 bytes against 103"), "{md}");
        assert!(md.contains(
            "| herdsman reloads 1,000 routes in under 1 s (the slowest of 0) | – | not measured |"
        ));
        assert!(
            md.contains("| 1,000 | 14.00 (100,000) | 14.20 (100,000) | 16.00 (100,000) |"),
            "{md}"
        );
        let summary = session.summary();
        assert!(
            summary.contains("herdsman      1,000     14.00     14.20     16.00"),
            "{summary}"
        );
    }
}
