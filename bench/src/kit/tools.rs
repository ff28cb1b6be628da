//! The outside programs a comparison needs: finding haproxy, nginx, varnishd, caddy, redis-server,
//! wrk, h2load and openssl (installing the Debian packages when one is missing), building herdsman
//! in this workspace (into its target/ or the one CARGO_TARGET_DIR names), the herdsman builds
//! asked for as rows (`--herdsman-bin [LABEL=]PATH`), and asking each its version.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::kit::process::run_with_timeout;

/// A tool this benchmark runs and the Debian package that provides it.
pub struct Tool {
    pub name: &'static str,
    pub package: &'static str,
}

pub const WRK: Tool = Tool {
    name: "wrk",
    package: "wrk",
};
pub const HAPROXY: Tool = Tool {
    name: "haproxy",
    package: "haproxy",
};
pub const NGINX: Tool = Tool {
    name: "nginx",
    package: "nginx-light",
};
/// HTTP/1.1 and HTTP/2 load over TLS, from nghttp2's tools.
pub const H2LOAD: Tool = Tool {
    name: "h2load",
    package: "nghttp2-client",
};
/// Varnish Cache, a peer of herdsman's cache (`cache`).
pub const VARNISH: Tool = Tool {
    name: "varnishd",
    package: "varnish",
};
/// Caddy (Debian's 2.6), a peer for header rules and compression (`rules`).
pub const CADDY: Tool = Tool {
    name: "caddy",
    package: "caddy",
};
/// Redis, where `rules` shares a rate limit.
pub const REDIS: Tool = Tool {
    name: "redis-server",
    package: "redis-server",
};
/// The command line of OpenSSL: certificates, and `s_time` for handshakes.
pub const OPENSSL: Tool = Tool {
    name: "openssl",
    package: "openssl",
};

/// Bounds on the slow outside steps, so a stuck mirror or build cannot hang the benchmark forever.
const APT_LOCK_WAIT: Duration = Duration::from_secs(600);
const APT_STEP_LIMIT: Duration = Duration::from_secs(1200);
const BUILD_LIMIT: Duration = Duration::from_secs(1800);

/// Where `name` is: on PATH, or in the sbin directories a non-root PATH often lacks.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The path of every tool in `tools`, installing the missing ones with apt-get (one update, one
/// install) after any apt or dpkg already running has finished.
pub fn ensure_installed(tools: &[&Tool]) -> anyhow::Result<Vec<PathBuf>> {
    let missing: Vec<&&Tool> = tools
        .iter()
        .filter(|t| find_program(t.name).is_none())
        .collect();
    if !missing.is_empty() {
        wait_for_package_manager();
        let still_missing: Vec<&str> = missing
            .iter()
            .filter(|t| find_program(t.name).is_none())
            .map(|t| t.package)
            .collect();
        if !still_missing.is_empty() {
            install(&still_missing)?;
        }
    }
    tools
        .iter()
        .map(|t| {
            find_program(t.name).with_context(|| {
                format!("{} is still missing after installing {}", t.name, t.package)
            })
        })
        .collect()
}

/// Waits (bounded) while another apt-get or dpkg runs; it may be installing these very packages.
fn wait_for_package_manager() {
    let deadline = Instant::now() + APT_LOCK_WAIT;
    let mut announced = false;
    while Instant::now() < deadline && ["apt-get", "apt", "dpkg"].iter().any(|p| is_running(p)) {
        if !announced {
            eprintln!("waiting for a running apt/dpkg to finish…");
            announced = true;
        }
        thread::sleep(Duration::from_secs(2));
    }
}

fn is_running(name: &str) -> bool {
    Command::new("pgrep")
        .arg("-x")
        .arg(name)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Installs Debian packages with apt-get (root only; otherwise says which command would).
pub fn install(packages: &[&str]) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "missing {}; install with: sudo apt-get install -y {}",
            packages.join(", "),
            packages.join(" ")
        );
    }
    eprintln!("installing {} with apt-get…", packages.join(" "));
    let lock_wait = format!("DPkg::Lock::Timeout={}", APT_LOCK_WAIT.as_secs());
    let mut update = Command::new("apt-get");
    update.args(["-o", &lock_wait, "update"]);
    apt(update)?;
    let mut command = Command::new("apt-get");
    command
        .args(["-o", &lock_wait, "install", "-y", "--no-install-recommends"])
        .args(packages);
    apt(command)
}

