//! What `ctl` and `top` read of `GET /api/pools`, and the text tables they print: `ctl servers`
//! and the column layout both share.

use std::fmt::Write as _;

use serde::Deserialize;

use herdsman::rate_limit::LimitView;
use herdsman::stats::cache::PoolCacheView;
use herdsman::stats::traffic::TrafficTotals;

/// `GET /api/pools`, as far as `ctl` and `top` read it (unknown fields ignored, so that a newer
/// herdsman still answers an older `ctl`; missing ones default, so that an older one answers a
/// newer `ctl`).
#[derive(Debug, Deserialize)]
pub struct PoolsReply {
    /// The published snapshot's: one more with each change and reload (absent from herdsman
    /// before reloads: 0).
    #[serde(default)]
    pub generation: u64,
    pub pools: Vec<PoolReply>,
}

#[derive(Debug, Deserialize)]
pub struct PoolReply {
    pub name: String,
    /// `[pool.tls]` (absent from herdsman before TLS to servers, and null for a cleartext pool:
    /// none).
    #[serde(default)]
    pub tls: Option<PoolTlsReply>,
    /// A caching pool's cache figures (absent from herdsman before them, and null for a pool
    /// that does not cache: none).
    #[serde(default)]
    pub cache: Option<PoolCacheView>,
    pub servers: Vec<ServerReply>,
}

/// What `ctl` reads of a pool's `tls`.
#[derive(Debug, Deserialize)]
pub struct PoolTlsReply {
    pub verify: bool,
}

#[derive(Debug, Deserialize)]
pub struct ServerReply {
    pub name: String,
    pub addr: String,
    pub state: String,
    /// "up", "down" or "ejected" (absent from herdsman before health checks: up).
    #[serde(default = "up")]
    pub health: String,
    pub weight: u32,
    /// In a TLS pool, the name it is asked for and verified against.
    #[serde(default)]
    pub tls_name: Option<String>,
    #[serde(default)]
    pub active: u64,
    #[serde(default)]
    pub requests: u64,
    /// Peak-ewma's estimate of its time to a response head, in milliseconds (null before its
    /// first answer, in pools balanced otherwise, and absent from herdsman before peak-ewma:
    /// none).
    #[serde(default)]
    pub latency_ms: Option<f64>,
    /// Its requests since it joined, by ending and duration (absent from herdsman before
    /// traffic counters: none).
    #[serde(default)]
    pub traffic: TrafficTotals,
}

fn up() -> String {
    "up".to_string()
}

/// The table `ctl servers` prints: one row per server, columns aligned, numbers to the right,
/// the latency estimate of a peak-ewma pool's servers last (`-` elsewhere, and before a
/// server's first answer). A pool without servers gets a row saying so. When some pool speaks TLS to its servers, a TLS
/// column after ADDR names what each server is asked for and verified against (`unverified`
/// after it in a pool with `verify = false`; `-` for a cleartext server).
pub fn servers_table(reply: &PoolsReply) -> String {
    let with_tls = reply.pools.iter().any(|pool| pool.tls.is_some());
    let mut headings = vec!["POOL", "SERVER", "ADDR"];
    let mut numeric = vec![false; 3];
    if with_tls {
        headings.push("TLS");
        numeric.push(false);
    }
    headings.extend(["STATE", "HEALTH", "WEIGHT", "ACTIVE", "REQUESTS", "LATMS"]);
    numeric.extend([false, false, true, true, true, true]);
    let mut rows: Vec<Vec<String>> = vec![headings.into_iter().map(str::to_string).collect()];
    for pool in &reply.pools {
        if pool.servers.is_empty() {
            rows.push(vec![pool.name.clone(), "(no servers)".to_string()]);
        }
        for server in &pool.servers {
            let mut row = vec![pool.name.clone(), server.name.clone(), server.addr.clone()];
            if with_tls {
                row.push(match (&pool.tls, &server.tls_name) {
                    (Some(tls), Some(name)) if !tls.verify => format!("{name} unverified"),
                    (Some(_), Some(name)) => name.clone(),
                    _ => "-".to_string(),
                });
            }
            row.extend([
                server.state.clone(),
                server.health.clone(),
                server.weight.to_string(),
                server.active.to_string(),
                server.requests.to_string(),
                latency_ms(server.latency_ms),
            ]);
            rows.push(row);
        }
    }
    aligned_columns(&rows, &numeric)
}

