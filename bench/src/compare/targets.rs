//! Which rows a comparison measures: the proxies asked for, in order, with herdsman expanded into
//! one row per --herdsman-bin (or the workspace's own build) and per --intake mode, installing
//! missing peers and building herdsman on the way. A row that cannot run is kept, with the reason,
//! for the results file.

use std::path::Path;

use super::report::Session;
use super::settings::{first_mentions, CompareArgs};
use crate::kit::environment;
use crate::kit::proxies::{IntakeMode, ProxyKind, Target};
use crate::kit::tools::{self, HerdsmanBuild};

/// (row label, why it was not measured).
pub type NotRun = Vec<(String, String)>;

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
    let modes = first_mentions(&args.intake);
    session.intake_modes = modes.iter().map(ToString::to_string).collect();
    for kind in kinds {
        match kind {
            ProxyKind::Herdsman => {
                let builds = herdsman_builds(args, workspace)?;
                let labels: Vec<String> = builds.iter().map(|(label, _)| label.clone()).collect();
                session.build_pairs = build_pairs(&labels, &modes);
                for (build, program) in builds {
                    session.intake_pairs.extend(intake_pairs(&build, &modes));
                    for (label, intake) in intake_rows(&build, &modes) {
                        session.labels.push(label.clone());
                        session.herdsman_labels.push(label.clone());
                        match &program {
                            Ok(program) => targets.push(Target {
                                label,
                                kind,
                                program: program.clone(),
                                intake,
                            }),
                            Err(reason) => not_run.push((label, reason.clone())),
                        }
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
                        intake: None,
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
    tools::herdsman_builds(&args.herdsman_bins, workspace, args.output.no_build)
}

/// The rows of one herdsman build: one per intake mode, labelled "BUILD (MODE)", or, with no mode
/// asked for, the build's own label and herdsman's default intake.
fn intake_rows(build: &str, modes: &[IntakeMode]) -> Vec<(String, Option<IntakeMode>)> {
    if modes.is_empty() {
        return vec![(build.to_string(), None)];
    }
    modes
        .iter()
        .map(|&mode| (intake_label(build, mode), Some(mode)))
        .collect()
}

fn intake_label(build: &str, mode: IntakeMode) -> String {
    format!("{build} ({mode})")
}

/// (row, its build's reuseport row) for every other mode, when reuseport is among several modes.
fn intake_pairs(build: &str, modes: &[IntakeMode]) -> Vec<(String, String)> {
    if modes.len() < 2 || !modes.contains(&IntakeMode::Reuseport) {
        return Vec::new();
    }
    let reference = intake_label(build, IntakeMode::Reuseport);
    modes
        .iter()
        .filter(|&&mode| mode != IntakeMode::Reuseport)
        .map(|&mode| (intake_label(build, mode), reference.clone()))
        .collect()
}

/// (row, the first build's row in the same intake mode) for every later build, when several
/// herdsman builds are measured (--herdsman-bin before=… --herdsman-bin after=…): after ÷ before.
fn build_pairs(builds: &[String], modes: &[IntakeMode]) -> Vec<(String, String)> {
    let Some((first, later)) = builds.split_first() else {
        return Vec::new();
    };
    let references = intake_rows(first, modes);
    later
        .iter()
        .flat_map(|build| {
            let rows = intake_rows(build, modes);
            rows.into_iter()
                .zip(references.clone())
                .map(|((row, _), (reference, _))| (row, reference))
        })
        .collect()
}

/// Fills in the versions of everything measured or measuring, and what the machine is.
pub fn record_versions(session: &mut Session, wrk_path: &Path, targets: &[Target]) {
    let mut versions = Vec::new();
    for target in targets {
        let args: &[&str] = match target.kind {
            ProxyKind::Herdsman => &["--version"],
            ProxyKind::Haproxy => &["-v"],
            ProxyKind::Nginx => &["-v"],
        };
        let mut line = tools::version_line(&target.program, args);
        if target.kind == ProxyKind::Herdsman {
            // Every work-in-progress build says "0.1.0"; where and when it was built tells them apart.
            let built = tools::version_line(
                Path::new("date"),
                &[
                    "-u",
                    "-r",
                    &target.program.to_string_lossy(),
                    "+%Y-%m-%d %H:%M:%S UTC",
                ],
            );
            line = format!("{line} ({}, built {built})", target.program.display());
        }
        versions.push((target.label.clone(), line));
    }
    versions.push(("wrk".into(), tools::version_line(wrk_path, &["-v"])));
    versions.push((
        "rustc".into(),
        tools::version_line(Path::new("rustc"), &["-V"]),
    ));
    session.versions = versions;
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    session.machine = vec![
        ("nproc".into(), nproc.to_string()),
        ("cpu".into(), environment::cpu_model()),
        (
            "kernel".into(),
            std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
        ),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use IntakeMode::{Balanced, Exclusive, Reuseport};

    #[test]
    fn no_intake_keeps_the_plain_row() {
        assert_eq!(
            intake_rows("herdsman", &[]),
            vec![("herdsman".to_string(), None)]
        );
        assert!(intake_pairs("herdsman", &[]).is_empty());
    }

    #[test]
    fn each_mode_is_a_row_labelled_with_it() {
        assert_eq!(
            intake_rows("herdsman", &[Balanced, Reuseport]),
            vec![
                ("herdsman (balanced)".to_string(), Some(Balanced)),
                ("herdsman (reuseport)".to_string(), Some(Reuseport)),
            ]
        );
        assert_eq!(
            intake_rows("jemalloc", &[Exclusive])[0].0,
            "jemalloc (exclusive)"
        );
    }

    #[test]
    fn every_other_mode_is_paired_with_reuseport_of_the_same_build() {
        assert_eq!(
            intake_pairs("herdsman", &[Balanced, Reuseport, Exclusive]),
            vec![
                (
                    "herdsman (balanced)".to_string(),
                    "herdsman (reuseport)".to_string()
                ),
                (
                    "herdsman (exclusive)".to_string(),
                    "herdsman (reuseport)".to_string()
                ),
            ]
        );
        // One mode, or no reuseport to divide by: no pair.
        assert!(intake_pairs("herdsman", &[Reuseport]).is_empty());
        assert!(intake_pairs("herdsman", &[Balanced, Exclusive]).is_empty());
    }

    #[test]
    fn repeated_modes_count_once() {
        assert_eq!(
            first_mentions(&[Balanced, Reuseport, Balanced]),
            vec![Balanced, Reuseport]
        );
    }

    #[test]
    fn later_builds_are_paired_with_the_first_in_the_same_mode() {
        let builds = ["before".to_string(), "after".to_string()];
        assert_eq!(
            build_pairs(&builds, &[]),
            vec![("after".to_string(), "before".to_string())]
        );
        assert_eq!(
            build_pairs(&builds, &[Balanced, Reuseport]),
            vec![
                (
                    "after (balanced)".to_string(),
                    "before (balanced)".to_string()
                ),
                (
                    "after (reuseport)".to_string(),
                    "before (reuseport)".to_string()
                ),
            ]
        );
        assert!(build_pairs(&builds[..1], &[]).is_empty());
    }
}
