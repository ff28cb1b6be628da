//! `GET /metrics`: everything herdsman counts, in the Prometheus text format (version 0.0.4),
//! named by Prometheus's conventions: a `herdsman_` prefix, `_total` on counters, seconds and
//! bytes as units. It is built when scraped from the figures the admin API also reports (the
//! workers' own counters, summed here, and the registry's view of the pools), so collecting
//! costs the request path nothing beyond the counters themselves.

use std::sync::atomic::Ordering;

use std::sync::Arc;

use crate::cache::shared::SharedStore;
use crate::config::acme::ManagedCertificate;
use crate::config::certificates::{Certificate, CertificateStore};
use crate::config::{Algorithm, ServerState};
use crate::rate_limit::{LimitView, RateLimits};
use crate::stats::cache::{CacheHeld, PoolCacheView};
use crate::stats::compression::{CompressionReport, Skipped};
use crate::stats::http2::{Http2Report, CODES};
use crate::stats::procfs::{self, ListenQueueDrops, ThreadCpu};
use crate::stats::tls::{HandshakeFailed, TlsReport, HANDSHAKE_BUCKETS_MS};
use crate::stats::traffic::TrafficTotals;
use crate::stats::{Stats, WorkerReport};
use crate::upstream::health::HealthView;
use crate::upstream::registry::{PoolsView, Registry, ServerView};

use super::exposition::{Buckets, Exposition};
use super::rule_metrics::RuleAnswers;

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The names of the status classes, in `TrafficTotals::responses` order.
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The whole exposition, as of now.
pub fn render(
    stats: &Stats,
    registry: &Registry,
    cache: &SharedStore,
    rate_limits: &RateLimits,
) -> String {
    let (reloads, failed_reloads) = registry.reload_counts();
    let figures = Figures {
        access_log_dropped_lines: stats.access_log_dropped_lines.load(Ordering::Relaxed),
        buffered_memory: stats.buffer_use.memory.load(Ordering::Relaxed),
        buffered_disk: stats.buffer_use.disk.load(Ordering::Relaxed),
        buffered_file_bytes: stats.buffer_use.disk_written.load(Ordering::Relaxed),
        workers: stats.report(),
        health_checker: stats.health_checker_cpu(),
        pools: super::cache::pools_with_cache(registry, cache),
        cache_memory: cache.current().map(|store| store.memory()),
        cache_disk: cache
            .current()
            .and_then(|store| store.disk().map(|disk| DiskFigures::of(disk))),
        tls: stats.tls_reports(),
        compression: stats.compression_report(),
        certificates: registry.certificates(),
        acme: registry.acme_certificates(),
        listen_queue: procfs::listen_queue_drops(),
        reloads,
        failed_reloads,
        descriptors: Descriptors::now(stats),
        rate_limits: rate_limits.views(),
        rule_answers: RuleAnswers::of(&registry.snapshot_handle().load().rule_counts),
    };
    figures.write()
}

/// What the cache's disk tier holds and did.
struct DiskFigures {
    files: u64,
    bytes: u64,
    read: u64,
    written: u64,
    corrupt: u64,
}

impl DiskFigures {
    fn of(disk: &crate::cache::disk::Disk) -> DiskFigures {
        let (files, bytes) = disk.held();
        DiskFigures {
            files,
            bytes,
            read: disk.read.load(Ordering::Relaxed),
            written: disk.written.load(Ordering::Relaxed),
            corrupt: disk.corrupt.load(Ordering::Relaxed),
        }
    }
}

/// A counter family with a sample per rate limit: its name, help, and value in a limit's view.
type PerLimit = (&'static str, &'static str, fn(&LimitView) -> u64);

/// What one scrape reports.
struct Figures {
    workers: Vec<WorkerReport>,
    /// Each worker's TLS handshakes, in worker order.
    tls: Vec<TlsReport>,
    /// Every worker's compression counters, summed.
    compression: CompressionReport,
    /// Each TLS listener's certificates.
    certificates: Vec<(String, Arc<CertificateStore>)>,
    /// Each TLS listener's certificate that ACME keeps.
    acme: Vec<(String, Arc<ManagedCertificate>)>,
    /// The health checker thread's CPU; `None` where /proc cannot be read.
    health_checker: Option<ThreadCpu>,
    pools: PoolsView,
    /// `[cache] memory`, while some pool caches.
    cache_memory: Option<u64>,
    /// `[cache.disk]`, while some pool caches with one.
    cache_disk: Option<DiskFigures>,
    listen_queue: Option<ListenQueueDrops>,
    reloads: u64,
    failed_reloads: u64,
    access_log_dropped_lines: u64,
    buffered_memory: u64,
    buffered_disk: u64,
    buffered_file_bytes: u64,
    descriptors: Descriptors,
    /// The rate limits in force.
    rate_limits: Vec<LimitView>,
    /// The answers of the rules in force.
    rule_answers: RuleAnswers,
}

