//! Command line and environment, parsed once into [`Settings`] and passed explicitly.

use crate::filters::{NamespaceFilter, Scope};
use crate::label_selector::LabelSelector;
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
    Controller(crate::controller::settings::ControllerArgs),
    /// Print what reloadlet would do for a pod, and why.
    ///
    /// Run it inside the agent's pod (`kubectl exec ds/reloadlet -- reloadlet explain --pod
    /// NS/NAME`): it reads the same RELOADLET_* environment as the agent, so it applies the
    /// same filters.
    Explain(ExplainArgs),
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
}

/// Which pods the agent acts on, and whether it acts at all: shared by the agent and
/// `explain`, so both read the same flags and environment.
#[derive(Debug, Args, Clone, Default)]
pub struct ScopeArgs {
    /// Only act on pods in these namespaces (comma-separated; default: all).
    #[arg(long, env = "RELOADLET_NAMESPACES", value_delimiter = ',')]
    pub namespaces: Vec<String>,
    /// Never act on pods in these namespaces (comma-separated; wins over --namespaces).
    #[arg(long, env = "RELOADLET_EXCLUDE_NAMESPACES", value_delimiter = ',')]
    pub exclude_namespaces: Vec<String>,
    /// Only act on pods matching this label selector (kubectl -l syntax, e.g. `app in (web,api),tier!=db`).
    #[arg(long, env = "RELOADLET_POD_SELECTOR")]
    pub pod_selector: Option<String>,
    /// Decide and log, act on nothing (evictions are sent with dryRun=All).
    #[arg(long, env = "RELOADLET_DRY_RUN")]
    pub dry_run: bool,
}

impl ScopeArgs {
    /// Validates the selector and builds the filters (one-line error).
    pub fn scope(&self) -> Result<Scope, String> {
        let selector = match &self.pod_selector {
            None => None,
            Some(sel) if sel.trim().is_empty() => return Err("--pod-selector is empty".into()),
            Some(sel) => Some(parse_pod_selector(sel)?),
        };
        Ok(Scope {
            namespaces: namespace_filter(&self.namespaces, &self.exclude_namespaces),
            selector,
            dry_run: self.dry_run,
        })
    }
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
    /// Never hash more than this many bytes of one volume (a byte count or a Kubernetes quantity: 64Mi, 1Gi, 500k).
    #[arg(long, env = "RELOADLET_MAX_VOLUME_BYTES", default_value = "64Mi", value_parser = parse_byte_quantity)]
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
    /// PEM CA certificates that `reloadlet.io/http-scheme: https` endpoints must chain to
    /// (their certificate must then name the pod IP). Without it, https endpoints are not
    /// verified.
    #[arg(long, env = "RELOADLET_HTTP_CA_FILE")]
    pub http_ca_file: Option<PathBuf>,
    #[command(flatten)]
    pub notify: crate::notify::NotifyArgs,
}

/// Validated settings of the agent.
#[derive(Clone, Debug)]
pub struct Settings {
    pub node_name: String,
    pub kubelet_root: PathBuf,
    pub proc_root: PathBuf,
    pub debounce: Duration,
    /// `--hot-thread-slice` (`Duration::ZERO`: the kernel's default).
    pub hot_thread_slice: Duration,
    pub listen: SocketAddr,
    pub dry_run: bool,
    pub log_format: LogFormat,
    pub namespaces: NamespaceFilter,
    /// `--pod-selector`, parsed; applied by the API server on the pod watch.
    pub pod_selector: Option<LabelSelector>,
    pub state_dir: PathBuf,
    pub max_evictions_in_flight: usize,
    pub max_volume_bytes: u64,
    pub rescan_interval: Duration,
    pub shutdown_grace: Duration,
    pub eviction_backoff: Duration,
    pub eviction_backoff_max: Duration,
    /// Webhook notifications (off without `--notify-url`).
    pub notify: crate::notify::NotifySettings,
    /// `--http-ca-file`: verify https reload endpoints against these CAs.
    pub http_ca_file: Option<PathBuf>,
}

