//! Driving wrk and reading its report: requests completed, requests/s, the latency distribution
//! (`--latency`) and every kind of error it counts; against 127.0.0.1:PORT in cleartext, or any URL
//! (`https://`, a path such as `/big`); uploads, by a Lua script that makes every request a POST
//! of a given size. Also a run in the background that is paused (SIGSTOP) and resumed (SIGCONT)
//! with its connections kept open, and ended when asked (SIGINT). And a report's figures per
//! request: a proxy's CPU over the run per response, latencies in milliseconds, errors.

use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::process::{run_with_timeout, Supervised};
use crate::kit::procstat::{self, CpuTime};

/// One wrk run, as wrk reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct WrkReport {
    /// Responses completed ("N requests in"), the divisor of CPU per request.
    pub requests: u64,
    pub seconds: f64,
    pub requests_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// The slowest response ("Max" in wrk's Latency line).
    pub max_us: f64,
    /// Connect, read, write and timeout errors ("Socket errors:"), summed; 0 when wrk printed none.
    pub socket_errors: u64,
    /// Responses with a status of 400 or more (wrk's "Non-2xx or 3xx responses").
    pub bad_status: u64,
}

impl WrkReport {
    /// µs of `cpu` (a proxy's over the run) per response completed; None without a response.
    pub fn per_request_us(&self, cpu: Duration) -> Option<f64> {
        (self.requests > 0).then(|| cpu.as_secs_f64() * 1e6 / self.requests as f64)
    }

    /// The median latency in ms; None without a response.
    pub fn p50_ms(&self) -> Option<f64> {
        (self.requests > 0).then_some(self.p50_us / 1e3)
    }

    /// The 99th percentile latency in ms; None without a response.
    pub fn p99_ms(&self) -> Option<f64> {
        (self.requests > 0).then_some(self.p99_us / 1e3)
    }

    /// Socket errors (connect, read, write, timeout) and answers of 400 or more.
    pub fn errors(&self) -> u64 {
        self.socket_errors + self.bad_status
    }
}

/// What one wrk invocation is asked to do.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub connections: u32,
    pub seconds: u32,
}

impl Load {
    /// The same load for `seconds`: a warm-up before it.
    pub fn for_seconds(self, seconds: u32) -> Load {
        Load { seconds, ..self }
    }

    /// The arguments after `wrk`, as they are run and as they are printed in the results.
    pub fn args(&self, port: u16) -> Vec<String> {
        self.args_for(&format!("http://127.0.0.1:{port}/"))
    }

    /// The arguments after `wrk` for `url` (`https://127.0.0.1:PORT/big`, say).
    pub fn args_for(&self, url: &str) -> Vec<String> {
        vec![
            "-t1".to_string(),
            format!("-c{}", self.connections),
            format!("-d{}s", self.seconds),
            "--latency".to_string(),
            url.to_string(),
        ]
    }

    /// The arguments after `wrk` for `url` with the Lua `script` (`-s`) and each request allowed
    /// `timeout_seconds` (`--timeout`): wrk leaves a response slower than its timeout (2 s by
    /// default) out of the latency distribution and counts it as a timeout instead.
    pub fn script_args(&self, url: &str, script: &Path, timeout_seconds: u32) -> Vec<String> {
        let mut args = vec![
            "-s".to_string(),
            script.display().to_string(),
            "--timeout".to_string(),
            format!("{timeout_seconds}s"),
        ];
        args.extend(self.args_for(url));
        args
    }
}

/// A wrk script that makes every request an upload: a `POST` of `bytes` bytes ("x" repeated),
/// `Content-Type: application/octet-stream` (wrk adds its Content-Length). wrk builds the request
/// once and sends it whole on each keep-alive connection, the next once its answer is in.
pub fn upload_script(bytes: u64) -> String {
    format!(
        "wrk.method = \"POST\"\n\
         wrk.body = string.rep(\"x\", {bytes})\n\
         wrk.headers[\"Content-Type\"] = \"application/octet-stream\"\n"
    )
}

/// Runs wrk against 127.0.0.1:`port` and parses its report.
pub fn run(wrk: &Path, port: u16, load: Load) -> anyhow::Result<WrkReport> {
    run_with_headers(wrk, port, load, &[])
}

/// Runs wrk against 127.0.0.1:`port` with each of `headers` ("Host: a.example") on every request
/// (a `Host` given replaces wrk's own), and parses its report.
pub fn run_with_headers(
    wrk: &Path,
    port: u16,
    load: Load,
    headers: &[&str],
) -> anyhow::Result<WrkReport> {
    run_args(wrk, load.args(port), load.seconds, headers)
}

