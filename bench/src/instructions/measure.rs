//! One case counted. herdsman starts under callgrind, counting nothing; wrk makes its 50
//! connections (and TLS handshakes) and sends requests for the warm-up; then wrk is paused and,
//! once herdsman has finished every request wrk sent, the count is turned on, wrk resumes for the
//! counted seconds and is paused again, and the count is turned off once herdsman has finished
//! every request again. So the instructions counted are those of exactly the requests counted:
//! none begun before the count or finished after it, and no keep-alive connection made during it
//! (turning the count on and off takes valgrind most of a second, which is why wrk waits instead
//! of starting and stopping). The requests are counted at the backend, and checked against
//! herdsman's own counters (requests, and connections accepted: one per request, or none) and
//! wrk's report (no error, every request it completed answered by the backend), so a broken run
//! fails rather than giving a figure.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::bail;
use rustls::ClientConfig;

use super::cases::{herdsman_config, Case, Ports};
use crate::kit::callgrind::{Callgrind, START_LIMIT};
use crate::kit::process::{probe, set_priority};
use crate::kit::proxies::TlsCertificate;
use crate::kit::server_status::{self, ServerCounts};
use crate::kit::stack::listener_and_admin_ports;
use crate::kit::tls_client::{self, KEEP_ALIVE_GET};
use crate::kit::workers_api;
use crate::kit::wrk::{PausedRun, WrkReport};

/// wrk's connections, as bench/scripts/instructions-per-request.sh opens them.
pub const CONNECTIONS: u32 = 50;

/// Fewer requests counted than this says the load did not run as meant (valgrind runs herdsman
/// at a few thousand requests a second here, so even 3 s counts several thousand).
pub const MIN_REQUESTS: u64 = 1_000;

/// herdsman has finished every request once the backend has seen none for this many readings in
/// a row, `QUIET_INTERVAL` apart: under valgrind a request takes well under a millisecond from
/// the backend's answer to the client.
const QUIET_READINGS: u32 = 3;
const QUIET_INTERVAL: Duration = Duration::from_millis(100);
/// How long herdsman may take to become quiet once wrk is paused.
const QUIET_LIMIT: Duration = Duration::from_secs(30);

/// What every case is counted with.
pub struct Bench<'a> {
    pub callgrind: &'a Callgrind,
    pub wrk: &'a Path,
    pub backend_port: u16,
    /// The certificate of the TLS case's listener.
    pub certificate: &'a TlsCertificate,
    /// A client that trusts that certificate: the probe of the TLS case's listener.
    pub tls_client: &'a Arc<ClientConfig>,
    pub warm_up: Duration,
    pub counted: Duration,
    /// The nice value wrk (and the backend) run at, when raising their priority was permitted:
    /// ahead of the machine's other work they answer herdsman at once, so no other program's
    /// load decides a race that `Case::think_time` describes.
    pub clients_nice: Option<i32>,
}

/// The nice value of the clients (wrk, the backend) when it may be raised.
pub const CLIENTS_NICE: i32 = -15;

/// A wrk script that pauses `milliseconds` before each request.
fn think_time_script(milliseconds: u32) -> String {
    format!("function delay()\n  return {milliseconds}\nend\n")
}

/// One case's count.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseRun {
    pub case: Case,
    /// Requests answered while counting (at the backend, and by herdsman's own count).
    pub requests: u64,
    /// Instructions herdsman executed while counting, every thread.
    pub instructions: u64,
    /// Connections herdsman accepted while counting.
    pub accepted: u64,
}

impl CaseRun {
    pub fn per_request(&self) -> f64 {
        self.instructions as f64 / self.requests.max(1) as f64
    }
}

