//! Discovery's Consul source (`herdsman::discovery::consul`) against a stand-in agent over real
//! sockets. Consul itself is not packaged for Debian (nor reachable here), so the stand-in keeps
//! the contract of its health API's blocking queries: `/v1/health/service/NAME?passing` answers
//! at once when the caller's `index` is behind its own, and otherwise holds the question until
//! the service changes or `wait` passes, its index in `X-Consul-Index`.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use herdsman::discovery::consul::{Consul, Service};
use herdsman::discovery::membership::Answer;

/// The stand-in's catalogue: its index and the passing instances (node, ID, address, port).
#[derive(Default)]
struct Catalogue {
    index: u64,
    instances: Vec<(String, String, String, u16)>,
}

struct Agent {
    addr: SocketAddr,
    catalogue: Arc<(Mutex<Catalogue>, Condvar)>,
    /// The questions it was asked, as request lines.
    asked: Arc<Mutex<Vec<String>>>,
}

impl Agent {
    fn start(index: u64, instances: &[(&str, &str, &str, u16)]) -> Agent {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let agent = Agent {
            addr: listener.local_addr().unwrap(),
            catalogue: Arc::default(),
            asked: Arc::default(),
        };
        agent.change(index, instances);
        let (catalogue, asked) = (Arc::clone(&agent.catalogue), Arc::clone(&agent.asked));
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (catalogue, asked) = (Arc::clone(&catalogue), Arc::clone(&asked));
                thread::spawn(move || answer(stream, &catalogue, &asked));
            }
        });
        agent
    }

    /// Sets the catalogue, at `index`, and wakes the questions held.
    fn change(&self, index: u64, instances: &[(&str, &str, &str, u16)]) {
        let (catalogue, changed) = &*self.catalogue;
        let mut catalogue = catalogue.lock().unwrap();
        catalogue.index = index;
        catalogue.instances = instances
            .iter()
            .map(|(node, id, address, port)| {
                (node.to_string(), id.to_string(), address.to_string(), *port)
            })
            .collect();
        changed.notify_all();
    }

    fn service(&self) -> Service {
        Service {
            agent: self.addr,
            name: "web".into(),
            tag: None,
            datacenter: None,
            token: Some("t0ken".into()),
        }
    }
}

/// One question, answered as Consul's agent would.
fn answer(stream: TcpStream, catalogue: &(Mutex<Catalogue>, Condvar), asked: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let mut token = false;
    loop {
        let mut field = String::new();
        if reader.read_line(&mut field).unwrap() <= 2 {
            break;
        }
        token |= field == "X-Consul-Token: t0ken\r\n";
    }
    asked.lock().unwrap().push(line.trim_end().to_string());
    let query = |key: &str| {
        line.split(['?', '&', ' '])
            .find_map(|pair| pair.strip_prefix(&format!("{key}=")))
            .map(str::to_string)
    };
    let mut out = stream;
    if !token {
        let _ = out.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\nACL not found");
        return;
    }
    let index: u64 = query("index").unwrap().parse().unwrap();
    let wait = Duration::from_secs(
        query("wait")
            .unwrap()
            .trim_end_matches('s')
            .parse()
            .unwrap(),
    );
    let (catalogue, changed) = catalogue;
    let held = catalogue.lock().unwrap();
    let (held, _) = changed
        .wait_timeout_while(held, wait, |catalogue| {
            catalogue.index <= index && index != 0
        })
        .unwrap();
    let entries: Vec<String> = held
        .instances
        .iter()
        .map(|(node, id, address, port)| {
            format!(
                r#"{{"Node":{{"Node":"{node}","Address":"10.9.9.9"}},"Service":{{"ID":"{id}","Service":"web","Address":"{address}","Port":{port},"Weights":{{"Passing":1,"Warning":1}}}},"Checks":[]}}"#
            )
        })
        .collect();
    let body = format!("[{}]", entries.join(","));
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Consul-Index: {}\r\n\r\n",
        held.index
    );
    drop(held);
    let _ = out.write_all(head.as_bytes());
    let _ = out.write_all(body.as_bytes());
}

