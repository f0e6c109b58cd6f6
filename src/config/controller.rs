//! `reloadlet controller` flags and environment, parsed once into [`ControllerSettings`].

use super::scope::{LogFormat, PacingArgs, ScopeArgs};
use crate::core::filters::NamespaceFilter;
use clap::{ArgAction, Args};
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Clone, Args)]
pub struct ControllerArgs {
    /// Also watch Secrets (metadata only) and nudge their consumers. Off by default: RBAC
    /// cannot restrict `list` to metadata, so this needs list/watch on every Secret.
    #[arg(long, env = "RELOADLET_CONTROLLER_SECRETS")]
    pub secrets: bool,
    /// At most this many nudges (pod patches) in any one second. A pod's first nudge over it
    /// waits its turn; a re-nudge that would delay a pod's first is dropped and counted.
    #[arg(long, env = "RELOADLET_MAX_NUDGES_PER_SECOND", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub max_nudges_per_second: u32,
    #[command(flatten)]
    pub election: ElectionArgs,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(
        long,
        env = "RELOADLET_CONTROLLER_LISTEN",
        default_value = "0.0.0.0:9103"
    )]
    pub listen: SocketAddr,
    #[arg(long, env = "RELOADLET_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Which pods may be nudged or evicted, and `--dry-run`: the agent's flags and
    /// environment.
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Follow the data of the ConfigMaps that opted-in pods read through env/envFrom (only
    /// those), and evict or warn when a key they read changes (docs/env-consumers.md).
    /// `--env-consumers=false` turns it off.
    #[arg(long, env = "RELOADLET_ENV_CONSUMERS", default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub env_consumers: bool,
    /// The same for Secrets. Off by default: it needs get/list/watch on Secrets, which can
    /// read every Secret in the cluster.
    #[arg(long, env = "RELOADLET_ENV_CONSUMERS_SECRETS", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub env_consumers_secrets: bool,
    #[command(flatten)]
    pub notify: crate::outbound::notify::NotifyArgs,
    /// `--flap-threshold`, `--time-zone`, `--max-defer` (docs/pacing.md).
    #[command(flatten)]
    pub pacing: PacingArgs,
    #[command(flatten)]
    pub rollout: RolloutArgs,
    /// Also export `reloadlet_object_consumers{namespace,kind,name,state}`: the consumers of
    /// each ConfigMap/Secret by state (docs/monitoring.md). Off by default: one series per
    /// state and consumed object. `reloadlet_consumers{namespace,state}` is always exported.
    #[arg(long, env = "RELOADLET_STATUS_METRICS_PER_OBJECT", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub status_metrics_per_object: bool,
}

/// `reloadlet.io/action: rollout` (docs/rollout.md).
#[derive(Debug, Clone, Args)]
pub struct RolloutArgs {
    /// Roll the owning Deployment/StatefulSet/DaemonSet of `reloadlet.io/action: rollout`
    /// pods when data they read changes (needs get on pods and ReplicaSets, get/patch on the
    /// workloads). `--rollout=false` turns it off (Helm `controller.rollout.enabled`).
    #[arg(long = "rollout", env = "RELOADLET_ROLLOUT", default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub enabled: bool,
    /// Also roll Argo Rollouts (`argoproj.io/v1alpha1`, through `spec.restartAt`). Off by
    /// default: it needs get/patch on rollouts.argoproj.io.
    #[arg(long, env = "RELOADLET_ARGO_ROLLOUTS", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub argo_rollouts: bool,
    /// Also roll Deployments, StatefulSets, DaemonSets (and Argo Rollouts with
    /// `--argo-rollouts`) that carry Stakater Reloader's annotations, as `action: rollout`
    /// (docs/rollout.md). Off by default, so that reloadlet beside a running Reloader never
    /// doubles its rollouts; needs list/watch on those workloads (metadata only is read).
    #[arg(long, env = "RELOADLET_RELOADER_COMPAT", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub reloader_compat: bool,
}