/// Runs wrk against `url` with each of `headers` on every request, and parses its report.
pub fn run_url(wrk: &Path, url: &str, load: Load, headers: &[&str]) -> anyhow::Result<WrkReport> {
    run_args(wrk, load.args_for(url), load.seconds, headers)
}

/// Runs wrk with `headers` and then `args` (which ask for `seconds`), and parses its report.
fn run_args(
    wrk: &Path,
    args: Vec<String>,
    seconds: u32,
    headers: &[&str],
) -> anyhow::Result<WrkReport> {
    let mut command = Command::new(wrk);
    for header in headers {
        command.arg("-H").arg(header);
    }
    command.args(args);
    // wrk stops itself after -d; the margin covers start-up and a slow final drain.
    let limit = Duration::from_secs(u64::from(seconds) + 30);
    let output = run_with_timeout(command, limit)?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "wrk failed ({}): {}{}",
            output.status,
            stdout.trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    parse(&stdout).with_context(|| format!("reading wrk's report:\n{stdout}"))
}

/// `run_with_headers`, and the CPU the process tree of `pid` used meanwhile (/proc, read just
/// before wrk starts and just after it ends): what the run cost a proxy.
pub fn run_costing(
    wrk: &Path,
    port: u16,
    load: Load,
    headers: &[&str],
    pid: u32,
) -> anyhow::Result<(CpuTime, WrkReport)> {
    let before = procstat::tree_cpu(pid)?;
    let report = run_with_headers(wrk, port, load, headers)?;
    let after = procstat::tree_cpu(pid)?;
    Ok((after.since(before), report))
}

/// `run_url`, and the CPU the process tree of `pid` used meanwhile, as `run_costing` reads it.
pub fn run_url_costing(
    wrk: &Path,
    url: &str,
    load: Load,
    pid: u32,
) -> anyhow::Result<(CpuTime, WrkReport)> {
    let before = procstat::tree_cpu(pid)?;
    let report = run_url(wrk, url, load, &[])?;
    let after = procstat::tree_cpu(pid)?;
    Ok((after.since(before), report))
}

/// Runs wrk with `args` from `Load::script_args` (which ask for `seconds`) and parses its report.
pub fn run_script(wrk: &Path, args: Vec<String>, seconds: u32) -> anyhow::Result<WrkReport> {
    run_args(wrk, args, seconds, &[])
}

/// `run_script`, and the CPU the process tree of `pid` used meanwhile, as `run_costing` reads it.
pub fn run_script_costing(
    wrk: &Path,
    args: Vec<String>,
    seconds: u32,
    pid: u32,
) -> anyhow::Result<(CpuTime, WrkReport)> {
    let before = procstat::tree_cpu(pid)?;
    let report = run_script(wrk, args, seconds)?;
    let after = procstat::tree_cpu(pid)?;
    Ok((after.since(before), report))
}

/// How long a paused run may go on: it is ended by `PausedRun::finish`, never by its duration.
const PAUSED_RUN_SECONDS: u32 = 3600;

/// wrk's `--timeout` for a paused run: longer than any pause, so that no request counts as timed
/// out only because wrk itself was stopped while it waited.
const PAUSED_RUN_TIMEOUT: &str = "600s";

/// How long wrk may take to print its report after SIGINT.
const FINISH_LIMIT: Duration = Duration::from_secs(30);

/// wrk running in the background with one thread and its connections to `url`, which can be
/// stopped and continued with signals: while it is paused its connections stay open and send
/// nothing, so a server's work can be counted over exactly the requests sent while it ran.
/// Dropping it stops wrk.
pub struct PausedRun {
    process: Supervised,
}

impl PausedRun {
    /// Starts wrk with `connections` to `url`, `headers` on every request and the Lua `script`
    /// when one is given (wrk's `-s`); its output goes to `log`.
    pub fn start(
        wrk: &Path,
        url: &str,
        connections: u32,
        headers: &[&str],
        script: Option<&Path>,
        log: &Path,
    ) -> anyhow::Result<PausedRun> {
        let mut command = Command::new(wrk);
        for header in headers {
            command.arg("-H").arg(header);
        }
        if let Some(script) = script {
            command.arg("-s").arg(script);
        }
        let load = Load {
            connections,
            seconds: PAUSED_RUN_SECONDS,
        };
        command
            .arg("--timeout")
            .arg(PAUSED_RUN_TIMEOUT)
            .args(load.args_for(url));
        let process = Supervised::spawn("wrk", command, log)?;
        Ok(PausedRun { process })
    }

    /// wrk's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Stops wrk where it is (SIGSTOP): it sends nothing more until `resume`.
    pub fn pause(&mut self) -> anyhow::Result<()> {
        self.process.check_running()?;
        self.process.signal(libc::SIGSTOP)
    }

