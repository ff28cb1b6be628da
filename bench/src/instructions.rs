//! `herdsman-bench instructions` (issue 45): herdsman's instructions per request, counted by
//! callgrind, for keep-alive requests, keep-alive requests over TLS, a new connection per request
//! keep-alive with the access log on and keep-alive with issue 42's header rules and a rate limit,
//! each against herdsman's release build with its defaults but one worker and the access log
//! off; printed as a Markdown table beside the budgets of
//! bench/budget.toml, and with `--check`, failing when a budgeted case counts more than 2% over
//! its budget (bench/tests/budget.rs runs it so in the test suite). Counting is repeatable to a
//! fraction of a percent whatever else the machine does, so this is a budget, not a timing.
//! Every process it starts is stopped when it returns, on success or error.
//!
//! Layout:
//! - `settings` — the options, the full and the short defaults, the builds to count
//! - `cases`    — the five cases and herdsman's configuration for each
//! - `measure`  — one case counted, and the checks that its count is what it claims
//! - `budget`   — bench/budget.toml read, and the 2% rule
//! - `report`   — the tables printed

mod budget;
mod cases;
mod measure;
mod report;
mod settings;

pub use settings::InstructionsArgs;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::callgrind::Callgrind;
use crate::kit::process::{free_port, set_priority};
use crate::kit::scratch::ScratchDir;
use crate::kit::{backend, certificates, tls_client, tools};
use budget::Budget;
use measure::{Bench, CLIENTS_NICE};
use report::{BuildRuns, Method};
use settings::{Build, Settings};

pub fn run(args: InstructionsArgs) -> anyhow::Result<()> {
    let workspace = tools::workspace_root()?;
    let settings = Settings::resolve(&args, &workspace)?;
    // Read first, so that a missing or broken budget fails before anything is counted.
    let budget = if settings.check || settings.budget_file.exists() {
        Some(Budget::read(&settings.budget_file)?)
    } else {
        None
    };
    let binaries = settings
        .builds
        .iter()
        .map(|build| binary(build, &workspace, settings.no_build))
        .collect::<anyhow::Result<Vec<PathBuf>>>()?;
    let callgrind = Callgrind::ensure_installed()?;
    let [wrk, openssl] =
        <[PathBuf; 2]>::try_from(tools::ensure_installed(&[&tools::WRK, &tools::OPENSSL])?)
            .map_err(|_| anyhow::anyhow!("two client programs expected"))?;

    let scratch = ScratchDir::create()?;
    let certificates = certificates::make(&openssl, scratch.path())?;
    let pinned = tls_client::read_certificates(&[&certificates.ecdsa.chain])?;
    let tls_client = tls_client::client_config(pinned, false)?;
    let backend_port = free_port()?;
    let backend = backend::start(backend_port, scratch.path())?;
    let clients_nice = set_priority(backend.pid(), CLIENTS_NICE).then_some(CLIENTS_NICE);
    if clients_nice.is_none() {
        eprintln!(
            "instructions: the clients' priority cannot be raised here (not root): on a busy \
             machine the new-connection count may move"
        );
    }
    let bench = Bench {
        callgrind: &callgrind,
        wrk: &wrk,
        backend_port,
        certificate: &certificates.ecdsa,
        tls_client: &tls_client,
        warm_up: Duration::from_secs(settings.warm_up.into()),
        counted: Duration::from_secs(settings.seconds.into()),
        clients_nice,
    };
    let started = Instant::now();
    let mut builds = Vec::new();
    for (build, binary) in settings.builds.iter().zip(&binaries) {
        let mut runs = Vec::new();
        for &case in &settings.cases {
            let dir = scratch.path().join(format!("{}-{case}", builds.len()));
            std::fs::create_dir_all(&dir)?;
            let run = bench
                .measure(binary, case, &dir)
                .with_context(|| format!("counting {case} with {}", build.label))?;
            eprintln!(
                "instructions: {}, {case}: {} requests, {:.0} instructions each ({:.0} s in)",
                build.label,
                run.requests,
                run.per_request(),
                started.elapsed().as_secs_f64()
            );
            runs.push(run);
        }
        builds.push(BuildRuns {
            label: build.label.clone(),
            binary: binary.clone(),
            version: tools::version_line(binary, &["--version"]),
            runs,
        });
    }
    let method = Method {
        valgrind: callgrind.version_line(),
        // "wrk debian/4.1.0-3+b2 [epoll] Copyright (C) 2012 Will Glozer": the version is enough.
        wrk: tools::version_line(&wrk, &["-v"])
            .split(" Copyright")
            .next()
            .unwrap_or_default()
            .to_string(),
        warm_up: settings.warm_up,
        seconds: settings.seconds,
        clients_nice,
    };
    print!("{}", report::markdown(&method, &builds, budget.as_ref()));
    if settings.check {
        check(&builds, budget.as_ref().context("the budget")?)?;
    }
    Ok(())
}

/// The build's binary, absolute (herdsman runs in its case's directory): as given, or the
/// workspace's release build, built first unless `no_build`.
fn binary(build: &Build, workspace: &Path, no_build: bool) -> anyhow::Result<PathBuf> {
    match &build.binary {
        Some(path) => path
            .canonicalize()
            .ok()
            .filter(|absolute| absolute.is_file())
            .with_context(|| format!("--herdsman {}: no such file", path.display())),
        None => tools::herdsman_binary(workspace, no_build),
    }
}

/// Fails with every budgeted case of every build that counted more than 2% over its budget,
/// naming the figure and the budget.
fn check(builds: &[BuildRuns], budget: &Budget) -> anyhow::Result<()> {
    let several = builds.len() > 1;
    let failures: Vec<String> = builds
        .iter()
        .flat_map(|build| {
            let label = several.then_some(build.label.as_str());
            build
                .runs
                .iter()
                .filter(|run| run.case.budgeted())
                .filter_map(move |run| budget::failure(label, run.case, run.per_request(), budget))
        })
        .collect();
    if !failures.is_empty() {
        bail!(
            "over the instruction budget:\n{}\nA change that must spend more raises the budget in \
             {} in the same commit, with the reason in its message.",
            failures.join("\n"),
            budget.file.display()
        );
    }
    Ok(())
}
