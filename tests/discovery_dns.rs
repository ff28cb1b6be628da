//! Discovery's DNS source (`herdsman::discovery::dns`) against a real DNS server: Knot DNS
//! (Debian's `knot`), started by the test on 127.0.0.1 with a zone whose records the test
//! changes while it runs (`knotc zone-set`), as an operator's DNS would change under a running
//! proxy. What the source makes of A, AAAA and SRV records, of a name that does not exist, and
//! of a DNS server that stopped answering.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{free_port, fresh_temp_dir};
use herdsman::discovery::dns::Dns;
use herdsman::discovery::membership::{Answer, Found};

/// Knot DNS serving the zone `app.internal` from a directory of its own.
struct Knot {
    dir: PathBuf,
    addr: SocketAddr,
    child: Option<Child>,
}

impl Knot {
    /// Starts knotd with the zone's `records` (lines of the zone file, after its SOA and NS).
    fn start(tag: &str, records: &str) -> Knot {
        let dir = fresh_temp_dir(&format!("knot-{tag}"));
        // Free for TCP a moment ago, and so almost surely for UDP: knotd takes both.
        let port = free_port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let d = dir.display();
        let conf = format!(
            "server:\n    listen: 127.0.0.1@{port}\n    rundir: {d}\n\
             database:\n    storage: {d}\n\
             log:\n  - target: stderr\n    any: warning\n\
             zone:\n  - domain: app.internal\n    file: {d}/app.internal.zone\n\
             \x20   zonefile-sync: -1\n    journal-content: none\n"
        );
        std::fs::write(dir.join("knot.conf"), conf).unwrap();
        let zone = format!(
            "$ORIGIN app.internal.\n$TTL 30\n@ IN SOA ns hostmaster 1 60 60 60 5\n@ IN NS ns\n\
             ns IN A 127.0.0.1\n{records}\n"
        );
        std::fs::write(dir.join("app.internal.zone"), zone).unwrap();
        let child = Command::new("knotd")
            .arg("-c")
            .arg(dir.join("knot.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("knotd runs (Debian's knot; scripts/test installs it)");
        let knot = Knot {
            dir,
            addr,
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !knot.control(&["zone-status", "app.internal"]) {
            assert!(Instant::now() < deadline, "knotd did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        knot
    }

    /// Runs `knotc` on this server; whether it succeeded.
    fn control(&self, args: &[&str]) -> bool {
        Command::new("knotc")
            .arg("-c")
            .arg(self.dir.join("knot.conf"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    /// Replaces the zone's records of `owner` and `kind` with `data` (one record each), at
    /// `ttl`, in one transaction.
    fn set(&self, owner: &str, ttl: u32, kind: &str, data: &[&str]) {
        assert!(self.control(&["zone-begin", "app.internal"]));
        self.control(&["zone-unset", "app.internal", owner, kind]);
        let ttl = ttl.to_string();
        for one in data {
            let mut args = vec!["zone-set", "app.internal", owner, &ttl, kind];
            args.extend(one.split(' '));
            assert!(self.control(&args), "zone-set {owner} {kind} {one}");
        }
        assert!(self.control(&["zone-commit", "app.internal"]));
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Knot {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn dns(knot: &Knot) -> Dns {
    Dns::new(&[knot.addr], Duration::from_millis(500), 1).unwrap()
}

/// The answer's servers as (identity, weight, backup), and its TTL in seconds.
fn servers(answer: Answer) -> (Vec<(String, u32, bool)>, u64) {
    let Answer::Servers { servers, ttl } = answer else {
        panic!("no servers: {answer:?}");
    };
    let mut listed: Vec<_> = servers
        .into_iter()
        .map(
            |Found {
                 identity,
                 weight,
                 backup,
                 ..
             }| (identity, weight, backup),
        )
        .collect();
    listed.sort();
    (listed, ttl.as_secs())
}

fn row(identity: &str, weight: u32, backup: bool) -> (String, u32, bool) {
    (identity.to_string(), weight, backup)
}

#[tokio::test]
async fn a_name_s_addresses_are_servers_on_the_port_with_the_least_ttl() {
    let knot = Knot::start(
        "addresses",
        "web 20 IN A 127.0.0.2\nweb 7 IN A 127.0.0.3\nweb 30 IN AAAA ::1\nv4only IN A 127.0.0.9",
    );
    let dns = dns(&knot);
    let (found, ttl) = servers(dns.addresses("web.app.internal", 8080).await);
    assert_eq!(
        found,
        [
            row("127.0.0.2:8080", 1, false),
            row("127.0.0.3:8080", 1, false),
            row("[::1]:8080", 1, false)
        ]
    );
    // Knot answers an RRset with one TTL (its first record's); the least of A and AAAA.
    assert!(ttl <= 20, "TTL {ttl}");
    // No AAAA for a name with an A is no failure.
    let (found, _) = servers(dns.addresses("v4only.app.internal", 80).await);
    assert_eq!(found, [row("127.0.0.9:80", 1, false)]);
    // A change is seen by the next question: nothing is cached.
    knot.set("web", 5, "A", &["127.0.0.4"]);
    let (found, ttl) = servers(dns.addresses("web.app.internal", 8080).await);
    assert_eq!(
        found,
        [row("127.0.0.4:8080", 1, false), row("[::1]:8080", 1, false)]
    );
    assert_eq!(ttl, 5);
}

#[tokio::test]
async fn srv_records_give_each_target_its_port_weight_and_priority() {
    let knot = Knot::start(
        "srv",
        "_http._tcp 10 IN SRV 10 20 8080 a\n_http._tcp 10 IN SRV 10 60 8081 b\n\
         _http._tcp 10 IN SRV 20 10 8082 c\na IN A 127.0.0.2\nb IN A 127.0.0.3\n\
         c IN A 127.0.0.4\nc IN A 127.0.0.5",
    );
    let dns = dns(&knot);
    let (found, ttl) = servers(dns.services("_http._tcp.app.internal").await);
    assert_eq!(
        found,
        [
            row("a.app.internal:8080", 20, false),
            row("b.app.internal:8081", 60, false),
            row("c.app.internal:8082@127.0.0.4", 10, true),
            row("c.app.internal:8082@127.0.0.5", 10, true),
        ]
    );
    assert_eq!(ttl, 10);
}

#[tokio::test]
async fn a_missing_name_is_empty_and_a_silent_server_is_a_failure() {
    let mut knot = Knot::start("negative", "txtonly IN TXT \"no address\"");
    let dns = dns(&knot);
    let nxdomain = dns.addresses("nothing.app.internal", 80).await;
    assert!(matches!(nxdomain, Answer::Empty { .. }), "{nxdomain:?}");
    let nodata = dns.addresses("txtonly.app.internal", 80).await;
    assert!(matches!(nodata, Answer::Empty { .. }), "{nodata:?}");
    let no_srv = dns.services("_http._tcp.app.internal").await;
    assert!(matches!(no_srv, Answer::Empty { .. }), "{no_srv:?}");
    // The DNS server stops: a failure, within the timeout, not an empty answer.
    knot.stop();
    let asked = Instant::now();
    let silent = dns.addresses("ns.app.internal", 80).await;
    assert!(matches!(silent, Answer::Failed { .. }), "{silent:?}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
}