/// A server's latency estimate as `ctl servers` and `top` show it (their LATMS): milliseconds
/// with two decimals, `-` without one.
pub fn latency_ms(latency_ms: Option<f64>) -> String {
    latency_ms.map_or_else(|| "-".to_string(), |ms| format!("{ms:.2}"))
}

/// `GET /api/certificates`, as `ctl certs` reads it.
#[derive(Debug, Deserialize)]
pub struct CertificatesReply {
    pub certificates: Vec<CertificateReply>,
}

#[derive(Debug, Deserialize)]
pub struct CertificateReply {
    pub listener: String,
    pub names: Vec<String>,
    pub issuer: String,
    pub not_after: String,
    pub expires_in_seconds: i64,
    #[serde(default)]
    pub acme: bool,
    /// For an ACME certificate, when herdsman plans to renew it.
    #[serde(default)]
    pub renews_at: Option<String>,
}

/// `ctl certs`: a row per certificate, its expiry as a date and in days (`EXPIRED` once past),
/// and for those ACME manages, when herdsman plans to renew them (`-` for the others).
pub fn certificates_table(reply: &CertificatesReply) -> String {
    if reply.certificates.is_empty() {
        return "no TLS listener\n".to_string();
    }
    const HEADINGS: [&str; 7] = [
        "LISTENER", "NAMES", "ISSUER", "EXPIRES", "LEFT", "ACME", "RENEWS",
    ];
    const NUMERIC: [bool; 7] = [false, false, false, false, true, false, false];
    let mut rows: Vec<Vec<String>> = vec![HEADINGS.map(str::to_string).to_vec()];
    for certificate in &reply.certificates {
        let seconds = certificate.expires_in_seconds;
        let left = match seconds {
            ..0 => "EXPIRED".to_string(),
            _ => format!("{}d", seconds / 86_400),
        };
        rows.push(vec![
            certificate.listener.clone(),
            certificate.names.join(","),
            certificate.issuer.clone(),
            certificate.not_after.clone(),
            left,
            if certificate.acme { "yes" } else { "no" }.to_string(),
            certificate
                .renews_at
                .clone()
                .unwrap_or_else(|| "-".to_string()),
        ]);
    }
    aligned_columns(&rows, &NUMERIC)
}

/// `GET /api/rate_limits`, as `ctl limits` reads it.
#[derive(Debug, Deserialize)]
pub struct LimitsReply {
    pub limits: Vec<LimitView>,
}

/// `ctl limits`: a row per limit, with its counts and the keys it refused most lately
/// (`key×refusals`, most first).
pub fn limits_table(reply: &LimitsReply) -> String {
    if reply.limits.is_empty() {
        return "no rate limit\n".to_string();
    }
    const HEADINGS: [&str; 7] = [
        "LIMIT", "RATE", "BURST", "KEY", "ALLOWED", "LIMITED", "TOP KEYS",
    ];
    const NUMERIC: [bool; 7] = [false, false, true, false, true, true, false];
    let mut rows: Vec<Vec<String>> = vec![HEADINGS.map(str::to_string).to_vec()];
    for limit in &reply.limits {
        let top: Vec<String> = limit
            .top_keys
            .iter()
            .map(|key| format!("{}×{}", key.key, key.refused))
            .collect();
        rows.push(vec![
            limit.name.clone(),
            limit.rate.clone(),
            limit.burst.to_string(),
            limit.key.clone(),
            limit.allowed.to_string(),
            limit.limited.to_string(),
            if top.is_empty() {
                "-".to_string()
            } else {
                top.join(" ")
            },
        ]);
    }
    aligned_columns(&rows, &NUMERIC)
}

