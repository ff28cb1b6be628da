//! Helpers that more than one experiment needs, so that no experiment imports another:
//!
//! - `admin_api`   — GET on herdsman's admin API (a whole 200 with a body), and waiting until it answers
//! - `workers_api` — `/api/workers` read into per-worker counters, and the deltas between two reads
//! - `json`        — just enough JSON to read the admin API's answers
//! - `logfile`     — an access log's lines and bytes, as the file stands
//! - `loopback`    — a loopback address of its own per server (127.0.x.y), and back to its index
//! - `periodic`    — a thread that does one thing every period until told to finish
//! - `stats`       — percentiles by nearest rank
//! - `backend`     — the fast fixed-response HTTP/1.1 backend every proxy is put in front of (which
//!   can also answer late, or fail fast with 500s), and the long listen queue every server of the
//!   benchmarks binds with
//! - `thread_server` — a server on a thread of this program (its runtime, listener and accept
//!   loop), stopped when dropped
//! - `servers`     — the servers behind the proxies, the own backend or a real nginx (or nginx
//!   taking uploads of any size whole before it answers), started on ports of their own
//! - `grpc_server` — the own h2c gRPC server (unary calls echoed, calls counted) and one checked
//!   call to it
//! - `server_status` — what a server has accepted and answered, read from it (stub_status's shape)
//! - `proxies`     — the proxies' equivalent configurations (cleartext or TLS; one server, or
//!   several with a balancing method) and command lines
//! - `stack`       — herdsman in one intake mode plus the backend, started and stopped together
//! - `process`     — child processes that never outlive the benchmark; ports; readiness
//! - `procstat`    — CPU time and RSS of a process tree, CPU time of a process or of one of its
//!   threads by name, connections on a port and those in TIME_WAIT, from /proc
//! - `callgrind`   — a program's instructions counted by callgrind only around the work asked for
//! - `cpu`         — where the machine's CPU went during a run, process by process
//! - `exchange`    — one GET and its whole 2xx answer on a client connection, keep-alive or closing
//! - `load`        — closed-loop client load that classifies every failure: keep-alive or a new
//!   connection per request, idle closes retried or not, latencies kept or not
//! - `tls_client`  — the benchmarks' own TLS client (rustls), pinned to the benchmark's own
//!   certificates: one handshake and one request, and probing a TLS listener
//! - `certificates` — the TLS benchmarks' ECDSA and RSA certificates, made with openssl
//! - `h2load`      — batches of full TLS handshakes by h2load, one after another, counted
//! - `tls_metrics` — herdsman's own TLS figures per worker from /metrics: handshakes completed,
//!   failed by reason (timeouts), under way
//! - `holders`     — client processes (idle, slow) started, made ready and finished by lines
//! - `slow_holders` — holder processes of slow connections, both ends, and what each kind saw
//! - `silent`      — connections that never send a byte, opened again when closed: the hidden
//!   `silent-holder` and its handle
//! - `slow_steps`  — what slow connections do: connect with a small window, trickle, read slowly
//! - `tools`       — finding/installing haproxy, nginx, varnishd, wrk, h2load, openssl; building
//!   herdsman; the herdsman builds asked for as rows (`--herdsman-bin`); versions
//! - `wrk`         — running wrk and parsing its report, and its figures per request; uploads by a
//!   Lua script; a run paused and resumed with signals
//! - `settings`    — the full or the --short defaults, and the results file, as every benchmark resolves them
//! - `scratch`     — the temporary directory for configs and logs
//! - `environment` — versions, machine, load, the open-files limit, and the command that
//!   reproduces a run
//! - `progress`    — "run k of n, ~ETA left" after each run, paced against the plan
//! - `results`     — what every results file states about its run and the configurations it ran; a
//!   session's last step (a stop reported, nothing written over an earlier file when nothing was
//!   measured), and writing the results file with its plot
//! - `plot`        — line charts as PNG files for bench/results/

pub mod admin_api;
pub mod backend;
pub mod callgrind;
pub mod certificates;
pub mod cpu;
pub mod environment;
pub mod exchange;
pub mod grpc_server;
pub mod h2load;
pub mod holders;
pub mod json;
pub mod load;
pub mod logfile;
pub mod loopback;
pub mod markdown;
pub mod paired;
pub mod periodic;
pub mod plot;
pub mod process;
pub mod procstat;
pub mod progress;
pub mod proxies;
pub mod quiet;
pub mod results;
pub mod scratch;
pub mod server_status;
pub mod servers;
pub mod settings;
pub mod silent;
pub mod slow_holders;
pub mod slow_steps;
pub mod stack;
pub mod stats;
pub mod thread_server;
pub mod tls_client;
pub mod tls_metrics;
pub mod tools;
pub mod workers_api;
pub mod wrk;
