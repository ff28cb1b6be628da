//! The instruction budget (bench/budget.toml): one table per budgeted case, named as the case is,
//! holding `instructions_per_request`. A case counted more than `ALLOWED_OVER` above its budget
//! fails `--check`; one more than that below it is pointed out, so that the budget can be lowered
//! to hold the gain.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::cases::Case;

/// How far above its budget a case may count and still pass: counting is repeatable to a fraction
/// of a percent, so more than this is a change's cost, not noise.
pub const ALLOWED_OVER: f64 = 0.02;

/// The budgets, as read from their file.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub file: PathBuf,
    /// Instructions per request, by case; each budgeted case at most once.
    pub per_request: Vec<(Case, u64)>,
}

impl Budget {
    /// Reads `file`.
    pub fn read(file: &Path) -> anyhow::Result<Budget> {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("reading the budget {}", file.display()))?;
        let per_request = parse(&text).with_context(|| format!("in {}", file.display()))?;
        Ok(Budget {
            file: file.to_path_buf(),
            per_request,
        })
    }

    /// The budget of `case`, when the file has one.
    pub fn of(&self, case: Case) -> Option<u64> {
        self.per_request
            .iter()
            .find(|(budgeted, _)| *budgeted == case)
            .map(|&(_, budget)| budget)
    }
}

/// The budgets in a budget file's text. Every table must name a budgeted case and hold only a
/// positive whole `instructions_per_request`.
pub fn parse(text: &str) -> anyhow::Result<Vec<(Case, u64)>> {
    let table: toml::Table = text.parse().context("not TOML")?;
    let accepted: Vec<&str> = Case::budgeted_cases().map(Case::name).collect();
    let mut budgets = Vec::new();
    for (name, value) in &table {
        let case = Case::named(name)
            .filter(|case| case.budgeted())
            .with_context(|| {
                format!(
                    "[{name}]: no such budgeted case; accepted: {}",
                    accepted.join(", ")
                )
            })?;
        let Some(entries) = value.as_table() else {
            bail!("{name} must be a table ([{name}])");
        };
        for key in entries.keys() {
            if key != "instructions_per_request" {
                bail!("[{name}] {key}: unknown key; accepted: instructions_per_request");
            }
        }
        let budget = entries
            .get("instructions_per_request")
            .with_context(|| format!("[{name}] has no instructions_per_request"))?;
        match budget.as_integer() {
            Some(budget) if budget > 0 => budgets.push((case, budget as u64)),
            _ => bail!(
                "[{name}] instructions_per_request = {budget}: must be a whole number above 0"
            ),
        }
    }
    Ok(budgets)
}

/// How a count stands against its budget: the share above it (negative: below).
pub fn over(per_request: f64, budget: u64) -> f64 {
    per_request / budget as f64 - 1.0
}

/// Why `per_request` of `case` fails its budget, if it does: more than `ALLOWED_OVER` above it,
/// or no budget for a budgeted case. `build` names the build when several were counted.
pub fn failure(
    build: Option<&str>,
    case: Case,
    per_request: f64,
    budget: &Budget,
) -> Option<String> {
    let who = match build {
        Some(label) => format!("{label}, {case}"),
        None => case.to_string(),
    };
    let Some(allowed) = budget.of(case) else {
        return Some(format!(
            "{who}: {per_request:.0} instructions per request, and no budget for {case} in {}",
            budget.file.display()
        ));
    };
    // Compared as a limit rather than a share, so that exactly 2% over passes.
    let limit = allowed as f64 * (1.0 + ALLOWED_OVER);
    (per_request > limit).then(|| {
        format!(
            "{who}: {per_request:.0} instructions per request is {:.1}% over its budget of \
             {allowed} in {} (at most {:.0}% over passes)",
            over(per_request, allowed) * 100.0,
            budget.file.display(),
            ALLOWED_OVER * 100.0
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# how and when\n[keep-alive]\ninstructions_per_request = 12000\n\n\
                        [new-connection]\n# measured …\ninstructions_per_request = 13500\n";

    fn budget() -> Budget {
        Budget {
            file: PathBuf::from("bench/budget.toml"),
            per_request: parse(FILE).unwrap(),
        }
    }

    #[test]
    fn the_file_s_budgets_are_read() {
        let budget = budget();
        assert_eq!(budget.of(Case::KeepAlive), Some(12_000));
        assert_eq!(budget.of(Case::NewConnection), Some(13_500));
        assert_eq!(budget.of(Case::TlsKeepAlive), None);
    }

    #[test]
    fn a_wrong_file_is_refused_with_the_key_named() {
        let refused = [
            (
                "[keep-alive-access-log]\ninstructions_per_request = 1\n",
                "no such budgeted case",
            ),
            (
                "[keepalive]\ninstructions_per_request = 1\n",
                "accepted: keep-alive, tls-keep-alive, new-connection",
            ),
            (
                "[keep-alive]\nper_request = 1\n",
                "[keep-alive] per_request: unknown key",
            ),
            (
                "[keep-alive]\n",
                "[keep-alive] has no instructions_per_request",
            ),
            (
                "[keep-alive]\ninstructions_per_request = 1.5\n",
                "whole number above 0",
            ),
            (
                "[keep-alive]\ninstructions_per_request = 0\n",
                "whole number above 0",
            ),
            ("keep-alive = 5\n", "must be a table"),
        ];
        for (text, said) in refused {
            let error = format!("{:#}", parse(text).unwrap_err());
            assert!(error.contains(said), "{text:?}: {error}");
        }
    }

    #[test]
    fn only_more_than_two_percent_over_fails_and_the_message_names_figure_and_budget() {
        let budget = budget();
        assert_eq!(failure(None, Case::KeepAlive, 12_240.0, &budget), None);
        assert_eq!(failure(None, Case::KeepAlive, 9_000.0, &budget), None);
        let message = failure(None, Case::KeepAlive, 12_250.0, &budget).unwrap();
        assert_eq!(
            message,
            "keep-alive: 12250 instructions per request is 2.1% over its budget of 12000 in \
             bench/budget.toml (at most 2% over passes)"
        );
        let message = failure(Some("after"), Case::TlsKeepAlive, 1.0, &budget).unwrap();
        assert!(
            message.starts_with("after, tls-keep-alive: 1 instructions"),
            "{message}"
        );
        assert!(
            message.contains("no budget for tls-keep-alive"),
            "{message}"
        );
    }
}