/// The process's descriptors against its budget (`config::descriptors`): in `/metrics` and in
/// `GET /api/workers` (and so the stats page).
#[derive(Debug, serde::Serialize)]
pub(super) struct Descriptors {
    /// Open now; `None` where /proc cannot be read.
    open_files: Option<u64>,
    limit: u64,
    client_connections: u64,
    /// 0: no cap.
    client_cap: u32,
    refused_per_client: u64,
}

impl Descriptors {
    pub(super) fn now(stats: &Stats) -> Descriptors {
        Descriptors {
            open_files: procfs::open_descriptors(),
            limit: crate::config::descriptors::open_file_limit().0,
            client_connections: stats.client_connections(),
            client_cap: stats.client_cap.cap(),
            refused_per_client: stats.per_client.refused_total.load(Ordering::Relaxed),
        }
    }
}

impl Figures {
    fn write(&self) -> String {
        let mut out = Exposition::default();
        out.family(
            "herdsman_build_info",
            "gauge",
            "herdsman's version; always 1.",
        );
        out.sample(
            "herdsman_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))],
            1,
        );
        self.write_workers(&mut out);
        self.write_tls(&mut out);
        self.write_http2(&mut out);
        self.write_compression(&mut out);
        self.write_pools(&mut out);
        self.write_cache(&mut out);
        self.write_servers(&mut out);
        self.write_rate_limits(&mut out);
        self.rule_answers.write(&mut out);
        self.write_process(&mut out);
        out.text
    }

    /// Each rate limit's requests by verdict, the keys it forgot for room and the checks Redis
    /// did not answer; nothing while no limit is set.
    fn write_rate_limits(&self, out: &mut Exposition) {
        if self.rate_limits.is_empty() {
            return;
        }
        let name = "herdsman_rate_limit_requests_total";
        out.family(
            name,
            "counter",
            "Requests a rate limit counted, by verdict: allowed, or limited (answered 429).",
        );
        for limit in &self.rate_limits {
            for (verdict, count) in [("allowed", limit.allowed), ("limited", limit.limited)] {
                out.sample(
                    name,
                    &[("limit", limit.name.as_str()), ("verdict", verdict)],
                    count,
                );
            }
        }
        let per_limit: [PerLimit; 2] = [
            (
                "herdsman_rate_limit_forgotten_keys_total",
                "Keys a rate limit forgot while still counted, its table full (max_keys).",
                |limit| limit.forgotten,
            ),
            (
                "herdsman_rate_limit_redis_errors_total",
                "Checks of a rate limit Redis did not answer within [rate_limit] timeout.",
                |limit| limit.redis_errors,
            ),
        ];
        for (name, help, value) in per_limit {
            out.family(name, "counter", help);
            for limit in &self.rate_limits {
                out.sample(name, &[("limit", limit.name.as_str())], value(limit));
            }
        }
    }

