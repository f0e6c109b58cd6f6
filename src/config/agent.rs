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
    /// This agent's own pod, namespace (downward API metadata.namespace): Warning Events
    /// about refused API requests regard it.
    #[arg(long, env = "POD_NAMESPACE")]
    pub pod_namespace: Option<String>,
    /// This agent's own pod, name (downward API metadata.name).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    #[command(flatten)]
    pub paths: HostPathArgs,
    #[command(flatten)]
    pub watch: WatchArgs,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, env = "RELOADLET_LISTEN", default_value = "0.0.0.0:9102")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub scope: ScopeArgs,
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
    /// `action: restart`: restarts of one container at least this far apart (a later change
    /// is deferred, not dropped). The default, 10m, is twice the kubelet's longest crash-loop
    /// back-off: a restart after it is always immediate; a shorter spacing meets the back-off.
    #[arg(long, env = "RELOADLET_RESTART_SPACING", default_value = "10m", value_parser = restart_spacing)]
    pub restart_spacing: Duration,
    /// `action: restart` without the controller's grant: each pod restarted on its own node's
    /// decision, with no PodDisruptionBudget asked and no one-at-a-time across replicas (a pod
    /// that says `reloadlet.io/on-blocked: rollout` is still requested: only the controller
    /// sees whether it is the only pod of its owner, docs/restart.md). Off (the default): the agent writes `reloadlet.io/restart-request` on the pod and restarts
    /// once the controller grants it (docs/restart.md, "The grant").
    #[arg(long, env = "RELOADLET_RESTART_WITHOUT_GRANT", default_value_t = false)]
    pub restart_without_grant: bool,
    /// Where the controller's Lease is (`action: restart`: who grants it).
    #[command(flatten)]
    pub controller_lease: super::ControllerLeaseArgs,
    /// PEM CA certificates that `reloadlet.io/http-scheme: https` endpoints must chain to
    /// (their certificate must then name the pod IP). Without it, https endpoints are not
    /// verified.
    #[arg(long, env = "RELOADLET_HTTP_CA_FILE")]
    pub http_ca_file: Option<PathBuf>,
    /// Let `reloadlet.io/action: http` pods that use `hostNetwork` be reloaded. Their IP is
    /// the node's own address, so the request goes to a service of the node (on a port the
    /// pod declares); refused by default.
    #[arg(long, env = "RELOADLET_HTTP_ALLOW_HOST_NETWORK")]
    pub http_allow_host_network: bool,
    #[command(flatten)]
    pub notify: crate::outbound::notify::NotifyArgs,
    /// `--flap-threshold`, `--time-zone`, `--max-defer` (docs/pacing.md).
    #[command(flatten)]
    pub pacing: PacingArgs,
}

/// Where the kubelet, the host's procfs and reloadlet's state are.
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
    /// Where the last content hash per volume and pending evictions are kept across restarts.
    #[arg(
        long,
        env = "RELOADLET_STATE_DIR",
        default_value = "/var/lib/reloadlet"
    )]
    pub state_dir: PathBuf,
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
    /// How the threads that work after a signal (logs, metrics, Events, notifications,
    /// evictions, the pod watch, the HTTP server) are scheduled: `idle` (SCHED_IDLE: any
    /// other task woken on their CPU runs first, so the signalled process is not kept waiting;
    /// they still get CPU time under load) or `normal`. The thread that watches the volumes
    /// and signals always runs at normal priority.
    #[arg(long, env = "RELOADLET_BACKGROUND_SCHED", value_enum, default_value_t = BackgroundSched::Idle)]
    pub background_sched: BackgroundSched,
}

/// `--background-sched`: the scheduling policy of the async runtime's worker threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackgroundSched {
    /// `SCHED_IDLE` (host/sched.rs).
    Idle,
    /// The kernel's default (`SCHED_OTHER`, nice unchanged).
    Normal,
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
    /// The CSI drivers whose inline volumes are watched, comma-separated; replaces the
    /// default list ("" watches none). Volumes of other drivers are never watched.
    #[arg(
        long,
        env = "RELOADLET_CSI_DRIVERS",
        default_value = "secrets-store.csi.k8s.io,csi.cert-manager.io,spiffe.csi.cert-manager.io"
    )]
    pub csi_drivers: String,
    /// A CSI volume written in place (not through `..data`) is looked at this long after its
    /// last write.
    #[arg(long, env = "RELOADLET_CSI_SETTLE", default_value = "2s", value_parser = humantime::parse_duration)]
    pub csi_settle: Duration,
}