/// What the rollout feature does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RolloutSettings {
    pub enabled: bool,
    pub argo: bool,
    /// `--reloader-compat` (only with the rollout feature on).
    pub reloader_compat: bool,
}

/// Leader election: whether, through which Lease namespace, as whom, and its timing.
#[derive(Debug, Clone, Args)]
pub struct ElectionArgs {
    /// Elect one active replica through the Lease `reloadlet-controller` (--leader-elect=false
    /// for a single replica outside a cluster).
    #[arg(long, env = "RELOADLET_LEADER_ELECT", default_value_t = true, action = ArgAction::Set)]
    pub leader_elect: bool,
    /// The namespace of the Lease (the controller's own, from the downward API).
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// This replica's identity in the Lease (default: the hostname).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// How long a Lease not renewed stays with its holder.
    #[arg(long, env = "RELOADLET_LEASE_DURATION", default_value = "15s", value_parser = humantime::parse_duration)]
    pub lease_duration: Duration,
    /// The leader steps down when it could not renew for this long.
    #[arg(long, env = "RELOADLET_RENEW_DEADLINE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub renew_deadline: Duration,
    /// Between leader-election tries.
    #[arg(long, env = "RELOADLET_RETRY_PERIOD", default_value = "2s", value_parser = humantime::parse_duration)]
    pub retry_period: Duration,
}

#[derive(Clone, Debug)]
pub struct ControllerSettings {
    pub secrets: bool,
    pub max_nudges_per_second: u32,
    /// `None`: leader election is off (this replica always acts).
    pub election: Option<LeaseTarget>,
    /// The controller's own namespace (`POD_NAMESPACE` / `--lease-namespace`), where its key
    /// Secret lives (`crate::k8s::controller_key`); `None` outside a cluster.
    pub key_namespace: Option<String>,
    pub listen: SocketAddr,
    pub log_format: LogFormat,
    pub scope: ControllerScope,
    /// Follow env consumers of ConfigMaps / of Secrets.
    pub env: EnvKinds,
    pub notify: crate::outbound::notify::NotifySettings,
    /// Names the controller in notifications and Events (`POD_NAME`, else the hostname).
    pub instance: String,
    /// The controller's own pod (namespace, name) from the downward API: Warning Events about
    /// refused API requests regard it.
    pub own_pod: Option<(String, String)>,
    /// `--flap-threshold`, `--time-zone`, `--max-defer` (the controller has no `--debounce`:
    /// 0 unless a pod sets `reloadlet.io/debounce`).
    pub pacing: crate::core::pacing::PacingDefaults,
    pub rollout: RolloutSettings,
    /// `--status-metrics-per-object`.
    pub status_metrics_per_object: bool,
}

/// Which pods the controller may act on, and whether it writes at all.
#[derive(Clone, Debug)]
pub struct ControllerScope {
    pub filter: NamespaceFilter,
    /// `--pod-selector`, validated; applied by the API server on the pod watch.
    pub pod_selector: Option<String>,
    /// `--dry-run`: the executor writes nothing (no nudge or baseline patch; evictions are
    /// sent with dryRun=All).
    pub dry_run: bool,
}

/// `--env-consumers` / `--env-consumers-secrets`.
#[derive(Clone, Copy, Debug)]
pub struct EnvKinds {
    pub configmaps: bool,
    pub secrets: bool,
}

