//! h2load (Debian's nghttp2-client) driving full TLS handshakes: batches of clients that each
//! connect, make one HTTP/1.1 request and close, all at once, one batch after another for as long
//! as the caller wants; what the batches reported, summed. No client has a session to offer, so
//! every handshake is full. For `tls` (handshakes per CPU-second) and `tls-load` (a handshake storm).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::kit::process::run_with_timeout;

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

/// Reads h2load's `requests:` and `status codes:` lines and its `TLS Protocol:`: one batch.
fn parse_h2load(text: &str) -> anyhow::Result<Batches> {
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
    Ok(Batches {
        batches: 1,
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
            Batches {
                batches: 1,
                answered: 97,
                failed: 3,
                version: Some("TLSv1.3".into())
            }
        );
        assert!(parse_h2load("finished in 1s\n").is_err());
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
        sum.add(parse_h2load(H2LOAD).unwrap());
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