    fn write_workers(&self, out: &mut Exposition) {
        let workers: Vec<(String, &WorkerReport)> = self
            .workers
            .iter()
            .map(|report| (report.worker.to_string(), report))
            .collect();
        let each = |out: &mut Exposition,
                    name: &str,
                    kind: &str,
                    help: &str,
                    value: &dyn Fn(&WorkerReport) -> f64| {
            out.family(name, kind, help);
            for (worker, report) in &workers {
                out.sample(name, &[("worker", worker)], value(report));
            }
        };
        each(
            out,
            "herdsman_worker_connections",
            "gauge",
            "Client connections the worker owns now.",
            &|r| f64::from(r.active),
        );
        each(
            out,
            "herdsman_worker_parked_connections",
            "gauge",
            "Of those, quiet ones waiting out of their tasks.",
            &|r| f64::from(r.parked),
        );
        each(
            out,
            "herdsman_worker_accepted_connections_total",
            "counter",
            "Connections the worker took from a listening socket.",
            &|r| r.accepted as f64,
        );
        each(
            out,
            "herdsman_worker_handoffs_sent_total",
            "counter",
            "Accepted connections handed to another worker.",
            &|r| r.handoffs_sent as f64,
        );
        each(
            out,
            "herdsman_worker_handoffs_received_total",
            "counter",
            "Connections other workers handed to this one.",
            &|r| r.handoffs_received as f64,
        );
        each(
            out,
            "herdsman_worker_spurious_wakeups_total",
            "counter",
            "Wake-ups for a new connection that found none.",
            &|r| r.spurious_wakeups as f64,
        );
        each(
            out,
            "herdsman_worker_buffered_request_bodies_total",
            "counter",
            "Request bodies read whole before a server was involved ([buffering]).",
            &|r| r.buffered_requests as f64,
        );
        each(
            out,
            "herdsman_worker_slow_request_bodies_total",
            "counter",
            "Request bodies slower than request_min_rate, answered 408.",
            &|r| r.slow_request_bodies as f64,
        );
        each(
            out,
            "herdsman_worker_streamed_request_bodies_total",
            "counter",
            "Request bodies past memory that came fast enough to stream on (request_stream_rate).",
            &|r| r.streamed_request_bodies as f64,
        );
        each(
            out,
            "herdsman_worker_spliced_request_bodies_total",
            "counter",
            "Streaming request bodies relayed by splice, socket to socket (plain TCP both sides).",
            &|r| r.spliced_request_bodies as f64,
        );
        each(
            out,
            "herdsman_worker_buffered_response_bodies_total",
            "counter",
            "Response bodies read at the server's pace through a spool ([buffering]).",
            &|r| r.buffered_responses as f64,
        );
        each(
            out,
            "herdsman_worker_spilled_bodies_total",
            "counter",
            "Buffered bodies that outgrew memory into a temporary file.",
            &|r| r.spilled_bodies as f64,
        );
        each(
            out,
            "herdsman_worker_buffering_full_total",
            "counter",
            "Bodies that reached a buffering limit (their own or memory_total/disk_total) and went on at the slower side's pace.",
            &|r| r.buffering_full as f64,
        );
        each(
            out,
            "herdsman_worker_slow_response_readers_total",
            "counter",
            "Clients that took a buffered response slower than response_min_rate (answer ended).",
            &|r| r.slow_response_readers as f64,
        );
        each(
            out,
            "herdsman_worker_client_connections_shed_total",
            "counter",
            "Quiet keep-alive connections the worker closed to make room for new clients at the client cap.",
            &|r| r.shed_for_room as f64,
        );
        each(
            out,
            "herdsman_worker_accept_paused_total",
            "counter",
            "Times the worker's accepting paused at the client cap with no quiet connection left to close.",
            &|r| r.accept_paused as f64,
        );
        each(
            out,
            "herdsman_worker_restarts_total",
            "counter",
            "Worker tasks restarted after a panic.",
            &|r| r.restarts as f64,
        );
        each(
            out,
            "herdsman_worker_requests_total",
            "counter",
            "Requests the worker finished, answered or not.",
            &|r| r.requests as f64,
        );
        each(
            out,
            "herdsman_worker_rejected_requests_total",
            "counter",
            "Requests refused before routing: a malformed head, or one too slow to arrive.",
            &|r| r.rejected as f64,
        );
        each(
            out,
            "herdsman_worker_backend_connections_opened_total",
            "counter",
            "Connections opened to servers.",
            &|r| r.backend_connects as f64,
        );
        each(
            out,
            "herdsman_worker_backend_connections_reused_total",
            "counter",
            "Idle connections to servers reused for a request.",
            &|r| r.backend_reuses as f64,
        );
        each(
            out,
            "herdsman_worker_backend_connections_idle",
            "gauge",
            "Idle connections to servers kept for reuse.",
            &|r| f64::from(r.idle_backend),
        );
        let name = "herdsman_worker_run_queue_wait_seconds_total";
        out.family(name, "counter", "Time the worker thread was ready to run but waited for a CPU (from schedstat; absent where the kernel keeps none).");
        for (worker, report) in &workers {
            if let Some(seconds) = report.cpu.run_queue_wait_seconds {
                out.sample(name, &[("worker", worker)], seconds);
            }
        }
        let name = "herdsman_worker_cpu_seconds_total";
        out.family(name, "counter", "CPU time of the worker thread, by mode.");
        for (worker, report) in &workers {
            out.sample(
                name,
                &[("worker", worker), ("mode", "user")],
                report.cpu.user_seconds,
            );
            out.sample(
                name,
                &[("worker", worker), ("mode", "system")],
                report.cpu.system_seconds,
            );
        }
        let name = "herdsman_worker_context_switches_total";
        out.family(name, "counter", "Times the kernel switched the worker thread out: it waited (voluntary) or was preempted (involuntary).");
        for (worker, report) in &workers {
            let switches = report.context_switches;
            out.sample(
                name,
                &[("worker", worker), ("kind", "voluntary")],
                switches.voluntary,
            );
            out.sample(
                name,
                &[("worker", worker), ("kind", "involuntary")],
                switches.involuntary,
            );
        }
    }

