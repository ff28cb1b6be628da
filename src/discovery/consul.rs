//! Consul as a discovery source: a service's passing instances from the agent's health API
//! (`/v1/health/service/NAME?passing`), asked with blocking queries — the agent holds each
//! question until the answer changes or `wait` passes, and says where its answer stands in
//! `X-Consul-Index` — so a change arrives within moments and an unchanged fleet costs one
//! question per `wait`. The index rules are Consul's own: an index that goes backwards (the
//! agent restarted, a snapshot was restored) starts the queries again from 0, and one that
//! moved with no change in the answer is no change (the membership compares sets). A question
//! is HTTP/1.0 with `Connection: close`, so the answer ends with the connection and is never
//! chunked; a token, when configured, goes in `X-Consul-Token`.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::membership::{Answer, Found};
use crate::upstream::registry::MAX_WEIGHT;

/// An answer's largest: a service of thousands of instances fits.
const MOST_ANSWER: usize = 16 << 20;

/// How a service is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// The agent's HTTP address.
    pub agent: SocketAddr,
    pub name: String,
    /// Only instances with this tag.
    pub tag: Option<String>,
    /// Another datacenter than the agent's.
    pub datacenter: Option<String>,
    pub token: Option<String>,
}

/// One service followed by blocking queries.
pub struct Consul {
    service: Service,
    /// Where the last answer stood (`X-Consul-Index`); 0 before the first.
    index: u64,
}

