//! Which rows a comparison measures: the proxies asked for, in order, with herdsman expanded into
//! one row per --herdsman-bin (or the workspace's own build), installing missing peers and building
//! herdsman on the way. A row that cannot run is kept, with the reason, for the results file.

use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::compare::CompareArgs;
use crate::proxies::{ProxyKind, Target};
use crate::report::Session;
use crate::tools;

/// (row label, why it was not measured).
pub type NotRun = Vec<(String, String)>;
/// (row label, the herdsman binary, or why there is none).
type HerdsmanBuild = (String, Result<PathBuf, String>);

/// The targets to start, in order, and those that cannot be (with why). Installs missing peers and
/// builds herdsman as needed.
pub fn resolve_targets(
    args: &CompareArgs,
    workspace: &Path,
    session: &mut Session,
) -> anyhow::Result<(Vec<Target>, NotRun)> {
    let mut targets = Vec::new();
    let mut not_run = Vec::new();
    let mut kinds = args.proxies.clone();
    if !args.herdsman_bins.is_empty() && !kinds.contains(&ProxyKind::Herdsman) {
        kinds.insert(0, ProxyKind::Herdsman);
    }
    kinds.dedup();
    for kind in kinds {
        match kind {
            ProxyKind::Herdsman => {
                for (label, program) in herdsman_builds(args, workspace)? {
                    session.labels.push(label.clone());
                    session.herdsman_labels.push(label.clone());
                    match program {
                        Ok(program) => targets.push(Target {
                            label,
                            kind,
                            program,
                        }),
                        Err(reason) => not_run.push((label, reason)),
                    }
                }
            }
            ProxyKind::Haproxy | ProxyKind::Nginx => {
                let tool = if kind == ProxyKind::Haproxy {
                    &tools::HAPROXY
                } else {
                    &tools::NGINX
                };
                session.labels.push(kind.to_string());
                session.peer_labels.push(kind.to_string());
                match tools::ensure_installed(&[tool]) {
                    Ok(mut programs) => targets.push(Target {
                        label: kind.to_string(),
                        kind,
                        program: programs.remove(0),
                    }),
                    Err(e) => not_run.push((kind.to_string(), format!("{e:#}"))),
                }
            }
        }
    }
    Ok((targets, not_run))
}

/// Every herdsman row.
fn herdsman_builds(args: &CompareArgs, workspace: &Path) -> anyhow::Result<Vec<HerdsmanBuild>> {
    if args.herdsman_bins.is_empty() {
        let default = tools::default_herdsman(workspace);
        let program = if args.no_build {
            if default.exists() {
                Ok(default)
            } else {
                Err(format!("{} does not exist (--no-build)", default.display()))
            }
        } else {
            tools::build_herdsman(workspace).map_err(|e| format!("{e:#}"))
        };
        return Ok(vec![("herdsman".to_string(), program)]);
    }
    let mut builds: Vec<HerdsmanBuild> = Vec::new();
    for spec in &args.herdsman_bins {
        let (label, path) = match spec.split_once('=') {
            Some((label, path)) => (label.trim().to_string(), PathBuf::from(path)),
            None => ("herdsman".to_string(), PathBuf::from(spec)),
        };
        if builds.iter().any(|(l, _)| *l == label) {
            bail!("two --herdsman-bin rows are labelled {label:?}; write LABEL=PATH");
        }
        // Absolute, because each proxy runs with its scratch directory as working directory.
        let program = match path.canonicalize() {
            Ok(absolute) if absolute.is_file() => Ok(absolute),
            _ => Err(format!("{} is not a file", path.display())),
        };
        builds.push((label, program));
    }
    Ok(builds)
}
