//! Command line and environment, parsed once into [`Settings`] and passed explicitly.

use crate::filters::NamespaceFilter;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Fast projection: nudge the kubelet to re-project a changed ConfigMap/Secret at once
    /// (one small Deployment per cluster; see docs/controller.md).
    Controller(crate::controller::settings::ControllerArgs),
    /// Print what reloadlet would do for a pod, and why.
    Explain {
        /// The pod, as NAMESPACE/NAME.
        #[arg(long, value_parser = parse_pod_ref)]
        pod: (String, String),
        #[arg(long, env = "RELOADLET_PROC_ROOT", default_value = "/proc")]
        proc_root: PathBuf,
        #[arg(
            long = "namespaces",
            env = "RELOADLET_NAMESPACES",
            value_delimiter = ','
        )]
        namespaces: Vec<String>,
        #[arg(
            long = "exclude-namespaces",
            env = "RELOADLET_EXCLUDE_NAMESPACES",
            value_delimiter = ','
        )]
        exclude_namespaces: Vec<String>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// This node's name (from the downward API: spec.nodeName).
    #[arg(long, env = "NODE_NAME", required = true)]
    pub node_name: Option<String>,
    /// The kubelet's root directory (k0s: /var/lib/k0s/kubelet, microk8s: /var/snap/microk8s/common/var/lib/kubelet).
    #[arg(
        long,
        env = "RELOADLET_KUBELET_ROOT",
        default_value = "/var/lib/kubelet"
    )]
    pub kubelet_root: PathBuf,
    /// Where the host's /proc is (the agent needs hostPID).
    #[arg(long, env = "RELOADLET_PROC_ROOT", default_value = "/proc")]
    pub proc_root: PathBuf,
    /// Coalesce the swaps of one pod within this window into one action (e.g. 1s, 500ms, 0s).
    #[arg(long, env = "RELOADLET_DEBOUNCE", default_value = "1s", value_parser = humantime::parse_duration)]
    pub debounce: Duration,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, env = "RELOADLET_LISTEN", default_value = "0.0.0.0:9102")]
    pub listen: SocketAddr,
    /// Decide and log, act on nothing (evictions are sent with dryRun=All).
    #[arg(long, env = "RELOADLET_DRY_RUN")]
    pub dry_run: bool,
    #[arg(long, env = "RELOADLET_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Only act on pods in these namespaces (comma-separated; default: all).
    #[arg(long, env = "RELOADLET_NAMESPACES", value_delimiter = ',')]
    pub namespaces: Vec<String>,
    /// Never act on pods in these namespaces (wins over --namespaces).
    #[arg(long, env = "RELOADLET_EXCLUDE_NAMESPACES", value_delimiter = ',')]
    pub exclude_namespaces: Vec<String>,
    /// Only act on pods matching this label selector (e.g. `app in (web,api),tier!=db`).
    #[arg(long, env = "RELOADLET_POD_SELECTOR")]
    pub pod_selector: Option<String>,
    /// Where the last content hash per volume and pending evictions are kept across restarts.
    #[arg(
        long,
        env = "RELOADLET_STATE_DIR",
        default_value = "/var/lib/reloadlet"
    )]
    pub state_dir: PathBuf,
    /// At most this many eviction requests in flight at once.
    #[arg(long, env = "RELOADLET_MAX_EVICTIONS_IN_FLIGHT", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_evictions_in_flight: u32,
    /// Never hash more than this many bytes of one volume.
    #[arg(long, env = "RELOADLET_MAX_VOLUME_BYTES", default_value_t = 64 << 20)]
    pub max_volume_bytes: u64,
    /// How often volumes that could not get an inotify watch are rescanned.
    #[arg(long, env = "RELOADLET_RESCAN_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub rescan_interval: Duration,
    /// First retry delay after a PodDisruptionBudget refused an eviction (doubles, with jitter).
    #[arg(long, env = "RELOADLET_EVICTION_BACKOFF", default_value = "5s", value_parser = humantime::parse_duration)]
    pub eviction_backoff: Duration,
    /// Longest delay between eviction retries.
    #[arg(long, env = "RELOADLET_EVICTION_BACKOFF_MAX", default_value = "2m", value_parser = humantime::parse_duration)]
    pub eviction_backoff_max: Duration,
    /// On SIGTERM, how long in-flight work may take before state is flushed and reloadlet exits.
    #[arg(long, env = "RELOADLET_SHUTDOWN_GRACE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
}