/// One entry of the health API's answer (the fields herdsman reads).
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Entry {
    node: Node,
    service: Instance,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Node {
    node: String,
    address: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Instance {
    #[serde(rename = "ID")]
    id: String,
    #[serde(default)]
    address: String,
    port: u16,
    #[serde(default)]
    weights: Option<Weights>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Weights {
    passing: u32,
}

impl Consul {
    pub fn new(service: Service) -> Consul {
        Consul { service, index: 0 }
    }

    /// Where the last answer stood.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// One blocking query: the service's passing instances once they differ from the last
    /// answer's index, or after `wait` (the agent adds up to a sixteenth); given up `timeout`
    /// after the wait. An instance's identity is its service ID at its node (`web-1@node1`: no
    /// `/`, so that it can name a server in the admin API's paths); its address the service's,
    /// else its node's (names are not looked up: such an instance is left out).
    pub async fn ask(&mut self, wait: Duration, timeout: Duration) -> Answer {
        let request = self.request(wait);
        let limit = wait + wait / 16 + timeout;
        let exchange = async {
            let mut stream = TcpStream::connect(self.service.agent).await?;
            stream.write_all(request.as_bytes()).await?;
            let mut answer = Vec::new();
            (&mut stream)
                .take(MOST_ANSWER as u64 + 1)
                .read_to_end(&mut answer)
                .await?;
            Ok::<_, std::io::Error>(answer)
        };
        let answer = match tokio::time::timeout(limit, exchange).await {
            Err(_) => return self.failed(format!("no answer within {limit:?}")),
            Ok(Err(error)) => return self.failed(format!("{error}")),
            Ok(Ok(answer)) if answer.len() > MOST_ANSWER => {
                return self.failed(format!("an answer over {MOST_ANSWER} bytes"))
            }
            Ok(Ok(answer)) => answer,
        };
        match self.read(&answer) {
            Ok(answer) => answer,
            Err(reason) => self.failed(reason),
        }
    }

    fn request(&self, wait: Duration) -> String {
        let service = &self.service;
        let mut target = format!(
            "/v1/health/service/{}?passing=1&index={}&wait={}s",
            encode(&service.name),
            self.index,
            wait.as_secs().max(1)
        );
        if let Some(tag) = &service.tag {
            target.push_str(&format!("&tag={}", encode(tag)));
        }
        if let Some(datacenter) = &service.datacenter {
            target.push_str(&format!("&dc={}", encode(datacenter)));
        }
        let token = service
            .token
            .as_ref()
            .map(|token| format!("X-Consul-Token: {token}\r\n"))
            .unwrap_or_default();
        format!(
            "GET {target} HTTP/1.0\r\nHost: {}\r\nAccept: application/json\r\n{token}\
             User-Agent: herdsman-discovery\r\nConnection: close\r\n\r\n",
            service.agent
        )
    }

    /// A failure, named by its service; the index stays where the last answer left it.
    fn failed(&self, reason: String) -> Answer {
        Answer::Failed {
            reason: format!("consul {}: {reason}", self.service.name),
        }
    }

    /// The answer's servers, and the index it stood at.
    fn read(&mut self, answer: &[u8]) -> Result<Answer, String> {
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut head = httparse::Response::new(&mut fields);
        let body_at = match head.parse(answer) {
            Ok(httparse::Status::Complete(at)) => at,
            _ => return Err("not an HTTP answer".into()),
        };
        let status = head.code.unwrap_or(0);
        if status != 200 {
            let body = String::from_utf8_lossy(&answer[body_at..]);
            return Err(format!("answered {status}: {}", body.trim()));
        }
        let index = head
            .headers
            .iter()
            .find(|field| field.name.eq_ignore_ascii_case("x-consul-index"))
            .and_then(|field| {
                std::str::from_utf8(field.value)
                    .ok()?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .ok_or("no X-Consul-Index in the answer")?;
        let entries: Vec<Entry> = serde_json::from_slice(&answer[body_at..])
            .map_err(|error| format!("not the health API's JSON: {error}"))?;
        // Consul's rule: an index that went backwards starts again from 0; one of 0 is taken as
        // 1, so that the next question blocks.
        self.index = match index < self.index {
            true => 0,
            false => index.max(1),
        };
        let servers: Vec<Found> = entries
            .into_iter()
            .filter_map(|entry| {
                let address = match entry.service.address.is_empty() {
                    true => &entry.node.address,
                    false => &entry.service.address,
                };
                let ip: IpAddr = address.parse().ok()?;
                let weight = entry.service.weights.map_or(1, |w| w.passing);
                Some(Found {
                    identity: format!("{}@{}", entry.service.id, entry.node.node),
                    addr: SocketAddr::new(ip, entry.service.port),
                    weight: weight.clamp(1, MAX_WEIGHT),
                    backup: false,
                })
            })
            .collect();
        Ok(match servers.is_empty() {
            true => Answer::Empty { ttl: None },
            // No TTL: the blocking query paces the questions (the membership's floor bounds an
            // agent that answers at once).
            false => Answer::Servers {
                servers,
                ttl: Duration::ZERO,
            },
        })
    }
}

/// `text` percent-encoded for a query string (all but unreserved characters).
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consul() -> Consul {
        Consul::new(Service {
            agent: "127.0.0.1:8500".parse().unwrap(),
            name: "web api".into(),
            tag: Some("v2".into()),
            datacenter: None,
            token: Some("secret".into()),
        })
    }

    fn answer(index: &str, body: &str) -> Vec<u8> {
        format!("HTTP/1.1 200 OK\r\nX-Consul-Index: {index}\r\nContent-Type: application/json\r\n\r\n{body}")
            .into_bytes()
    }

    const TWO: &str = r#"[
      {"Node":{"Node":"n1","Address":"10.0.0.1"},"Service":{"ID":"web-1","Service":"web","Address":"","Port":8080,"Weights":{"Passing":3,"Warning":1}},"Checks":[]},
      {"Node":{"Node":"n2","Address":"10.0.0.2"},"Service":{"ID":"web-2","Service":"web","Address":"10.0.1.2","Port":8081},"Checks":[]},
      {"Node":{"Node":"n3","Address":"node3.internal"},"Service":{"ID":"web-3","Service":"web","Address":"","Port":8082},"Checks":[]}
    ]"#;

    #[test]
    fn the_question_is_a_blocking_query_from_the_last_index() {
        let mut consul = consul();
        let request = consul.request(Duration::from_secs(300));
        assert!(request.starts_with(
            "GET /v1/health/service/web%20api?passing=1&index=0&wait=300s&tag=v2 HTTP/1.0\r\n"
        ));
        assert!(request.contains("X-Consul-Token: secret\r\n"));
        consul.read(&answer("42", "[]")).unwrap();
        assert!(consul
            .request(Duration::from_secs(5))
            .contains("&index=42&wait=5s"));
    }

    #[test]
    fn instances_become_servers_by_node_and_service_id() {
        let mut consul = consul();
        let Answer::Servers { servers, .. } = consul.read(&answer("7", TWO)).unwrap() else {
            panic!("no servers");
        };
        let listed: Vec<(String, String, u32)> = servers
            .iter()
            .map(|s| (s.identity.clone(), s.addr.to_string(), s.weight))
            .collect();
        // The node's address where the service has none; a host name is not looked up.
        assert_eq!(
            listed,
            [
                ("web-1@n1".to_string(), "10.0.0.1:8080".to_string(), 3),
                ("web-2@n2".to_string(), "10.0.1.2:8081".to_string(), 1),
            ]
        );
        assert_eq!(consul.index(), 7);
    }

    #[test]
    fn an_index_that_goes_back_starts_again_and_errors_say_why() {
        let mut consul = consul();
        consul.read(&answer("100", "[]")).unwrap();
        assert_eq!(
            consul.read(&answer("5", "[]")).unwrap(),
            Answer::Empty { ttl: None }
        );
        assert_eq!(consul.index(), 0);
        consul.read(&answer("0", "[]")).unwrap();
        assert_eq!(consul.index(), 1);
        let refused = b"HTTP/1.1 403 Forbidden\r\n\r\nACL not found".to_vec();
        assert_eq!(
            consul.read(&refused).unwrap_err(),
            "answered 403: ACL not found"
        );
        let no_index = b"HTTP/1.1 200 OK\r\n\r\n[]".to_vec();
        assert!(consul
            .read(&no_index)
            .unwrap_err()
            .contains("X-Consul-Index"));
        assert!(consul.read(&answer("9", "{")).unwrap_err().contains("JSON"));
    }
}