fn apt(mut command: Command) -> anyhow::Result<()> {
    command.env("DEBIAN_FRONTEND", "noninteractive");
    let shown = format!("{command:?}");
    let output = run_with_timeout(command, APT_STEP_LIMIT)?;
    if !output.status.success() {
        bail!(
            "{shown} failed: {}",
            tail(&String::from_utf8_lossy(&output.stderr), 10)
        );
    }
    Ok(())
}

/// The workspace root: the parent of this package's manifest directory when it still exists
/// (the usual `cargo run`), else the nearest directory above the current one whose Cargo.toml
/// declares a `[workspace]`.
pub fn workspace_root() -> anyhow::Result<PathBuf> {
    let compiled_in = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if is_workspace(&compiled_in) {
        return Ok(compiled_in.canonicalize()?);
    }
    let mut dir = std::env::current_dir()?;
    loop {
        if is_workspace(&dir) {
            return Ok(dir);
        }
        if !dir.pop() {
            bail!("no Cargo workspace found above the current directory");
        }
    }
}

fn is_workspace(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Cargo.toml"))
        .map(|text| text.lines().any(|l| l.trim() == "[workspace]"))
        .unwrap_or(false)
}

/// The herdsman binary `cargo build --release -p herdsman` makes in this workspace.
pub fn default_herdsman(workspace: &Path) -> PathBuf {
    workspace.join("target/release/herdsman")
}

/// The workspace's release herdsman, built first unless `no_build`.
pub fn herdsman_binary(workspace: &Path, no_build: bool) -> anyhow::Result<PathBuf> {
    if !no_build {
        return build_herdsman(workspace);
    }
    let binary = default_herdsman(workspace);
    if !binary.exists() {
        bail!(
            "{} does not exist (--no-build): build it first",
            binary.display()
        );
    }
    Ok(binary)
}

/// The target directory a build of this workspace uses: CARGO_TARGET_DIR when it is set (relative
/// to the current directory, as cargo takes it), else the workspace's target/.
pub fn target_dir(workspace: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").filter(|dir| !dir.is_empty()) {
        Some(dir) => std::env::current_dir()
            .map(|here| here.join(&dir))
            .unwrap_or_else(|_| PathBuf::from(dir)),
        None => workspace.join("target"),
    }
}

/// The release herdsman in `target_dir(workspace)`, built there first unless `no_build`: for a
/// benchmark run beside someone else's builds, which CARGO_TARGET_DIR keeps out of their way.
pub fn herdsman_binary_in_target_dir(workspace: &Path, no_build: bool) -> anyhow::Result<PathBuf> {
    let target = target_dir(workspace);
    if !no_build {
        return build_herdsman_into(workspace, &target, &[]);
    }
    let binary = target.join("release/herdsman");
    if !binary.exists() {
        bail!(
            "{} does not exist (--no-build): build it first",
            binary.display()
        );
    }
    Ok(binary)
}

/// Builds (or confirms up to date) herdsman's release binary. The error says why it failed.
pub fn build_herdsman(workspace: &Path) -> anyhow::Result<PathBuf> {
    build_herdsman_into(workspace, &workspace.join("target"), &[])
}

/// Builds herdsman's release binary with `features` into `target_dir` (so a special build leaves
/// the normal binary alone) and returns its path. The error says why it failed.
pub fn build_herdsman_into(
    workspace: &Path,
    target_dir: &Path,
    features: &[&str],
) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    let mut shown = "cargo build --release -p herdsman".to_string();
    // --target-dir pins the output, whatever CARGO_TARGET_DIR says.
    command
        .current_dir(workspace)
        .args(["build", "--release", "-p", "herdsman", "--target-dir"])
        .arg(target_dir);
    if !features.is_empty() {
        let features = features.join(",");
        shown.push_str(&format!(" --features {features}"));
        command.args(["--features", &features]);
    }
    eprintln!("building herdsman: {shown} …");
    let output = run_with_timeout(command, BUILD_LIMIT)?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("error"))
            .take(5)
            .collect();
        bail!(
            "{shown} failed: {}",
            if errors.is_empty() {
                tail(&stderr, 5)
            } else {
                errors.join(" | ")
            }
        );
    }
    let binary = target_dir.join("release/herdsman");
    if !binary.exists() {
        bail!("cargo build succeeded but {} is missing", binary.display());
    }
    Ok(binary)
}

/// The TLS benchmarks' clients (`tls`, `tls-load`): wrk for keep-alive load over https, h2load
/// for batches of full handshakes, openssl for the certificates (and `tls`'s resumed handshakes).
pub struct TlsClients {
    pub wrk: PathBuf,
    pub h2load: PathBuf,
    pub openssl: PathBuf,
}

