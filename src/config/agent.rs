//! The node agent's flags and environment, validated into [`Settings`].

use super::scope::{parse_byte_quantity, LogFormat, PacingArgs, ScopeArgs};
use crate::core::filters::Scope;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The agent's flags. Related flags are grouped in flattened structs; each group holds flags
/// that are adjacent in `--help`, so the help lists them in the same order as before.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// This node's name (from the downward API: spec.nodeName).
    #[arg(long, env = "NODE_NAME", required = true)]
    pub node_name: Option<String>,
    #[command(flatten)]
    pub paths: HostPathArgs,
    #[command(flatten)]
    pub watch: WatchArgs,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, env = "RELOADLET_LISTEN", default_value = "0.0.0.0:9102")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Where the last content hash per volume and pending evictions are kept across restarts.
    #[arg(
        long,
        env = "RELOADLET_STATE_DIR",
        default_value = "/var/lib/reloadlet"
    )]
    pub state_dir: PathBuf,
    /// At most this many eviction requests in flight at once (1-1000).
    #[arg(long, env = "RELOADLET_MAX_EVICTIONS_IN_FLIGHT", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_evictions_in_flight: u32,
    #[command(flatten)]
    pub volumes: VolumeArgs,
    #[command(flatten)]
    pub eviction: EvictionArgs,
    /// On SIGTERM, how long in-flight work may take before state is flushed and reloadlet exits.
    #[arg(long, env = "RELOADLET_SHUTDOWN_GRACE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
    /// PEM CA certificates that `reloadlet.io/http-scheme: https` endpoints must chain to
    /// (their certificate must then name the pod IP). Without it, https endpoints are not
    /// verified.
    #[arg(long, env = "RELOADLET_HTTP_CA_FILE")]
    pub http_ca_file: Option<PathBuf>,
    #[command(flatten)]
    pub notify: crate::outbound::notify::NotifyArgs,
    /// `--flap-threshold`, `--time-zone`, `--max-defer` (docs/pacing.md).
    #[command(flatten)]
    pub pacing: PacingArgs,
}

/// Where the kubelet and the host's procfs are.
#[derive(Debug, Args)]
pub struct HostPathArgs {
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
}

/// How soon a swap is acted on.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Coalesce the swaps of one pod within this window into one action (e.g. 250ms, 1s, 0s).
    /// The default covers one kubelet sync: it marks every configMap/secret/projected volume
    /// of the pod for remount in one pass, and the volume reconciler (a 100 ms loop,
    /// pkg/kubelet/volumemanager/reconciler) mounts them all in its next pass, each in its own
    /// goroutine, so one sync's `..data` swaps land within about 100-200 ms of each other.
    #[arg(long, env = "RELOADLET_DEBOUNCE", default_value = "250ms", value_parser = humantime::parse_duration)]
    pub debounce: Duration,
    /// The scheduler slice the thread that watches the volumes asks for (Linux 6.12+, no
    /// capability needed): a woken thread with a shorter slice than the running one runs at
    /// once, so a swap is acted on without waiting for the writer's slice to end. 0s keeps the
    /// kernel's default; the kernel clamps to 100us-100ms.
    #[arg(long, env = "RELOADLET_HOT_THREAD_SLICE", default_value = "100us", value_parser = humantime::parse_duration)]
    pub hot_thread_slice: Duration,
}

/// How volumes are hashed and rescanned.
#[derive(Debug, Args)]
pub struct VolumeArgs {
    /// Never hash more than this many bytes of one volume (a byte count or a Kubernetes quantity: 64Mi, 1Gi, 500k).
    #[arg(long, env = "RELOADLET_MAX_VOLUME_BYTES", default_value = "64Mi", value_parser = parse_byte_quantity)]
    pub max_volume_bytes: u64,
    /// How often volumes that could not get an inotify watch are rescanned.
    #[arg(long, env = "RELOADLET_RESCAN_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub rescan_interval: Duration,
}

/// How refused evictions are retried.
#[derive(Debug, Args)]
pub struct EvictionArgs {
    /// First retry delay after a PodDisruptionBudget refused an eviction (doubles, with jitter).
    #[arg(long, env = "RELOADLET_EVICTION_BACKOFF", default_value = "5s", value_parser = humantime::parse_duration)]
    pub eviction_backoff: Duration,
    /// Longest delay between eviction retries.
    #[arg(long, env = "RELOADLET_EVICTION_BACKOFF_MAX", default_value = "2m", value_parser = humantime::parse_duration)]
    pub eviction_backoff_max: Duration,
}

