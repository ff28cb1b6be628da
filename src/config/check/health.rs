//! How a pool finds a server down: `[pool.health]` (active checks: TCP, or HTTP with a method,
//! path and expected statuses) and `[pool.passive]` (ejection after failed requests).

use std::time::Duration;

use toml::Spanned;

use super::primitives::{quoted, Zero};
use super::{Checker, Table};
use crate::config::raw::{RawHealth, RawPassive};
use crate::config::{HealthCheck, HealthKind, Passive};

impl Checker {
    pub(super) fn health(&mut self, table: &Table, raw: &RawHealth) -> HealthCheck {
        let kind = match raw.check.as_ref().map(|c| c.get_ref().as_str()) {
            Some("tcp") => HealthKind::Tcp,
            Some("grpc") => HealthKind::Grpc {
                service: raw
                    .service
                    .as_ref()
                    .map(|service| service.get_ref().clone())
                    .unwrap_or_default(),
            },
            None | Some("http") => HealthKind::Http {
                method: self.health_method(table, &raw.method),
                path: self.health_path(table, &raw.path),
                host: raw.host.as_ref().map(|host| host.get_ref().clone()),
                expect: self.status_range(table, &raw.expect),
            },
            Some(other) => {
                let check = raw.check.as_ref().expect("matched Some");
                self.reject(
                    &table.key("check"),
                    check.span(),
                    &quoted(other),
                    "unknown; accepted: http, tcp, grpc",
                );
                HealthKind::Tcp
            }
        };
        let default = HealthCheck {
            kind: HealthKind::Tcp,
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(1),
            rise: 2,
            fall: 3,
        };
        HealthCheck {
            kind,
            interval: self.duration(
                &table.key("interval"),
                &raw.interval,
                default.interval,
                Zero::Refused,
            ),
            timeout: self.duration(
                &table.key("timeout"),
                &raw.timeout,
                default.timeout,
                Zero::Refused,
            ),
            rise: self.integer(
                &table.key("rise"),
                &raw.rise,
                1..=100,
                "1 to 100 (default 2)",
                default.rise,
            ),
            fall: self.integer(
                &table.key("fall"),
                &raw.fall,
                1..=100,
                "1 to 100 (default 3)",
                default.fall,
            ),
        }
    }

    fn health_method(&mut self, table: &Table, raw: &Option<Spanned<String>>) -> String {
        let Some(method) = raw else {
            return "GET".to_string();
        };
        let text = method.get_ref();
        if !matches!(text.as_str(), "GET" | "HEAD" | "OPTIONS") {
            self.reject(
                &table.key("method"),
                method.span(),
                &quoted(text),
                "accepted: GET (the default), HEAD, OPTIONS",
            );
        }
        text.clone()
    }

    fn health_path(&mut self, table: &Table, raw: &Option<Spanned<String>>) -> String {
        let Some(path) = raw else {
            return "/".to_string();
        };
        let text = path.get_ref();
        let printable = text.bytes().all(|b| b.is_ascii_graphic());
        if !text.starts_with('/') || !printable {
            self.reject(
                &table.key("path"),
                path.span(),
                &quoted(text),
                "a path starting with '/', without spaces, e.g. path = \"/healthz\"",
            );
        }
        text.clone()
    }

    /// `expect`: "200", or a range "200-399".
    fn status_range(&mut self, table: &Table, raw: &Option<Spanned<String>>) -> (u16, u16) {
        let Some(expect) = raw else {
            return (200, 399);
        };
        let text = expect.get_ref();
        let (low, high) = text.split_once('-').unwrap_or((text, text));
        let status = |s: &str| {
            s.trim()
                .parse::<u16>()
                .ok()
                .filter(|c| (100..=599).contains(c))
        };
        if let (Some(low), Some(high)) = (status(low), status(high)) {
            if low <= high {
                return (low, high);
            }
        }
        self.reject(
            &table.key("expect"),
            expect.span(),
            &quoted(text),
            "a status or an inclusive range of statuses, e.g. \"200\" or \"200-399\" (the default)",
        );
        (200, 399)
    }

    pub(super) fn passive(&mut self, table: &Table, raw: &RawPassive) -> Passive {
        let default = Passive::default();
        let ejection = self.duration(
            &table.key("ejection"),
            &raw.ejection,
            default.ejection,
            Zero::Refused,
        );
        Passive {
            consecutive_failures: self.integer(
                &table.key("consecutive_failures"),
                &raw.consecutive_failures,
                0..=1000,
                "0 (off) to 1000 (default 5)",
                default.consecutive_failures,
            ),
            count_5xx: raw
                .count_5xx
                .as_ref()
                .map_or(default.count_5xx, |b| *b.get_ref()),
            ejection,
            max_ejection: self.duration(
                &table.key("max_ejection"),
                &raw.max_ejection,
                default.max_ejection.max(ejection),
                Zero::Refused,
            ),
            max_ejected_percent: self.integer(
                &table.key("max_ejected_percent"),
                &raw.max_ejected_percent,
                0..=100,
                "0 to 100 (default 50)",
                default.max_ejected_percent,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures::{only_problem, MINIMAL};
    use crate::config::load::from_toml;

    #[test]
    fn health_passive_and_slow_start_are_read_and_held_to_their_rules() {
        let text = format!(
            "{MINIMAL}slow_start = \"30s\"\n[pool.health]\npath = \"/healthz\"\nexpect = \"200-299\"\n\
             interval = \"5s\"\nfall = 2\n[pool.passive]\nconsecutive_failures = 3\ncount_5xx = true\n"
        );
        let pool = from_toml(&text, "t").unwrap().pools.remove(0);
        assert_eq!(pool.slow_start, Duration::from_secs(30));
        assert_eq!(
            pool.health,
            Some(HealthCheck {
                kind: HealthKind::Http {
                    method: "GET".into(),
                    path: "/healthz".into(),
                    host: None,
                    expect: (200, 299),
                },
                interval: Duration::from_secs(5),
                timeout: Duration::from_secs(1),
                rise: 2,
                fall: 2,
            })
        );
        assert_eq!(
            pool.passive,
            Passive {
                consecutive_failures: 3,
                count_5xx: true,
                ..Passive::default()
            }
        );
        for (bad, key, why) in [
            (
                "check = \"icmp\"",
                "pool[0].health.check",
                "accepted: http, tcp",
            ),
            (
                "path = \"healthz\"",
                "pool[0].health.path",
                "starting with '/'",
            ),
            (
                "expect = \"299-200\"",
                "pool[0].health.expect",
                "inclusive range",
            ),
            (
                "method = \"POST\"",
                "pool[0].health.method",
                "accepted: GET",
            ),
            ("fall = 0", "pool[0].health.fall", "1 to 100"),
            (
                "interval = \"0s\"",
                "pool[0].health.interval",
                "more than 0",
            ),
        ] {
            let found = only_problem(&format!("{MINIMAL}[pool.health]\n{bad}\n"));
            assert_eq!(found.key, key, "{bad}");
            assert!(found.message.contains(why), "{bad}: {}", found.message);
        }
        let percent = only_problem(&format!(
            "{MINIMAL}[pool.passive]\nmax_ejected_percent = 101\n"
        ));
        assert_eq!(percent.key, "pool[0].passive.max_ejected_percent");
    }
}
