//! What `rules` measured and how it reads: every run, the one checked request per row (what
//! came back: its fields, encoding and bytes), per part and worker count a table of medians over
//! rounds with their range, issue 42's targets judged, and the results file.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};

use super::origin;
use super::rows::Row;
use super::settings::{Part, Settings};
use crate::kit::markdown::{spread_cell, thousands, worker_count};
use crate::kit::procstat::CpuTime;
use crate::kit::results::{Configurations, Results, RunFacts};
use crate::kit::stats::{spread, Spread};
use crate::kit::wrk::WrkReport;

/// One row's measured run.
#[derive(Debug, Clone)]
pub struct RulesRun {
    pub part: Part,
    pub workers: u32,
    pub round: u32,
    /// Its index in its part's rows.
    pub row: usize,
    /// The proxy's CPU over the run.
    pub cpu: CpuTime,
    pub wrk: WrkReport,
}

/// One answer, as a row's check read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub status: u16,
    /// Its fields, names in lower case.
    pub fields: Vec<(String, String)>,
    /// The body's bytes, without chunked framing.
    pub body_bytes: usize,
}

impl Probe {
    /// The first value of field `name` (lower case).
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(known, _)| known == name)
            .map(|(_, value)| value.as_str())
    }

    /// A whole answer read to its end.
    pub fn parse(answer: &[u8]) -> anyhow::Result<Probe> {
        let end = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .context("an answer without a whole head")?;
        let head = String::from_utf8_lossy(&answer[..end]);
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|line| line.split(' ').nth(1))
            .and_then(|code| code.parse().ok())
            .context("an answer without a status")?;
        let fields: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
            .collect();
        let body = &answer[end + 4..];
        let chunked = fields
            .iter()
            .any(|(name, value)| name == "transfer-encoding" && value.contains("chunked"));
        let body_bytes = if chunked {
            dechunked_len(body)?
        } else {
            body.len()
        };
        Ok(Probe {
            status,
            fields,
            body_bytes,
        })
    }
}

