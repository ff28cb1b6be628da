//! `[compression]` and `[route.compression]` as checked: whether herdsman compresses answers,
//! with which algorithms in which order, for which content types, above which length, and at
//! which level each (the defaults chosen by measurement: `bench/results/compression-levels.md`).

/// A content coding herdsman can compress an answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Zstd,
    Brotli,
    Gzip,
}

impl Algorithm {
    /// Every algorithm, in the order the metrics list them.
    pub const ALL: [Algorithm; 3] = [Algorithm::Zstd, Algorithm::Brotli, Algorithm::Gzip];

    /// The name the config, the metrics and `Content-Encoding` use.
    pub fn token(self) -> &'static str {
        match self {
            Algorithm::Zstd => "zstd",
            Algorithm::Brotli => "br",
            Algorithm::Gzip => "gzip",
        }
    }

    /// Its place in [`Algorithm::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The algorithm a config names (`zstd`, `br`, `gzip`), if any.
    pub fn named(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| a.token() == name)
    }
}

/// Default `zstd_level`: 3, zstd's own default and Caddy's (the measured figures are in
/// `bench/results/compression-levels.md`).
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;
/// Default `brotli_level`: 4 (brotli's default, 11, costs tens of times the CPU for a few per
/// cent of size: far too slow for live traffic).
pub const DEFAULT_BROTLI_LEVEL: u32 = 4;
/// Default `gzip_level`: 5, nginx's usual setting and Caddy's.
pub const DEFAULT_GZIP_LEVEL: u32 = 5;
/// Default `min_length`: 1 KiB; below it a compressed answer saves less than a packet.
pub const DEFAULT_MIN_LENGTH: u64 = 1024;

/// The content types compressed unless `types` says otherwise: text formats that shrink well,
/// and none that are compressed already (images other than SVG, video, archives, fonts in WOFF).
pub const DEFAULT_TYPES: [&str; 14] = [
    "text/html",
    "text/css",
    "text/plain",
    "text/javascript",
    "text/xml",
    "text/csv",
    "text/markdown",
    "text/event-stream",
    "application/javascript",
    "application/json",
    "application/xml",
    "application/wasm",
    "application/manifest+json",
    "image/svg+xml",
];

/// The compression a route's requests get: `[compression]`, with its `[route.compression]`
/// keys over it. A route (or a config) without it enabled carries none (`None`), so a request
/// there pays one test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressionRules {
    /// `enabled`: default false (see README: compression costs CPU per byte, changes what a
    /// server sent, and a BREACH-style attack needs a secret and attacker text in one
    /// compressed answer, which only the operator can rule out).
    pub enabled: bool,
    /// `algorithms`, in the server's order of preference: the first of those the client likes
    /// best wins. Default zstd, br, gzip; never empty once checked, no algorithm twice.
    pub algorithms: Vec<Algorithm>,
    /// `types`: media types compressed, lowercase, without parameters; an entry `text/*` takes
    /// every subtype. Default [`DEFAULT_TYPES`].
    pub types: Vec<String>,
    /// `min_length`: an answer whose `Content-Length` is below it goes as it is. An answer
    /// without one (chunked, or until the close) is compressed whatever its length, which is
    /// known only at its end: holding it back to see would break streaming.
    pub min_length: u64,
    /// `zstd_level` (1–19), `brotli_level` (0–11), `gzip_level` (1–9).
    pub zstd_level: i32,
    pub brotli_level: u32,
    pub gzip_level: u32,
}

impl Default for CompressionRules {
    fn default() -> Self {
        CompressionRules {
            enabled: false,
            algorithms: Algorithm::ALL.to_vec(),
            types: DEFAULT_TYPES.iter().map(|t| t.to_string()).collect(),
            min_length: DEFAULT_MIN_LENGTH,
            zstd_level: DEFAULT_ZSTD_LEVEL,
            brotli_level: DEFAULT_BROTLI_LEVEL,
            gzip_level: DEFAULT_GZIP_LEVEL,
        }
    }
}

impl CompressionRules {
    /// Whether an answer of this media type (a `Content-Type` value, parameters and case as
    /// sent) is compressed.
    pub fn compresses_type(&self, content_type: &[u8]) -> bool {
        let media = content_type
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        self.types.iter().any(|listed| {
            let listed = listed.as_bytes();
            match listed.strip_suffix(b"*") {
                Some(prefix) => {
                    media.len() > prefix.len() && media[..prefix.len()].eq_ignore_ascii_case(prefix)
                }
                None => media.eq_ignore_ascii_case(listed),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_match_without_parameters_or_case_and_by_wildcard() {
        let mut rules = CompressionRules::default();
        assert!(rules.compresses_type(b"text/HTML; charset=utf-8"));
        assert!(rules.compresses_type(b" application/json"));
        assert!(!rules.compresses_type(b"image/png"));
        assert!(!rules.compresses_type(b"text/htmlx"));
        rules.types = vec!["text/*".into()];
        assert!(rules.compresses_type(b"text/x-anything"));
        assert!(!rules.compresses_type(b"text/"));
        assert!(!rules.compresses_type(b"application/json"));
    }
}