impl RunArgs {
    /// `log_format`: from [`Cli::log_format`].
    pub fn settings(self, log_format: LogFormat) -> Result<Settings, String> {
        let scope = self.scope.scope()?;
        let node_name = self
            .node_name
            .filter(|n| !n.is_empty())
            .ok_or("--node-name (NODE_NAME) is required")?;
        // The kubelet root is checked once, where it is used: `VolumeWatcher::new`.
        if !self.proc_root.join("self").exists() && !self.proc_root.join("1").exists() {
            return Err(format!(
                "--proc-root {} does not look like a procfs mount",
                self.proc_root.display()
            ));
        }
        // The ALERT_* fallbacks (Reloader's names) are read from the environment here, once.
        let notify = self.notify.settings(&|k| std::env::var(k).ok())?;
        Ok(Settings {
            notify,
            http_ca_file: self.http_ca_file,
            node_name,
            kubelet_root: self.kubelet_root,
            proc_root: self.proc_root,
            debounce: self.debounce,
            hot_thread_slice: self.hot_thread_slice,
            listen: self.listen,
            dry_run: scope.dry_run,
            log_format,
            namespaces: scope.namespaces,
            pod_selector: scope.selector,
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

/// A byte count written as a Kubernetes quantity, read like apimachinery's
/// `resource.ParseQuantity` (kubernetes/kubernetes,
/// staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go): a decimal number and one
/// suffix, binary (`Ki Mi Gi Ti Pi Ei`), decimal (`k M G T P E`, `m` = 1/1000) or an exponent
/// (`e3`, `E3`). Suffixes are case-sensitive (`24mi` is refused, as the API server does). A
/// fraction of a byte rounds up, like `Quantity.Value()`.
/// `--pod-selector`, parsed as the API server would (one-line error naming the flag): shared
/// by the agent, `explain` and the controller, so a selector that cannot work stops each at
/// startup instead of failing every list.
pub fn parse_pod_selector(sel: &str) -> Result<LabelSelector, String> {
    LabelSelector::parse(sel)
        .map_err(|e| format!("--pod-selector {sel:?} is not a valid label selector: {e}"))
}

/// `--namespaces` / `--exclude-namespaces` as a filter (blank entries dropped).
pub fn namespace_filter(include: &[String], exclude: &[String]) -> NamespaceFilter {
    let clean = |v: &[String]| -> std::collections::BTreeSet<String> {
        v.iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    };
    NamespaceFilter {
        include: clean(include),
        exclude: clean(exclude),
    }
}

pub fn parse_byte_quantity(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(split);
    let number = number.strip_prefix('+').unwrap_or(number);
    if t.starts_with('-') {
        return Err(format!("{s:?}: a byte count cannot be negative"));
    }
    let valid_number = !number.is_empty()
        && number.chars().filter(|c| *c == '.').count() <= 1
        && number.chars().any(|c| c.is_ascii_digit());
    if !valid_number {
        return Err(format!(
            "{s:?} is not a quantity (expected a number and an optional suffix, e.g. 64Mi, 1Gi, 500k, 1048576)"
        ));
    }
    // value = mantissa * num / den
    let (num, den): (u128, u128) = match suffix {
        "" => (1, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        "m" => (1, 1000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        e if (e.starts_with('e') || e.starts_with('E'))
            && e.len() > 1
            && e[1..].chars().all(|c| c.is_ascii_digit()) =>
        {
            let exp: u32 = e[1..]
                .parse()
                .map_err(|_| format!("{s:?}: exponent too large"))?;
            (
                10u128
                    .checked_pow(exp)
                    .ok_or(format!("{s:?}: exponent too large"))?,
                1,
            )
        }
        other => {
            let hint = match other.to_ascii_lowercase().as_str() {
                "ki" => " (did you mean Ki?)",
                "mi" => " (did you mean Mi?)",
                "gi" => " (did you mean Gi?)",
                "ti" => " (did you mean Ti?)",
                "kb" | "kib" => " (did you mean Ki or k?)",
                "mb" | "mib" => " (did you mean Mi or M?)",
                "gb" | "gib" => " (did you mean Gi or G?)",
                _ => "",
            };
            return Err(format!(
                "{s:?}: unknown suffix {other:?}{hint}; quantity suffixes are case-sensitive: Ki Mi Gi Ti Pi Ei (powers of 1024) or k M G T P E (powers of 1000)"
            ));
        }
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let digits = format!("{int}{frac}");
    let mantissa: u128 = digits
        .trim_start_matches('0')
        .parse()
        .or_else(|e| {
            if digits.chars().all(|c| c == '0') {
                Ok(0)
            } else {
                Err(e)
            }
        })
        .map_err(|_| format!("{s:?} is too large"))?;
    let scale = 10u128
        .checked_pow(frac.len() as u32)
        .ok_or(format!("{s:?} has too many decimals"))?;
    let total_num = mantissa
        .checked_mul(num)
        .ok_or(format!("{s:?} is too large"))?;
    let total_den = scale * den;
    let value = total_num.div_ceil(total_den);
    u64::try_from(value).map_err(|_| format!("{s:?} is too large"))
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
        assert_eq!(cli.run.scope.namespaces, ["a", "b"]);
        assert_eq!(cli.run.kubelet_root, PathBuf::from("/var/lib/kubelet"));
        let cli = parse(&["--node-name", "n1"]).unwrap();
        assert_eq!(cli.run.debounce, Duration::from_millis(250));
        assert_eq!(cli.run.hot_thread_slice, Duration::from_micros(100));
        let cli = parse(&["--node-name", "n1", "--hot-thread-slice", "0s"]).unwrap();
        assert_eq!(cli.run.hot_thread_slice, Duration::ZERO);
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
        assert_eq!(cli.run.max_volume_bytes, 64 << 20);
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