    fn write_http2(&self, out: &mut Exposition) {
        /// A family of one sample per worker: name, type, help, and its value in a report.
        type Family = (
            &'static str,
            &'static str,
            &'static str,
            fn(&Http2Report) -> f64,
        );
        let workers: Vec<(String, &Http2Report)> = self
            .workers
            .iter()
            .map(|report| (report.worker.to_string(), &report.http2))
            .collect();
        let plain: [Family; 5] = [
            ("herdsman_worker_http2_connections_total", "counter", "HTTP/2 client connections the worker served.", |r| r.connections as f64),
            ("herdsman_worker_http2_connections", "gauge", "HTTP/2 client connections the worker has open now.", |r| f64::from(r.connections_open)),
            ("herdsman_worker_http2_streams_total", "counter", "HTTP/2 streams (requests) the worker took.", |r| r.streams as f64),
            ("herdsman_worker_http2_streams", "gauge", "HTTP/2 streams being served now.", |r| f64::from(r.streams_open)),
            ("herdsman_worker_http2_floods_total", "counter", "HTTP/2 connections ended with GOAWAY ENHANCE_YOUR_CALM for a flood: their budget of frames that ask nothing or of resets spent, or a limit of [http2] passed (a field block that does not end, a header list four times too large, streams reset before they were taken).", |r| r.floods as f64),
        ];
        for (name, kind, help, value) in plain {
            out.family(name, kind, help);
            for (worker, report) in &workers {
                out.sample(name, &[("worker", worker)], value(report));
            }
        }
        let name = "herdsman_worker_http2_resets_total";
        out.family(name, "counter", "HTTP/2 streams reset, by who reset them (client, herdsman) and error code; codes never seen are left out.");
        for (worker, report) in &workers {
            for (by, counts) in [
                ("client", &report.resets_received),
                ("herdsman", &report.resets_sent),
            ] {
                for (code, &count) in CODES.iter().zip(counts.iter()) {
                    if count > 0 {
                        out.sample(
                            name,
                            &[("worker", worker), ("by", by), ("code", code)],
                            count,
                        );
                    }
                }
            }
        }
        let name = "herdsman_worker_http2_goaways_sent_total";
        out.family(name, "counter", "GOAWAY frames herdsman sent on HTTP/2 client connections, by error code; codes never sent are left out.");
        for (worker, report) in &workers {
            for (code, &count) in CODES.iter().zip(report.goaways_sent.iter()) {
                if count > 0 {
                    out.sample(name, &[("worker", worker), ("code", code)], count);
                }
            }
        }
    }

    fn write_compression(&self, out: &mut Exposition) {
        let report = &self.compression;
        let name = "herdsman_compression_bytes_total";
        out.family(name, "counter", "Body bytes of compressed answers, by algorithm: in (as the server sent them) and out (as the client got them).");
        for algorithm in Algorithm::ALL {
            let (at, token) = (algorithm.index(), algorithm.token());
            let (bytes_in, bytes_out) = (report.bytes_in[at], report.bytes_out[at]);
            out.sample(name, &[("algorithm", token), ("direction", "in")], bytes_in);
            out.sample(
                name,
                &[("algorithm", token), ("direction", "out")],
                bytes_out,
            );
        }
        let name = "herdsman_compression_responses_total";
        out.family(
            name,
            "counter",
            "Answers herdsman compressed, by algorithm.",
        );
        for algorithm in Algorithm::ALL {
            let count = report.compressed[algorithm.index()];
            out.sample(name, &[("algorithm", algorithm.token())], count);
        }
        let name = "herdsman_compression_skipped_total";
        out.family(name, "counter", "Answers on routes that compress sent as the server sent them, by reason: not_accepted, head, range, stream (gRPC or upgrade), cached, status, encoded, no_transform, type, too_small.");
        for (why, count) in Skipped::ALL.iter().zip(report.skipped) {
            out.sample(name, &[("reason", why.name())], count);
        }
    }