    /// Lets wrk go on (SIGCONT).
    pub fn resume(&mut self) -> anyhow::Result<()> {
        self.process.signal(libc::SIGCONT)?;
        self.process.check_running()
    }

    /// Ends the run (SIGINT, after which wrk prints its report) and reads wrk's report.
    pub fn finish(mut self) -> anyhow::Result<WrkReport> {
        self.resume()?;
        // wrk's main thread sleeps for the run's duration while its worker thread sends; SIGINT
        // ends both only when the main thread takes it. Sent to a process just continued, the
        // kernel may hand it to the worker thread, which then stops alone while the main thread
        // sleeps on: so wrk is given a moment to run, and SIGINT is sent again each second until
        // wrk has exited (once the worker thread has gone, the main thread takes it).
        thread::sleep(Duration::from_millis(100));
        let deadline = Instant::now() + FINISH_LIMIT;
        let ended = loop {
            self.process.signal(libc::SIGINT)?;
            match self.process.wait_for_exit(Duration::from_secs(1)) {
                Ok(ended) => break ended,
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => continue,
            }
        };
        let output = self.process.output_text();
        if ended != "exit code 0" {
            bail!("wrk ended with {ended}: {}", output.trim());
        }
        parse(&output).with_context(|| format!("reading wrk's report:\n{output}"))
    }
}

/// Parses the text wrk prints with `--latency`.
pub fn parse(text: &str) -> anyhow::Result<WrkReport> {
    let mut requests = None;
    let mut seconds = None;
    let mut requests_per_sec = None;
    let mut p50_us = None;
    let mut p99_us = None;
    let mut max_us = None;
    let mut socket_errors = 0;
    let mut bad_status = 0;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("50%") {
            p50_us = Some(parse_time_us(rest.trim())?);
        } else if let Some(rest) = line.strip_prefix("99%") {
            p99_us = Some(parse_time_us(rest.trim())?);
        } else if let Some(max) = latency_max(line) {
            max_us = Some(parse_time_us(max)?);
        } else if let Some((count, rest)) = line.split_once(" requests in ") {
            requests = Some(count.trim().parse::<u64>().context("request count")?);
            let elapsed = rest.split(',').next().unwrap_or_default().trim();
            seconds = Some(parse_time_us(elapsed)? / 1e6);
        } else if let Some(rest) = line.strip_prefix("Requests/sec:") {
            requests_per_sec = Some(rest.trim().parse::<f64>().context("Requests/sec")?);
        } else if let Some(rest) = line.strip_prefix("Socket errors:") {
            // "connect 0, read 0, write 0, timeout 0"
            for part in rest.split(',') {
                let count = part.split_whitespace().nth(1).unwrap_or("0");
                socket_errors += count.parse::<u64>().context("socket error count")?;
            }
        } else if let Some(rest) = line.strip_prefix("Non-2xx or 3xx responses:") {
            bad_status = rest.trim().parse::<u64>().context("non-2xx count")?;
        }
    }
    let (
        Some(requests),
        Some(seconds),
        Some(requests_per_sec),
        Some(p50_us),
        Some(p99_us),
        Some(max_us),
    ) = (requests, seconds, requests_per_sec, p50_us, p99_us, max_us)
    else {
        bail!(
            "missing one of: requests, Requests/sec, Max latency, 50% or 99% latency (was --latency given?)"
        );
    };
    Ok(WrkReport {
        requests,
        seconds,
        requests_per_sec,
        p50_us,
        p99_us,
        max_us,
        socket_errors,
        bad_status,
    })
}

/// The Max column of the thread-stats line `Latency   248.34us  425.35us  13.82ms   98.39%`
/// (Avg, Stdev, Max, +/- Stdev); not the `Latency Distribution` heading.
fn latency_max(line: &str) -> Option<&str> {
    let columns: Vec<&str> = line.strip_prefix("Latency ")?.split_whitespace().collect();
    match columns[..] {
        [_avg, _stdev, max, _within] => Some(max),
        _ => None,
    }
}

/// wrk prints times as a number and a unit: `350.00us`, `1.23ms`, `5.00s`, `1.00m`, `1.00h`.
fn parse_time_us(text: &str) -> anyhow::Result<f64> {
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .with_context(|| format!("no unit in time {text:?}"))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .trim()
        .parse()
        .with_context(|| format!("time {text:?}"))?;
    let scale = match unit {
        "us" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        "m" => 60e6,
        "h" => 3600e6,
        _ => bail!("unknown time unit in {text:?}"),
    };
    Ok(value * scale)
}