fn identities(answer: &Answer) -> Vec<String> {
    match answer {
        Answer::Servers { servers, .. } => servers
            .iter()
            .map(|server| format!("{} {}", server.identity, server.addr))
            .collect(),
        other => panic!("no servers: {other:?}"),
    }
}

#[tokio::test]
async fn a_change_arrives_while_the_question_is_held_and_none_costs_one_question_a_wait() {
    let agent = Agent::start(10, &[("n1", "web-1", "127.0.0.2", 8080)]);
    let mut consul = Consul::new(agent.service());
    let (wait, timeout) = (Duration::from_secs(5), Duration::from_secs(2));
    // The first question is answered at once, with where the catalogue stands.
    let first = consul.ask(wait, timeout).await;
    assert_eq!(identities(&first), ["web-1@n1 127.0.0.2:8080"]);
    assert_eq!(consul.index(), 10);
    // The next is held until the service changes, 300 ms later.
    let changer = {
        let catalogue = Arc::clone(&agent.catalogue);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(300));
            let (catalogue, changed) = &*catalogue;
            let mut catalogue = catalogue.lock().unwrap();
            catalogue.index = 11;
            catalogue
                .instances
                .push(("n2".into(), "web-2".into(), "127.0.0.3".into(), 8081));
            changed.notify_all();
        })
    };
    let asked = Instant::now();
    let second = consul.ask(wait, timeout).await;
    let took = asked.elapsed();
    changer.join().unwrap();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert_eq!(
        identities(&second),
        ["web-1@n1 127.0.0.2:8080", "web-2@n2 127.0.0.3:8081"]
    );
    // Nothing changes: the question comes back after the wait, the same set.
    let asked = Instant::now();
    let third = consul.ask(Duration::from_secs(1), timeout).await;
    assert!(
        asked.elapsed() >= Duration::from_millis(900),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(identities(&third), identities(&second));
    let questions = agent.asked.lock().unwrap().clone();
    assert_eq!(questions.len(), 3, "{questions:?}");
    assert!(
        questions[1].contains("passing=1&index=10&wait=5s"),
        "{questions:?}"
    );
}

#[tokio::test]
async fn an_agent_that_went_back_is_asked_from_0_and_one_that_is_gone_is_a_failure() {
    let agent = Agent::start(500, &[("n1", "web-1", "127.0.0.2", 8080)]);
    let mut consul = Consul::new(agent.service());
    let (wait, timeout) = (Duration::from_secs(1), Duration::from_secs(1));
    consul.ask(wait, timeout).await;
    assert_eq!(consul.index(), 500);
    // Restored from a snapshot: its index is behind the one the question carries.
    agent.change(20, &[("n1", "web-1", "127.0.0.2", 8080)]);
    consul.ask(wait, timeout).await;
    assert_eq!(
        consul.index(),
        0,
        "an index that went backwards starts again"
    );
    // No instance passing: empty, for the membership to confirm.
    agent.change(21, &[]);
    assert_eq!(consul.ask(wait, timeout).await, Answer::Empty { ttl: None });
    // A wrong token is a failure that says why.
    let mut wrong = Consul::new(Service {
        token: None,
        ..agent.service()
    });
    let refused = wrong.ask(wait, timeout).await;
    assert!(
        matches!(&refused, Answer::Failed { reason } if reason.contains("403")),
        "{refused:?}"
    );
    // Nothing listens: a failure, at once.
    let gone = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut nobody = Consul::new(Service {
        agent: gone,
        ..agent.service()
    });
    let asked = Instant::now();
    assert!(matches!(
        nobody.ask(wait, timeout).await,
        Answer::Failed { .. }
    ));
    assert!(asked.elapsed() < Duration::from_secs(1));
}