impl TlsClients {
    /// The three, installed first where missing (`ensure_installed`).
    pub fn ensure_installed() -> anyhow::Result<TlsClients> {
        let found = ensure_installed(&[&WRK, &H2LOAD, &OPENSSL])?;
        let [wrk, h2load, openssl] = <[PathBuf; 3]>::try_from(found)
            .map_err(|_| anyhow::anyhow!("three client programs expected"))?;
        Ok(TlsClients {
            wrk,
            h2load,
            openssl,
        })
    }

    /// Their versions, as a results file's setup lines.
    pub fn version_lines(&self) -> Vec<(String, String)> {
        vec![
            ("wrk".into(), version_line(&self.wrk, &["-v"])),
            ("h2load".into(), version_line(&self.h2load, &["--version"])),
            ("openssl".into(), version_line(&self.openssl, &["version"])),
        ]
    }
}

/// A herdsman row to measure: its label, and its binary or why there is none.
pub type HerdsmanBuild = (String, Result<PathBuf, String>);

/// The herdsman rows asked for with `--herdsman-bin [LABEL=]PATH` (repeated to compare builds,
/// such as a before and an after), each binary made absolute (every proxy runs in a directory of
/// its own), "herdsman" when unlabelled; without any, the workspace's release build labelled
/// "herdsman", built first unless `no_build`. A row whose binary is missing or fails to build
/// carries the reason; only two rows with one label are an error.
pub fn herdsman_builds(
    specs: &[String],
    workspace: &Path,
    no_build: bool,
) -> anyhow::Result<Vec<HerdsmanBuild>> {
    if specs.is_empty() {
        let default = default_herdsman(workspace);
        let program = if no_build {
            if default.exists() {
                Ok(default)
            } else {
                Err(format!("{} does not exist (--no-build)", default.display()))
            }
        } else {
            build_herdsman(workspace).map_err(|e| format!("{e:#}"))
        };
        return Ok(vec![("herdsman".to_string(), program)]);
    }
    let mut builds: Vec<HerdsmanBuild> = Vec::new();
    for spec in specs {
        let (label, path) = match spec.split_once('=') {
            Some((label, path)) => (label.trim().to_string(), PathBuf::from(path)),
            None => ("herdsman".to_string(), PathBuf::from(spec)),
        };
        if builds.iter().any(|(l, _)| *l == label) {
            bail!("two --herdsman-bin rows are labelled {label:?}; write LABEL=PATH");
        }
        let program = match path.canonicalize() {
            Ok(absolute) if absolute.is_file() => Ok(absolute),
            _ => Err(format!("{} is not a file", path.display())),
        };
        builds.push((label, program));
    }
    Ok(builds)
}

/// The first line a program prints for `args` (stdout or, like `nginx -v`, stderr).
pub fn version_line(program: &Path, args: &[&str]) -> String {
    let mut command = Command::new(program);
    command.args(args);
    match run_with_timeout(command, Duration::from_secs(10)) {
        Ok(output) => {
            let text = [output.stdout, output.stderr].concat();
            String::from_utf8_lossy(&text)
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("(printed nothing)")
                .to_string()
        }
        Err(e) => format!("(unknown: {e:#})"),
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn herdsman_rows_are_labelled_absolute_and_each_once() {
        let exe = std::env::current_exe().unwrap();
        let specs = [
            format!("before={}", exe.display()),
            "after=/no/such/herdsman".to_string(),
        ];
        let builds = herdsman_builds(&specs, Path::new("/w"), true).unwrap();
        assert_eq!(builds[0], ("before".to_string(), Ok(exe.clone())));
        assert_eq!(builds[1].0, "after");
        assert_eq!(
            builds[1].1,
            Err("/no/such/herdsman is not a file".to_string())
        );
        // Unlabelled: "herdsman"; two rows of one label cannot be told apart.
        let one = herdsman_builds(&[exe.display().to_string()], Path::new("/w"), true).unwrap();
        assert_eq!(one[0].0, "herdsman");
        let twice = [exe.display().to_string(), exe.display().to_string()];
        assert!(herdsman_builds(&twice, Path::new("/w"), true).is_err());
        // None asked for, without building: the workspace's release binary, which must exist.
        let none = herdsman_builds(&[], Path::new("/no/such/workspace"), true).unwrap();
        assert_eq!(none[0].0, "herdsman");
        assert!(none[0].1.as_ref().unwrap_err().contains("--no-build"));
    }
}