/// The data bytes of a chunked body.
fn dechunked_len(mut body: &[u8]) -> anyhow::Result<usize> {
    let mut total = 0;
    loop {
        let line_end = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("a chunk without its size line")?;
        let size_text = String::from_utf8_lossy(&body[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .with_context(|| format!("a chunk size {size_text:?}"))?;
        if size == 0 {
            return Ok(total);
        }
        total += size;
        let next = line_end + 2 + size + 2;
        if body.len() < next {
            bail!("a chunk cut short");
        }
        body = &body[next..];
    }
}

/// The session: its facts, the rows of each part, every check and run.
pub struct Session {
    pub facts: RunFacts,
    pub settings: Settings,
    pub failure: Option<String>,
    /// Each part's rows, as its first pass made them.
    pub rows: Vec<(Part, Vec<Row>)>,
    /// (part, workers, row, what its check read).
    pub probes: Vec<(Part, u32, usize, Probe)>,
    pub runs: Vec<RulesRun>,
    pub configs: Configurations,
    /// How the far Redis is far, and its round trip as PING measured it.
    pub far_redis: Option<(String, Duration)>,
}

impl Session {
    pub fn new(facts: RunFacts, settings: Settings) -> Session {
        Session {
            facts,
            settings,
            failure: None,
            rows: Vec::new(),
            probes: Vec::new(),
            runs: Vec::new(),
            configs: Configurations::default(),
            far_redis: None,
        }
    }

    fn rows_of(&self, part: Part) -> &[Row] {
        self.rows
            .iter()
            .find(|(known, _)| *known == part)
            .map_or(&[], |(_, rows)| rows.as_slice())
    }

    fn runs_of(&self, part: Part, workers: u32, row: usize) -> impl Iterator<Item = &RulesRun> {
        self.runs
            .iter()
            .filter(move |run| run.part == part && run.workers == workers && run.row == row)
    }

    /// A figure of a row's runs, over rounds.
    fn figure(
        &self,
        part: Part,
        workers: u32,
        row: usize,
        of: fn(&RulesRun) -> Option<f64>,
    ) -> Option<Spread> {
        let values: Vec<f64> = self.runs_of(part, workers, row).filter_map(of).collect();
        spread(&values)
    }

    /// The row of `part` named `name`, by index.
    fn row_named(&self, part: Part, name: &str) -> Option<usize> {
        self.rows_of(part).iter().position(|row| row.name == name)
    }

    fn probe(&self, part: Part, workers: u32, row: usize) -> Option<&Probe> {
        self.probes
            .iter()
            .find(|(p, w, r, _)| *p == part && *w == workers && *r == row)
            .map(|(_, _, _, probe)| probe)
    }

    /// Per round, `numerator`'s figure ÷ the least of `denominators`' in that round.
    fn ratios_by_round(
        &self,
        (part, workers): (Part, u32),
        numerator: usize,
        denominators: &[usize],
        of: fn(&RulesRun) -> Option<f64>,
    ) -> Vec<f64> {
        (1..=self.settings.rounds)
            .filter_map(|round| {
                let in_round = |row| {
                    self.runs_of(part, workers, row)
                        .find(|run| run.round == round)
                        .and_then(of)
                };
                let least = denominators
                    .iter()
                    .filter_map(|&row| in_round(row))
                    .min_by(f64::total_cmp)?;
                Some(in_round(numerator)? / least)
            })
            .collect()
    }

    /// Issue 42's targets for each part and worker count: (what, figure, verdict).
    fn verdicts(&self) -> Vec<(String, String, bool)> {
        let mut verdicts = Vec::new();
        for &workers in &self.settings.workers {
            let at = worker_count(workers);
            let part = Part::Headers;
            let named = |name| self.row_named(part, name);
            if let (Some(rules), Some(plain)) =
                (named("herdsman, rules"), named("herdsman, no rules"))
            {
                let peers: Vec<usize> =
                    ["HAProxy, rules", "nginx, rules", "Caddy, rules (no limit)"]
                        .into_iter()
                        .filter_map(named)
                        .collect();
                let median = |row| {
                    self.figure(part, workers, row, cpu_per_request)
                        .map(|s| s.median)
                };
                let best_peer = peers
                    .iter()
                    .filter_map(|&row| median(row))
                    .min_by(f64::total_cmp);
                if let (Some(ours), Some(best)) = (median(rules), best_peer) {
                    let by_round =
                        self.ratios_by_round((part, workers), rules, &peers, cpu_per_request);
                    verdicts.push((
                        format!("headers, {at}: herdsman with rules ≤ 0.85× the better peer's CPU per request"),
                        ratio_text(ours / best, &by_round),
                        ours / best <= 0.85,
                    ));
                }
                if let (Some(ours), Some(without)) = (median(rules), median(plain)) {
                    let by_round =
                        self.ratios_by_round((part, workers), rules, &[plain], cpu_per_request);
                    verdicts.push((
                        format!("headers, {at}: herdsman with rules ≤ 1.1× herdsman without"),
                        ratio_text(ours / without, &by_round),
                        ours / without <= 1.1,
                    ));
                }
            }
            let part = Part::Compression;
            for (ours, theirs) in [
                ("herdsman gzip", "nginx gzip 1"),
                ("herdsman gzip", "nginx gzip 5"),
                ("herdsman gzip", "Caddy gzip"),
                ("herdsman zstd", "Caddy zstd"),
                ("herdsman gzip 2", "nginx gzip 1"),
                ("herdsman gzip 4", "Caddy gzip"),
            ] {
                let (Some(o), Some(t)) = (self.row_named(part, ours), self.row_named(part, theirs))
                else {
                    continue;
                };
                let cpu = |row| {
                    self.figure(part, workers, row, cpu_per_mib)
                        .map(|s| s.median)
                };
                let ratio = |row| self.probe(part, workers, row).map(compression_ratio);
                let (Some(our_cpu), Some(their_cpu), Some(our_ratio), Some(their_ratio)) =
                    (cpu(o), cpu(t), ratio(o), ratio(t))
                else {
                    continue;
                };
                let same_ratio_cheaper =
                    our_ratio >= their_ratio * 0.98 && our_cpu <= 0.9 * their_cpu;
                let better_ratio_same_cpu = our_ratio >= their_ratio * 1.02 && our_cpu <= their_cpu;
                verdicts.push((
                    format!(
                        "compression, {at}: {ours} against {theirs}: the same ratio at ≤ 0.9× the \
                         CPU, or a better one at the same CPU"
                    ),
                    format!(
                        "ratio {our_ratio:.2} against {their_ratio:.2}, CPU per MiB {:.2}×",
                        our_cpu / their_cpu
                    ),
                    same_ratio_cheaper || better_ratio_same_cpu,
                ));
            }
        }
        verdicts
    }

    /// A part's table for one worker count, as Markdown.
    fn write_table(&self, md: &mut String, part: Part, workers: u32) {
        let rows = self.rows_of(part);
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(md, "### {}, {}\n", part.title(), worker_count(workers));
        let money = |value: f64| format!("{value:.2}");
        let count = |value: f64| thousands(value);
        let ms = |value: f64| format!("{value:.2}");
        match part {
            Part::Compression => {
                let _ = writeln!(
                    md,
                    "| row | Content-Encoding | bytes out | ratio | CPU ms per MiB | user | kernel | answers/s | p99 ms | errors |\n\
                     |---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
                );
            }
            _ => {
                let _ = writeln!(
                    md,
                    "| row | CPU µs per request | user | kernel | requests/s | p50 ms | p99 ms | errors |\n\
                     |---|---:|---:|---:|---:|---:|---:|---:|"
                );
            }
        }
        for (index, row) in rows.iter().enumerate() {
            let cell = |of: fn(&RulesRun) -> Option<f64>, format: fn(f64) -> String| {
                spread_cell(self.figure(part, workers, index, of), format)
            };
            let errors: u64 = self
                .runs_of(part, workers, index)
                .map(|run| run.wrk.errors())
                .sum();
            let throughput = cell(|run| Some(run.wrk.requests_per_sec), count);
            let p99 = cell(|run| run.wrk.p99_ms(), ms);
            match part {
                Part::Compression => {
                    let probe = self.probe(part, workers, index);
                    let _ =
                        writeln!(
                        md,
                        "| {} | {} | {} | {} | {} | {} | {} | {throughput} | {p99} | {errors} |",
                        row.name,
                        probe.and_then(|p| p.field("content-encoding")).unwrap_or("identity"),
                        probe.map_or("–".into(), |p| thousands(p.body_bytes as f64)),
                        probe.map_or("–".into(), |p| format!("{:.2}", compression_ratio(p))),
                        cell(cpu_per_mib, money),
                        cell(|run| per_mib(run, run.cpu.user), money),
                        cell(|run| per_mib(run, run.cpu.system), money),
                    );
                }
                _ => {
                    let _ = writeln!(
                        md,
                        "| {} | {} | {} | {} | {throughput} | {} | {p99} | {errors} |",
                        row.name,
                        cell(cpu_per_request, money),
                        cell(|run| run.wrk.per_request_us(run.cpu.user), money),
                        cell(|run| run.wrk.per_request_us(run.cpu.system), money),
                        cell(|run| run.wrk.p50_ms(), ms),
                    );
                }
            }
        }
        let _ = writeln!(md);
        if part == Part::Redis {
            self.write_redis_ratios(md, workers);
        }
    }

    /// What Redis costs per request, and what 1 ms to it costs in requests/s.
    fn write_redis_ratios(&self, md: &mut String, workers: u32) {
        let part = Part::Redis;
        let named = |name| self.row_named(part, name);
        let (Some(local), Some(near), Some(far)) = (
            named("herdsman, local limit"),
            named("herdsman, Redis on loopback"),
            named("herdsman, Redis 1 ms away"),
        ) else {
            return;
        };
        let cpu = self.ratios_by_round((part, workers), near, &[local], cpu_per_request);
        let rate = self.ratios_by_round((part, workers), far, &[local], |run| {
            Some(run.wrk.requests_per_sec)
        });
        let median =
            |values: &[f64]| spread(values).map_or("–".into(), |s| format!("{:.2}×", s.median));
        let _ = writeln!(
            md,
            "CPU per request with Redis on loopback ÷ the local limit alone: {} per round; \
             requests/s with Redis 1 ms away ÷ the local limit alone: {}.\n",
            median(&cpu),
            median(&rate)
        );
        if let Some((how, round_trip)) = &self.far_redis {
            let _ = writeln!(
                md,
                "The far Redis: {how}; PING's round trip from this program {:.2} ms (median of 21).\n",
                round_trip.as_secs_f64() * 1e3
            );
        }
    }
}

/// µs of the proxy's CPU per request.
fn cpu_per_request(run: &RulesRun) -> Option<f64> {
    run.wrk.per_request_us(run.cpu.total())
}

/// ms of `cpu` per MiB of JSON answered (uncompressed).
fn per_mib(run: &RulesRun, cpu: Duration) -> Option<f64> {
    let mib = run.wrk.requests as f64 * origin::json().len() as f64 / (1024.0 * 1024.0);
    (mib > 0.0).then(|| cpu.as_secs_f64() * 1e3 / mib)
}

fn cpu_per_mib(run: &RulesRun) -> Option<f64> {
    per_mib(run, run.cpu.total())
}

/// The JSON's bytes ÷ the bytes the check's answer carried.
fn compression_ratio(probe: &Probe) -> f64 {
    origin::json().len() as f64 / probe.body_bytes.max(1) as f64
}

/// "0.82× (0.79–0.85 over rounds)".
fn ratio_text(of_medians: f64, by_round: &[f64]) -> String {
    match spread(by_round) {
        Some(s) if s.count > 1 => {
            format!("{of_medians:.2}× ({:.2}–{:.2} over rounds)", s.min, s.max)
        }
        _ => format!("{of_medians:.2}×"),
    }
}

fn verdict_word(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "**NOT MET**"
    }
}

impl Results for Session {
    fn measured_nothing(&self) -> bool {
        self.runs.is_empty()
    }

    fn facts_and_failure(&mut self) -> (&mut RunFacts, &mut Option<String>) {
        (&mut self.facts, &mut self.failure)
    }

    fn summary(&self) -> String {
        let mut text = String::new();
        for &part in &self.settings.parts {
            for &workers in &self.settings.workers {
                self.write_table(&mut text, part, workers);
            }
        }
        let verdicts = self.verdicts();
        for (what, figure, met) in &verdicts {
            let _ = writeln!(text, "{what}: {figure}: {}", verdict_word(*met));
        }
        if !verdicts.is_empty() {
            let all = verdicts.iter().all(|(_, _, met)| *met);
            let _ = writeln!(text, "issue 42's targets, herdsman: {}", verdict_word(all));
        }
        if let Some(failure) = &self.failure {
            let _ = writeln!(text, "stopped early: {failure}");
        }
        text
    }

    fn render(&self, _plot: Option<&Path>) -> String {
        let mut md =
            String::from("# Operator rules: header rules, limits and compression (issue 42)\n\n");
        self.facts.write_markdown(&mut md);
        let _ = writeln!(
            md,
            "Each proxy with {} in front of one origin (a server on a thread of the benchmark, \
             keep-alive, answering at once); wrk with {} keep-alive connections, {} s a run, {} \
             round(s), the rows in an order that turns each round. CPU is the proxy's own \
             (utime and stime from /proc, all its processes), divided by the requests wrk \
             completed; a cell is the median over rounds (the range beside it). Each row was \
             first checked by one request: its answer is in *Checks*.\n",
            self.settings
                .workers
                .iter()
                .map(|w| worker_count(*w))
                .collect::<Vec<_>>()
                .join(", then "),
            self.settings.connections,
            self.settings.duration,
            self.settings.rounds,
        );
        if let Some(failure) = &self.failure {
            let _ = writeln!(md, "## Stopped early\n\n{failure}\n");
        }
        let verdicts = self.verdicts();
        if !verdicts.is_empty() {
            let _ = writeln!(
                md,
                "## Targets\n\n| target | figure | verdict |\n|---|---|---|"
            );
            for (what, figure, met) in &verdicts {
                let _ = writeln!(md, "| {what} | {figure} | {} |", verdict_word(*met));
            }
            let _ = writeln!(md);
        }
        for &part in &self.settings.parts {
            let _ = writeln!(md, "## {}\n\n{}\n", part.title(), part_notes(part));
            for &workers in &self.settings.workers {
                self.write_table(&mut md, part, workers);
            }
        }
        let _ = writeln!(md, "## Checks\n\n| part | workers | row | status | fields | body bytes |\n|---|---:|---|---:|---|---:|");
        for (part, workers, row, probe) in &self.probes {
            let name = self
                .rows_of(*part)
                .get(*row)
                .map_or("?", |r| r.name.as_str());
            let fields: Vec<String> = probe
                .fields
                .iter()
                .filter(|(name, _)| {
                    !matches!(name.as_str(), "date" | "content-length" | "connection")
                })
                .map(|(name, value)| format!("{name}: {value}"))
                .collect();
            let _ = writeln!(
                md,
                "| {part} | {workers} | {name} | {} | {} | {} |",
                probe.status,
                fields.join("; ").replace('|', "\\|"),
                thousands(probe.body_bytes as f64)
            );
        }
        let _ = writeln!(
            md,
            "\n## Runs\n\n<details><summary>{} runs</summary>\n",
            self.runs.len()
        );
        let _ = writeln!(md, "| part | workers | round | row | requests | requests/s | CPU user s | CPU kernel s | p50 ms | p99 ms | socket errors | non-2xx |\n|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for run in &self.runs {
            let name = self
                .rows_of(run.part)
                .get(run.row)
                .map_or("?", |r| r.name.as_str());
            let _ = writeln!(
                md,
                "| {} | {} | {} | {name} | {} | {} | {:.3} | {:.3} | {:.2} | {:.2} | {} | {} |",
                run.part,
                run.workers,
                run.round,
                run.wrk.requests,
                thousands(run.wrk.requests_per_sec),
                run.cpu.user.as_secs_f64(),
                run.cpu.system.as_secs_f64(),
                run.wrk.p50_us / 1e3,
                run.wrk.p99_us / 1e3,
                run.wrk.socket_errors,
                run.wrk.bad_status
            );
        }
        let _ = writeln!(md, "\n</details>\n");
        self.configs.write_markdown(&mut md);
        md
    }

    fn plot(&self, _path: &Path) -> anyhow::Result<()> {
        bail!("its figures are tables")
    }
}

/// What a part's rows do and what they leave out.
fn part_notes(part: Part) -> &'static str {
    match part {
        Part::Headers => {
            "Ten header rules: request fields X-Client-Ip (the client's address), \
             X-Original-Host and X-Original-Method set, X-Via added, X-Debug (which every \
             request carries) removed; answers' X-Frame-Options, X-Content-Type-Options and \
             Referrer-Policy set, the server's Server and X-Powered-By removed. And a limit per \
             client address of 1,000,000 a second, never reached. nginx replaces X-Via rather \
             than add to it (`proxy_set_header`) and keeps its own Server field; Caddy has no \
             rate limit (a third-party module only), so its row has the rules alone. \
             herdsman without rules has no limit either."
        }
        Part::Compression => {
            "The compression corpus's API JSON (benches/corpus/api_json.rs, 592 KiB) to every \
             request, asked with `Accept-Encoding` naming one algorithm: herdsman's \
             `[compression]` at its defaults (zstd 3, brotli 4, gzip 5), nginx's gzip at levels 1 \
             (its default) and 5, Caddy's `encode gzip zstd` at its defaults. CPU per MiB is per \
             MiB of JSON answered (before compression); bytes out and the ratio are the checked \
             answer's body."
        }
        Part::Redis => {
            "herdsman with a limit per client address of 1,000,000 a second (never reached), \
             counted here alone, then in Redis on loopback as well (`[rate_limit] redis`), then \
             in Redis 1 ms away. A worker's checks share its connection to Redis, pipelined."
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checked_answer_reads_its_fields_and_its_bytes_without_chunking() {
        let plain =
            Probe::parse(b"HTTP/1.1 200 OK\r\nServer: x\r\nContent-Length: 3\r\n\r\nabc").unwrap();
        assert_eq!(
            (plain.status, plain.body_bytes, plain.field("server")),
            (200, 3, Some("x"))
        );
        let chunked = Probe::parse(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n\r\n\
              4\r\nabcd\r\n2;x=y\r\nef\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(chunked.body_bytes, 6);
        assert_eq!(chunked.field("content-encoding"), Some("gzip"));
        assert!(
            Probe::parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nab").is_err()
        );
    }
}