    fn write_tls(&self, out: &mut Exposition) {
        let workers: Vec<(String, &TlsReport)> = self
            .tls
            .iter()
            .enumerate()
            .map(|(worker, report)| (worker.to_string(), report))
            .collect();
        let name = "herdsman_worker_tls_handshakes_total";
        out.family(name, "counter", "TLS handshakes the worker completed on client connections: full, or resumed from a ticket or session id.");
        for (worker, report) in &workers {
            out.sample(name, &[("worker", worker), ("kind", "full")], report.full);
            let resumed = report.resumed;
            out.sample(name, &[("worker", worker), ("kind", "resumed")], resumed);
        }
        let name = "herdsman_worker_tls_handshake_failures_total";
        out.family(name, "counter", "TLS handshakes that failed on client connections, by reason: plain_http (cleartext HTTP to a TLS port, answered 400), not_tls, closed, unknown_name, client_certificate, alpn (the client offered only protocols herdsman does not speak), protocol, io, timeout.");
        for (worker, report) in &workers {
            for (why, count) in HandshakeFailed::ALL.iter().zip(report.failed) {
                out.sample(name, &[("worker", worker), ("reason", why.name())], count);
            }
        }
        let name = "herdsman_worker_tls_handshakes_in_progress";
        out.family(name, "gauge", "TLS handshakes under way on the worker now.");
        for (worker, report) in &workers {
            out.sample(name, &[("worker", worker)], report.in_progress);
        }
        let name = "herdsman_worker_tls_handshake_duration_seconds";
        out.family(
            name,
            "histogram",
            "Time from a TLS connection's arrival to its completed handshake.",
        );
        let bounds: Vec<f64> = HANDSHAKE_BUCKETS_MS
            .iter()
            .map(|&ms| ms as f64 / 1e3)
            .collect();
        for (worker, report) in &workers {
            let seconds = report.total_us as f64 / 1e6;
            let buckets = Buckets {
                bounds: &bounds,
                cumulative: &report.buckets,
                sum_seconds: seconds,
                count: report.full + report.resumed,
            };
            out.buckets(name, &[("worker", worker)], &buckets);
        }
        let acme_current: Vec<(&str, Arc<Certificate>)> = self
            .acme
            .iter()
            .filter_map(|(listener, managed)| Some((listener.as_str(), managed.current()?)))
            .collect();
        let certificates: Vec<(&str, String, &Certificate)> = self
            .certificates
            .iter()
            .flat_map(|(listener, store)| {
                store.certificates().iter().map(move |certificate| {
                    let file = certificate.chain_file.display().to_string();
                    (listener.as_str(), file, certificate)
                })
            })
            .chain(acme_current.iter().map(|(listener, certificate)| {
                let file = certificate.chain_file.display().to_string();
                (*listener, file, &**certificate)
            }))
            .collect();
        let name = "herdsman_certificate_expiry_seconds";
        out.family(name, "gauge", "Seconds until a TLS listener's certificate (by its chain file) expires; negative once it has.");
        let now = std::time::SystemTime::now();
        for (listener, file, certificate) in &certificates {
            let left = certificate.seconds_left(now);
            out.sample(name, &[("listener", listener), ("certificate", file)], left);
        }
        let name = "herdsman_certificate_name_info";
        out.family(
            name,
            "gauge",
            "The names a TLS listener's certificate covers, one sample (always 1) per name.",
        );
        for (listener, file, certificate) in &certificates {
            for host in &certificate.names {
                let labels = [
                    ("listener", *listener),
                    ("certificate", file),
                    ("name", host),
                ];
                out.sample(name, &labels, 1);
            }
        }
        self.write_acme(out, now);
    }

    /// ACME's certificates: when each is to be renewed, and how many orders for it failed.
    fn write_acme(&self, out: &mut Exposition, now: std::time::SystemTime) {
        let now = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let name = "herdsman_acme_renewal_seconds";
        out.family(name, "gauge", "Seconds until herdsman plans to renew a certificate ACME keeps (by its state directory folder); negative while the renewal is overdue (failing).");
        for (listener, managed) in &self.acme {
            if let Some(at) = managed.renews_at() {
                let labels = [
                    ("listener", listener.as_str()),
                    ("certificate", &managed.id),
                ];
                out.sample(name, &labels, at - now);
            }
        }
        let name = "herdsman_acme_renewal_failures_total";
        out.family(
            name,
            "counter",
            "Orders for a certificate ACME keeps that failed since the process started.",
        );
        for (listener, managed) in &self.acme {
            let failures = managed.failures.load(Ordering::Relaxed);
            let labels = [
                ("listener", listener.as_str()),
                ("certificate", &managed.id),
            ];
            out.sample(name, &labels, failures);
        }
    }

