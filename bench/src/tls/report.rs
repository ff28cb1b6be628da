//! What `tls` prints and writes: the targets judged on paired rounds; per worker count, each
//! proxy's full and resumed handshakes per CPU-second (user and kernel CPU apart), how resumption
//! was seen, keep-alive requests over TLS, CPU per GiB of 1 MiB answers, memory per idle TLS
//! connection; the commands and configurations; every run; a plot of every figure by round.

use std::fmt::Write as _;
use std::path::Path;

use super::handshakes::s_time_args;
use super::runs::{HandshakeFigure, HandshakeRun, IdleRun, Run, Transfer, TransferRun};
use super::settings::Settings;
use crate::kit::certificates::KeyType;
use crate::kit::h2load::h2load_args;
use crate::kit::markdown::{spread_cell, thousands, worker_count, write_details_table};
use crate::kit::paired::PairedRatio;
use crate::kit::plot::{write_panels_png, LineChart, Series};
use crate::kit::proxies::ProxyKind;
use crate::kit::results::{write_plot_link, Results, RunFacts, Trouble};
use crate::kit::stats::spread;
use crate::kit::wrk::Load;

/// The issue's bounds: herdsman ÷ each peer.
const FULL_ECDSA_AT_LEAST: f64 = 1.3;
const FULL_RSA_AT_LEAST: f64 = 1.0;
const RESUMED_AT_LEAST: f64 = 1.3;
const KEEP_ALIVE_CPU_AT_MOST: f64 = 0.9;
const KEEP_ALIVE_P99_AT_MOST: f64 = 1.0;
const BIG_CPU_AT_MOST: f64 = 1.0;
/// herdsman's bytes per idle TLS connection ÷ nginx's.
const IDLE_AT_MOST: f64 = 0.5;

/// Everything one `tls` session measured.
pub struct Session {
    pub facts: RunFacts,
    pub settings: Settings,
    pub failure: Option<String>,
    /// The commands that made the certificates.
    pub certificate_commands: Vec<String>,
    /// Each proxy's configuration as run (with the first worker count), the scratch directory
    /// written SCRATCH.
    pub configs: Vec<(ProxyKind, String)>,
    pub handshakes: Vec<HandshakeRun>,
    pub transfers: Vec<TransferRun>,
    pub idle: Vec<IdleRun>,
}

/// (round, value) of the runs of `proxy` with `workers` that `pick` keeps.
fn side<R: Run>(
    runs: &[R],
    workers: u32,
    proxy: ProxyKind,
    pick: impl Fn(&R) -> bool,
    value: impl Fn(&R) -> f64,
) -> Vec<(u32, f64)> {
    runs.iter()
        .filter(|r| r.workers() == workers && r.proxy() == proxy && pick(r))
        .map(|r| (r.round(), value(r)))
        .collect()
}

/// The median over rounds of `side`'s values.
fn median(side: &[(u32, f64)]) -> Option<f64> {
    spread(&side.iter().map(|&(_, v)| v).collect::<Vec<_>>()).map(|s| s.median)
}

impl Session {
    pub fn new(facts: RunFacts, settings: Settings) -> Session {
        Session {
            facts,
            settings,
            failure: None,
            certificate_commands: Vec::new(),
            configs: Vec::new(),
            handshakes: Vec::new(),
            transfers: Vec::new(),
            idle: Vec::new(),
        }
    }

    fn handshake_side(
        &self,
        workers: u32,
        proxy: ProxyKind,
        figure: HandshakeFigure,
        value: impl Fn(&HandshakeRun) -> f64,
    ) -> Vec<(u32, f64)> {
        side(
            &self.handshakes,
            workers,
            proxy,
            |r| r.figure == figure,
            value,
        )
    }

    fn transfer_side(
        &self,
        workers: u32,
        proxy: ProxyKind,
        transfer: Transfer,
        value: impl Fn(&TransferRun) -> f64,
    ) -> Vec<(u32, f64)> {
        side(
            &self.transfers,
            workers,
            proxy,
            |r| r.transfer == transfer,
            value,
        )
    }

    fn idle_side(&self, workers: u32, proxy: ProxyKind) -> Vec<(u32, f64)> {
        side(
            &self.idle,
            workers,
            proxy,
            |_| true,
            IdleRun::bytes_per_connection,
        )
    }

