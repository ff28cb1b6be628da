//! herdsman's own count of the handshakes it completed, full and resumed, summed over its workers
//! from `/metrics` on its admin API: the server's side of what the clients counted. HAProxy and
//! nginx keep no such count without more configuration (a stats socket, an access log with
//! `$ssl_session_reused`), so for them the client's count stands alone.

use anyhow::Context;

use crate::kit::admin_api;

/// Handshakes completed so far, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandshakeCounts {
    pub full: u64,
    pub resumed: u64,
}

impl HandshakeCounts {
    /// What was counted between `earlier` and this reading.
    pub fn since(self, earlier: HandshakeCounts) -> HandshakeCounts {
        HandshakeCounts {
            full: self.full.saturating_sub(earlier.full),
            resumed: self.resumed.saturating_sub(earlier.resumed),
        }
    }
}

/// The counts herdsman's admin API on 127.0.0.1:`admin_port` reports now.
pub fn read(admin_port: u16) -> anyhow::Result<HandshakeCounts> {
    let body = admin_api::get(admin_port, "/metrics")?;
    parse(&String::from_utf8_lossy(&body)).context("herdsman's /metrics has no handshake counts")
}

/// Sums `herdsman_worker_tls_handshakes_total{worker="…",kind="full|resumed"} N` over workers.
fn parse(metrics: &str) -> Option<HandshakeCounts> {
    let mut counts = HandshakeCounts::default();
    let mut seen = false;
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("herdsman_worker_tls_handshakes_total{") else {
            continue;
        };
        let (labels, value) = rest.split_once('}')?;
        let value = value.trim().parse::<f64>().ok()? as u64;
        if labels.contains("kind=\"full\"") {
            counts.full += value;
        } else if labels.contains("kind=\"resumed\"") {
            counts.resumed += value;
        }
        seen = true;
    }
    seen.then_some(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counts_are_summed_over_workers() {
        let metrics = "\
# TYPE herdsman_worker_tls_handshakes_total counter
herdsman_worker_tls_handshakes_total{worker=\"0\",kind=\"full\"} 21
herdsman_worker_tls_handshakes_total{worker=\"0\",kind=\"resumed\"} 1980
herdsman_worker_tls_handshakes_total{worker=\"1\",kind=\"full\"} 4
herdsman_worker_tls_handshakes_total{worker=\"1\",kind=\"resumed\"} 20
herdsman_worker_tls_handshakes_in_progress{worker=\"0\"} 0
";
        let counts = parse(metrics).unwrap();
        assert_eq!(
            counts,
            HandshakeCounts {
                full: 25,
                resumed: 2000
            }
        );
        assert_eq!(
            counts.since(HandshakeCounts {
                full: 5,
                resumed: 1000
            }),
            HandshakeCounts {
                full: 20,
                resumed: 1000
            }
        );
        assert_eq!(parse("herdsman_up 1\n"), None);
    }
}