impl Bench<'_> {
    /// Counts `case` with `herdsman`, its files in `dir`.
    pub fn measure(&self, herdsman: &Path, case: Case, dir: &Path) -> anyhow::Result<CaseRun> {
        let (listener, admin) = listener_and_admin_ports()?;
        let ports = Ports {
            listener,
            admin,
            backend: self.backend_port,
        };
        let config = dir.join("herdsman.toml");
        std::fs::write(&config, herdsman_config(case, ports, self.certificate, dir))?;
        let args = [OsStr::new("run"), OsStr::new("-c"), config.as_os_str()];
        let mut counted = self
            .callgrind
            .start("herdsman (callgrind)", herdsman, &args, dir)?;
        if case.tls() {
            let tls_probe = |port| tls_client::probe_with(self.tls_client, port, KEEP_ALIVE_GET);
            counted
                .process
                .wait_until_answering(listener, START_LIMIT, tls_probe)?;
        } else {
            counted
                .process
                .wait_until_answering(listener, START_LIMIT, probe)?;
        }

        let script = match case.think_time() {
            Some(milliseconds) => {
                let script = dir.join("think-time.lua");
                std::fs::write(&script, think_time_script(milliseconds))?;
                Some(script)
            }
            None => None,
        };
        let mut forwarded = Forwarded::start(self.backend_port)?;
        let mut load = PausedRun::start(
            self.wrk,
            &case.url(listener),
            CONNECTIONS,
            case.headers(),
            script.as_deref(),
            &dir.join("wrk.log"),
        )?;
        thread::sleep(self.warm_up);
        if let Some(nice) = self.clients_nice {
            // By now wrk has started its thread, which is the one that sends.
            set_priority(load.pid(), nice);
        }
        load.pause()?;
        let before = forwarded.when_quiet()?;
        let herdsman_before = workers_api::read_workers(admin)?;
        let (instructions, after) = counted.count(|| {
            load.resume()?;
            thread::sleep(self.counted);
            load.pause()?;
            forwarded.when_quiet()
        })?;
        let herdsman_counted = herdsman_before.delta(&workers_api::read_workers(admin)?);
        let report = load.finish()?;
        let whole_run = forwarded.when_quiet()?;
        let run = CaseRun {
            case,
            requests: after - before,
            instructions,
            accepted: herdsman_counted.total(|w| w.accepted),
        };
        check(
            &run,
            herdsman_counted.total(|w| w.requests),
            &report,
            whole_run,
        )?;
        Ok(run)
    }
}

/// Fails unless the count is what it claims to be: enough requests, herdsman's own count of
/// them the backend's, a connection accepted for each (new-connection) or none (keep-alive), and
/// wrk's whole run without an error and answered at the backend (wrk leaves out the requests it
/// had sent when it was stopped, at most one per connection).
fn check(
    run: &CaseRun,
    herdsman_requests: u64,
    report: &WrkReport,
    whole_run: u64,
) -> anyhow::Result<()> {
    let case = run.case;
    if report.socket_errors > 0 || report.bad_status > 0 {
        bail!(
            "{case}: wrk counted {} socket errors and {} answers other than 2xx/3xx",
            report.socket_errors,
            report.bad_status
        );
    }
    if run.requests < MIN_REQUESTS {
        bail!(
            "{case}: only {} requests were answered while counting (at least {MIN_REQUESTS} \
             expected): the load did not run",
            run.requests
        );
    }
    if herdsman_requests != run.requests {
        bail!(
            "{case}: herdsman counted {herdsman_requests} requests while counting, the backend \
             answered {}",
            run.requests
        );
    }
    if case.reconnects() {
        if run.accepted.abs_diff(run.requests) > u64::from(CONNECTIONS) {
            bail!(
                "{case}: herdsman accepted {} connections for {} requests: wrk did not connect \
                 anew for each request",
                run.accepted,
                run.requests
            );
        }
    } else if run.accepted > 0 {
        bail!(
            "{case}: herdsman accepted {} connections while counting; wrk's keep-alive \
             connections should all have been made in the warm-up",
            run.accepted
        );
    }
    if whole_run < report.requests || whole_run > report.requests + u64::from(CONNECTIONS) {
        bail!(
            "{case}: wrk completed {} requests in its whole run, the backend answered {whole_run}",
            report.requests
        );
    }
    Ok(())
}

