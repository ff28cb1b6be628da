//! One measured wrk run against one target: the CPU its process tree used, its peak memory, wrk's
//! report, and the connections the server behind it accepted (read from the server before, during
//! and after the run); and the run's line of progress output, recorded into the session.

use std::path::Path;
use std::thread;
use std::time::Duration;

use anyhow::bail;

use super::report::opened::{per_request, steady_from};
use super::report::{section_name, Cell, Run, ServerOpened, Session};
use crate::kit::markdown::thousands;
use crate::kit::process::Supervised;
use crate::kit::procstat;
use crate::kit::server_status;
use crate::kit::wrk::{self, Load};

/// What one wrk run cost the measured process tree, and what the server accepted meanwhile.
pub struct Measured {
    pub wrk: wrk::WrkReport,
    /// CPU time of the process tree (utime + stime) ÷ requests completed, in µs.
    pub cpu_us_per_request: f64,
    /// The user-space part of `cpu_us_per_request` (utime ÷ requests): the proxy's own code.
    pub user_us_per_request: f64,
    /// The kernel part of `cpu_us_per_request` (stime ÷ requests): mostly loopback TCP.
    pub kernel_us_per_request: f64,
    pub peak_rss_kib: u64,
    pub opened: ServerOpened,
}

/// Runs `load` against 127.0.0.1:`port`, served by `process`, in front of the server on
/// `server_port` (the same port when the server runs alone). The server's counts are read just
/// before, at `steady_from` into the run (on a thread of its own, while wrk runs) and just after,
/// each outside the CPU readings.
pub fn measure(
    wrk_path: &Path,
    process: &mut Supervised,
    port: u16,
    load: Load,
    server_port: u16,
) -> anyhow::Result<Measured> {
    let pid = process.pid();
    let server_before = server_status::read(server_port)?;
    let before = procstat::tree_cpu(pid)?;
    let (report, server_steady) = thread::scope(|scope| {
        let steady = scope.spawn(|| {
            thread::sleep(steady_from(load.seconds));
            server_status::read(server_port)
        });
        let report = wrk::run(wrk_path, port, load);
        (report, steady.join())
    });
    let after = procstat::tree_cpu(pid)?;
    let report = report?;
    let server_after = server_status::read(server_port)?;
    process.check_running()?;
    if report.requests == 0 {
        bail!("no request completed");
    }
    let used = after.since(before);
    // CPU time ÷ requests completed, in µs.
    let us_per_request = |time: Duration| time.as_secs_f64() * 1e6 / report.requests as f64;
    let steady = match server_steady {
        Ok(Ok(counts)) => Some(server_after.since(counts)),
        Ok(Err(e)) => {
            eprintln!("no steady-load count of server connections for this run: {e:#}");
            None
        }
        Err(_) => None,
    };
    Ok(Measured {
        cpu_us_per_request: us_per_request(used.total()),
        user_us_per_request: us_per_request(used.user),
        kernel_us_per_request: us_per_request(used.system),
        peak_rss_kib: procstat::tree_peak_rss_kib(pid)?,
        wrk: report,
        opened: ServerOpened {
            // The reading in between was a connection of its own too.
            accepted: server_after.since(server_before).accepted - u64::from(steady.is_some()),
            steady,
        },
    })
}

/// The figures of one run on one line, for the progress output.
pub fn figures_line(m: &Measured) -> String {
    let steady = m
        .opened
        .steady_per_request()
        .map_or("–".to_string(), per_request);
    format!(
        "{:>9} req/s  p50 {:>6.0} µs  p99 {:>6.0} µs  max {:>7.0} µs  {:>6.2} CPU-µs/req (user {:.2})  errors {}  \
         server conns opened {} ({steady}/req at steady load)",
        thousands(m.wrk.requests_per_sec),
        m.wrk.p50_us,
        m.wrk.p99_us,
        m.wrk.max_us,
        m.cpu_us_per_request,
        m.user_us_per_request,
        m.wrk.socket_errors + m.wrk.bad_status,
        m.opened.accepted,
    )
}

/// Which run of the main comparison a measurement is.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub round: u32,
    pub cell: Cell,
}

/// Prints the run's line and keeps it in the session.
pub fn record(session: &mut Session, case: Case, label: &str, m: Measured, progress: &str) {
    let Cell {
        server,
        workers,
        connections,
    } = case.cell;
    eprintln!(
        "[{progress}] {}, round {}/{}, c={connections}: {label:<16} {}  peak {:.1} MiB",
        section_name(workers, server),
        case.round,
        session.rounds,
        figures_line(&m),
        m.peak_rss_kib as f64 / 1024.0,
    );
    session.runs.push(Run {
        round: case.round,
        server,
        workers,
        label: label.to_string(),
        connections,
        wrk: m.wrk,
        cpu_us_per_request: m.cpu_us_per_request,
        user_us_per_request: m.user_us_per_request,
        kernel_us_per_request: m.kernel_us_per_request,
        peak_rss_kib: m.peak_rss_kib,
        opened: m.opened,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_line_gives_the_user_part_of_the_cpu() {
        let measured = Measured {
            wrk: wrk::WrkReport {
                requests: 1000,
                seconds: 1.0,
                requests_per_sec: 1000.0,
                p50_us: 800.0,
                p99_us: 1900.0,
                max_us: 5000.0,
                socket_errors: 0,
                bad_status: 0,
            },
            cpu_us_per_request: 13.11,
            user_us_per_request: 4.2,
            kernel_us_per_request: 8.91,
            peak_rss_kib: 10240,
            opened: ServerOpened::default(),
        };
        let line = figures_line(&measured);
        assert!(line.contains("  13.11 CPU-µs/req (user 4.20)  "), "{line}");
    }
}
