//! `reloadlet`: parses the command line, sets up logging and the runtime, and runs one mode
//! (`src/wiring/`).

use reloadlet::config::agent::BackgroundSched;
use reloadlet::config::{Cli, Command, LogFormat};
use reloadlet::wiring;
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

/// The name kubectl runs a plugin by (`kubectl reloadlet …` finds `kubectl-reloadlet` on PATH,
/// e.g. a link to this binary).
const KUBECTL_PLUGIN: &str = "kubectl-reloadlet";

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let format = cli.log_format;
    init_tracing(format);
    // A panic while handling one object is caught and logged by its loop
    // (reloadlet::contain); any other keeps the default hook's text on stderr and ends the
    // process as before.
    reloadlet::contain::install_panic_hook();
    reloadlet::host::memory::limit_malloc_arenas();
    if matches!(cli.command, Some(Command::Controller(_))) {
        // One arena and a fixed mmap threshold: at 100,000 pods glibc's defaults left a
        // fifth of the controller's heap in free holes (docs/controller.md, "Memory").
        reloadlet::host::memory::tune_for_controller();
    }
    // The agent's volume → signal path runs on its own thread (`agent::hot_thread`); this
    // runtime carries the API watches, Events, evictions, retries and the HTTP server.
    let background = match cli.command {
        None => cli.run.watch.background_sched,
        Some(_) => BackgroundSched::Normal,
    };
    let runtime = match wiring::runtime::build(background) {
        Ok(rt) => rt,
        Err(e) => return fail(format, &format!("cannot start the async runtime: {e}")),
    };
    match cli.command {
        Some(Command::Explain(args)) => match runtime.block_on(wiring::explain::report(args)) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(reason) => fail(format, &reason.to_string()),
        },
        Some(Command::Status(args)) => match runtime.block_on(wiring::status::run(args)) {
            Ok(answer) => {
                print!("{}", answer.text);
                if answer.all_current {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(reason) => fail(format, &reason.to_string()),
        },
        Some(Command::Controller(args)) => {
            // The UTS namespace's hostname, as gethostname(2) returns it.
            let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim_end().to_owned());
            let settings = match args.settings(hostname) {
                Ok(s) => s,
                Err(e) => return fail(format, &e),
            };
            let settings_format = settings.log_format;
            init_tracing(settings_format);
            runtime.block_on(async {
                let shutdown = CancellationToken::new();
                tokio::spawn(wiring::shutdown_on_signal(shutdown.clone()));
                match wiring::controller::serve(settings, shutdown).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => fail(settings_format, &e.to_string()),
                }
            })
        }
        None => {
            let settings = match cli.run.settings(format) {
                Ok(s) => s,
                Err(e) => return fail(format, &e),
            };
            let format = settings.log_format;
            match runtime.block_on(wiring::agent::run(settings)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(wiring::agent::RunError::Startup(reason)) => fail(format, &reason),
                Err(wiring::agent::RunError::Stopped(e)) => {
                    tracing::error!(error = %e, "reloadlet stopped");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// The command line. Run as the kubectl plugin (argv[0] `kubectl-reloadlet`), usage reads
/// `kubectl reloadlet …` and a subcommand is required: `kubectl reloadlet` alone must print the
/// help, never start the node agent on an operator's machine.
fn parse() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let plugin = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .is_some_and(|n| n == KUBECTL_PLUGIN);
    let mut command = Cli::command();
    if plugin {
        command = command
            .bin_name("kubectl reloadlet")
            .subcommand_required(true)
            .arg_required_else_help(true);
    }
    let matches = command.try_get_matches()?;
    Cli::from_arg_matches(&matches)
}

/// A fatal startup error: one line on stderr (a JSON object with `--log-format json`),
/// exit status 2.
fn fail(format: LogFormat, reason: &str) -> ExitCode {
    match format {
        LogFormat::Json => tracing::error!(exit_code = 2, "{reason}"),
        LogFormat::Text => eprintln!("reloadlet: {reason}"),
    }
    ExitCode::from(2)
}

/// A command line clap refused: its own text, or one JSON line when JSON logs were asked for
/// (the flag or RELOADLET_LOG_FORMAT), so log pipelines see it.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let args: Vec<String> = std::env::args().collect();
    let json = std::env::var("RELOADLET_LOG_FORMAT").is_ok_and(|v| v == "json")
        || args
            .windows(2)
            .any(|w| w[0] == "--log-format" && w[1] == "json")
        || args.iter().any(|a| a == "--log-format=json");
    if !json {
        e.exit();
    }
    init_tracing(LogFormat::Json);
    let text = e.kind().to_string();
    let detail = e
        .to_string()
        .lines()
        .find(|l| l.starts_with("error:"))
        .map(|l| l.trim_start_matches("error:").trim().to_string())
        .unwrap_or(text);
    fail(LogFormat::Json, &detail)
}

fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
