//! Handshakes driven through a proxy while its CPU is read from /proc: full ones by h2load, in
//! batches of clients that each connect, make one request and close (no client has a session to
//! resume), and resumed ones by `openssl s_time -reuse` processes, each resuming the session of
//! its previous connection, one after another. s_time marks every connection it made, `r` when
//! the server resumed the session, so the resumed count is the client's own, per connection.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::process::{run_with_timeout, Supervised};
use crate::kit::procstat::{self, CpuTime};

/// What one handshake run counted, over the window its CPU was read.
#[derive(Debug, Clone, PartialEq)]
pub struct Counted {
    /// Connections whose handshake completed and whose request was answered 2xx.
    pub handshakes: u64,
    /// Of those, the ones the client saw resumed; None when the client does not say (h2load,
    /// whose clients each make one connection and so never have a session to resume).
    pub resumed: Option<u64>,
    /// Requests that failed or were answered other than 2xx.
    pub failed: u64,
    /// The TLS version the client reported ("TLSv1.3"), or what it was made to use.
    pub version: String,
    pub seconds: f64,
    /// The proxy's processes' CPU over the window.
    pub cpu: CpuTime,
}

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

/// Full handshakes through the proxy on `port` (process tree `pid`): h2load batches of `batch`
/// clients, one after another, until `seconds` have passed (one batch when 0).
pub fn full(
    h2load: &Path,
    port: u16,
    batch: u32,
    seconds: u32,
    pid: u32,
) -> anyhow::Result<Counted> {
    let args = h2load_args(&port.to_string(), batch);
    let before = procstat::tree_cpu(pid)?;
    let started = Instant::now();
    let mut handshakes = 0;
    let mut failed = 0;
    let mut version = None;
    // One batch at least: a warm-up asks for no more.
    loop {
        let batch = run_batch(h2load, &args)?;
        handshakes += batch.answered;
        failed += batch.failed;
        version = version.or(batch.version);
        if started.elapsed() >= Duration::from_secs(u64::from(seconds)) {
            break;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = procstat::tree_cpu(pid)?.since(before);
    if handshakes == 0 {
        bail!("h2load completed no request on 127.0.0.1:{port} ({failed} failed)");
    }
    Ok(Counted {
        handshakes,
        resumed: None,
        failed,
        version: version.unwrap_or_else(|| "not reported".into()),
        seconds,
        cpu,
    })
}

/// One batch as h2load reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Batch {
    /// Requests answered 2xx.
    answered: u64,
    /// Requests that failed, errored, timed out or were answered other than 2xx.
    failed: u64,
    version: Option<String>,
}

fn run_batch(h2load: &Path, args: &[String]) -> anyhow::Result<Batch> {
    let mut command = Command::new(h2load);
    command.args(args);
    let output = run_with_timeout(command, BATCH_LIMIT)?;
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

/// Reads h2load's `requests:` and `status codes:` lines and its `TLS Protocol:`.
fn parse_h2load(text: &str) -> anyhow::Result<Batch> {
    let mut total = None;
    let mut answered = None;
    let mut version = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("requests:") {
            // "100 total, 100 started, 100 done, 100 succeeded, 0 failed, 0 errored, 0 timeout"
            total = Some(count_before(rest, "total")?);
        } else if let Some(rest) = line.strip_prefix("status codes:") {
            // "100 2xx, 0 3xx, 0 4xx, 0 5xx"
            answered = Some(count_before(rest, "2xx")?);
        } else if let Some(rest) = line.strip_prefix("TLS Protocol:") {
            version = Some(rest.trim().to_string());
        }
    }
    let (Some(total), Some(answered)) = (total, answered) else {
        bail!("no `requests:` or `status codes:` line");
    };
    Ok(Batch {
        answered,
        failed: total.saturating_sub(answered),
        version,
    })
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

/// The request s_time makes on each connection (`-www /`): HTTP/1.0, no Host, closed after the
/// answer. Every proxy is checked to answer it 2xx before it is counted.
pub const S_TIME_REQUEST: &[u8] = b"GET / HTTP/1.0\r\n\r\n";

/// The arguments after `openssl` for one resuming client running `seconds` (whole seconds; s_time
/// reads the clock in seconds, so it runs up to one more).
pub fn s_time_args(port: &str, seconds: u32) -> Vec<String> {
    vec![
        "s_time".into(),
        "-connect".into(),
        format!("127.0.0.1:{port}"),
        "-reuse".into(),
        "-tls1_3".into(),
        "-www".into(),
        "/".into(),
        "-time".into(),
        seconds.to_string(),
    ]
}

/// How long the s_time processes may take to make their first connection and say `starting`.
const START_LIMIT: Duration = Duration::from_secs(15);

/// Resumed handshakes through the proxy on `port` (process tree `pid`): `clients` s_time
/// processes at once for `seconds`, their output in `dir`. The window opens once every one has
/// made its first (full) connection and started resuming, and closes when the last has finished;
/// the handshakes counted are the connections each marked within it.
pub fn resumed(
    openssl: &Path,
    port: u16,
    clients: u32,
    seconds: u32,
    pid: u32,
    dir: &Path,
) -> anyhow::Result<Counted> {
    let args = s_time_args(&port.to_string(), seconds);
    let mut processes = Vec::new();
    for client in 0..clients {
        let mut command = Command::new(openssl);
        command.args(&args);
        let log = dir.join(format!("s_time-{client}.log"));
        processes.push((Supervised::spawn("openssl s_time", command, &log)?, log));
    }
    let read_all = |processes: &[(Supervised, std::path::PathBuf)]| {
        processes
            .iter()
            .map(|(_, log)| marks(&std::fs::read_to_string(log).unwrap_or_default()))
            .collect::<Vec<_>>()
    };
    let deadline = Instant::now() + START_LIMIT;
    loop {
        if read_all(&processes).iter().all(Option::is_some) {
            break;
        }
        for (process, _) in &mut processes {
            if let Some(reason) = process.exit_reason() {
                bail!("s_time ended before it started resuming: {reason}");
            }
        }
        if Instant::now() >= deadline {
            bail!("s_time had not started resuming within {START_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = sum(&read_all(&processes));
    let cpu_before = procstat::tree_cpu(pid)?;
    let started = Instant::now();
    let limit = Duration::from_secs(u64::from(seconds)) + START_LIMIT;
    for (process, _) in &mut processes {
        let ended = process.wait_for_exit(limit)?;
        if ended != "exit code 0" {
            bail!("s_time ended with {ended}: {}", process.log_tail(5));
        }
    }
    let cpu = procstat::tree_cpu(pid)?.since(cpu_before);
    let seconds = started.elapsed().as_secs_f64();
    let after = sum(&read_all(&processes));
    let resumed = after.resumed - before.resumed;
    let full = after.full - before.full;
    if resumed + full == 0 {
        bail!("s_time made no connection to 127.0.0.1:{port} in the window");
    }
    Ok(Counted {
        handshakes: resumed + full,
        resumed: Some(resumed),
        failed: 0,
        version: "TLSv1.3 (s_time -tls1_3)".into(),
        seconds,
        cpu,
    })
}

/// Connections one s_time process has marked since it started resuming.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Marks {
    /// `r`: the server resumed the session.
    resumed: u64,
    /// Any other mark (`*`, `t`, `3`): a full handshake.
    full: u64,
}

/// The marks on the line after `starting` (written and flushed one per connection); None before
/// s_time has printed `starting`.
fn marks(output: &str) -> Option<Marks> {
    let (_, after) = output.split_once("starting\n")?;
    let line = after.split('\n').next().unwrap_or_default();
    let resumed = line.chars().filter(|&c| c == 'r').count() as u64;
    Some(Marks {
        resumed,
        full: line.chars().filter(|c| !c.is_whitespace()).count() as u64 - resumed,
    })
}

fn sum(all: &[Option<Marks>]) -> Marks {
    all.iter().flatten().fold(Marks::default(), |a, m| Marks {
        resumed: a.resumed + m.resumed,
        full: a.full + m.full,
    })
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
    fn h2load_s_report_gives_the_answered_and_the_failed() {
        let batch = parse_h2load(H2LOAD).unwrap();
        assert_eq!(
            batch,
            Batch {
                answered: 97,
                failed: 3,
                version: Some("TLSv1.3".into())
            }
        );
        assert!(parse_h2load("finished in 1s\n").is_err());
    }

    #[test]
    fn s_time_s_marks_are_counted_after_starting() {
        let setup = "\n\nNow timing with session id reuse.\n";
        assert_eq!(marks(setup), None);
        let running = format!("{setup}starting\nrrr*r");
        assert_eq!(
            marks(&running),
            Some(Marks {
                resumed: 4,
                full: 1
            })
        );
        let done = format!(
            "{running}rr\n\n7 connections in 0.01s; 700.00 connections/user sec, bytes read 539\n"
        );
        assert_eq!(
            marks(&done),
            Some(Marks {
                resumed: 6,
                full: 1
            })
        );
        assert_eq!(
            sum(&[marks(&done), None, marks(&running)]),
            Marks {
                resumed: 10,
                full: 2
            }
        );
    }

    #[test]
    fn the_commands_are_the_documented_ones() {
        assert_eq!(
            h2load_args("PORT", 100).join(" "),
            "--h1 -t1 -c100 -n100 https://127.0.0.1:PORT/"
        );
        assert_eq!(
            s_time_args("PORT", 5).join(" "),
            "s_time -connect 127.0.0.1:PORT -reuse -tls1_3 -www / -time 5"
        );
    }
}