    fn write_pools(&self, out: &mut Exposition) {
        let pools = &self.pools.pools;
        let name = "herdsman_requests_total";
        out.family(name, "counter", "Requests routed to the pool, by the status class of their response; class=\"none\" when none was sent whole.");
        for pool in pools {
            write_classes(out, name, &[("pool", &pool.name)], &pool.traffic);
        }
        let name = "herdsman_request_duration_seconds";
        out.family(
            name,
            "histogram",
            "Time from a request's first byte to the end of its response, by pool.",
        );
        for pool in pools {
            out.histogram(name, &[("pool", &pool.name)], &pool.traffic);
        }
        let name = "herdsman_retries_total";
        out.family(
            name,
            "counter",
            "Requests sent again to another server of the pool.",
        );
        for pool in pools {
            out.sample(name, &[("pool", &pool.name)], pool.traffic.retries);
        }
        let name = "herdsman_pool_backend_connections_opened_total";
        out.family(
            name,
            "counter",
            "Connections opened to the pool's servers (idle ones reused are not counted); divided by herdsman_requests_total, near 0 at a steady load.",
        );
        for pool in pools {
            let opened = pool.traffic.connections_opened;
            out.sample(name, &[("pool", &pool.name)], opened);
        }
        let name = "herdsman_queue_depth";
        out.family(
            name,
            "gauge",
            "Requests waiting now for a server below its max_connections.",
        );
        for pool in pools {
            out.sample(name, &[("pool", &pool.name)], pool.queued);
        }
        let name = "herdsman_queue_timeouts_total";
        out.family(
            name,
            "counter",
            "Requests that waited queue_timeout in vain and got 503.",
        );
        for pool in pools {
            out.sample(name, &[("pool", &pool.name)], pool.queue_timeouts);
        }
    }

    /// The caching pools' requests by what the cache did, and what the store holds of them.
    fn write_cache(&self, out: &mut Exposition) {
        let caching: Vec<(&str, &PoolCacheView)> = self
            .pools
            .pools
            .iter()
            .filter_map(|pool| Some((pool.name.as_str(), pool.cache.as_ref()?)))
            .collect();
        if caching.is_empty() {
            return;
        }
        let name = "herdsman_cache_requests_total";
        out.family(name, "counter", "Requests to a caching pool by what the cache did: hit (fresh), stale (served stale), collapsed (served from another request's fetch), lock_timeout (waited lock_timeout for it, then went to the server), miss (fetched and stored), uncacheable (fetched, not storable), pass (not for the cache), revalidated (a stale object the server confirmed with 304), replaced (revalidation answered with a new response).");
        for (pool, cache) in &caching {
            for (outcome, count) in cache.requests.by_outcome() {
                out.sample(name, &[("pool", pool), ("result", outcome.as_str())], count);
            }
        }
        let per_pool = [
            ("herdsman_cache_objects", "gauge", "Responses the cache holds for the pool now (each variant of a varying response counts), from the store's index.", (|held: &CacheHeld| held.objects) as fn(&CacheHeld) -> u64),
            ("herdsman_cache_bytes", "gauge", "Bytes of the cache's budget the pool's entries take now: keys, heads, bodies and each entry's bookkeeping.", |held| held.bytes),
            ("herdsman_cache_evictions_total", "counter", "The pool's entries evicted to make room, since the store was made (a change to the cache's config makes a new, empty one).", |held| held.evictions),
        ];
        for (name, kind, help, value) in per_pool {
            out.family(name, kind, help);
            for (pool, cache) in &caching {
                out.sample(name, &[("pool", pool)], value(&cache.held));
            }
        }
        if let Some(memory) = self.cache_memory {
            let name = "herdsman_cache_memory_limit_bytes";
            out.family(
                name,
                "gauge",
                "The cache's budget for the whole process ([cache] memory).",
            );
            out.sample(name, &[], memory);
        }
        if let Some(disk) = &self.cache_disk {
            let figures = [
                ("herdsman_cache_disk_objects", "gauge", "Entries the cache keeps on disk ([cache.disk]).", disk.files),
                ("herdsman_cache_disk_bytes", "gauge", "Bytes the cache's files on disk take.", disk.bytes),
                ("herdsman_cache_disk_reads_total", "counter", "Entries read back from the disk (a miss in memory), since start.", disk.read),
                ("herdsman_cache_disk_writes_total", "counter", "Entries written to the disk, since start.", disk.written),
                ("herdsman_cache_disk_corrupt_total", "counter", "Files on disk that failed their checksum (or could not be read as an entry): deleted, never served, fetched again.", disk.corrupt),
            ];
            for (name, kind, help, value) in figures {
                out.family(name, kind, help);
                out.sample(name, &[], value);
            }
        }
    }