    /// The proxies other than herdsman, in the order measured.
    fn peers(&self) -> Vec<ProxyKind> {
        self.settings
            .proxies
            .iter()
            .copied()
            .filter(|&p| p != ProxyKind::Herdsman)
            .collect()
    }

    fn write_targets(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## Targets\n\nEach ratio is herdsman's figure over the peer's, taken per round (the \
             two runs of a round back to back) and judged by its median over rounds; the range \
             follows. When the median misses a bound that its 95% interval (from the rounds' \
             order statistics) still holds, the run did not tell the two apart; more rounds \
             (`--rounds`) narrow the interval.\n\n| target | measured | verdict |\n|---|---|---|"
        );
        let herdsman = ProxyKind::Herdsman;
        for &workers in &self.settings.workers {
            let w = worker_count(workers);
            for peer in self.peers() {
                let p = peer.written();
                for (figure, bound) in [
                    (HandshakeFigure::Full(KeyType::Ecdsa), FULL_ECDSA_AT_LEAST),
                    (HandshakeFigure::Full(KeyType::Rsa), FULL_RSA_AT_LEAST),
                    (HandshakeFigure::Resumed, RESUMED_AT_LEAST),
                ] {
                    let ratio = PairedRatio::of(
                        &self.handshake_side(
                            workers,
                            herdsman,
                            figure,
                            HandshakeRun::per_cpu_second,
                        ),
                        &self.handshake_side(workers, peer, figure, HandshakeRun::per_cpu_second),
                    );
                    ratio_row(
                        md,
                        format!(
                            "{w}: {} handshakes per CPU-second, herdsman ÷ {p} ≥ {bound}",
                            figure.written()
                        ),
                        &ratio,
                        bound,
                        false,
                    );
                }
                let cpu = |proxy| {
                    self.transfer_side(workers, proxy, Transfer::Small, TransferRun::cpu_us)
                };
                ratio_row(
                    md,
                    format!(
                        "{w}: keep-alive over TLS, CPU per request, herdsman ÷ {p} ≤ {KEEP_ALIVE_CPU_AT_MOST}"
                    ),
                    &PairedRatio::of(&cpu(herdsman), &cpu(peer)),
                    KEEP_ALIVE_CPU_AT_MOST,
                    true,
                );
                let p99 =
                    |proxy| self.transfer_side(workers, proxy, Transfer::Small, |r| r.wrk.p99_us);
                ratio_row(
                    md,
                    format!("{w}: keep-alive over TLS, p99 latency, herdsman ÷ {p} ≤ {KEEP_ALIVE_P99_AT_MOST}"),
                    &PairedRatio::of(&p99(herdsman), &p99(peer)),
                    KEEP_ALIVE_P99_AT_MOST,
                    true,
                );
                let gib = |proxy| {
                    self.transfer_side(workers, proxy, Transfer::Big, TransferRun::cpu_per_gib)
                };
                ratio_row(
                    md,
                    format!("{w}: 1 MiB answers over TLS, CPU-seconds per GiB, herdsman ÷ {p} ≤ {BIG_CPU_AT_MOST}"),
                    &PairedRatio::of(&gib(herdsman), &gib(peer)),
                    BIG_CPU_AT_MOST,
                    true,
                );
            }
            if self.settings.proxies.contains(&ProxyKind::Nginx) {
                ratio_row(
                    md,
                    format!(
                        "{w}: resident bytes per idle TLS connection ({} held), herdsman ÷ nginx ≤ {IDLE_AT_MOST}",
                        thousands(f64::from(self.settings.idle))
                    ),
                    &PairedRatio::of(
                        &self.idle_side(workers, herdsman),
                        &self.idle_side(workers, ProxyKind::Nginx),
                    ),
                    IDLE_AT_MOST,
                    true,
                );
            }
        }
        md.push('\n');
    }

    /// A table with a row per worker count and a column per proxy, each cell made by `cell`.
    fn write_by_proxy(
        &self,
        md: &mut String,
        first: &str,
        rows: &[(u32, String)],
        cell: impl Fn(u32, usize, ProxyKind) -> Option<String>,
    ) {
        let mut head = format!("| workers | {first} |");
        let mut rule = String::from("|---|---|");
        for proxy in &self.settings.proxies {
            let _ = write!(head, " {} |", proxy.written());
            rule.push_str("---:|");
        }
        let _ = writeln!(md, "{head}\n{rule}");
        for (index, (workers, what)) in rows.iter().enumerate() {
            let _ = write!(md, "| {} | {what} |", worker_count(*workers));
            for &proxy in &self.settings.proxies {
                let _ = write!(
                    md,
                    " {} |",
                    cell(*workers, index, proxy).unwrap_or_else(|| "–".into())
                );
            }
            md.push('\n');
        }
        md.push('\n');
    }

    fn write_handshakes(&self, md: &mut String) {
        let s = &self.settings;
        let _ = writeln!(
            md,
            "## Handshakes per CPU-second\n\nHandshakes completed (each with one `GET /` answered \
             2xx) ÷ the proxy's CPU-seconds (user + system of all its processes, from /proc) over \
             the same window; median over rounds, then the CPU per handshake in µs, user and \
             kernel apart, and handshakes per second of wall time. **Full**: h2load, batches of \
             {} clients that each connect, make one request and close (`{}`), one batch after \
             another for {} s; no client has a session to offer. **Resumed**: {} `openssl s_time \
             -reuse -tls1_3` processes at once for {} s, on the ECDSA listener, each connection \
             resuming the session (a TLS 1.3 ticket) of the one before; counted from when every \
             process has made its first, full, connection. The two clients differ: s_time's \
             connections come one at a time per process, h2load's a hundred at once, and a proxy \
             pays more per handshake when they come one at a time (fewer of them per wake-up). \
             So compare the proxies within a row, not the resumed row with the full ones.\n",
            s.batch,
            h2load_args("PORT", s.batch).join(" "),
            s.seconds,
            s.resuming_clients,
            s.seconds,
        );
        let rows: Vec<(u32, String)> = s
            .workers
            .iter()
            .flat_map(|&w| HandshakeFigure::ALL.map(|f| (w, f.written())))
            .collect();
        self.write_by_proxy(md, "handshakes", &rows, |workers, index, proxy| {
            let figure = HandshakeFigure::ALL[index % HandshakeFigure::ALL.len()];
            let m = |value: fn(&HandshakeRun) -> f64| {
                median(&self.handshake_side(workers, proxy, figure, value))
            };
            Some(format!(
                "**{}**/CPU-s (user {:.0} µs, sys {:.0} µs), {}/s",
                thousands(m(HandshakeRun::per_cpu_second)?),
                m(|r| r.us_each(r.counted.cpu.user))?,
                m(|r| r.us_each(r.counted.cpu.system))?,
                thousands(m(HandshakeRun::per_second)?)
            ))
        });
        self.write_resumption(md);
    }

    /// How the handshakes were seen: the clients' counts, summed over rounds, and herdsman's own.
    fn write_resumption(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "### Were the resumed handshakes resumed, and the full ones full?\n\nSummed over \
             rounds. s_time marks each connection `r` when the server resumed its session \
             (`SSL_session_reused`), so its count is per connection; h2load's clients make one \
             connection each and so never offer a session. herdsman's own count \
             (`herdsman_worker_tls_handshakes_total` on its admin API, read before and after each \
             run) is the server's side, over the whole run: with s_time, also each process's \
             first, full, connection and the resumed ones before every process had made it; \
             HAProxy and nginx keep no such count without more configuration.\n\n\
             | workers | handshakes | proxy | counted by the client | resumed, by the client | \
             herdsman's own count: full / resumed | failed requests |\n\
             |---|---|---|---:|---:|---:|---:|"
        );
        for &workers in &self.settings.workers {
            for figure in HandshakeFigure::ALL {
                for &proxy in &self.settings.proxies {
                    let runs: Vec<&HandshakeRun> = self
                        .handshakes
                        .iter()
                        .filter(|r| r.workers == workers && r.proxy == proxy && r.figure == figure)
                        .collect();
                    if runs.is_empty() {
                        continue;
                    }
                    let total: u64 = runs.iter().map(|r| r.counted.handshakes).sum();
                    let resumed = runs
                        .iter()
                        .map(|r| r.counted.resumed)
                        .sum::<Option<u64>>()
                        .map_or("not told".into(), |n| thousands(n as f64));
                    let server = runs.iter().map(|r| r.server).sum_counts().map_or(
                        "–".into(),
                        |(full, resumed)| {
                            format!("{} / {}", thousands(full as f64), thousands(resumed as f64))
                        },
                    );
                    let failed: u64 = runs.iter().map(|r| r.counted.failed).sum();
                    let _ = writeln!(
                        md,
                        "| {} | {} | {} | {} | {resumed} | {server} | {failed} |",
                        worker_count(workers),
                        figure.written(),
                        proxy.written(),
                        thousands(total as f64),
                    );
                }
            }
        }
        let _ = writeln!(md, "\n{}\n", self.resumption_verdict());
    }

    /// One sentence on whether every connection of the resumed runs was resumed.
    pub fn resumption_verdict(&self) -> String {
        let resumed_runs: Vec<&HandshakeRun> = self
            .handshakes
            .iter()
            .filter(|r| r.figure == HandshakeFigure::Resumed)
            .collect();
        let total: u64 = resumed_runs.iter().map(|r| r.counted.handshakes).sum();
        let resumed: u64 = resumed_runs.iter().filter_map(|r| r.counted.resumed).sum();
        if total == 0 {
            "Resumption: not measured.".into()
        } else if resumed == total {
            format!(
                "Resumption: seen on every one of the {} connections of the resumed runs, for \
                 every proxy (s_time marked each `r`).",
                thousands(total as f64)
            )
        } else {
            format!(
                "Resumption: **only {} of the {} connections of the resumed runs were resumed**; \
                 the rest were full handshakes, which the resumed figures include.",
                thousands(resumed as f64),
                thousands(total as f64)
            )
        }
    }

    fn write_transfers(&self, md: &mut String) {
        let s = &self.settings;
        let small = Load {
            connections: s.connections,
            seconds: s.seconds,
        };
        let _ = writeln!(
            md,
            "## Keep-alive requests over TLS\n\n`wrk {}` (a 19-byte answer; the {} connections' \
             handshakes fall in the run). Median over rounds of requests/s, p99 latency, and the \
             proxy's CPU-µs per request, user and kernel apart.\n",
            small.args_for("https://127.0.0.1:PORT/").join(" "),
            s.connections
        );
        let rows: Vec<(u32, String)> = s.workers.iter().map(|&w| (w, "`GET /`".into())).collect();
        self.write_by_proxy(md, "request", &rows, |workers, _, proxy| {
            let m = |value: fn(&TransferRun) -> f64| {
                median(&self.transfer_side(workers, proxy, Transfer::Small, value))
            };
            Some(format!(
                "{} req/s, p99 {} µs, **{:.2}** CPU-µs (user {:.2}, sys {:.2})",
                thousands(m(|r| r.wrk.requests_per_sec)?),
                thousands(m(|r| r.wrk.p99_us)?),
                m(TransferRun::cpu_us)?,
                m(|r| r.us_per_request(r.cpu.user))?,
                m(|r| r.us_per_request(r.cpu.system))?
            ))
        });
        let big = Load {
            connections: s.big_connections,
            seconds: s.seconds,
        };
        let _ = writeln!(
            md,
            "## 1 MiB answers over TLS\n\n`wrk {}`: the backend's 1 MiB answer, encrypted by the \
             proxy. Median over rounds of the proxy's CPU-seconds per GiB of answer bodies, user \
             and kernel apart, and GiB/s.\n",
            big.args_for("https://127.0.0.1:PORT/big").join(" ")
        );
        let rows: Vec<(u32, String)> = s
            .workers
            .iter()
            .map(|&w| (w, "`GET /big`".into()))
            .collect();
        self.write_by_proxy(md, "request", &rows, |workers, _, proxy| {
            let m = |value: fn(&TransferRun) -> f64| {
                median(&self.transfer_side(workers, proxy, Transfer::Big, value))
            };
            Some(format!(
                "**{:.3}** CPU-s/GiB (user {:.3}, sys {:.3}), {:.2} GiB/s",
                m(TransferRun::cpu_per_gib)?,
                m(|r| r.seconds_per_gib(r.cpu.user))?,
                m(|r| r.seconds_per_gib(r.cpu.system))?,
                m(|r| r.gib() / r.wrk.seconds.max(1e-9))?
            ))
        });
    }

    fn write_idle(&self, md: &mut String) {
        let s = &self.settings;
        let _ = writeln!(
            md,
            "## Memory per idle TLS connection\n\nEach proxy started afresh (ECDSA listener), one \
             TLS request served, its processes' resident memory (VmRSS, /proc) read; then one \
             holder process (`herdsman-bench tls-holder`) completes {} full TLS handshakes, one \
             keep-alive `GET /` answered 2xx on each, and holds them; the memory read again. \
             (RSS with them − RSS before) ÷ {}: median over rounds, with the RSS before and \
             with them.\n",
            thousands(f64::from(s.idle)),
            thousands(f64::from(s.idle)),
        );
        let rows: Vec<(u32, String)> = s
            .workers
            .iter()
            .map(|&w| (w, format!("{} held", thousands(f64::from(s.idle)))))
            .collect();
        self.write_by_proxy(md, "connections", &rows, |workers, _, proxy| {
            let m = |value: fn(&IdleRun) -> f64| {
                median(&side(&self.idle, workers, proxy, |_| true, value))
            };
            Some(format!(
                "**{}** bytes each ({:.1} → {:.1} MiB)",
                thousands(m(IdleRun::bytes_per_connection)?),
                m(|r| r.rss_before_kib as f64)? / 1024.0,
                m(|r| r.rss_after_kib as f64)? / 1024.0
            ))
        });
        let closed: u32 = self.idle.iter().map(|r| r.closed).sum();
        let not_13: u32 = self.idle.iter().map(|r| r.held.count - r.held.tls13).sum();
        let not_full: u32 = self.idle.iter().map(|r| r.held.count - r.held.full).sum();
        if !self.idle.is_empty() {
            let _ = writeln!(
                md,
                "Over every idle run: {closed} connection(s) closed by a proxy while held, {not_13} \
                 not on TLS 1.3, {not_full} not a full handshake.\n"
            );
        }
    }

    fn write_commands(&self, md: &mut String) {
        let s = &self.settings;
        let _ = writeln!(
            md,
            "## Commands\n\nThe certificates, made in the scratch directory (SCRATCH):\n\n```"
        );
        for command in &self.certificate_commands {
            let _ = writeln!(md, "{command}");
        }
        let keep = Load {
            connections: s.connections,
            seconds: s.seconds,
        };
        let big = Load {
            connections: s.big_connections,
            seconds: s.seconds,
        };
        let _ = writeln!(
            md,
            "```\n\nEach proxy serves the ECDSA certificate on one port and the RSA one on \
             another, in front of `herdsman-bench backend --listen 127.0.0.1:PORT`; per run:\n\n\
             ```\n\
             # full handshakes: batches one after another for {secs} s\n\
             h2load {full}\n\
             # resumed handshakes: {clients} of these at once\n\
             openssl {resumed}\n\
             # keep-alive requests\n\
             wrk {keep}\n\
             # 1 MiB answers\n\
             wrk {big}\n\
             # idle TLS connections, against a fresh proxy\n\
             herdsman-bench tls-holder --port PORT --count {idle} --certificate SCRATCH/ecdsa.pem\n\
             ```\n",
            secs = s.seconds,
            full = h2load_args("PORT", s.batch).join(" "),
            clients = s.resuming_clients,
            resumed = s_time_args("PORT", s.seconds).join(" "),
            keep = keep.args_for("https://127.0.0.1:PORT/").join(" "),
            big = big.args_for("https://127.0.0.1:PORT/big").join(" "),
            idle = s.idle,
        );
        for (proxy, config) in &self.configs {
            let _ = writeln!(
                md,
                "<details><summary>{}'s configuration</summary>\n\n```\n{}```\n\n</details>\n",
                proxy.written(),
                config
            );
        }
    }

    fn write_runs(&self, md: &mut String) {
        let rows = self.handshakes.iter().map(|r| {
            format!(
                "| {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {} | {} |",
                r.round,
                r.workers,
                r.proxy.written(),
                r.figure.written(),
                r.counted.handshakes,
                r.counted.resumed.map_or("–".into(), |n| n.to_string()),
                r.us_each(r.counted.cpu.user),
                r.us_each(r.counted.cpu.system),
                thousands(r.per_cpu_second()),
                r.counted.version
            )
        });
        write_details_table(
            md,
            "Every handshake run",
            "| round | workers | proxy | handshakes | completed | resumed | user µs each | \
             system µs each | per CPU-s | TLS |",
            "|---:|---:|---|---|---:|---:|---:|---:|---:|---|",
            rows.collect::<Vec<_>>().into_iter(),
        );
        let rows = self.transfers.iter().map(|r| {
            format!(
                "| {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.4} | {} | {:.0} | {} |",
                r.round,
                r.workers,
                r.proxy.written(),
                r.transfer.path(),
                thousands(r.wrk.requests_per_sec),
                r.us_per_request(r.cpu.user),
                r.us_per_request(r.cpu.system),
                r.cpu_per_gib(),
                r.wrk.requests,
                r.wrk.p99_us,
                r.errors()
            )
        });
        write_details_table(
            md,
            "Every wrk run",
            "| round | workers | proxy | path | req/s | user µs/req | system µs/req | CPU-s/GiB | \
             requests | p99 µs | errors |",
            "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
            rows.collect::<Vec<_>>().into_iter(),
        );
        let rows = self.idle.iter().map(|r| {
            format!(
                "| {} | {} | {} | {} | {} | {} | {:.0} | {} |",
                r.round,
                r.workers,
                r.proxy.written(),
                r.held.count,
                r.rss_before_kib,
                r.rss_after_kib,
                r.bytes_per_connection(),
                r.closed
            )
        });
        write_details_table(
            md,
            "Every idle run",
            "| round | workers | proxy | connections | RSS before KiB | RSS with them KiB | bytes \
             each | closed |",
            "|---:|---:|---|---:|---:|---:|---:|---:|",
            rows.collect::<Vec<_>>().into_iter(),
        );
    }

    /// A panel of one figure by round: a line per proxy and worker count.
    fn panel(
        &self,
        title: &str,
        y_label: &str,
        value: impl Fn(u32, ProxyKind) -> Vec<(u32, f64)>,
    ) -> LineChart {
        let mut series = Vec::new();
        for &workers in &self.settings.workers {
            for &proxy in &self.settings.proxies {
                series.push(Series {
                    name: format!("{}, {}", proxy.written(), worker_count(workers)),
                    points: value(workers, proxy)
                        .into_iter()
                        .map(|(round, v)| (f64::from(round), v))
                        .collect(),
                });
            }
        }
        LineChart {
            title: title.into(),
            x_label: "round".into(),
            y_label: y_label.into(),
            series,
            log_y: false,
        }
    }
}

