//! The document's own keys and its one-of tables: `workers`, `[timeouts]`, `[limits]` and
//! `[log]` (`intake`, `shutdown_grace` and `hard_stop_after` are one call each in `mod.rs`).

use std::num::NonZeroUsize;
use std::time::Duration;

use toml::Spanned;

use super::primitives::Zero;
use super::words::{LOG_FORMATS, LOG_LEVELS};
use super::{Checker, Table};
use crate::config::raw::{RawBuffering, RawCache, RawHttp2, RawLimits, RawLog, RawTimeouts};
use crate::config::{
    Buffering, CacheSettings, DiskSettings, Http2Limits, Limits, LogSettings, Timeouts,
};

/// Most worker threads accepted; also the cap on "auto".
const MAX_WORKERS: i64 = 1024;
/// `shutdown_grace` when not written (see `Config::shutdown_grace`).
pub(super) const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

impl Checker {
    pub(super) fn workers(&mut self, raw: &Option<Spanned<toml::Value>>) -> usize {
        let accepted = format!(r#""auto" or a number from 1 to {MAX_WORKERS}"#);
        // A refused value refuses the whole config: what stands in for it here is never used.
        self.auto_or_integer("workers", raw, 1..=MAX_WORKERS, ("workers", &accepted))
            .map_or_else(auto_workers, |count| usize::try_from(count).unwrap_or(1))
    }

    pub(super) fn timeouts(&mut self, raw: &RawTimeouts) -> Timeouts {
        let default = Timeouts::default();
        let mut timeout = |key, value, default| self.duration(key, value, default, Zero::Refused);
        let timeouts = Timeouts {
            connect: timeout("timeouts.connect", &raw.connect, default.connect),
            client_header: timeout(
                "timeouts.client_header",
                &raw.client_header,
                default.client_header,
            ),
            client_idle: timeout(
                "timeouts.client_idle",
                &raw.client_idle,
                default.client_idle,
            ),
            backend_response: timeout(
                "timeouts.backend_response",
                &raw.backend_response,
                default.backend_response,
            ),
            backend_read: timeout(
                "timeouts.backend_read",
                &raw.backend_read,
                default.backend_read,
            ),
            backend_idle: timeout(
                "timeouts.backend_idle",
                &raw.backend_idle,
                default.backend_idle,
            ),
            tls_handshake: timeout(
                "timeouts.tls_handshake",
                &raw.tls_handshake,
                default.tls_handshake,
            ),
            tunnel_idle: timeout(
                "timeouts.tunnel_idle",
                &raw.tunnel_idle,
                default.tunnel_idle,
            ),
            request: None,
        };
        Timeouts {
            request: self.optional_duration(
                "timeouts.request",
                &raw.request,
                "30s",
                "no limit (the default)",
            ),
            ..timeouts
        }
    }

    /// `[http2]`: each limit within what RFC 9113 allows and a proxy can use.
    pub(super) fn http2(&mut self, raw: &RawHttp2) -> Http2Limits {
        let default = Http2Limits::default();
        let mut number = |key: &str,
                          value: &Option<Spanned<i64>>,
                          range: std::ops::RangeInclusive<i64>,
                          words: &str,
                          fallback: u32| {
            self.integer(&format!("http2.{key}"), value, range, words, fallback)
        };
        Http2Limits {
            max_concurrent_streams: number(
                "max_concurrent_streams",
                &raw.max_concurrent_streams,
                1..=10_000,
                "1 to 10000 (default 128)",
                default.max_concurrent_streams,
            ),
            stream_window: number(
                "stream_window",
                &raw.stream_window,
                65_535..=2_147_483_647,
                "65535 to 2147483647 bytes (default 1048576)",
                default.stream_window,
            ),
            connection_window: number(
                "connection_window",
                &raw.connection_window,
                65_535..=2_147_483_647,
                "65535 to 2147483647 bytes (default 4194304)",
                default.connection_window,
            ),
            max_pending_resets: number(
                "max_pending_resets",
                &raw.max_pending_resets,
                1..=10_000,
                "1 to 10000 (default 20)",
                default.max_pending_resets,
            ),
            frame_burst: number(
                "frame_burst",
                &raw.frame_burst,
                10..=1_000_000,
                "10 to 1000000 (default 1000)",
                default.frame_burst,
            ),
            frames_per_stream: number(
                "frames_per_stream",
                &raw.frames_per_stream,
                0..=1000,
                "0 to 1000 (default 10)",
                default.frames_per_stream,
            ),
            frames_per_second: number(
                "frames_per_second",
                &raw.frames_per_second,
                0..=1_000_000,
                "0 to 1000000 (default 100)",
                default.frames_per_second,
            ),
            reset_burst: number(
                "reset_burst",
                &raw.reset_burst,
                1..=1_000_000,
                "1 to 1000000 (default 100)",
                default.reset_burst,
            ),
            resets_per_second: number(
                "resets_per_second",
                &raw.resets_per_second,
                0..=1_000_000,
                "0 to 1000000 (default 10)",
                default.resets_per_second,
            ),
            max_requests_per_connection: number(
                "max_requests_per_connection",
                &raw.max_requests_per_connection,
                1..=1_000_000_000,
                "1 to 1000000000 (default 1000)",
                default.max_requests_per_connection,
            ),
            max_frame_size: number(
                "max_frame_size",
                &raw.max_frame_size,
                16_384..=16_777_215,
                "16384 to 16777215 bytes (default 16384)",
                default.max_frame_size,
            ),
            // Absent: `[limits] max_header_bytes` (the session reads it there).
            max_header_list_size: raw.max_header_list_size.as_ref().map(|_| {
                number(
                    "max_header_list_size",
                    &raw.max_header_list_size,
                    1024..=16_777_216,
                    "1024 to 16777216 bytes (default: [limits] max_header_bytes)",
                    65_536,
                )
            }),
            header_table_size: number(
                "header_table_size",
                &raw.header_table_size,
                0..=65_536,
                "0 to 65536 bytes (default 4096)",
                default.header_table_size,
            ),
        }
    }

    pub(super) fn limits(&mut self, raw: &RawLimits) -> Limits {
        let default = Limits::default();
        Limits {
            max_header_bytes: self.integer(
                "limits.max_header_bytes",
                &raw.max_header_bytes,
                1024..=1_048_576,
                "1024 to 1048576 (default 65536)",
                default.max_header_bytes,
            ),
            max_body_bytes: self.integer(
                "limits.max_body_bytes",
                &raw.max_body_bytes,
                0..=i64::MAX,
                "0 (no limit, the default) or a number of bytes",
                default.max_body_bytes,
            ),
            max_idle_per_server: self
                .auto_or_integer(
                    "limits.max_idle_per_server",
                    &raw.max_idle_per_server,
                    0..=65_535,
                    (
                        "connections",
                        r#""auto" (the default: as many as recent use calls for) or a number from 0 to 65535"#,
                    ),
                )
                .map(|most| most as usize),
            max_client_connections: self
                .auto_or_integer(
                    "limits.max_client_connections",
                    &raw.max_client_connections,
                    1..=4_000_000,
                    (
                        "connections",
                        r#""auto" (the default: what the open-file limit allows, keeping room for servers and the operator) or a number from 1 to 4000000"#,
                    ),
                )
                .map(|most| most as u32),
            max_connections_per_client: self.integer(
                "limits.max_connections_per_client",
                &raw.max_connections_per_client,
                0..=4_000_000,
                "0 (no limit, the default) or a number of connections",
                default.max_connections_per_client,
            ),
        }
    }

    pub(super) fn buffering(&mut self, raw: &RawBuffering) -> Buffering {
        let default = Buffering::default();
        Buffering {
            request_memory: self.integer(
                "buffering.request_buffer_memory",
                &raw.request_buffer_memory,
                0..=1_073_741_824,
                "0 (off) to 1073741824 bytes (default 1048576)",
                default.request_memory,
            ),
            request_min_rate: self.integer(
                "buffering.request_min_rate",
                &raw.request_min_rate,
                0..=i64::MAX,
                "0 (no minimum) or bytes per second (default 500)",
                default.request_min_rate,
            ),
            request_stream_rate: self.integer(
                "buffering.request_stream_rate",
                &raw.request_stream_rate,
                0..=i64::MAX,
                "0 (a body past memory always goes to a temporary file) or bytes per second \
                 (default 10485760)",
                default.request_stream_rate,
            ),
            request_min_rate_grace: self.duration(
                "buffering.request_min_rate_grace",
                &raw.request_min_rate_grace,
                default.request_min_rate_grace,
                Zero::Allowed,
            ),
            request_max: self.integer(
                "buffering.request_buffer_max",
                &raw.request_buffer_max,
                0..=i64::MAX,
                "bytes (default 1073741824)",
                default.request_max,
            ),
            response_memory: self.integer(
                "buffering.response_buffer_memory",
                &raw.response_buffer_memory,
                0..=1_073_741_824,
                "0 (off) to 1073741824 bytes (default 65536)",
                default.response_memory,
            ),
            response_max: self.integer(
                "buffering.response_buffer_max",
                &raw.response_buffer_max,
                0..=i64::MAX,
                "0 (memory only) or bytes (default 1073741824)",
                default.response_max,
            ),
            response_min_rate: self.integer(
                "buffering.response_min_rate",
                &raw.response_min_rate,
                0..=i64::MAX,
                "0 (no minimum) or bytes per second (default 500)",
                default.response_min_rate,
            ),
            response_min_rate_window: self.duration(
                "buffering.response_min_rate_window",
                &raw.response_min_rate_window,
                default.response_min_rate_window,
                Zero::Allowed,
            ),
            memory_total: self.integer(
                "buffering.memory_total",
                &raw.memory_total,
                0..=i64::MAX,
                "bytes (default 268435456)",
                default.memory_total,
            ),
            disk_total: self.integer(
                "buffering.disk_total",
                &raw.disk_total,
                0..=i64::MAX,
                "bytes (default 10737418240)",
                default.disk_total,
            ),
            temp_dir: match &raw.temp_dir {
                Some(raw) if !std::path::Path::new(raw.get_ref()).is_absolute() => {
                    self.reject(
                        "buffering.temp_dir",
                        raw.span(),
                        &format!("{:?}", raw.get_ref()),
                        "an absolute path, e.g. temp_dir = \"/var/tmp\"",
                    );
                    default.temp_dir
                }
                Some(raw) => raw.get_ref().into(),
                None => default.temp_dir,
            },
        }
    }

    pub(super) fn cache(&mut self, raw: &RawCache) -> CacheSettings {
        let default = CacheSettings::default();
        let disk = raw.disk.as_ref().and_then(|disk| {
            let table = Table {
                path: "cache.disk".to_string(),
                line: self.lines.line_of(disk.span().start),
            };
            let disk = disk.get_ref();
            let how = "an absolute path of a folder of herdsman's own, e.g. path = \"/var/cache/herdsman\"";
            let path = self.required(&table, "path", &disk.path, how)?;
            if !std::path::Path::new(path.get_ref()).is_absolute() {
                self.reject("cache.disk.path", path.span(), &format!("{:?}", path.get_ref()), how);
                return None;
            }
            let size = self.size(
                "cache.disk.size",
                &disk.size,
                1 << 20..=1 << 50,
                "1MiB to 1PiB, as bytes or with a unit, e.g. \"1GiB\" (the default) or \"100GiB\"",
                1 << 30,
            );
            Some(DiskSettings {
                path: path.get_ref().into(),
                size,
            })
        });
        CacheSettings {
            memory: self.size(
                "cache.memory",
                &raw.memory,
                1 << 20..=1 << 40,
                "1MiB to 1TiB, as bytes or with a unit, e.g. \"256MiB\" (the default) or \"4GiB\"",
                default.memory,
            ),
            disk,
        }
    }

    pub(super) fn log(&mut self, raw: &RawLog) -> LogSettings {
        LogSettings {
            level: self.word("log.level", &raw.level, &LOG_LEVELS),
            format: self.word("log.format", &raw.format, &LOG_FORMATS),
        }
    }
}

/// "auto": the CPUs this process may run on (1 if that cannot be known), at most [`MAX_WORKERS`].
pub(super) fn auto_workers() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    cpus.min(usize::try_from(MAX_WORKERS).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures::{only_problem, MINIMAL};
    use crate::config::load::from_toml;

    #[test]
    fn the_cache_s_memory_is_a_size_with_or_without_a_unit() {
        let memory = |value: &str| {
            from_toml(&format!("{MINIMAL}[cache]\nmemory = {value}\n"), "t")
                .unwrap()
                .cache
                .memory
        };
        assert_eq!(from_toml(MINIMAL, "t").unwrap().cache.memory, 256 << 20);
        assert_eq!(memory("\"4GiB\""), 4 << 30);
        assert_eq!(memory("\"512 MiB\""), 512 << 20);
        assert_eq!(memory("2097152"), 2 << 20);
        for bad in ["\"lots\"", "\"4GB\"", "1024", "\"2TiB\"", "true"] {
            let text = format!("{MINIMAL}[cache]\nmemory = {bad}\n");
            let refused = only_problem(&text);
            assert_eq!(refused.key, "cache.memory", "{bad}");
            assert_eq!(refused.line, Some(11), "{bad}");
            assert!(
                refused.message.contains("accepted: 1MiB to 1TiB"),
                "{}",
                refused.message
            );
        }
    }

    #[test]
    fn buffering_is_on_by_default_and_each_key_is_read() {
        assert_eq!(
            from_toml(MINIMAL, "t").unwrap().buffering,
            Buffering::default()
        );
        let text = format!(
            "{MINIMAL}[buffering]\nrequest_buffer_memory = 0\nrequest_min_rate = 1000\n\
             request_min_rate_grace = \"5s\"\nrequest_stream_rate = 0\n"
        );
        let expected = Buffering {
            request_memory: 0,
            request_min_rate: 1000,
            request_stream_rate: 0,
            request_min_rate_grace: Duration::from_secs(5),
            ..Buffering::default()
        };
        assert_eq!(from_toml(&text, "t").unwrap().buffering, expected);
        let refused = only_problem(&format!("{MINIMAL}[buffering]\nrequest_min_rate = -1\n"));
        assert_eq!(refused.key, "buffering.request_min_rate");
        let text = format!(
            "{MINIMAL}[buffering]\nrequest_buffer_max = 10\nresponse_buffer_memory = 0\n\
             response_buffer_max = 20\nresponse_min_rate = 30\nresponse_min_rate_window = \"1s\"\n\
             memory_total = 40\ndisk_total = 50\ntemp_dir = \"/srv/spool\"\n"
        );
        let expected = Buffering {
            request_max: 10,
            response_memory: 0,
            response_max: 20,
            response_min_rate: 30,
            response_min_rate_window: Duration::from_secs(1),
            memory_total: 40,
            disk_total: 50,
            temp_dir: "/srv/spool".into(),
            ..Buffering::default()
        };
        assert_eq!(from_toml(&text, "t").unwrap().buffering, expected);
        let refused = only_problem(&format!("{MINIMAL}[buffering]\ntemp_dir = \"spool\"\n"));
        assert_eq!(refused.key, "buffering.temp_dir");
    }

    #[test]
    fn workers_auto_is_the_cpu_count() {
        let text = format!("workers = \"auto\"\n{MINIMAL}");
        let cpus = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        assert_eq!(from_toml(&text, "t").unwrap().workers, cpus.min(1024));
    }

    #[test]
    fn idle_server_connections_are_kept_by_use_unless_capped() {
        let with = |value: &str| format!("{MINIMAL}\n[limits]\nmax_idle_per_server = {value}\n");
        let limit = |text: &str| from_toml(text, "t").unwrap().limits.max_idle_per_server;
        assert_eq!(limit(MINIMAL), None);
        assert_eq!(limit(&with("\"auto\"")), None);
        assert_eq!(limit(&with("0")), Some(0));
        assert_eq!(limit(&with("64")), Some(64));
        let refused = only_problem(&with("-1"));
        assert_eq!(refused.key, "limits.max_idle_per_server");
        assert!(refused.line.is_some());
    }

    #[test]
    fn hard_stop_after_is_a_duration_above_zero_or_absent() {
        let with = |value: &str| format!("hard_stop_after = {value:?}\n{MINIMAL}");
        let config = from_toml(&with("30m"), "t").unwrap();
        assert_eq!(config.hard_stop_after, Some(Duration::from_secs(1800)));
        let zero = only_problem(&with("0s"));
        assert_eq!(
            (zero.key.as_str(), zero.line, zero.message.as_str()),
            (
                "hard_stop_after",
                Some(1),
                r#"hard_stop_after = "0s": must be more than 0, e.g. "30m"; leave it out for no limit (the default)"#
            )
        );
        let bad = only_problem(&with("forever"));
        assert_eq!(bad.key, "hard_stop_after");
    }
}
