//! The Redis servers of the `redis` part: one on loopback, and one 1 ms away (a round trip) —
//! in a network namespace of its own, reached over a veth pair whose two ends each delay what
//! they send by 500 µs (`tc … netem`). Where the kernel has no netem (a container's kernel
//! without `sch_netem`), the far Redis is on loopback behind a delay line of this program that
//! holds every byte 500 µs each way, and the results say so. Everything made here is removed
//! when dropped: the servers stopped, the veth pair and the namespace deleted.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::process::{free_port, run_with_timeout, Supervised};

/// What each side of the far link adds to every packet it sends: a round trip of 1 ms.
pub const ONE_WAY: Duration = Duration::from_micros(500);

/// A Redis server started by the benchmark; stopped when dropped.
pub struct Redis {
    pub addr: SocketAddr,
    _process: Supervised,
}

/// Starts `redis-server` (`program`) without persistence on `addr`, run through `wrapper`
/// (`ip netns exec NAME`) when given, logging into `dir`; waits until it answers PING.
fn start_redis(
    program: &Path,
    addr: SocketAddr,
    wrapper: &[&str],
    dir: &Path,
) -> anyhow::Result<Redis> {
    let mut command = match wrapper.split_first() {
        Some((first, rest)) => {
            let mut command = Command::new(first);
            command.args(rest).arg(program);
            command
        }
        None => Command::new(program),
    };
    command
        .args([
            "--port",
            &addr.port().to_string(),
            "--bind",
            &addr.ip().to_string(),
        ])
        .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"]);
    let log = dir.join(format!("redis-{}.log", addr.port()));
    let mut process = Supervised::spawn("redis-server", command, &log)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while ping(addr).is_err() {
        if let Some(reason) = process.exit_reason() {
            bail!(
                "redis-server on {addr}: {reason}; its log: {}",
                process.log_tail(5)
            );
        }
        if Instant::now() > deadline {
            bail!("redis-server on {addr} did not answer PING within 10 s");
        }
        thread::sleep(Duration::from_millis(50));
    }
    Ok(Redis {
        addr,
        _process: process,
    })
}

/// One PING and its PONG on a new connection: the time the PONG took.
fn ping(addr: SocketAddr) -> anyhow::Result<Duration> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut reply = [0u8; 7];
    // The first exchange opens the connection's way; the second is the one timed.
    stream.write_all(b"PING\r\n")?;
    stream.read_exact(&mut reply)?;
    let sent = Instant::now();
    stream.write_all(b"PING\r\n")?;
    stream.read_exact(&mut reply)?;
    let took = sent.elapsed();
    if &reply != b"+PONG\r\n" {
        bail!(
            "{addr} answered PING with {:?}",
            String::from_utf8_lossy(&reply)
        );
    }
    Ok(took)
}

/// The median round trip of 21 PINGs to `addr`.
pub fn round_trip(addr: SocketAddr) -> anyhow::Result<Duration> {
    let mut times = (0..21)
        .map(|_| ping(addr))
        .collect::<anyhow::Result<Vec<_>>>()?;
    times.sort();
    Ok(times[times.len() / 2])
}

/// Redis on 127.0.0.1.
pub fn start_near(program: &Path, dir: &Path) -> anyhow::Result<Redis> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
    start_redis(program, addr, &[], dir)
}

/// Redis 1 ms away, and how it is made so.
pub struct FarRedis {
    /// Declared first: stopped before its namespace goes.
    _redis: Redis,
    /// "a network namespace, netem 500 µs each way" or the delay line's note.
    pub how: String,
    /// Where herdsman reaches it (the delay line's address when there is one).
    pub addr: SocketAddr,
    /// What makes it far, removed when dropped: one or the other.
    _namespace: Option<Namespace>,
    _delay_line: Option<DelayLine>,
}

/// Redis `ONE_WAY` × 2 away: in a namespace with netem, or behind the delay line.
pub fn start_far(program: &Path, dir: &Path) -> anyhow::Result<FarRedis> {
    match Namespace::create() {
        Ok(namespace) => {
            let addr = SocketAddr::from((namespace.far, free_port()?));
            let wrapper = ["ip", "netns", "exec", namespace.name.as_str()];
            let redis = start_redis(program, addr, &wrapper, dir)?;
            Ok(FarRedis {
                _redis: redis,
                how: format!(
                    "in network namespace {} over a veth pair, `tc qdisc … netem delay 500us` \
                     on each end",
                    namespace.name
                ),
                addr,
                _namespace: Some(namespace),
                _delay_line: None,
            })
        }
        Err(e) => {
            let note = format!(
                "no netem here ({e:#}): Redis on loopback behind this program's delay line, \
                 which holds every byte 500 µs each way"
            );
            println!("note: {note}");
            let redis = start_near(program, dir)?;
            let line = DelayLine::start(redis.addr, ONE_WAY)?;
            let addr = line.addr;
            Ok(FarRedis {
                _redis: redis,
                how: note,
                addr,
                _namespace: None,
                _delay_line: Some(line),
            })
        }
    }
}