    fn write_servers(&self, out: &mut Exposition) {
        let servers: Vec<_> = self
            .pools
            .pools
            .iter()
            .flat_map(|pool| {
                pool.servers
                    .iter()
                    .map(move |server| (pool.name.as_str(), server))
            })
            .collect();
        let name = "herdsman_server_requests_total";
        out.family(name, "counter", "Requests the server was sent, by the status class of their response; class=\"none\" when none was sent whole.");
        for (pool, server) in &servers {
            write_classes(
                out,
                name,
                &[("pool", pool), ("server", &server.name)],
                &server.traffic,
            );
        }
        let name = "herdsman_server_request_duration_seconds";
        out.family(name, "histogram", "Time from a request's first byte to the end of its response, by the server that answered.");
        for (pool, server) in &servers {
            out.histogram(
                name,
                &[("pool", pool), ("server", &server.name)],
                &server.traffic,
            );
        }
        let per_server =
            |out: &mut Exposition, name, kind, help, value: &dyn Fn(&ServerView) -> u64| {
                out.family(name, kind, help);
                for (pool, server) in &servers {
                    let labels = [("pool", *pool), ("server", server.name.as_str())];
                    out.sample(name, &labels, value(server));
                }
            };
        per_server(
            out,
            "herdsman_server_backend_connections_opened_total",
            "counter",
            "Connections opened to the server (idle ones reused are not counted).",
            &|server| server.traffic.connections_opened,
        );
        per_server(
            out,
            "herdsman_server_active_requests",
            "gauge",
            "Requests in flight on the server.",
            &|server| u64::from(server.active),
        );
        let name = "herdsman_server_latency_seconds";
        out.family(name, "gauge", "The server's time to a response head as balance = \"peak-ewma\" estimates it (a peak-sensitive moving average over the pool's latency_window); no sample before its first answer, nor in pools balanced otherwise.");
        for (pool, server) in &servers {
            if let Some(ms) = server.latency_ms {
                let labels = [("pool", *pool), ("server", server.name.as_str())];
                out.sample(name, &labels, ms / 1000.0);
            }
        }
        let name = "herdsman_server_weight";
        out.family(name, "gauge", "The server's configured weight, and the weight it takes new sessions with now (below it during slow start).");
        for (pool, server) in &servers {
            let labels = [("pool", *pool), ("server", server.name.as_str())];
            out.sample(
                name,
                &[labels[0], labels[1], ("kind", "configured")],
                server.weight,
            );
            out.sample(
                name,
                &[labels[0], labels[1], ("kind", "effective")],
                server.effective_weight,
            );
        }
        let name = "herdsman_server_state";
        out.family(
            name,
            "gauge",
            "The server's administrative state: 1 for the state it is in, 0 for the others.",
        );
        for (pool, server) in &servers {
            for state in ServerState::words() {
                let value = u8::from(server.state == state);
                out.sample(
                    name,
                    &[("pool", pool), ("server", &server.name), ("state", state)],
                    value,
                );
            }
        }
        let name = "herdsman_server_up";
        out.family(name, "gauge", "1 when neither active checks have marked the server down nor passive checks ejected it.");
        for (pool, server) in &servers {
            let up = u8::from(server.health == HealthView::Up);
            out.sample(name, &[("pool", pool), ("server", &server.name)], up);
        }
        let name = "herdsman_server_health";
        out.family(name, "gauge", "The server's health: 1 for up, down (active checks) or ejected (passive checks), 0 for the others.");
        for (pool, server) in &servers {
            let now = match server.health {
                HealthView::Up => "up",
                HealthView::Down { .. } => "down",
                HealthView::Ejected { .. } => "ejected",
            };
            for health in ["up", "down", "ejected"] {
                let value = u8::from(now == health);
                out.sample(
                    name,
                    &[("pool", pool), ("server", &server.name), ("health", health)],
                    value,
                );
            }
        }
    }

