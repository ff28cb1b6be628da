//! The conditions `observability` compares: what herdsman is configured to log and whether this
//! program scrapes its metrics meanwhile. Every condition has the admin API open on loopback, so
//! that the only differences are the access log and the scraping.

use std::fmt;

/// One way herdsman runs during a wrk run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Condition {
    /// No access log; the admin API listens but nobody scrapes it.
    Off,
    /// An access log in `combined`, and `/metrics` scraped every second.
    On,
    /// An access log in `json`, and `/metrics` scraped every second (`--json`).
    Json,
}

impl Condition {
    /// The listener's `access_log_format`, when it has an access log.
    pub fn access_log_format(self) -> Option<&'static str> {
        match self {
            Condition::Off => None,
            Condition::On => Some("combined"),
            Condition::Json => Some("json"),
        }
    }

    /// Whether this program GETs `/metrics` every second during the run.
    pub fn scraped(self) -> bool {
        self != Condition::Off
    }

    /// What the condition is, for the results file.
    pub fn describe(self) -> &'static str {
        match self {
            Condition::Off => "no access log; the admin API listens on loopback, nobody scrapes it",
            Condition::On => {
                "`access_log` in `combined` format; `GET /metrics` on the admin API every second"
            }
            Condition::Json => {
                "`access_log` in `json` format; `GET /metrics` on the admin API every second"
            }
        }
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Condition::Off => "off",
            Condition::On => "on",
            Condition::Json => "json",
        })
    }
}