/// Sums herdsman's counts over runs: None unless every run has one.
trait SumCounts {
    fn sum_counts(self) -> Option<(u64, u64)>;
}

impl<I: Iterator<Item = Option<crate::kit::tls_metrics::HandshakeCounts>>> SumCounts for I {
    fn sum_counts(self) -> Option<(u64, u64)> {
        let mut total = (0, 0);
        let mut any = false;
        for counts in self {
            let counts = counts?;
            total = (total.0 + counts.full, total.1 + counts.resumed);
            any = true;
        }
        any.then_some(total)
    }
}

/// A target's row: what, the ratio over rounds, and its verdict against `bound`.
fn ratio_row(md: &mut String, what: String, ratio: &PairedRatio, bound: f64, at_most: bool) {
    let _ = writeln!(
        md,
        "| {what} | {} | {} |",
        spread_cell(ratio.per_round(), |v| format!("{v:.3}")),
        ratio.judged(bound, at_most)
    );
}

impl Results for Session {
    fn measured_nothing(&self) -> bool {
        self.handshakes.is_empty() && self.transfers.is_empty() && self.idle.is_empty()
    }

    fn facts_and_failure(&mut self) -> (&mut RunFacts, &mut Option<String>) {
        (&mut self.facts, &mut self.failure)
    }