#[derive(Clone, Debug)]
pub struct LeaseTarget {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

pub use super::LEASE_NAME;

impl ControllerArgs {
    /// `hostname` is used when `POD_NAME` is not set.
    pub fn settings(
        &self,
        hostname: Option<String>,
    ) -> Result<ControllerSettings, crate::core::invalid::Invalid> {
        let el = &self.election;
        let instance = el
            .identity
            .clone()
            .filter(|s| !s.is_empty())
            .or(hostname.clone().filter(|s| !s.is_empty()))
            .unwrap_or_else(|| "reloadlet-controller".into());
        let notify = self.notify.clone().settings(&|k| std::env::var(k).ok())?;
        if self.rollout.reloader_compat && !self.rollout.enabled {
            return Err("--reloader-compat rolls workloads through the rollout feature: it needs --rollout (Helm controller.rollout.enabled)".into());
        }
        let election = if el.leader_elect {
            let namespace = el
                .lease_namespace
                .clone()
                .filter(|s| !s.is_empty())
                .ok_or("--leader-elect needs the controller's namespace: set POD_NAMESPACE (downward API metadata.namespace) or --lease-namespace")?;
            let identity = el
                .identity
                .clone()
                .filter(|s| !s.is_empty())
                .or(hostname.filter(|s| !s.is_empty()))
                .ok_or("--leader-elect needs an identity: set POD_NAME or --identity")?;
            if el.renew_deadline >= el.lease_duration {
                return Err("--renew-deadline must be shorter than --lease-duration".into());
            }
            if el.retry_period >= el.renew_deadline || el.retry_period.is_zero() {
                return Err(
                    "--retry-period must be above zero and shorter than --renew-deadline".into(),
                );
            }
            Some(LeaseTarget {
                namespace,
                name: LEASE_NAME.into(),
                identity,
                lease_duration: el.lease_duration,
                renew_deadline: el.renew_deadline,
                retry_period: el.retry_period,
            })
        } else {
            None
        };
        let scope = &self.scope;
        let pod_selector = scope.pod_selector.clone().filter(|s| !s.is_empty());
        if let Some(sel) = &pod_selector {
            super::scope::parse_pod_selector(sel)?;
        }
        let pacing = self.pacing.defaults(Duration::ZERO)?;
        Ok(ControllerSettings {
            key_namespace: el.lease_namespace.clone().filter(|s| !s.is_empty()),
            pacing,
            secrets: self.secrets,
            max_nudges_per_second: self.max_nudges_per_second,
            election,
            listen: self.listen,
            log_format: self.log_format,
            scope: ControllerScope {
                filter: super::scope::namespace_filter(
                    &scope.namespaces,
                    &scope.exclude_namespaces,
                ),
                pod_selector,
                dry_run: scope.dry_run,
            },
            env: EnvKinds {
                configmaps: self.env_consumers,
                secrets: self.env_consumers_secrets,
            },
            notify,
            instance,
            own_pod: super::agent::own_pod(el.lease_namespace.clone(), el.identity.clone()),
            rollout: RolloutSettings {
                enabled: self.rollout.enabled,
                argo: self.rollout.argo_rollouts,
                reloader_compat: self.rollout.reloader_compat,
            },
            status_metrics_per_object: self.status_metrics_per_object,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: ControllerArgs,
    }

    fn parse(argv: &[&str]) -> ControllerArgs {
        Wrap::try_parse_from(std::iter::once("x").chain(argv.iter().copied()))
            .unwrap()
            .args
    }

    #[test]
    fn a_malformed_pod_selector_is_refused_at_startup() {
        let bad = parse(&["--leader-elect=false", "--pod-selector", "app in ("]);
        let e = bad.settings(None).unwrap_err();
        assert!(
            e.contains("--pod-selector") && e.contains("not a valid label selector"),
            "{e}"
        );
        let good = parse(&[
            "--leader-elect=false",
            "--pod-selector",
            "app in (web),tier!=db",
        ]);
        assert_eq!(
            good.settings(None).unwrap().scope.pod_selector.as_deref(),
            Some("app in (web),tier!=db")
        );
    }

    #[test]
    fn defaults_and_validation() {
        let a = parse(&["--lease-namespace", "reloadlet", "--identity", "c-1"]);
        let s = a.settings(None).unwrap();
        assert!(!s.secrets);
        assert_eq!(s.max_nudges_per_second, 20);
        let e = s.election.unwrap();
        assert_eq!(
            (e.name.as_str(), e.namespace.as_str(), e.identity.as_str()),
            (LEASE_NAME, "reloadlet", "c-1")
        );

        let no_ns = parse(&["--identity", "c-1"]);
        if no_ns.election.lease_namespace.is_none() {
            assert!(no_ns.settings(None).unwrap_err().contains("POD_NAMESPACE"));
        }
        let off = parse(&[
            "--leader-elect=false",
            "--namespaces",
            "a,b",
            "--exclude-namespaces",
            "b",
        ]);
        let s = off.settings(None).unwrap();
        assert!(s.election.is_none());
        assert!(s.scope.filter.check("b").is_some());
        assert!(s.scope.filter.check("a").is_none());
        let host = parse(&["--lease-namespace", "x"]);
        if host.election.identity.is_none() {
            assert_eq!(
                host.settings(Some("node-1".into()))
                    .unwrap()
                    .election
                    .unwrap()
                    .identity,
                "node-1"
            );
        }
        assert!(
            parse(&["--leader-elect=false", "--max-nudges-per-second", "5"]).max_nudges_per_second
                == 5
        );
        assert!(Wrap::try_parse_from(["x", "--max-nudges-per-second", "0"]).is_err());
    }

    #[test]
    fn dry_run_is_the_agents_flag() {
        let s = |argv: &[&str]| {
            let mut v = vec!["--leader-elect=false"];
            v.extend_from_slice(argv);
            parse(&v).settings(None).unwrap()
        };
        if std::env::var_os("RELOADLET_DRY_RUN").is_none() {
            assert!(!s(&[]).scope.dry_run, "off by default");
        }
        assert!(s(&["--dry-run"]).scope.dry_run);
    }

    #[test]
    fn env_consumer_flags() {
        let s = |argv: &[&str]| {
            let mut v = vec!["--leader-elect=false"];
            v.extend_from_slice(argv);
            parse(&v).settings(None).unwrap()
        };
        if std::env::var_os("RELOADLET_ENV_CONSUMERS").is_none() {
            assert!(s(&[]).env.configmaps, "on by default");
            assert!(!s(&["--env-consumers=false"]).env.configmaps);
            assert!(s(&["--env-consumers"]).env.configmaps);
            assert!(s(&["--env-consumers", "true"]).env.configmaps);
        }
        if std::env::var_os("RELOADLET_ENV_CONSUMERS_SECRETS").is_none() {
            assert!(!s(&[]).env.secrets, "off by default");
            assert!(s(&["--env-consumers-secrets"]).env.secrets);
            assert!(!s(&["--env-consumers-secrets=false"]).env.secrets);
            assert!(s(&[]).rollout.enabled, "rollout on by default");
            assert!(!s(&["--rollout=false"]).rollout.enabled);
            assert!(!s(&[]).rollout.argo, "Argo Rollouts off by default");
            assert!(s(&["--argo-rollouts"]).rollout.argo);
        }
        if std::env::var_os("RELOADLET_RELOADER_COMPAT").is_none() {
            assert!(
                !s(&[]).rollout.reloader_compat,
                "Reloader compat off by default"
            );
            assert!(s(&["--reloader-compat"]).rollout.reloader_compat);
            assert!(!s(&["--reloader-compat=false"]).rollout.reloader_compat);
            let off = parse(&[
                "--leader-elect=false",
                "--reloader-compat",
                "--rollout=false",
            ]);
            assert!(off.settings(None).unwrap_err().contains("--rollout"));
        }
        assert!(Wrap::try_parse_from(["x", "--env-consumers=maybe"]).is_err());
        // The agent's notification flags, the same way.
        if std::env::var_os("RELOADLET_NOTIFY_URL").is_none()
            && std::env::var_os("ALERT_WEBHOOK_URL").is_none()
        {
            assert!(!s(&[]).notify.enabled());
            let on = s(&[
                "--notify-url",
                "https://hooks.example.com/x",
                "--notify-format",
                "slack",
            ]);
            assert!(on.notify.enabled());
            assert!(!format!("{on:?}").contains("/x"), "the URL is a credential");
        }
    }
}
