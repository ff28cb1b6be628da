//! h2load (Debian's nghttp2-client), two ways. Batches of full TLS handshakes: clients that each
//! connect, make one HTTP/1.1 request and close, all at once, one batch after another for as long
//! as the caller wants; what the batches reported, summed. No client has a session to offer, so
//! every handshake is full. For `tls` (handshakes per CPU-second) and `tls-load` (a handshake
//! storm). And timed HTTP/2 load (`-c` connections × `-m` streams for `-D` seconds, over TLS or
//! h2c by the URL's scheme), with every request's latency from its `--log-file`, for `h2`: GETs,
//! or POSTs of a file's bytes with header fields of their own (gRPC's unary calls).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::kit::process::run_with_timeout;
use crate::kit::stats::percentile;

/// The arguments after `h2load` for one batch: `batch` clients, one request each, HTTP/1.1.
pub fn h2load_args(port: &str, batch: u32) -> Vec<String> {
    vec![
        "--h1".into(),
        "-t1".into(),
        format!("-c{batch}"),
        format!("-n{batch}"),
        format!("https://127.0.0.1:{port}/"),
    ]
}

/// A batch may take this long beyond nothing at all before it is killed: a proxy that stops
/// answering is reported, not waited for.
const BATCH_LIMIT: Duration = Duration::from_secs(60);

/// What batches reported, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batches {
    /// Batches run.
    pub batches: u64,
    /// Requests answered 2xx: each one a handshake completed.
    pub answered: u64,
    /// Requests that failed, errored, timed out or were answered other than 2xx.
    pub failed: u64,
    /// The TLS version h2load reported first ("TLSv1.3").
    pub version: Option<String>,
}

impl Batches {
    fn add(&mut self, batch: Batches) {
        self.batches += batch.batches;
        self.answered += batch.answered;
        self.failed += batch.failed;
        if self.version.is_none() {
            self.version = batch.version;
        }
    }
}

/// Batches of `batch` clients against 127.0.0.1:`port`, one after another while `again()` says so
/// after each (one batch at least).
pub fn batches(
    h2load: &Path,
    port: u16,
    batch: u32,
    mut again: impl FnMut() -> bool,
) -> anyhow::Result<Batches> {
    let args = h2load_args(&port.to_string(), batch);
    let mut sum = Batches::default();
    loop {
        sum.add(run_batch(h2load, &args)?);
        if !again() {
            return Ok(sum);
        }
    }
}

fn run_batch(h2load: &Path, args: &[String]) -> anyhow::Result<Batches> {
    let report = run_h2load(h2load, args, BATCH_LIMIT)?;
    Ok(Batches {
        batches: 1,
        answered: report.answered,
        failed: report.total.saturating_sub(report.answered),
        version: report.tls_version,
    })
}

/// Runs h2load with `args`, killed past `limit`, and reads its report; a failed h2load is an error.
fn run_h2load(h2load: &Path, args: &[String], limit: Duration) -> anyhow::Result<H2loadReport> {
    let mut command = Command::new(h2load);
    command.args(args);
    let output = run_with_timeout(command, limit)?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "h2load {} failed ({}): {} {}",
            args.join(" "),
            output.status,
            stdout.trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    parse_h2load(&stdout).with_context(|| format!("reading h2load's report:\n{stdout}"))
}

/// What h2load's report says, as far as the benchmarks read it.
#[derive(Debug, Clone, Default, PartialEq)]
struct H2loadReport {
    /// Requests asked for (`requests: N total`).
    total: u64,
    /// Requests answered 2xx (`status codes: N 2xx`).
    answered: u64,
    /// `finished in 10.00s, …`: h2load's own measured span (its rate beside it counts every
    /// request done, whatever its status, so it is not read).
    seconds: f64,
    /// `TLS Protocol:` ("TLSv1.3"); None in cleartext.
    tls_version: Option<String>,
    /// `Application protocol:` ("h2", "h2c", "http/1.1").
    protocol: Option<String>,
}

