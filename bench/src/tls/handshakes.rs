//! Handshakes driven through a proxy while its CPU is read from /proc: full ones by h2load
//! (`kit::h2load`), in batches of clients that each connect, make one request and close (no
//! client has a session to resume), and resumed ones by `openssl s_time -reuse` processes, each resuming the session of
//! its previous connection, one after another. s_time marks every connection it made, `r` when
//! the server resumed the session, so the resumed count is the client's own, per connection.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::kit::h2load;
use crate::kit::process::Supervised;
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

/// Full handshakes through the proxy on `port` (process tree `pid`): h2load batches of `batch`
/// clients, one after another, until `seconds` have passed (one batch when 0).
pub fn full(
    h2load: &Path,
    port: u16,
    batch: u32,
    seconds: u32,
    pid: u32,
) -> anyhow::Result<Counted> {
    let before = procstat::tree_cpu(pid)?;
    let started = Instant::now();
    let limit = Duration::from_secs(u64::from(seconds));
    // One batch at least: a warm-up asks for no more.
    let done = h2load::batches(h2load, port, batch, || started.elapsed() < limit)?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = procstat::tree_cpu(pid)?.since(before);
    if done.answered == 0 {
        bail!(
            "h2load completed no request on 127.0.0.1:{port} ({} failed)",
            done.failed
        );
    }
    Ok(Counted {
        handshakes: done.answered,
        resumed: None,
        failed: done.failed,
        version: done.version.unwrap_or_else(|| "not reported".into()),
        seconds,
        cpu,
    })
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
    fn the_command_is_the_documented_one() {
        assert_eq!(
            s_time_args("PORT", 5).join(" "),
            "s_time -connect 127.0.0.1:PORT -reuse -tls1_3 -www / -time 5"
        );
    }
}