/// How wide each column of `rows` is: its widest cell, in characters.
pub fn column_widths(rows: &[Vec<String>]) -> Vec<usize> {
    let mut widths = Vec::new();
    for row in rows {
        widths.resize(widths.len().max(row.len()), 0);
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    widths
}

/// `rows` (the headings first) as lines of text: columns two spaces apart, each as wide as its
/// widest cell, the `numeric` ones right-aligned and the others left-aligned, no trailing blanks.
/// A row may be shorter than the others: its missing cells are blank.
pub fn aligned_columns(rows: &[Vec<String>], numeric: &[bool]) -> String {
    let widths = column_widths(rows);
    let mut table = String::new();
    for row in rows {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            if column > 0 {
                line.push_str("  ");
            }
            let width = widths[column];
            if numeric.get(column).copied().unwrap_or(false) {
                let _ = write!(line, "{cell:>width$}");
            } else {
                let _ = write!(line, "{cell:<width$}");
            }
        }
        table.push_str(line.trim_end());
        table.push('\n');
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_servers_table_lines_up() {
        let reply: PoolsReply = serde_json::from_value(json!({
            "generation": 4,
            "pools": [
                { "name": "app", "balance": "round-robin", "servers": [
                    { "name": "a", "addr": "127.0.0.1:9001", "state": "ready", "weight": 1,
                      "active": 12, "requests": 1234567, "latency_ms": 0.237,
                      "added_at_run_time": false },
                    { "name": "backend-2", "addr": "[::1]:9002", "state": "drain", "weight": 256,
                      "health": "ejected", "remaining_ms": 900,
                      "active": 0, "requests": 3, "added_at_run_time": true },
                ]},
                { "name": "empty", "balance": "p2c", "servers": [] },
            ],
        }))
        .unwrap();
        let expected = "\
POOL   SERVER        ADDR            STATE  HEALTH   WEIGHT  ACTIVE  REQUESTS  LATMS
app    a             127.0.0.1:9001  ready  up            1      12   1234567   0.24
app    backend-2     [::1]:9002      drain  ejected     256       0         3      -
empty  (no servers)
";
        assert_eq!(servers_table(&reply), expected);
    }

    #[test]
    fn with_a_tls_pool_the_servers_table_names_what_each_server_is_verified_against() {
        let reply: PoolsReply = serde_json::from_value(json!({
            "pools": [
                { "name": "app", "tls": null, "servers": [
                    { "name": "a", "addr": "127.0.0.1:9001", "state": "ready", "weight": 1 },
                ]},
                { "name": "secure", "tls": { "ca": "system", "sni": null, "verify": true,
                                             "client_certificate": null }, "servers": [
                    { "name": "s", "addr": "10.0.0.5:443", "tls_name": "api.example.com",
                      "state": "ready", "weight": 1 },
                ]},
                { "name": "lab", "tls": { "ca": "system", "sni": null, "verify": false,
                                          "client_certificate": null }, "servers": [
                    { "name": "l", "addr": "10.0.0.6:443", "tls_name": "10.0.0.6",
                      "state": "ready", "weight": 1 },
                ]},
            ],
        }))
        .unwrap();
        let expected = "\
POOL    SERVER  ADDR            TLS                  STATE  HEALTH  WEIGHT  ACTIVE  REQUESTS  LATMS
app     a       127.0.0.1:9001  -                    ready  up           1       0         0      -
secure  s       10.0.0.5:443    api.example.com      ready  up           1       0         0      -
lab     l       10.0.0.6:443    10.0.0.6 unverified  ready  up           1       0         0      -
";
        assert_eq!(servers_table(&reply), expected);
    }
}