/// `--csi-drivers`: CSI driver names (the `CSIDriver` object's name: at most 63 characters
/// of `[a-z0-9.-]`, beginning and ending with an alphanumeric, kubernetes
/// `pkg/apis/storage/validation/validation.go`, `validateCSIDriverName`).
fn csi_drivers(raw: &str) -> Result<Vec<String>, crate::core::invalid::Invalid> {
    let mut out: Vec<String> = Vec::new();
    for name in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let valid = name.len() <= 63
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
            && name
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphanumeric())
            && name
                .bytes()
                .last()
                .is_some_and(|b| b.is_ascii_alphanumeric());
        if !valid {
            return Err(crate::invalid!(
                "--csi-drivers: {name:?} is not a CSI driver name (at most 63 characters of a-z, 0-9, '.' and '-', alphanumeric at both ends)"
            ));
        }
        if !out.iter().any(|d| d == name) {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

/// `--restart-spacing`: a duration of at most a day.
fn restart_spacing(s: &str) -> Result<Duration, crate::core::invalid::Invalid> {
    crate::core::durations::parse_bounded(s, Duration::from_secs(86_400))
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
    /// The agent's own pod (namespace, name), when the downward API says: Warning Events
    /// about refused API requests regard it.
    pub own_pod: Option<(String, String)>,
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
    /// `--restart-spacing`.
    pub restart_spacing: Duration,
    /// `--restart-without-grant`.
    pub restart_without_grant: bool,
    /// The controller's Lease `(namespace, name)` read while a restart request waits
    /// (`None`: not read: no namespace known, or `--controller-lease ""`).
    pub controller_lease: Option<(String, String)>,
    /// Webhook notifications (off without `--notify-url`).
    pub notify: crate::outbound::notify::NotifySettings,
    /// `--http-ca-file`: verify https reload endpoints against these CAs.
    pub http_ca_file: Option<PathBuf>,
    /// `--http-allow-host-network`: what the `http` action may reach.
    pub http_fence: crate::core::policy::HttpFence,
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
    /// `--csi-drivers`: whose inline CSI volumes are watched (docs/csi.md).
    pub csi_drivers: Vec<String>,
    /// `--csi-settle`: how long after its last write in place a CSI volume is looked at.
    pub csi_settle: Duration,
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
    pub fn settings(
        self,
        log_format: LogFormat,
    ) -> Result<Settings, crate::core::invalid::Invalid> {
        let scope = self.scope.scope()?;
        let node_name = self
            .node_name
            .filter(|n| !n.is_empty())
            .ok_or("--node-name (NODE_NAME) is required")?;
        let HostPathArgs {
            kubelet_root,
            proc_root,
            state_dir,
        } = self.paths;
        // The kubelet root is checked once, where it is used: `VolumeWatcher::new`.
        if !proc_root.join("self").exists() && !proc_root.join("1").exists() {
            return Err(crate::invalid!(
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
            http_fence: crate::core::policy::HttpFence {
                allow_host_network: self.http_allow_host_network,
            },
            node_name,
            controller_lease: self.controller_lease.target(self.pod_namespace.clone()),
            own_pod: own_pod(self.pod_namespace, self.pod_name),
            paths: HostPaths {
                kubelet_root,
                proc_root,
                state_dir,
            },
            volumes: VolumeSettings {
                debounce: self.watch.debounce,
                hot_thread_slice: self.watch.hot_thread_slice,
                max_volume_bytes: self.volumes.max_volume_bytes,
                rescan_interval: self.volumes.rescan_interval,
                csi_drivers: csi_drivers(&self.volumes.csi_drivers)?,
                csi_settle: self.volumes.csi_settle,
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
            restart_spacing: self.restart_spacing,
            restart_without_grant: self.restart_without_grant,
        })
    }
}

/// `(namespace, name)` when both are set and not empty.
pub fn own_pod(namespace: Option<String>, name: Option<String>) -> Option<(String, String)> {
    Some((
        namespace.filter(|s| !s.is_empty())?,
        name.filter(|s| !s.is_empty())?,
    ))
}

#[cfg(test)]
mod tests {
    use super::csi_drivers;

    #[test]
    fn csi_driver_lists_replace_the_default_and_reject_bad_names() {
        assert_eq!(
            csi_drivers(" secrets-store.csi.k8s.io, csi.cert-manager.io,csi.cert-manager.io ")
                .unwrap(),
            vec!["secrets-store.csi.k8s.io", "csi.cert-manager.io"]
        );
        assert_eq!(csi_drivers("").unwrap(), Vec::<String>::new());
        for bad in ["Secrets.Store", "-x", "x.", "a/b", &"a".repeat(64)] {
            let err = csi_drivers(bad).unwrap_err();
            assert!(err.starts_with("--csi-drivers: "), "{err}");
        }
    }
}
