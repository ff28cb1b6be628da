//! What every benchmark's options resolve alike: the full or the `--short` defaults, and the
//! results file (`--out`, or the chosen defaults' path under the workspace).

use std::path::{Path, PathBuf};

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

#[cfg(test)]
mod tests {
    use super::*;

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