    fn summary(&self) -> String {
        let mut text = format!(
            "tls: medians over {} round(s) of {} s\n",
            self.settings.rounds, self.settings.seconds
        );
        for &workers in &self.settings.workers {
            for &proxy in &self.settings.proxies {
                let _ = write!(text, "{:<10} {:<9}", worker_count(workers), proxy.written());
                for figure in HandshakeFigure::ALL {
                    let value = median(&self.handshake_side(
                        workers,
                        proxy,
                        figure,
                        HandshakeRun::per_cpu_second,
                    ));
                    let _ = write!(
                        text,
                        " {} {}/CPU-s;",
                        figure.written(),
                        value.map_or("–".into(), thousands)
                    );
                }
                let cpu = median(&self.transfer_side(
                    workers,
                    proxy,
                    Transfer::Small,
                    TransferRun::cpu_us,
                ));
                let gib = median(&self.transfer_side(
                    workers,
                    proxy,
                    Transfer::Big,
                    TransferRun::cpu_per_gib,
                ));
                let idle = median(&self.idle_side(workers, proxy));
                let _ = writeln!(
                    text,
                    " keep-alive {} CPU-µs/req; {} CPU-s/GiB; {} bytes/idle connection",
                    cpu.map_or("–".into(), |v| format!("{v:.2}")),
                    gib.map_or("–".into(), |v| format!("{v:.3}")),
                    idle.map_or("–".into(), thousands)
                );
            }
        }
        let _ = writeln!(text, "{}", self.resumption_verdict());
        Trouble::new(
            &[],
            self.handshakes.len() + self.transfers.len() + self.idle.len(),
            &self.failure,
        )
        .write_summary(&mut text);
        text
    }