/// Reads h2load's `finished in`, `requests:`, `status codes:`, `TLS Protocol:` and `Application
/// protocol:` lines.
fn parse_h2load(text: &str) -> anyhow::Result<H2loadReport> {
    let mut report = H2loadReport::default();
    let (mut total, mut answered) = (None, None);
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("requests:") {
            // "100 total, 100 started, 100 done, 100 succeeded, 0 failed, 0 errored, 0 timeout"
            total = Some(count_before(rest, "total")?);
        } else if let Some(rest) = line.strip_prefix("status codes:") {
            // "100 2xx, 0 3xx, 0 4xx, 0 5xx"
            answered = Some(count_before(rest, "2xx")?);
        } else if let Some(rest) = line.strip_prefix("TLS Protocol:") {
            report.tls_version = Some(rest.trim().to_string());
        } else if let Some(rest) = line.strip_prefix("Application protocol:") {
            report.protocol = Some(rest.trim().to_string());
        } else if let Some(rest) = line.strip_prefix("finished in ") {
            // "123.45ms, 810.04 req/s, 45.88KB/s" (or "10.00s, …", or "466us, …" for a run
            // shorter than a millisecond: one probe request)
            let span = rest.split(',').next().unwrap_or_default().trim();
            let (number, per_second) = if let Some(us) = span.strip_suffix("us") {
                (us, 1e6)
            } else if let Some(ms) = span.strip_suffix("ms") {
                (ms, 1e3)
            } else {
                (span.strip_suffix('s').unwrap_or(span), 1.0)
            };
            report.seconds = number
                .parse::<f64>()
                .map(|n| n / per_second)
                .with_context(|| format!("the span in {line:?}"))?;
        }
    }
    let (Some(total), Some(answered)) = (total, answered) else {
        bail!("no `requests:` or `status codes:` line");
    };
    report.total = total;
    report.answered = answered;
    Ok(report)
}

/// The number before `word` in a list like "100 total, 100 started".
fn count_before(list: &str, word: &str) -> anyhow::Result<u64> {
    list.split(',')
        .map(str::trim)
        .find_map(|part| part.strip_suffix(word))
        .with_context(|| format!("no {word:?} in {list:?}"))?
        .trim()
        .parse()
        .with_context(|| format!("the count of {word:?} in {list:?}"))
}

/// Timed HTTP/2 load: `clients` connections, each with up to `streams` requests in flight,
/// for `seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLoad {
    pub clients: u32,
    pub streams: u32,
    pub seconds: u32,
}

/// What each request of a load asks: h2load's GET by default, or a POST of a file's bytes with
/// header fields of its own (a gRPC call: the message, `content-type: application/grpc`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Asking {
    /// `-d`: the body of every request, which makes each a POST.
    pub body: Option<PathBuf>,
    /// `-H`: header fields added to every request, "name: value".
    pub headers: Vec<String>,
}

impl Asking {
    /// h2load's arguments for it, before the URL.
    fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for header in &self.headers {
            args.push("-H".into());
            args.push(header.clone());
        }
        if let Some(body) = &self.body {
            args.push("-d".into());
            args.push(body.display().to_string());
        }
        args
    }
}

impl StreamLoad {
    /// The arguments after `h2load` for `asking` of `url` (`https://…` negotiates h2 by ALPN,
    /// `http://…` is h2c with prior knowledge), every request's latency written to `log`. One
    /// h2load thread, as wrk runs one.
    pub fn args(&self, url: &str, asking: &Asking, log: &Path) -> Vec<String> {
        let mut args = vec![
            "-t1".into(),
            format!("-c{}", self.clients),
            format!("-m{}", self.streams),
            format!("-D{}", self.seconds),
            format!("--log-file={}", log.display()),
        ];
        args.extend(asking.args());
        args.push(url.into());
        args
    }

    /// How it is written in tables: "50 × 10".
    pub fn written(&self) -> String {
        format!("{} × {}", self.clients, self.streams)
    }
}

/// What one timed run of HTTP/2 load measured.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamReport {
    /// Requests answered 2xx: the divisor of CPU per request.
    pub answered: u64,
    /// Requests that failed, errored, timed out or were answered other than 2xx.
    pub failed: u64,
    /// 2xx answers per second over h2load's measured span.
    pub requests_per_sec: f64,
    /// Latencies of the 2xx answers, by nearest rank, from the log file (None without any).
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    /// What h2load agreed with the proxy ("h2", "h2c"): a proxy that fell back to HTTP/1.1 shows.
    pub protocol: Option<String>,
}

/// A run may last this long beyond its seconds before h2load is killed.
const STREAM_LIMIT_SLACK: Duration = Duration::from_secs(30);