    fn write_process(&self, out: &mut Exposition) {
        if let Some(drops) = self.listen_queue {
            let name = "herdsman_listen_queue_overflows_total";
            out.family(name, "counter", "Connections the kernel lost because a listen queue was full (ListenOverflows, for the whole network namespace).");
            out.sample(name, &[], drops.overflows);
            let name = "herdsman_listen_queue_drops_total";
            out.family(name, "counter", "Connections the kernel dropped before accept for any reason (ListenDrops, for the whole network namespace).");
            out.sample(name, &[], drops.drops);
        }
        if let Some(cpu) = self.health_checker {
            let name = "herdsman_health_checker_cpu_seconds_total";
            out.family(name, "counter", "CPU time of the health checker thread (active checks of every pool, ejections), by mode.");
            out.sample(name, &[("mode", "user")], cpu.user_seconds);
            out.sample(name, &[("mode", "system")], cpu.system_seconds);
        }
        let name = "herdsman_config_reloads_total";
        out.family(
            name,
            "counter",
            "Reloads of the config file (SIGHUP or the admin API) that were applied.",
        );
        out.sample(name, &[], self.reloads);
        let name = "herdsman_config_reload_failures_total";
        out.family(name, "counter", "Reloads refused (the file did not validate, or a listener could not be bound); the running config stayed.");
        out.sample(name, &[], self.failed_reloads);
        let name = "herdsman_access_log_dropped_lines_total";
        out.family(
            name,
            "counter",
            "Access log lines dropped because the log writer fell behind the disk.",
        );
        out.sample(name, &[], self.access_log_dropped_lines);
        let name = "herdsman_buffer_reserved_bytes";
        out.family(
            name,
            "gauge",
            "Bytes buffered bodies have reserved of [buffering] memory_total and disk_total, over the process: taken up front (a request body of known length reserves all its file will need), and what decides whether the next body is buffered.",
        );
        out.sample(name, &[("where", "memory")], self.buffered_memory);
        out.sample(name, &[("where", "disk")], self.buffered_disk);
        let name = "herdsman_buffer_file_bytes";
        out.family(
            name,
            "gauge",
            "Bytes buffered bodies hold in temporary files now, over the process: written and not yet freed.",
        );
        out.sample(name, &[], self.buffered_file_bytes);
        let d = &self.descriptors;
        if let Some(open) = d.open_files {
            out.single("herdsman_open_files", "gauge", "Descriptors the process has open now (client and server connections, listeners, files, epolls).", open);
        }
        out.single(
            "herdsman_open_files_limit",
            "gauge",
            "The process's open-file limit (raised at start to the hard limit).",
            d.limit,
        );
        out.single(
            "herdsman_client_connections",
            "gauge",
            "Client connections open now, over every worker.",
            d.client_connections,
        );
        out.single("herdsman_client_connections_cap", "gauge", "The cap on client connections: [limits] max_client_connections, by default the descriptor budget (0: none).", d.client_cap);
        out.single(
            "herdsman_client_connections_refused_per_client_total",
            "counter",
            "Connections closed as accepted because their address had max_connections_per_client open.",
            d.refused_per_client,
        );
        let name = "herdsman_config_generation";
        out.family(
            name,
            "gauge",
            "The generation of the pools' snapshot: it grows with every change and reload.",
        );
        out.sample(name, &[], self.pools.generation);
    }
}

/// The requests of one pool or server, a sample per status class and one for `none`.
fn write_classes(
    out: &mut Exposition,
    name: &str,
    labels: &[(&str, &str)],
    traffic: &TrafficTotals,
) {
    let mut with_class = labels.to_vec();
    with_class.push(("class", ""));
    let last = with_class.len() - 1;
    for (class, count) in CLASSES.iter().zip(traffic.responses) {
        with_class[last].1 = class;
        out.sample(name, &with_class, count);
    }
    with_class[last].1 = "none";
    out.sample(name, &with_class, traffic.unanswered);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::traffic::{Ending, Traffic};
    use std::time::Duration;

    #[test]
    fn a_histogram_is_cumulative_and_ends_in_inf() {
        let traffic = Traffic::new(1);
        traffic.record(0, Ending::Status(200), Duration::from_micros(90));
        traffic.record(0, Ending::Status(200), Duration::from_millis(2));
        traffic.record(0, Ending::Unanswered, Duration::from_secs(99));
        let mut out = Exposition::default();
        out.histogram("x_seconds", &[("pool", "a")], &traffic.totals());
        let text = out.text;
        assert!(
            text.starts_with("x_seconds_bucket{pool=\"a\",le=\"0.0001\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("x_seconds_bucket{pool=\"a\",le=\"0.0025\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("x_seconds_bucket{pool=\"a\",le=\"60\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("x_seconds_bucket{pool=\"a\",le=\"+Inf\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("x_seconds_sum{pool=\"a\"} 99.00209\n"),
            "{text}"
        );
        assert!(text.ends_with("x_seconds_count{pool=\"a\"} 3\n"), "{text}");
    }
}
