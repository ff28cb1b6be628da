//! The options of `instructions` and what they resolve to: every case with 3 s of uncounted
//! warm-up and 10 s counted by default, or with `--short` 2 s and 3 s (still repeatable to well
//! under a percent: callgrind counts work, not time); the builds to count; and the budget file,
//! checked with `--check`. An option given explicitly wins over either set of defaults.

use std::path::{Path, PathBuf};

use anyhow::bail;

use super::cases::Case;
use crate::kit::settings;

/// The budget file, relative to the workspace.
pub const DEFAULT_BUDGET: &str = "bench/budget.toml";

/// Options of `instructions`.
#[derive(Debug, clap::Args)]
pub struct InstructionsArgs {
    /// A herdsman binary to count, as PATH or LABEL=PATH; repeat to compare builds in one run
    /// (each one's table is printed, then their ratios). Default: the workspace's release build,
    /// built first (`cargo build --release -p herdsman`).
    #[arg(long, value_name = "[LABEL=]PATH")]
    pub herdsman: Vec<String>,
    /// The cases, comma-separated. Default: all five.
    #[arg(long, value_delimiter = ',', value_name = "CASE[,CASE…]")]
    pub cases: Vec<Case>,
    /// Fail when a budgeted case of any build counts more than 2% above its budget in PATH.
    /// Without PATH: bench/budget.toml. Without --check, the budgets are shown beside the
    /// figures when that file exists, and nothing fails.
    #[arg(long, value_name = "PATH", num_args = 0..=1)]
    pub check: Option<Option<PathBuf>>,
    /// Seconds of uncounted load before each count, in which wrk makes its connections (and TLS
    /// handshakes). Default: 3; with --short, 2.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub warm_up: Option<u32>,
    /// Seconds of load counted per case. Default: 10; with --short, 3.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub seconds: Option<u32>,
    /// 2 s of warm-up and 3 s counted per case: the test suite's run (about a minute).
    #[arg(long)]
    pub short: bool,
    /// Use the existing target/release/herdsman without running cargo build first.
    #[arg(long)]
    pub no_build: bool,
}

/// One set of defaults.
struct Defaults {
    warm_up: u32,
    seconds: u32,
}

/// As bench/scripts/instructions-per-request.sh counts.
const FULL: Defaults = Defaults {
    warm_up: 3,
    seconds: 10,
};

/// Short enough for the test suite; the figures still agree with the full run's to a fraction of
/// a percent (some 5,000 requests counted per case even over TLS).
const SHORT: Defaults = Defaults {
    warm_up: 2,
    seconds: 3,
};

/// A build to count: its label in the tables, and its binary (None: the workspace's, built
/// first unless --no-build).
#[derive(Debug, Clone, PartialEq)]
pub struct Build {
    pub label: String,
    pub binary: Option<PathBuf>,
}

/// What a run counts, with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Never empty; labels all different.
    pub builds: Vec<Build>,
    /// Without repeats, in the order given; never empty.
    pub cases: Vec<Case>,
    pub warm_up: u32,
    pub seconds: u32,
    /// The budgets' file: --check's PATH, or the workspace's bench/budget.toml.
    pub budget_file: PathBuf,
    /// Whether a case over its budget fails the run.
    pub check: bool,
    pub no_build: bool,
}

impl Settings {
    pub fn resolve(args: &InstructionsArgs, workspace: &Path) -> anyhow::Result<Settings> {
        let defaults = settings::defaults(args.short, &FULL, &SHORT);
        let mut builds: Vec<Build> = Vec::new();
        for spec in &args.herdsman {
            let build = match spec.split_once('=') {
                Some((label, path)) => Build {
                    label: label.trim().to_string(),
                    binary: Some(PathBuf::from(path)),
                },
                None => Build {
                    label: spec.clone(),
                    binary: Some(PathBuf::from(spec)),
                },
            };
            if builds.iter().any(|b| b.label == build.label) {
                bail!(
                    "two --herdsman builds are labelled {:?}; write LABEL=PATH",
                    build.label
                );
            }
            builds.push(build);
        }
        if builds.is_empty() {
            builds.push(Build {
                label: "herdsman".to_string(),
                binary: None,
            });
        }
        let budget_file = match &args.check {
            Some(Some(path)) => path.clone(),
            _ => workspace.join(DEFAULT_BUDGET),
        };
        Ok(Settings {
            builds,
            cases: settings::without_repeats(&args.cases, &Case::ALL),
            warm_up: args.warm_up.unwrap_or(defaults.warm_up),
            seconds: args.seconds.unwrap_or(defaults.seconds),
            budget_file,
            check: args.check.is_some(),
            no_build: args.no_build,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::settings::parse_args;

    fn resolve(args: &[&str]) -> anyhow::Result<Settings> {
        let args: InstructionsArgs = parse_args("instructions", args)?;
        Settings::resolve(&args, Path::new("/w"))
    }

    #[test]
    fn the_defaults_count_every_case_of_the_workspace_build_without_failing() {
        let s = resolve(&[]).unwrap();
        assert_eq!(s.cases, Case::ALL);
        assert_eq!((s.warm_up, s.seconds), (3, 10));
        assert_eq!(s.builds.len(), 1);
        assert_eq!(s.builds[0].binary, None);
        assert_eq!(s.budget_file, PathBuf::from("/w/bench/budget.toml"));
        assert!(!s.check);
        let short = resolve(&["--short", "--seconds", "5"]).unwrap();
        assert_eq!((short.warm_up, short.seconds), (2, 5));
    }

    #[test]
    fn check_takes_the_workspace_budget_or_the_path_given() {
        let s = resolve(&["--check"]).unwrap();
        assert!(s.check);
        assert_eq!(s.budget_file, PathBuf::from("/w/bench/budget.toml"));
        let s = resolve(&["--check", "/tmp/b.toml", "--short"]).unwrap();
        assert!(s.check);
        assert_eq!(s.budget_file, PathBuf::from("/tmp/b.toml"));
    }

    #[test]
    fn builds_are_labelled_and_a_label_taken_twice_is_refused() {
        let s = resolve(&["--herdsman", "old=/tmp/a", "--herdsman", "/tmp/b"]).unwrap();
        let labels: Vec<&str> = s.builds.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(labels, ["old", "/tmp/b"]);
        assert_eq!(s.builds[0].binary, Some(PathBuf::from("/tmp/a")));
        let error = resolve(&["--herdsman", "x=/a", "--herdsman", "x=/b"]).unwrap_err();
        assert!(format!("{error}").contains("\"x\""), "{error}");
    }

    #[test]
    fn cases_are_named_as_the_budget_names_them() {
        let s = resolve(&[
            "--cases",
            "new-connection,keep-alive-access-log,new-connection",
        ]);
        assert_eq!(
            s.unwrap().cases,
            [Case::NewConnection, Case::KeepAliveAccessLog]
        );
    }
}