/// A clean report of `requests_per_sec` over 10 s (p50 800 µs, p99 1.5 ms, max 9 ms): for tests.
#[cfg(test)]
pub fn sample_report(requests_per_sec: f64) -> WrkReport {
    WrkReport {
        requests: (requests_per_sec * 10.0) as u64,
        seconds: 10.0,
        requests_per_sec,
        p50_us: 800.0,
        p99_us: 1500.0,
        max_us: 9000.0,
        socket_errors: 0,
        bad_status: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from `wrk -t1 -c50 -d5s --latency` (Debian's wrk 4.1.0) against the bench backend.
    const CLEAN: &str = include_str!("wrk_sample_clean.txt");

    /// wrk's report when a proxy failed some requests: the two error lines appear.
    const WITH_ERRORS: &str = "\
Running 2s test @ http://127.0.0.1:41000/
  1 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.20ms    3.10ms   1.01s    99.10%
    Req/Sec    40.12k     2.01k   44.00k    70.00%
  Latency Distribution
     50%  812.00us
     75%    1.10ms
     90%    1.50ms
     99%    1.02s
  80240 requests in 2.00s, 9.10MB read
  Socket errors: connect 3, read 7, write 0, timeout 12
  Non-2xx or 3xx responses: 41
Requests/sec:  40110.52
Transfer/sec:      4.55MB
";

    #[test]
    fn a_clean_report_is_read() {
        let report = parse(CLEAN).unwrap();
        assert_eq!(report.requests, CLEAN_REQUESTS);
        assert!((report.seconds - 5.0).abs() < 0.1);
        assert!(report.requests_per_sec > 1000.0);
        assert!(report.p50_us > 0.0 && report.p50_us <= report.p99_us);
        assert_eq!(report.max_us, 13_820.0);
        assert_eq!(report.socket_errors, 0);
        assert_eq!(report.bad_status, 0);
    }

    /// The request count in the captured sample.
    const CLEAN_REQUESTS: u64 = 731_024;

    #[test]
    fn errors_and_units_are_read() {
        let report = parse(WITH_ERRORS).unwrap();
        assert_eq!(report.requests, 80240);
        assert_eq!(report.seconds, 2.0);
        assert_eq!(report.requests_per_sec, 40110.52);
        assert_eq!(report.p50_us, 812.0);
        assert_eq!(report.p99_us, 1.02e6);
        assert_eq!(report.max_us, 1.01e6);
        assert_eq!(report.socket_errors, 22);
        assert_eq!(report.bad_status, 41);
    }

    #[test]
    fn a_report_without_latency_distribution_is_refused() {
        let text = "  100 requests in 1.00s, 1.00KB read\nRequests/sec: 100.00\n";
        assert!(parse(text).is_err());
    }

    #[test]
    fn only_the_thread_stats_line_gives_the_max() {
        assert_eq!(
            latency_max("Latency   248.34us  425.35us  13.82ms   98.39%"),
            Some("13.82ms")
        );
        assert_eq!(latency_max("Latency Distribution"), None);
        assert_eq!(
            latency_max("Req/Sec   147.06k    10.16k  160.64k    74.00%"),
            None
        );
    }

    #[test]
    fn times_convert_to_microseconds() {
        assert_eq!(parse_time_us("350.00us").unwrap(), 350.0);
        assert_eq!(parse_time_us("1.50ms").unwrap(), 1500.0);
        assert_eq!(parse_time_us("1.00m").unwrap(), 60e6);
        assert!(parse_time_us("12").is_err());
    }

    #[test]
    fn an_upload_load_posts_its_size_and_waits_as_long_as_asked() {
        assert_eq!(
            upload_script(1_048_576),
            "wrk.method = \"POST\"\nwrk.body = string.rep(\"x\", 1048576)\n\
             wrk.headers[\"Content-Type\"] = \"application/octet-stream\"\n"
        );
        let load = Load {
            connections: 20,
            seconds: 10,
        };
        assert_eq!(
            load.script_args("http://127.0.0.1:8080/upload", Path::new("/tmp/up.lua"), 11)
                .join(" "),
            "-s /tmp/up.lua --timeout 11s -t1 -c20 -d10s --latency http://127.0.0.1:8080/upload"
        );
    }

    #[test]
    fn the_command_line_matches_the_documented_one() {
        let load = Load {
            connections: 50,
            seconds: 10,
        };
        assert_eq!(
            load.args(8080).join(" "),
            "-t1 -c50 -d10s --latency http://127.0.0.1:8080/"
        );
        assert_eq!(
            load.args_for("https://127.0.0.1:8443/big").join(" "),
            "-t1 -c50 -d10s --latency https://127.0.0.1:8443/big"
        );
    }
}