/// Validated settings of the agent.
#[derive(Clone, Debug)]
pub struct Settings {
    pub node_name: String,
    /// Where the kubelet, the host's procfs and the agent's state are.
    pub paths: HostPaths,
    /// How swaps are picked up, hashed and rescanned.
    pub volumes: VolumeSettings,
    pub listen: SocketAddr,
    pub log_format: LogFormat,
    /// `--namespaces` / `--exclude-namespaces`, `--pod-selector` (parsed; applied by the API
    /// server on the pod watch) and `--dry-run`.
    pub scope: Scope,
    /// How many evictions at once, and how refused ones are retried.
    pub eviction: EvictionLimits,
    pub shutdown_grace: Duration,
    /// Webhook notifications (off without `--notify-url`).
    pub notify: crate::outbound::notify::NotifySettings,
    /// `--http-ca-file`: verify https reload endpoints against these CAs.
    pub http_ca_file: Option<PathBuf>,
    /// `--debounce`, `--flap-threshold`, `--time-zone`, `--max-defer`: every pod's pacing
    /// before its annotations.
    pub pacing: crate::core::pacing::PacingDefaults,
}

/// `--kubelet-root`, `--proc-root`, `--state-dir`.
#[derive(Clone, Debug)]
pub struct HostPaths {
    pub kubelet_root: PathBuf,
    pub proc_root: PathBuf,
    pub state_dir: PathBuf,
}

/// `--debounce`, `--hot-thread-slice`, `--max-volume-bytes`, `--rescan-interval`.
#[derive(Clone, Debug)]
pub struct VolumeSettings {
    pub debounce: Duration,
    /// `--hot-thread-slice` (`Duration::ZERO`: the kernel's default).
    pub hot_thread_slice: Duration,
    pub max_volume_bytes: u64,
    pub rescan_interval: Duration,
}

/// `--max-evictions-in-flight`, `--eviction-backoff`, `--eviction-backoff-max` (never shorter
/// than `backoff`); main.rs turns them into the executor's eviction settings.
#[derive(Clone, Debug)]
pub struct EvictionLimits {
    pub max_in_flight: usize,
    pub backoff: Duration,
    pub backoff_max: Duration,
}

impl RunArgs {
    /// `log_format`: from [`Cli::log_format`].
    pub fn settings(self, log_format: LogFormat) -> Result<Settings, String> {
        let scope = self.scope.scope()?;
        let node_name = self
            .node_name
            .filter(|n| !n.is_empty())
            .ok_or("--node-name (NODE_NAME) is required")?;
        let HostPathArgs {
            kubelet_root,
            proc_root,
        } = self.paths;
        // The kubelet root is checked once, where it is used: `VolumeWatcher::new`.
        if !proc_root.join("self").exists() && !proc_root.join("1").exists() {
            return Err(format!(
                "--proc-root {} does not look like a procfs mount",
                proc_root.display()
            ));
        }
        // The ALERT_* fallbacks (Reloader's names) are read from the environment here, once.
        let notify = self.notify.settings(&|k| std::env::var(k).ok())?;
        let EvictionArgs {
            eviction_backoff,
            eviction_backoff_max,
        } = self.eviction;
        let pacing = self.pacing.defaults(self.watch.debounce)?;
        Ok(Settings {
            pacing,
            notify,
            http_ca_file: self.http_ca_file,
            node_name,
            paths: HostPaths {
                kubelet_root,
                proc_root,
                state_dir: self.state_dir,
            },
            volumes: VolumeSettings {
                debounce: self.watch.debounce,
                hot_thread_slice: self.watch.hot_thread_slice,
                max_volume_bytes: self.volumes.max_volume_bytes,
                rescan_interval: self.volumes.rescan_interval,
            },
            listen: self.listen,
            log_format,
            scope,
            eviction: EvictionLimits {
                max_in_flight: self.max_evictions_in_flight as usize,
                backoff: eviction_backoff,
                backoff_max: eviction_backoff_max.max(eviction_backoff),
            },
            shutdown_grace: self.shutdown_grace,
        })
    }
}