/// Runs `load` of `asking` against `url`, its log at `log` (read, then removed).
pub fn stream_load(
    h2load: &Path,
    url: &str,
    load: StreamLoad,
    asking: &Asking,
    log: &Path,
) -> anyhow::Result<StreamReport> {
    let args = load.args(url, asking, log);
    let limit = Duration::from_secs(u64::from(load.seconds)) + STREAM_LIMIT_SLACK;
    let report = run_h2load(h2load, &args, limit)?;
    let text =
        std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    let _ = std::fs::remove_file(log);
    let mut latencies = answered_latencies(&text)?;
    latencies.sort_by(f64::total_cmp);
    Ok(StreamReport {
        answered: report.answered,
        failed: report.total.saturating_sub(report.answered),
        // 2xx answers only: h2load's own rate counts a 503 as a request done.
        requests_per_sec: report.answered as f64 / report.seconds.max(1e-3),
        p50_us: percentile(&latencies, 50.0),
        p99_us: percentile(&latencies, 99.0),
        protocol: report.protocol,
    })
}

/// One HTTP/2 request to `url` by h2load, which must be answered 2xx over `protocol` ("h2" or
/// "h2c"): whether a proxy serves HTTP/2 there yet.
pub fn probe(h2load: &Path, url: &str, protocol: &str) -> anyhow::Result<()> {
    let args = vec!["-n1".to_string(), "-c1".into(), url.to_string()];
    let report = run_h2load(h2load, &args, Duration::from_secs(10))?;
    if report.answered != 1 || report.protocol.as_deref() != Some(protocol) {
        bail!(
            "{url}: {} of 1 answered 2xx over {:?}, not {protocol}",
            report.answered,
            report.protocol
        );
    }
    Ok(())
}

