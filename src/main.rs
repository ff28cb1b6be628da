//! The herdsman binary: parses the command line, loads the config, and calls the library; its
//! clients of a running herdsman (`ctl`, `top`) are in `cli`.

mod cli;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use herdsman::config::{LogFormat, LogLevel};
use herdsman::process::log_lines;
use herdsman::process::signals::Signals;
use herdsman::{Config, Server};

#[cfg(all(feature = "alloc-mimalloc", not(feature = "alloc-jemalloc")))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(feature = "alloc-jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// A load-balancing HTTP/1.1 reverse proxy.
#[derive(Parser)]
#[command(name = "herdsman", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run three demo backends in-process with the proxy in front (the embedded default).
    Demo {
        /// Where the proxy listens.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Where the admin API listens.
        #[arg(long, default_value = "127.0.0.1:9900")]
        admin: SocketAddr,
    },
    /// Run the proxy with a config file.
    Run {
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Check a config file and print a summary (and any warnings), or its problems (exit
    /// status 1).
    Check {
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Show and change a running herdsman's pools through its admin API.
    Ctl(cli::ctl::CtlArgs),
    /// Watch a running herdsman's workers and servers through its admin API (`q` quits).
    Top(cli::top::TopArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `run` starts its log once it has read the level from its config.
    if !matches!(cli.command, Command::Run { .. }) {
        log_lines::start(LogLevel::default(), LogFormat::default());
    }
    let result = match cli.command {
        Command::Check { config } => return check(&config),
        Command::Ctl(args) => return ctl(&args),
        Command::Top(args) => return top(&args),
        Command::Run { config: path } => run(path),
        Command::Demo { listen, admin } => demo(listen, admin),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("herdsman: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// `herdsman run`: reads the config, starts the log at its `[log] level`, and serves.
fn run(path: PathBuf) -> anyhow::Result<()> {
    let config = Config::load(&path)?;
    log_lines::start(config.log.level, config.log.format);
    serve(config, Some(path), None)
}

fn check(path: &std::path::Path) -> ExitCode {
    match Config::load(path) {
        Ok(config) => {
            // Written, not println!: a reader that stops early (`| head`) is not a crash.
            // The budget under the hard limit: `run` raises the soft one to it first.
            let (_, hard) = herdsman::config::descriptors::open_file_limit();
            let budget = herdsman::config::descriptors::Budget::of(&config, hard);
            let summary = format!(
                "{}: ok\n{}\n{}\n",
                path.display(),
                config.summary(),
                budget.describe(&config)
            );
            let mut stdout = std::io::stdout();
            let _ = std::io::Write::write_all(&mut stdout, summary.as_bytes());
            let _ = std::io::Write::flush(&mut stdout);
            // After the summary, on stderr as problems are; the file is valid: exit status 0.
            if let Some(warnings) = config.warnings_listed(&path.display().to_string()) {
                eprintln!("{warnings}");
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a `ctl` command with the token from the environment, if set; exit status 1 on failure.
fn ctl(args: &cli::ctl::CtlArgs) -> ExitCode {
    use cli::ctl;
    let token = ctl::token_from_env();
    match ctl::run(args, token.as_deref(), &mut std::io::stderr()) {
        Ok(output) => {
            print!("{output}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("herdsman ctl: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `top` with the token from the environment, as `ctl` does; exit status 1 on failure.
fn top(args: &cli::top::TopArgs) -> ExitCode {
    let token = cli::ctl::token_from_env();
    match cli::top::run(args, token.as_deref()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("herdsman top: {error}");
            ExitCode::FAILURE
        }
    }
}

fn demo(listen: SocketAddr, admin: SocketAddr) -> anyhow::Result<()> {
    let backends = herdsman::demo::start_backends().context("starting the demo backends")?;
    let config = herdsman::demo::config(listen, admin, &backends);
    serve(config, None, Some(herdsman::demo::banner))
}

/// What a banner is made from: the first listener's address and the admin API's.
type Banner = fn(SocketAddr, Option<SocketAddr>) -> String;

/// Starts the proxy, optionally prints a banner with its addresses, and runs until SIGTERM or
/// SIGINT (then stops gracefully) or a binary upgrade (then drains). SIGHUP reloads `path`, the
/// file the config came from.
fn serve(config: Config, path: Option<PathBuf>, banner: Option<Banner>) -> anyhow::Result<()> {
    use herdsman::process::signals::Ending;
    use herdsman::process::{drain, upgrade};

    let first_listener = config.listeners[0].name.clone();
    // Read before the binary file can be replaced: an upgrade starts whatever is there then.
    let relaunch = upgrade::Relaunch::of_this_process().context("finding this executable")?;
    let server = Server::start_with_file(config, path)?;
    // Handlers first: a SIGHUP or SIGUSR2 sent as soon as systemd (or the old process) hears
    // this one serves must find them, not end the process by default.
    let mut signals = Signals::install().context("installing signal handlers")?;
    upgrade::tell_ready();
    if let (Some(banner), Some(addr)) = (banner, server.listener_addr(&first_listener)) {
        print!("{}", banner(addr, server.admin_addr()));
    }
    let upgrade = || match upgrade::start_successor(&relaunch, &server.upgrade_sockets()) {
        Ok(successor) => Some(successor),
        Err(why) => {
            tracing::error!("upgrade failed, still serving: {why}");
            None
        }
    };
    let reopen_logs = || server.reopen_access_logs();
    let ending = signals
        .wait_for_stop(&server.registry(), &upgrade, &reopen_logs)
        .context("waiting for signals")?;
    let successor = match ending {
        Ending::Stop(signal) => {
            server.stop();
            tracing::info!(
                signal,
                open = server.open_connections(),
                "stopping gracefully: connections still open may finish within shutdown_grace"
            );
            None
        }
        Ending::HandedOver(successor) => {
            server.hand_over();
            tracing::info!(
                successor = successor.pid,
                open = server.open_connections(),
                "the new process serves; this one serves the connections it has until they end (or hard_stop_after), then exits"
            );
            Some(successor)
        }
    };
    let hurried = std::cell::Cell::new(false);
    let hurry = |signal| {
        tracing::info!(
            signal,
            "stopping sooner: connections still open may finish within shutdown_grace"
        );
        server.stop();
        hurried.set(true);
    };
    let open = || server.open_connections();
    let finished = || server.workers_finished();
    let drain = drain::Drain {
        open: &open,
        finished: &finished,
        predecessors: server.predecessors(),
        successor,
        hurried: &hurried,
    };
    signals.serve_while_draining(drain.run(), &hurry, &reopen_logs);
    server.wait();
    tracing::info!("stopped");
    Ok(())
}