/// The requests the backend has answered since `start`, its own status requests left out: those
/// herdsman forwarded.
struct Forwarded {
    port: u16,
    last: ServerCounts,
    total: u64,
}

impl Forwarded {
    fn start(port: u16) -> anyhow::Result<Forwarded> {
        Ok(Forwarded {
            port,
            last: server_status::read(port)?,
            total: 0,
        })
    }

    /// Reads the backend's counts; the requests answered since the last reading.
    fn read(&mut self) -> anyhow::Result<u64> {
        let now = server_status::read(self.port)?;
        let new = now.since(self.last).requests;
        self.last = now;
        self.total += new;
        Ok(new)
    }

    /// Waits until the backend has answered nothing for `QUIET_READINGS` readings in a row, and
    /// returns the requests it answered since `start`.
    fn when_quiet(&mut self) -> anyhow::Result<u64> {
        let started = Instant::now();
        let mut quiet = 0;
        while quiet < QUIET_READINGS {
            if started.elapsed() > QUIET_LIMIT {
                bail!("herdsman still forwarded requests {QUIET_LIMIT:?} after wrk was paused");
            }
            thread::sleep(QUIET_INTERVAL);
            quiet = if self.read()? == 0 { quiet + 1 } else { 0 };
        }
        Ok(self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::wrk::sample_report;

    fn run(case: Case, requests: u64, accepted: u64) -> CaseRun {
        CaseRun {
            case,
            requests,
            instructions: requests * 12_000,
            accepted,
        }
    }

    /// wrk's report of a whole run that completed `requests`.
    fn report(requests: u64) -> WrkReport {
        WrkReport {
            requests,
            ..sample_report(1000.0)
        }
    }

    #[test]
    fn a_clean_count_passes() {
        let keep_alive = run(Case::KeepAlive, 7_000, 0);
        check(&keep_alive, 7_000, &report(20_000), 20_040).unwrap();
        let reconnecting = run(Case::NewConnection, 7_000, 7_020);
        check(&reconnecting, 7_000, &report(20_000), 20_000).unwrap();
        assert_eq!(keep_alive.per_request(), 12_000.0);
    }

    /// Checks that `counted`, with herdsman's own count, wrk's whole run and the backend's,
    /// fails with `words` in the error.
    fn assert_fails(counted: CaseRun, herdsman: u64, wrk: u64, whole: u64, words: &str) {
        let error = check(&counted, herdsman, &report(wrk), whole).unwrap_err();
        assert!(
            error.to_string().contains(words),
            "{words:?} not in {error}"
        );
    }

    #[test]
    fn a_broken_load_fails_and_says_why() {
        assert_fails(
            run(Case::KeepAlive, 500, 0),
            500,
            5_000,
            5_000,
            "only 500 requests",
        );
        assert_fails(
            run(Case::KeepAlive, 7_000, 0),
            6_990,
            20_000,
            20_000,
            "counted 6990",
        );
        assert_fails(
            run(Case::KeepAlive, 7_000, 50),
            7_000,
            20_000,
            20_000,
            "accepted 50",
        );
        let reconnecting = run(Case::NewConnection, 7_000, 60);
        assert_fails(reconnecting, 7_000, 20_000, 20_000, "did not connect anew");
        let tls = run(Case::TlsKeepAlive, 7_000, 0);
        assert_fails(
            tls.clone(),
            7_000,
            20_000,
            20_051,
            "the backend answered 20051",
        );
        assert_fails(tls, 7_000, 20_000, 19_999, "completed 20000");
        let errors = WrkReport {
            socket_errors: 3,
            ..report(20_000)
        };
        let error = check(&run(Case::KeepAlive, 7_000, 0), 7_000, &errors, 20_000).unwrap_err();
        assert!(format!("{error}").contains("3 socket errors"), "{error}");
    }
}
