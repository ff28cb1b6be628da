//! What every benchmark's options resolve alike: the full or the `--short` defaults, and the
//! results file (`--out`, or the chosen defaults' path under the workspace).

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
