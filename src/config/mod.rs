//! Command line and environment, parsed once into validated settings and passed explicitly:
//! [`agent`] (the node agent, the default command), [`controller`] (`reloadlet controller`),
//! [`scope`] (which pods are acted on, and the parsers every mode shares).

pub mod agent;
pub mod controller;
pub mod controller_lease;
pub mod scope;
pub mod status;

pub use agent::{RunArgs, Settings};
pub use controller_lease::{ControllerLeaseArgs, LEASE_NAME};
pub use scope::{LogFormat, ScopeArgs};

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "reloadlet",
    version,
    about = "Reloads pods in place when the kubelet projects new ConfigMap or Secret content",
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Log format; fatal startup errors follow it too (json: one JSON object per line).
    #[arg(long, env = "RELOADLET_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Fast projection: nudge the kubelet to re-project a changed ConfigMap/Secret at once
    /// (one small Deployment per cluster; see docs/controller.md).
    Controller(crate::config::controller::ControllerArgs),
    /// Print what reloadlet would do for a pod, and why.
    ///
    /// Run it inside the agent's pod (`kubectl exec ds/reloadlet -- reloadlet explain --pod
    /// NS/NAME`): it reads the same RELOADLET_* environment as the agent, so it applies the
    /// same filters.
    Explain(ExplainArgs),
    /// Every pod that consumes a ConfigMap or Secret, and whether it runs its current data.
    ///
    /// Exits 0 only when every consumer is current (1 otherwise, 2 on an error); with --wait,
    /// waits for that. Needs read access to pods and the object's metadata only (never a
    /// Secret's data). Also installed as the kubectl plugin `kubectl reloadlet status`.
    Status(status::StatusArgs),
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The pod, as NAMESPACE/NAME.
    #[arg(long, value_parser = parse_pod_ref)]
    pub pod: (String, String),
    /// The node this agent serves (from the downward API: spec.nodeName); a pod on another
    /// node is explained with the command that reaches that node's agent.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// Where the host's /proc is (the agent needs hostPID).
    #[arg(long, env = "RELOADLET_PROC_ROOT", default_value = "/proc")]
    pub proc_root: PathBuf,
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// The agent's pacing flags (environment), for the pod's pacing section.
    #[command(flatten)]
    pub pacing: scope::PacingArgs,
    /// The agent's state directory: its saved pacers show what is deferred for the pod (read
    /// only).
    #[arg(
        long,
        env = "RELOADLET_STATE_DIR",
        default_value = "/var/lib/reloadlet"
    )]
    pub state_dir: PathBuf,
    /// Where the controller's Lease is (who grants `action: restart`), as the agent's flags.
    #[command(flatten)]
    pub controller_lease: ControllerLeaseArgs,
}

fn parse_pod_ref(s: &str) -> Result<(String, String), crate::core::invalid::Invalid> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(crate::invalid!("{s:?} is not NAMESPACE/NAME")),
    }
}

#[cfg(test)]
mod tests {
    use super::scope::parse_byte_quantity;
    use super::*;
    use std::time::Duration;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("reloadlet").chain(args.iter().copied()))
    }

    #[test]
    fn flags_parse_with_defaults() {
        let cli = parse(&[
            "--node-name",
            "n1",
            "--debounce",
            "0s",
            "--namespaces",
            "a,b",
        ])
        .unwrap();
        assert_eq!(cli.run.watch.debounce, Duration::ZERO);
        assert_eq!(cli.run.listen.port(), 9102);
        assert_eq!(cli.run.scope.namespaces, ["a", "b"]);
        assert_eq!(
            cli.run.paths.kubelet_root,
            PathBuf::from("/var/lib/kubelet")
        );
        let cli = parse(&["--node-name", "n1"]).unwrap();
        assert_eq!(cli.run.watch.debounce, Duration::from_millis(250));
        assert_eq!(cli.run.watch.hot_thread_slice, Duration::from_micros(100));
        let cli = parse(&["--node-name", "n1", "--hot-thread-slice", "0s"]).unwrap();
        assert_eq!(cli.run.watch.hot_thread_slice, Duration::ZERO);
        use agent::BackgroundSched;
        let cli = parse(&["--node-name", "n1"]).unwrap();
        assert_eq!(cli.run.watch.background_sched, BackgroundSched::Idle);
        let cli = parse(&["--node-name", "n1", "--background-sched", "normal"]).unwrap();
        assert_eq!(cli.run.watch.background_sched, BackgroundSched::Normal);
        assert!(parse(&["--node-name", "n1", "--background-sched", "low"]).is_err());
    }

    #[test]
    fn bad_flags_are_refused() {
        assert!(parse(&["--node-name", "n1", "--debounce", "soon"]).is_err());
        assert!(parse(&["--node-name", "n1", "--log-format", "xml"]).is_err());
        assert!(parse(&["--node-name", "n1", "--max-evictions-in-flight", "0"]).is_err());
        assert!(parse(&["explain", "--pod", "no-namespace"]).is_err());
        let cli = parse(&["explain", "--pod", "ns/web-0"]).unwrap();
        assert!(
            matches!(cli.command, Some(Command::Explain(ExplainArgs { pod, .. })) if pod == ("ns".into(), "web-0".into()))
        );
    }

    #[test]
    fn a_malformed_pod_selector_is_refused_at_startup_in_one_line() {
        let cli = parse(&["--node-name", "n1", "--pod-selector", "app in ("]).unwrap();
        let err = cli.run.settings(LogFormat::Text).unwrap_err();
        assert!(
            err.starts_with("--pod-selector \"app in (\" is not a valid label selector"),
            "{err}"
        );
        assert!(!err.contains('\n'));
    }

    #[test]
    fn byte_quantities_read_like_kubernetes_quantities() {
        for (text, bytes) in [
            ("64Mi", 64 << 20),
            ("1Gi", 1 << 30),
            ("500k", 500_000),
            ("1048576", 1 << 20),
            ("1.5Ki", 1536),
            ("2M", 2_000_000),
            ("1e3", 1000),
            ("1500m", 2),
            ("0", 0),
        ] {
            assert_eq!(parse_byte_quantity(text), Ok(bytes), "{text}");
        }
        let err = parse_byte_quantity("24mi").unwrap_err();
        assert!(
            err.contains("did you mean Mi?") && err.contains("case-sensitive"),
            "{err}"
        );
        for bad in ["", "Mi", "-1Gi", "1.2.3", "12 parsecs", "99999999999999Ei"] {
            assert!(parse_byte_quantity(bad).is_err(), "{bad}");
        }
        let cli = parse(&["--node-name", "n1", "--max-volume-bytes", "64Mi"]).unwrap();
        assert_eq!(cli.run.volumes.max_volume_bytes, 64 << 20);
        assert!(parse(&["--node-name", "n1", "--max-volume-bytes", "24mi"]).is_err());
    }

    #[test]
    fn every_flag_has_help_and_every_agent_flag_an_environment_variable() {
        use clap::CommandFactory;
        let cmd = Cli::command();
        let explain = cmd.find_subcommand("explain").unwrap().clone();
        for c in [&cmd, &explain] {
            for arg in c.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                assert!(
                    arg.get_help().is_some(),
                    "--{id} of {} has no help",
                    c.get_name()
                );
                if c.get_name() == "reloadlet" || id != "pod" {
                    assert!(
                        arg.get_env().is_some(),
                        "--{id} of {} has no env",
                        c.get_name()
                    );
                }
            }
        }
    }
}