/// The latencies in µs of the 2xx answers in an h2load `--log-file`: rows of start time (µs since
/// the epoch), status (-1 for a failed stream) and µs until the end of the response, tab-separated
/// (more columns may follow in later versions).
fn answered_latencies(log: &str) -> anyhow::Result<Vec<f64>> {
    let mut latencies = Vec::new();
    for line in log.lines().filter(|line| !line.trim().is_empty()) {
        let mut columns = line.split('\t');
        let (_, Some(status), Some(micros)) = (columns.next(), columns.next(), columns.next())
        else {
            bail!("not an h2load log row: {line:?}");
        };
        let status: i32 = status
            .parse()
            .with_context(|| format!("the status in {line:?}"))?;
        if (200..300).contains(&status) {
            latencies.push(
                micros
                    .trim()
                    .parse()
                    .with_context(|| format!("the duration in {line:?}"))?,
            );
        }
    }
    Ok(latencies)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from `h2load --h1 -t1 -c100 -n100 https://…` (nghttp2 1.52) through herdsman.
    const H2LOAD: &str = "\
starting benchmark...
spawning thread #0: 100 total client(s). 100 total requests
TLS Protocol: TLSv1.3
Cipher: TLS_AES_256_GCM_SHA384
Server Temp Key: X25519 253 bits
Application protocol: http/1.1
progress: 10% done

finished in 123.45ms, 810.04 req/s, 45.88KB/s
requests: 100 total, 100 started, 100 done, 98 succeeded, 2 failed, 0 errored, 0 timeout
status codes: 97 2xx, 0 3xx, 0 4xx, 1 5xx
traffic: 5.66KB (5800) total, 3.03KB (3100) headers (space savings 0.00%), 1.86KB (1900) data
";

    #[test]
    fn h2load_s_report_gives_the_answered_the_total_and_the_span() {
        let report = parse_h2load(H2LOAD).unwrap();
        assert_eq!(
            report,
            H2loadReport {
                total: 100,
                answered: 97,
                seconds: 0.12345,
                tls_version: Some("TLSv1.3".into()),
                protocol: Some("http/1.1".into()),
            }
        );
        assert!(parse_h2load("finished in 1s\n").is_err());
    }

    /// A one-request probe that took less than a millisecond, as h2load 1.52 reported it in a
    /// CI run (whose parse failed on the `us`, and with it the run's start).
    #[test]
    fn a_span_under_a_millisecond_is_read_in_microseconds() {
        let probe = "\
finished in 466us, 2145.92 req/s, 264.05KB/s
requests: 1 total, 1 started, 1 done, 1 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 1 2xx, 0 3xx, 0 4xx, 0 5xx
";
        let report = parse_h2load(probe).unwrap();
        assert!(
            (report.seconds - 0.000466).abs() < 1e-12,
            "{}",
            report.seconds
        );
        assert_eq!((report.total, report.answered), (1, 1));
    }

    /// Captured from `h2load -t1 -c10 -m10 -D2 --log-file=… http://…` (nghttp2 1.52) against an
    /// nginx 1.22 `listen … http2` that closed each connection after its default 1,000 requests
    /// (hence the failures); its progress and failure lines left out.
    const TIMED: &str = "\
starting benchmark...
spawning thread #0: 10 total client(s). Timing-based test with 0s of warm-up time and 2s of main duration for measurements.
Warm-up started for thread #0.
Warm-up phase is over for thread #0.
Main benchmark duration is started for thread #0.
Application protocol: h2c
Main benchmark duration is over for thread #0. Stopping all clients.
Stopped all clients for thread #0

finished in 2.00s, 5000.00 req/s, 351.88KB/s
requests: 10041 total, 10090 started, 10041 done, 10000 succeeded, 41 failed, 41 errored, 0 timeout
status codes: 10000 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 703.77KB (720660) total, 468.75KB (480000) headers (space savings 51.02%), 58.59KB (60000) data
                     min         max         mean         sd        +/- sd
time for request:      198us     53.54ms     13.53ms     11.03ms    76.82%
";

    #[test]
    fn a_timed_report_gives_its_span_and_protocol() {
        let report = parse_h2load(TIMED).unwrap();
        assert_eq!((report.total, report.answered), (10041, 10000));
        assert_eq!(report.seconds, 2.0);
        assert_eq!(report.protocol.as_deref(), Some("h2c"));
        assert_eq!(report.tls_version, None);
    }

    #[test]
    fn the_log_gives_the_latencies_of_the_answered_only() {
        // The first row as h2load 1.52 wrote it; then a failed stream, a 503 and a row with a
        // column a later version may add.
        let log = "1795831132520643\t200\t18685\n1795831132520700\t-1\t9000\n\
                   1795831132520800\t503\t7000\n1795831132520900\t204\t500\textra\n";
        assert_eq!(answered_latencies(log).unwrap(), [18685.0, 500.0]);
        assert!(answered_latencies("garbage\n").is_err());
    }

    #[test]
    fn the_stream_load_command_is_the_documented_one() {
        let load = StreamLoad {
            clients: 50,
            streams: 10,
            seconds: 5,
        };
        let log = Path::new("/tmp/log");
        assert_eq!(
            load.args("https://127.0.0.1:PORT/", &Asking::default(), log)
                .join(" "),
            "-t1 -c50 -m10 -D5 --log-file=/tmp/log https://127.0.0.1:PORT/"
        );
        let call = Asking {
            body: Some(PathBuf::from("/tmp/message")),
            headers: vec![
                "content-type: application/grpc".into(),
                "te: trailers".into(),
            ],
        };
        assert_eq!(
            load.args("http://127.0.0.1:PORT/p.S/M", &call, log),
            [
                "-t1",
                "-c50",
                "-m10",
                "-D5",
                "--log-file=/tmp/log",
                "-H",
                "content-type: application/grpc",
                "-H",
                "te: trailers",
                "-d",
                "/tmp/message",
                "http://127.0.0.1:PORT/p.S/M"
            ]
        );
        assert_eq!(load.written(), "50 × 10");
    }

    #[test]
    fn the_command_is_the_documented_one() {
        assert_eq!(
            h2load_args("PORT", 100).join(" "),
            "--h1 -t1 -c100 -n100 https://127.0.0.1:PORT/"
        );
    }

    #[test]
    fn batches_add_up_and_keep_the_first_version() {
        let mut sum = Batches::default();
        sum.add(Batches {
            batches: 1,
            answered: 97,
            failed: 3,
            version: Some("TLSv1.3".into()),
        });
        sum.add(Batches {
            batches: 1,
            answered: 100,
            failed: 0,
            version: Some("TLSv1.2".into()),
        });
        assert_eq!((sum.batches, sum.answered, sum.failed), (2, 197, 3));
        assert_eq!(sum.version.as_deref(), Some("TLSv1.3"));
    }
}