/// A network namespace joined to this one by a veth pair, both ends delaying by `ONE_WAY`.
struct Namespace {
    name: String,
    /// The veth end on this side (deleting it deletes the pair).
    near_end: String,
    far: Ipv4Addr,
}

impl Namespace {
    fn create() -> anyhow::Result<Namespace> {
        let id = std::process::id();
        let (a, b) = (((id >> 8) % 250) as u8 + 1, ((id % 64) * 4) as u8);
        let namespace = Namespace {
            name: format!("herdsman-rules-{id}"),
            near_end: format!("hbr{}", id % 1_000_000),
            far: Ipv4Addr::new(10, 213, a, b + 2),
        };
        let far_end = format!("{}f", namespace.near_end);
        let (near_cidr, far_cidr) = (
            format!("10.213.{a}.{}/30", b + 1),
            format!("{}/30", namespace.far),
        );
        let delay = format!("{}us", ONE_WAY.as_micros());
        let name = namespace.name.as_str();
        let near = namespace.near_end.as_str();
        ip(&["netns", "add", name])?;
        // From here on, dropping `namespace` removes what was made.
        let steps: [&[&str]; 8] = [
            &[
                "ip", "link", "add", near, "type", "veth", "peer", "name", &far_end,
            ],
            &["ip", "link", "set", &far_end, "netns", name],
            &["ip", "addr", "add", &near_cidr, "dev", near],
            &["ip", "link", "set", near, "up"],
            &["ip", "-n", name, "addr", "add", &far_cidr, "dev", &far_end],
            &["ip", "-n", name, "link", "set", &far_end, "up"],
            &[
                "tc", "qdisc", "add", "dev", near, "root", "netem", "delay", &delay,
            ],
            &[
                "ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", &far_end, "root",
                "netem", "delay", &delay,
            ],
        ];
        for step in steps {
            run(step)?;
        }
        run(&["ip", "-n", name, "link", "set", "lo", "up"])?;
        Ok(namespace)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = run(&["ip", "link", "del", &self.near_end]);
        let _ = run(&["ip", "netns", "del", &self.name]);
    }
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    run(&[&["ip"], args].concat())
}

/// Runs `command` (program first), failing with what it printed unless it succeeds.
fn run(command: &[&str]) -> anyhow::Result<()> {
    let (program, args) = command.split_first().context("an empty command")?;
    let mut line = Command::new(program);
    line.args(args);
    let output = run_with_timeout(line, Duration::from_secs(10))?;
    if !output.status.success() {
        bail!(
            "`{}` failed: {}",
            command.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// A relay on 127.0.0.1 to a server that delivers every byte `delay` after it came, each way
/// (several pieces in flight at once, as on a link: a delay, not a bandwidth limit).
struct DelayLine {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl DelayLine {
    fn start(server: SocketAddr, delay: Duration) -> anyhow::Result<DelayLine> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        thread::Builder::new()
            .name("delay-line".into())
            .spawn(move || {
                for client in listener.incoming() {
                    if stopping.load(Ordering::Relaxed) {
                        return;
                    }
                    let Ok(client) = client else { continue };
                    let Ok(server) = TcpStream::connect(server) else {
                        continue;
                    };
                    let _ = (client.set_nodelay(true), server.set_nodelay(true));
                    if let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone())
                    {
                        delay_one_way(client_in, server, delay);
                        delay_one_way(server_in, client, delay);
                    }
                }
            })?;
        Ok(DelayLine { addr, stop })
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop, which sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// What `from` sends, written to `to` `delay` after it came: a reader thread stamps each piece,
/// a writer thread holds it until its time. Both end when either side closes.
fn delay_one_way(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (pieces, due) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::spawn(move || {
        let mut buffer = [0u8; 16 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buffer) {
            if pieces
                .send((Instant::now() + delay, buffer[..n].to_vec()))
                .is_err()
            {
                return;
            }
        }
    });
    thread::spawn(move || {
        for (at, piece) in due {
            if let Some(wait) = at.checked_duration_since(Instant::now()) {
                thread::sleep(wait);
            }
            if to.write_all(&piece).is_err() {
                return;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}