/// Validated settings of the agent.
#[derive(Clone, Debug)]
pub struct Settings {
    pub node_name: String,
    pub kubelet_root: PathBuf,
    pub proc_root: PathBuf,
    pub debounce: Duration,
    pub listen: SocketAddr,
    pub dry_run: bool,
    pub log_format: LogFormat,
    pub namespaces: NamespaceFilter,
    pub pod_selector: Option<String>,
    pub state_dir: PathBuf,
    pub max_evictions_in_flight: usize,
    pub max_volume_bytes: u64,
    pub rescan_interval: Duration,
    pub shutdown_grace: Duration,
    pub eviction_backoff: Duration,
    pub eviction_backoff_max: Duration,
}

impl RunArgs {
    pub fn settings(self) -> Result<Settings, String> {
        let node_name = self
            .node_name
            .filter(|n| !n.is_empty())
            .ok_or("--node-name (NODE_NAME) is required")?;
        let pods = self.kubelet_root.join("pods");
        match std::fs::read_dir(&pods) {
            Ok(_) => {}
            Err(e) => {
                return Err(format!(
                "kubelet root {} is not usable: cannot read {}: {e} (set --kubelet-root; k0s uses \
                     /var/lib/k0s/kubelet, microk8s /var/snap/microk8s/common/var/lib/kubelet)",
                self.kubelet_root.display(),
                pods.display()
            ))
            }
        }
        if !self.proc_root.join("self").exists() && !self.proc_root.join("1").exists() {
            return Err(format!(
                "--proc-root {} does not look like a procfs mount",
                self.proc_root.display()
            ));
        }
        if let Some(sel) = &self.pod_selector {
            if sel.trim().is_empty() {
                return Err("--pod-selector is empty".into());
            }
        }
        Ok(Settings {
            node_name,
            kubelet_root: self.kubelet_root,
            proc_root: self.proc_root,
            debounce: self.debounce,
            listen: self.listen,
            dry_run: self.dry_run,
            log_format: self.log_format,
            namespaces: NamespaceFilter {
                include: self
                    .namespaces
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect(),
                exclude: self
                    .exclude_namespaces
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect(),
            },
            pod_selector: self.pod_selector,
            state_dir: self.state_dir,
            max_evictions_in_flight: self.max_evictions_in_flight as usize,
            max_volume_bytes: self.max_volume_bytes,
            rescan_interval: self.rescan_interval,
            shutdown_grace: self.shutdown_grace,
            eviction_backoff: self.eviction_backoff,
            eviction_backoff_max: self.eviction_backoff_max.max(self.eviction_backoff),
        })
    }
}

fn parse_pod_ref(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!("{s:?} is not NAMESPACE/NAME")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(cli.run.debounce, Duration::ZERO);
        assert_eq!(cli.run.listen.port(), 9102);
        assert_eq!(cli.run.namespaces, ["a", "b"]);
        assert_eq!(cli.run.kubelet_root, PathBuf::from("/var/lib/kubelet"));
        let cli = parse(&["--node-name", "n1"]).unwrap();
        assert_eq!(cli.run.debounce, Duration::from_secs(1));
    }

    #[test]
    fn bad_flags_are_refused() {
        assert!(parse(&["--node-name", "n1", "--debounce", "soon"]).is_err());
        assert!(parse(&["--node-name", "n1", "--log-format", "xml"]).is_err());
        assert!(parse(&["--node-name", "n1", "--max-evictions-in-flight", "0"]).is_err());
        assert!(parse(&["explain", "--pod", "no-namespace"]).is_err());
        let cli = parse(&["explain", "--pod", "ns/web-0"]).unwrap();
        assert!(
            matches!(cli.command, Some(Command::Explain { pod, .. }) if pod == ("ns".into(), "web-0".into()))
        );
    }

    #[test]
    fn an_unusable_kubelet_root_is_a_one_line_error() {
        let cli = parse(&[
            "--node-name",
            "n1",
            "--kubelet-root",
            "/nonexistent/kubelet",
        ])
        .unwrap();
        let err = cli.run.settings().unwrap_err();
        assert!(
            err.starts_with("kubelet root /nonexistent/kubelet is not usable"),
            "{err}"
        );
        assert!(!err.contains('\n'));
    }
}