    fn render(&self, plot: Option<&Path>) -> String {
        let s = &self.settings;
        let mut md = String::new();
        let _ = writeln!(
            md,
            "# TLS termination: herdsman, HAProxy and nginx\n\nEach proxy terminates TLS (1.2 and \
             1.3, ALPN http/1.1, session tickets and a TLS 1.2 session cache) with the same two \
             self-signed certificates for `bench.test`, ECDSA P-256 and RSA-2048, in front of one \
             fast backend (this program's, which it keeps connections to), with the same worker \
             count ({}). Every round runs each figure against each proxy once, back to back, in \
             an order that turns from round to round; {} round(s) of {} s per figure, then the \
             idle connections held once per proxy and round. CPU is the proxy's processes' user + \
             system time from /proc over the run; the load generators share the machine's {} \
             CPUs.\n",
            crate::kit::markdown::worker_counts(&s.workers),
            s.rounds,
            s.seconds,
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        self.facts.write_markdown(&mut md);
        Trouble::new(
            &[],
            self.handshakes.len() + self.transfers.len() + self.idle.len(),
            &self.failure,
        )
        .write_markdown(&mut md);
        self.write_targets(&mut md);
        self.write_handshakes(&mut md);
        self.write_transfers(&mut md);
        self.write_idle(&mut md);
        write_plot_link(&mut md, plot, "every figure by round");
        self.write_commands(&mut md);
        self.write_runs(&mut md);
        md
    }

    /// Every figure by round, a panel each, a line per proxy and worker count.
    fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let mut charts = Vec::new();
        for figure in HandshakeFigure::ALL {
            charts.push(self.panel(
                &format!("{} handshakes per CPU-second", figure.written()),
                "handshakes per CPU-second",
                |workers, proxy| {
                    self.handshake_side(workers, proxy, figure, HandshakeRun::per_cpu_second)
                },
            ));
        }
        charts.push(self.panel(
            "Keep-alive requests over TLS: CPU per request",
            "CPU-µs per request",
            |workers, proxy| {
                self.transfer_side(workers, proxy, Transfer::Small, TransferRun::cpu_us)
            },
        ));
        charts.push(self.panel(
            "1 MiB answers over TLS: CPU per GiB",
            "CPU-seconds per GiB",
            |workers, proxy| {
                self.transfer_side(workers, proxy, Transfer::Big, TransferRun::cpu_per_gib)
            },
        ));
        charts.push(self.panel(
            &format!(
                "Resident memory per idle TLS connection, {} held",
                thousands(f64::from(self.settings.idle))
            ),
            "bytes per connection",
            |workers, proxy| self.idle_side(workers, proxy),
        ));
        write_panels_png(path, &charts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::markdown::assert_contains_all;
    use crate::kit::procstat::CpuTime;
    use crate::kit::tls_metrics::HandshakeCounts;
    use crate::kit::wrk::sample_report;
    use crate::tls::handshakes::Counted;
    use crate::tls::holder::HeldReport;
    use std::time::Duration;

    fn settings() -> Settings {
        Settings::resolve(
            &crate::kit::settings::parse_args::<super::super::TlsArgs>("tls", &["--workers", "1"])
                .unwrap(),
            Path::new("/w"),
        )
    }

    fn handshakes(
        round: u32,
        proxy: ProxyKind,
        figure: HandshakeFigure,
        cpu_ms: u64,
    ) -> HandshakeRun {
        let resumed = (figure == HandshakeFigure::Resumed).then_some(1_000);
        HandshakeRun {
            round,
            workers: 1,
            proxy,
            figure,
            counted: Counted {
                handshakes: 1_000,
                resumed,
                failed: 0,
                version: "TLSv1.3".into(),
                seconds: 1.0,
                cpu: CpuTime {
                    user: Duration::from_millis(cpu_ms / 2),
                    system: Duration::from_millis(cpu_ms / 2),
                },
            },
            server: (proxy == ProxyKind::Herdsman).then_some(HandshakeCounts {
                full: if resumed.is_some() { 0 } else { 1_000 },
                resumed: resumed.unwrap_or(0),
            }),
        }
    }

    fn transfer(
        round: u32,
        proxy: ProxyKind,
        transfer: Transfer,
        cpu_ms: u64,
        p99_us: f64,
    ) -> TransferRun {
        TransferRun {
            round,
            workers: 1,
            proxy,
            transfer,
            cpu: CpuTime {
                user: Duration::from_millis(cpu_ms),
                system: Duration::ZERO,
            },
            wrk: crate::kit::wrk::WrkReport {
                p99_us,
                ..sample_report(1_000.0)
            },
        }
    }

    fn idle(round: u32, proxy: ProxyKind, after_kib: u64) -> IdleRun {
        IdleRun {
            round,
            workers: 1,
            proxy,
            rss_before_kib: 10_000,
            rss_after_kib: after_kib,
            held: HeldReport {
                count: 1_000,
                tls13: 1_000,
                full: 1_000,
            },
            closed: 0,
        }
    }

    #[test]
    fn every_target_is_judged_against_each_peer() {
        let mut session = Session::new(RunFacts::sample("tls"), settings());
        for round in 1..=2 {
            for (proxy, factor) in [
                (ProxyKind::Herdsman, 1),
                (ProxyKind::Haproxy, 2),
                (ProxyKind::Nginx, 3),
            ] {
                for figure in HandshakeFigure::ALL {
                    session
                        .handshakes
                        .push(handshakes(round, proxy, figure, 100 * factor));
                }
                session.transfers.push(transfer(
                    round,
                    proxy,
                    Transfer::Small,
                    100 * factor,
                    900.0,
                ));
                session
                    .transfers
                    .push(transfer(round, proxy, Transfer::Big, 100 * factor, 900.0));
                session
                    .idle
                    .push(idle(round, proxy, 10_000 + 1_000 * factor));
            }
        }
        let md = session.render(None);
        assert_contains_all(
            &md,
            &[
                // herdsman 10,000 handshakes per CPU-second, HAProxy 5,000: 2.0.
                "| 1 worker: full, ECDSA P-256 handshakes per CPU-second, herdsman ÷ HAProxy ≥ 1.3 | 2.000 (2.000–2.000) | met |",
                "| 1 worker: full, RSA-2048 handshakes per CPU-second, herdsman ÷ nginx ≥ 1 | 3.000 (3.000–3.000) | met |",
                "| 1 worker: resumed handshakes per CPU-second, herdsman ÷ nginx ≥ 1.3 | 3.000",
                "| 1 worker: keep-alive over TLS, CPU per request, herdsman ÷ HAProxy ≤ 0.9 | 0.500 (0.500–0.500) | met |",
                "| 1 worker: keep-alive over TLS, p99 latency, herdsman ÷ nginx ≤ 1 | 1.000 (1.000–1.000) | met |",
                "| 1 worker: 1 MiB answers over TLS, CPU-seconds per GiB, herdsman ÷ nginx ≤ 1 | 0.333",
                "| 1 worker: resident bytes per idle TLS connection (10,000 held), herdsman ÷ nginx ≤ 0.5 | 0.333 (0.333–0.333) | met |",
                "**10,000**/CPU-s (user 50 µs, sys 50 µs), 1,000/s",
                "| 1 worker | resumed | herdsman | 2,000 | 2,000 | 0 / 2,000 | 0 |",
                "| 1 worker | full, ECDSA P-256 | nginx | 2,000 | not told | – | 0 |",
                "Resumption: seen on every one of the 6,000 connections",
                "**1,024** bytes each (9.8 → 10.7 MiB)",
                "openssl s_time -connect 127.0.0.1:PORT -reuse -tls1_3 -www / -time 5",
            ],
        );
        assert!(session
            .summary()
            .contains("herdsman  full, ECDSA P-256 10,000/CPU-s;"));
    }

    #[test]
    fn a_resumed_run_with_full_handshakes_is_named() {
        let mut session = Session::new(RunFacts::sample("tls"), settings());
        let mut run = handshakes(1, ProxyKind::Nginx, HandshakeFigure::Resumed, 100);
        run.counted.resumed = Some(990);
        session.handshakes.push(run);
        assert!(session
            .resumption_verdict()
            .contains("only 990 of the 1,000 connections"));
        let md = session.render(None);
        assert!(md.contains("| 1 worker: resumed handshakes per CPU-second, herdsman ÷ nginx ≥ 1.3 | – | not measured |"), "{md}");
    }
}
