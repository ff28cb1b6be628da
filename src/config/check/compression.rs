//! `[compression]` and `[route.compression]`: the algorithms known and not repeated, the types
//! written as media types, the length and levels in range. A route's table starts from the
//! top-level one as checked and replaces the keys it writes.

use toml::Spanned;

use super::primitives::quoted;
use super::{Checker, Table};
use crate::config::compression::{Algorithm, CompressionRules};
use crate::config::raw::RawCompression;

impl Checker {
    /// `raw`'s keys over `base`: the rules as checked (`base`'s where a key is refused).
    pub(super) fn compression(
        &mut self,
        table: &Table,
        raw: &RawCompression,
        base: &CompressionRules,
    ) -> CompressionRules {
        let enabled = raw.enabled.as_ref().map_or(base.enabled, |b| *b.get_ref());
        let algorithms = match &raw.algorithms {
            Some(list) => self
                .algorithms(table, list)
                .unwrap_or_else(|| base.algorithms.clone()),
            None => base.algorithms.clone(),
        };
        let types = match &raw.types {
            Some(list) => self
                .media_types(table, list)
                .unwrap_or_else(|| base.types.clone()),
            None => base.types.clone(),
        };
        CompressionRules {
            enabled,
            algorithms,
            types,
            min_length: self.size(
                &table.key("min_length"),
                &raw.min_length,
                0..=u64::MAX >> 1,
                "0 or more bytes, or a size with a unit, e.g. \"1KiB\" (the default)",
                base.min_length,
            ),
            zstd_level: self.integer(
                &table.key("zstd_level"),
                &raw.zstd_level,
                1..=19,
                "1 to 19 (3, the default, from bench/results/compression-levels.md)",
                base.zstd_level,
            ),
            brotli_level: self.integer(
                &table.key("brotli_level"),
                &raw.brotli_level,
                0..=11,
                "0 to 11 (4, the default; 10 and 11 are far too slow for live traffic)",
                base.brotli_level,
            ),
            gzip_level: self.integer(
                &table.key("gzip_level"),
                &raw.gzip_level,
                1..=9,
                "1 to 9 (5, the default)",
                base.gzip_level,
            ),
        }
    }

    /// `algorithms`: known names, each once, at least one; `None` when refused.
    fn algorithms(
        &mut self,
        table: &Table,
        list: &Spanned<Vec<Spanned<String>>>,
    ) -> Option<Vec<Algorithm>> {
        let key = table.key("algorithms");
        let mut algorithms = Vec::new();
        let mut refused = false;
        for name in list.get_ref() {
            let why = match Algorithm::named(name.get_ref()) {
                None => "not an algorithm herdsman compresses with; accepted: \"zstd\", \"br\", \"gzip\"",
                Some(algorithm) if algorithms.contains(&algorithm) => "listed twice",
                Some(algorithm) => {
                    algorithms.push(algorithm);
                    continue;
                }
            };
            self.reject(&key, name.span(), &quoted(name.get_ref()), why);
            refused = true;
        }
        if algorithms.is_empty() && !refused {
            self.reject(
                &key,
                list.span(),
                "[]",
                "empty; list at least one of \"zstd\", \"br\", \"gzip\" (or set enabled = false)",
            );
            refused = true;
        }
        (!refused).then_some(algorithms)
    }

    /// `types`: `type/subtype` or `type/*`, lowercased; `None` when one is refused.
    fn media_types(
        &mut self,
        table: &Table,
        list: &Spanned<Vec<Spanned<String>>>,
    ) -> Option<Vec<String>> {
        let key = table.key("types");
        let mut refused = false;
        let types = list
            .get_ref()
            .iter()
            .map(|raw| {
                let text = raw.get_ref().trim().to_ascii_lowercase();
                let is_token = |part: &str| {
                    !part.is_empty() && part.bytes().all(crate::config::token::is_token_byte)
                };
                let valid = match text.split_once('/') {
                    Some((kind, "*")) => is_token(kind),
                    Some((kind, subtype)) => is_token(kind) && is_token(subtype),
                    None => false,
                };
                if !valid {
                    self.reject(
                        &key,
                        raw.span(),
                        &quoted(raw.get_ref()),
                        "not a media type; write e.g. \"text/html\" or \"text/*\" (no parameters)",
                    );
                    refused = true;
                }
                text
            })
            .collect();
        (!refused).then_some(types)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::fixtures::{only_problem, problem, VALID};
    use crate::config::load::from_toml;
    use crate::config::Algorithm;

    /// `VALID` with `[compression]` of these lines at its end, and the line `needle` is on.
    fn with_compression(lines: &str, needle: &str) -> (String, usize) {
        let text = format!("{VALID}\n[compression]\n{lines}\n");
        let line = text[..text.find(needle).unwrap()].matches('\n').count() + 1;
        (text, line)
    }

    #[test]
    fn a_route_takes_the_top_level_keys_it_does_not_write() {
        let (text, _) = with_compression(
            "enabled = true\nalgorithms = [\"gzip\"]\ngzip_level = 6",
            "",
        );
        let text = text.replace(
            "path_prefix = \"/api/\"",
            "path_prefix = \"/api/\"\ncompression = { types = [\"text/*\"], min_length = \"2KiB\" }",
        );
        let config = from_toml(&text, "test.toml").unwrap();
        let global = config.compression.as_deref().unwrap();
        assert_eq!(global.algorithms, [Algorithm::Gzip]);
        let route = config.routes[0].compression.as_deref().unwrap();
        assert_eq!(
            (route.gzip_level, route.min_length, route.types.clone()),
            (6, 2048, vec!["text/*".to_string()])
        );
        assert_eq!(config.routes[1].compression.as_deref(), Some(global));
    }

    #[test]
    fn disabled_compression_leaves_no_rules() {
        let (text, _) = with_compression("zstd_level = 5", "");
        let config = from_toml(&text, "test.toml").unwrap();
        assert!(config.compression.is_none());
        assert!(config.routes.iter().all(|r| r.compression.is_none()));
    }

    #[test]
    fn bad_keys_are_refused_with_key_and_line() {
        let (text, line) = with_compression("algorithms = [\"gzip\", \"lz4\"]", "algorithms");
        assert_eq!(
            only_problem(&text),
            problem(
                "compression.algorithms",
                line,
                "compression.algorithms = \"lz4\": not an algorithm herdsman compresses with; \
                 accepted: \"zstd\", \"br\", \"gzip\""
            )
        );
        let (text, line) = with_compression("enabled = true\nbrotli_level = 12", "brotli_level");
        assert_eq!(
            only_problem(&text),
            problem(
                "compression.brotli_level",
                line,
                "compression.brotli_level = 12: out of range; accepted: 0 to 11 (4, the \
                 default; 10 and 11 are far too slow for live traffic)"
            )
        );
        let (text, line) = with_compression("types = [\"text/html; charset=utf-8\"]", "types");
        let refused = only_problem(&text);
        assert_eq!(
            (refused.key.as_str(), refused.line),
            ("compression.types", Some(line))
        );
    }
}
