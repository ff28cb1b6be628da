//! How a configuration is refused: [`ConfigError`] and its [`ConfigProblem`]s, each naming a key
//! and the line it stands on. Below both `load.rs` (which reads the text) and `check/` (which
//! holds its values to their rules), so that neither needs the other for these.

use std::fmt;

/// Why a configuration was refused: every problem found, and where the text came from.
#[derive(Debug)]
pub struct ConfigError {
    /// The file's path, or a name such as "<demo>" for text that was not read from a file.
    pub origin: String,
    /// At least one, in the order of their lines; problems with no line come last.
    pub problems: Vec<ConfigProblem>,
}

/// One thing wrong with a configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigProblem {
    /// The dotted key path: `listener[0].bind`, `pool[1].servers[2].addr`, `timeouts.connect`.
    /// Empty when there is no key to name (a syntax error, an unreadable file).
    pub key: String,
    /// 1-based line in the text, when the problem is at one place.
    pub line: Option<usize>,
    /// The whole sentence, complete without `key`: the key, the value when there is one, what is
    /// wrong and what would be accepted —
    /// `pool[0].balance = "fastest": unknown; accepted: round-robin, least-conn, p2c, random`.
    pub message: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_list(f, &self.origin, "problem", &self.problems)
    }
}

/// `origin: 2 problems` (or warnings), then each on a line of its own, indented.
pub(super) fn write_list(
    out: &mut impl fmt::Write,
    origin: &str,
    noun: &str,
    items: &[ConfigProblem],
) -> fmt::Result {
    let count = items.len();
    let plural = if count == 1 { "" } else { "s" };
    write!(out, "{origin}: {count} {noun}{plural}")?;
    for item in items {
        write!(out, "\n  {item}")?;
    }
    Ok(())
}

impl std::error::Error for ConfigError {}

/// 1-based line of a byte offset.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    let before = &text.as_bytes()[..offset.min(text.len())];
    before.iter().filter(|&&byte| byte == b'\n').count() + 1
}

/// Where each line of a text starts, for the line of many offsets: counting the newlines before
/// each of 100,000 routes' tables made checking such a file quadratic (13 s for 30,000).
#[derive(Debug)]
pub(super) struct Lines {
    /// The offset after each newline.
    starts: Vec<usize>,
}

impl Lines {
    pub(super) fn new(text: &str) -> Lines {
        let starts = text
            .bytes()
            .enumerate()
            .filter(|&(_, byte)| byte == b'\n')
            .map(|(offset, _)| offset + 1)
            .collect();
        Lines { starts }
    }

    /// The 1-based line `offset` is on, as [`line_of`] counts it.
    pub(super) fn line_of(&self, offset: usize) -> usize {
        self.starts.partition_point(|&start| start <= offset) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_agree_with_counting_newlines() {
        for text in ["", "a", "\n", "a\nb", "a\n\nbc\n", "\n\nx\ny\n\n"] {
            let lines = Lines::new(text);
            for offset in 0..=text.len() + 1 {
                assert_eq!(
                    lines.line_of(offset),
                    line_of(text, offset),
                    "{text:?} at {offset}"
                );
            }
        }
    }
}
