//! What every benchmark's options resolve alike: the full or the `--short` defaults, the results
//! file (`--out`, or the chosen defaults' path under the workspace), and seconds as options take
//! them.

use std::path::{Path, PathBuf};

/// Where a benchmark writes its results and which herdsman it runs: the options every benchmark
/// with a results file and a `--short` run takes after its own.
#[derive(Debug, Clone, clap::Args)]
pub struct OutputArgs {
    /// The results file; its plots go beside it, named after it (.png). Default: the benchmark's
    /// file in bench/results/, or with --short target/herdsman-bench/BENCHMARK-short.md.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Use the existing target/release/herdsman without running cargo build first.
    #[arg(long)]
    pub no_build: bool,
}

impl OutputArgs {
    /// Where the results file goes: `--out` as given, else `default` under the workspace.
    pub fn results_file(&self, workspace: &Path, default: &str) -> PathBuf {
        results_file(self.out.as_deref(), workspace, default)
    }
}

/// `short` with --short, `full` otherwise.
pub fn defaults<'a, D>(short: bool, full: &'a D, short_defaults: &'a D) -> &'a D {
    if short {
        short_defaults
    } else {
        full
    }
}

/// Where the results file goes: `--out` as given, else `default` under the workspace.
pub fn results_file(out: Option<&Path>, workspace: &Path, default: &str) -> PathBuf {
    out.map_or_else(|| workspace.join(default), Path::to_path_buf)
}

/// `given` without repeats, in the order given; `otherwise` when nothing was given.
pub fn without_repeats<T: PartialEq + Clone>(given: &[T], otherwise: &[T]) -> Vec<T> {
    let mut kept: Vec<T> = Vec::new();
    for item in given {
        if !kept.contains(item) {
            kept.push(item.clone());
        }
    }
    if kept.is_empty() {
        kept = otherwise.to_vec();
    }
    kept
}

/// Seconds as an option takes them: "10" or "10s", 1 to 3,600, or 0 written as such (for an
/// option where 0 means none).
pub fn parse_seconds(text: &str) -> Result<u32, String> {
    let number = text.strip_suffix('s').unwrap_or(text);
    match number.parse::<u32>() {
        Ok(n) if (1..=3600).contains(&n) || (n == 0 && text.starts_with('0')) => Ok(n),
        _ => Err(format!(
            "expected whole seconds such as 10 or 10s, got {text:?}"
        )),
    }
}

/// A benchmark's options parsed from `args` as its subcommand `name` would be: for tests.
#[cfg(test)]
pub fn parse_args<A: clap::Args + clap::FromArgMatches>(
    name: &'static str,
    args: &[&str],
) -> Result<A, clap::Error> {
    let command = A::augment_args(clap::Command::new(name));
    let matches =
        command.try_get_matches_from(std::iter::once(name).chain(args.iter().copied()))?;
    A::from_arg_matches(&matches)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_go_and_nothing_given_takes_the_fallback() {
        assert_eq!(without_repeats(&[2, 1, 2, 3, 1], &[9]), [2, 1, 3]);
        assert_eq!(without_repeats::<u32>(&[], &[9, 8]), [9, 8]);
    }

    #[test]
    fn seconds_accept_an_optional_suffix() {
        assert_eq!(parse_seconds("10"), Ok(10));
        assert_eq!(parse_seconds("5s"), Ok(5));
        assert_eq!(parse_seconds("0"), Ok(0));
        assert!(parse_seconds("1m").is_err());
        assert!(parse_seconds("").is_err());
        assert!(parse_seconds("3601").is_err());
    }

    #[test]
    fn short_picks_the_short_defaults_and_out_wins() {
        assert_eq!(*defaults(false, &1, &2), 1);
        assert_eq!(*defaults(true, &1, &2), 2);
        let workspace = Path::new("/w");
        assert_eq!(
            results_file(None, workspace, "bench/results/x.md"),
            PathBuf::from("/w/bench/results/x.md")
        );
        assert_eq!(
            results_file(
                Some(Path::new("/tmp/y.md")),
                workspace,
                "bench/results/x.md"
            ),
            PathBuf::from("/tmp/y.md")
        );
    }
}
