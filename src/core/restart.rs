//! `reloadlet.io/action: restart` (issue #45): what the pod asks (its annotations, parsed
//! bounded), whether a restart in place can bring it the new config at all (the refusals),
//! how each container is stopped (its stop signal, then SIGKILL after the grace), and when
//! a container may be restarted again (the kubelet's crash-loop window). Pure.
//!
//! The kubelet starts an exited container again in the same pod when the pod's
//! `restartPolicy` is `Always` (`ShouldContainerBeRestarted`, pkg/kubelet/container/
//! helpers.go); the first start after an exit is immediate, a later one within 10 min of the
//! last start meets the crash-loop back-off (`doBackOff`, pkg/kubelet/kuberuntime/
//! kuberuntime_manager.go; client-go `flowcontrol.Backoff`: 10 s doubling to 300 s, the
//! entry reset once a container ran 2 × 300 s). Hence [`MIN_SPACING`].

use crate::core::durations::parse_bounded;
use crate::core::model::{PodInfo, ReloadSignal};
use std::collections::BTreeMap;
use std::time::Duration;

/// `reloadlet.io/restart-containers`: `all`, or a list of container names.
pub const RESTART_CONTAINERS: &str = "reloadlet.io/restart-containers";
/// `reloadlet.io/restart-grace`: SIGKILL this long after the stop signal.
pub const RESTART_GRACE: &str = "reloadlet.io/restart-grace";
/// `reloadlet.io/restart-timeout`: how long a restarted pod may take to be Ready again.
pub const RESTART_TIMEOUT: &str = "reloadlet.io/restart-timeout";
/// `reloadlet.io/drain`: how long a pod with the [`DRAIN_GATE`] is left out of its Services
/// before its containers are stopped.
pub const DRAIN: &str = "reloadlet.io/drain";
/// Every restart annotation (known keys of the parser).
pub const ANNOTATIONS: [&str; 4] = [RESTART_CONTAINERS, RESTART_GRACE, RESTART_TIMEOUT, DRAIN];

/// The readiness gate a pod declares to be drained before a restart.
pub const DRAIN_GATE: &str = "reloadlet.io/restart-drain";

/// Whether the pod declares [`DRAIN_GATE`].
pub fn declares_drain_gate(pod: &PodInfo) -> bool {
    pod.restart.drain_gate
}

/// The annotation the kubelet puts on the API's copy of a static pod (a mirror pod).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Default of [`DRAIN`].
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(5);
/// Default of [`RESTART_TIMEOUT`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest grace or timeout a pod may ask for.
pub const MAX_RESTART_DURATION: Duration = Duration::from_secs(3_600);
/// The kubelet's default `terminationGracePeriodSeconds`.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);
/// Restarts of one container at least this far apart: `2 × MaxContainerBackOff`, after
/// which the kubelet's back-off entry has expired and the restart is immediate.
pub const MIN_SPACING: Duration = Duration::from_secs(600);
/// At most this many names in [`RESTART_CONTAINERS`].
const MAX_NAMES: usize = 64;

/// Which containers a restart stops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestartContainers {
    /// Those that read the changed source (a volume mount or an env reference).
    Changed,
    All,
    Named(Vec<String>),
}

/// What a `restart` pod asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartSpec {
    pub containers: RestartContainers,
    /// `reloadlet.io/restart-grace`; `None`: the pod's `terminationGracePeriodSeconds`.
    pub grace: Option<Duration>,
    pub timeout: Duration,
    /// `reloadlet.io/drain` (used only when the pod declares the [`DRAIN_GATE`]).
    pub drain: Duration,
}

/// A restart annotation that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RestartError {
    #[error("{RESTART_CONTAINERS}: {0:?} is not valid; use \"all\" or container names separated by commas")]
    Containers(String),
    #[error("{key}: {value:?}: {why}")]
    Duration {
        key: &'static str,
        value: String,
        why: String,
    },
}

/// Parses the restart annotations (bounded: names are DNS labels, at most 64; durations at
/// most an hour).
pub fn parse(annotations: &BTreeMap<String, String>) -> Result<RestartSpec, RestartError> {
    let containers = match annotations.get(RESTART_CONTAINERS).map(|v| v.trim()) {
        None => RestartContainers::Changed,
        Some(v) if v.eq_ignore_ascii_case("all") => RestartContainers::All,
        Some(v) => {
            let names: Vec<String> = v
                .split(',')
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect();
            let valid = !names.is_empty()
                && names.len() <= MAX_NAMES
                && names.iter().all(|n| is_dns_label(n));
            if !valid {
                return Err(RestartError::Containers(truncated(v)));
            }
            RestartContainers::Named(names)
        }
    };
    let duration = |key: &'static str| -> Result<Option<Duration>, RestartError> {
        annotations
            .get(key)
            .map(|v| {
                parse_bounded(v, MAX_RESTART_DURATION).map_err(|why| RestartError::Duration {
                    key,
                    value: truncated(v),
                    why: why.to_string(),
                })
            })
            .transpose()
    };
    Ok(RestartSpec {
        containers,
        grace: duration(RESTART_GRACE)?,
        timeout: duration(RESTART_TIMEOUT)?.unwrap_or(DEFAULT_TIMEOUT),
        drain: duration(DRAIN)?.unwrap_or(DEFAULT_DRAIN),
    })
}

fn truncated(v: &str) -> String {
    v.chars().take(80).collect()
}

fn is_dns_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// `reloadlet.io/restart-containers` names containers of the pod (classic init containers
/// are never restarted): a name that matches none is a typo.
pub fn check_names(pod: &PodInfo, spec: &RestartSpec) -> Result<(), crate::core::invalid::Invalid> {
    use crate::core::model::ContainerKind;
    let RestartContainers::Named(names) = &spec.containers else {
        return Ok(());
    };
    let known: Vec<&str> = pod
        .containers
        .iter()
        .filter(|c| c.kind != ContainerKind::Init)
        .map(|c| c.name.as_str())
        .collect();
    match names.iter().find(|n| !known.contains(&n.as_str())) {
        None => Ok(()),
        Some(name) => Err(crate::invalid!(
            "{RESTART_CONTAINERS}: the pod has no container {name:?} (known: {})",
            known.join(", ")
        )),
    }
}

/// Why a restart in place cannot bring this pod its new config (the Warning's text), or
/// `None` when it can.
pub fn refusal(pod: &PodInfo) -> Option<String> {
    if pod.annotations.contains_key(MIRROR_ANNOTATION) {
        return Some("a static pod (its mirror in the API): the kubelet runs it from a file on the node, not from the API, and reloadlet does not restart it".into());
    }
    match pod.restart.restart_policy.as_deref().unwrap_or("Always") {
        "Always" => None,
        other => Some(format!(
            "restartPolicy {other}: the kubelet would not start the stopped container again (only Always does, whatever the exit code)"
        )),
    }
}

/// How one container is stopped: its stop signal, then SIGKILL after `grace` — after the
/// pod was drained when it declares the [`DRAIN_GATE`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopPlan {
    pub signal: ReloadSignal,
    pub grace: Duration,
    /// `Some`: the pod declares the [`DRAIN_GATE`]: its condition is set `False` and this
    /// long waited before the stop signal (`core::drain`).
    pub drain: Option<Duration>,
    /// `reloadlet.io/restart-timeout`: how long the restarted container may take to be
    /// Ready again (the drain condition is set back to `True` then at the latest).
    pub timeout: Duration,
}

/// The stop plan of `container`: `lifecycle.stopSignal` where set (KEP-4960) else SIGTERM;
/// `reloadlet.io/restart-grace`, else `terminationGracePeriodSeconds`, else 30 s. `Err`: a
/// stop signal reloadlet cannot send.
pub fn stop_plan(
    pod: &PodInfo,
    spec: &RestartSpec,
    container: &str,
) -> Result<StopPlan, crate::core::invalid::Invalid> {
    let signal = match pod
        .restart
        .stop_signals
        .iter()
        .find(|(c, _)| c == container)
    {
        None => ReloadSignal::Term,
        Some((_, s)) => ReloadSignal::parse(s).ok_or_else(|| {
            format!(
                "container {container}: lifecycle.stopSignal {:?} is not one reloadlet sends (HUP, INT, QUIT, USR1, USR2, TERM, WINCH)",
                truncated(s)
            )
        })?,
    };
    let grace = spec.grace.unwrap_or_else(|| {
        pod.restart
            .termination_grace_seconds
            .map(|s| Duration::from_secs(s.max(0) as u64).min(MAX_RESTART_DURATION))
            .unwrap_or(DEFAULT_GRACE)
    });
    Ok(StopPlan {
        signal,
        grace,
        drain: declares_drain_gate(pod).then_some(spec.drain),
        timeout: spec.timeout,
    })
}

/// Whether a container last restarted `since_last` ago may be restarted now: `None` if so,
/// else how long to defer.
pub fn spacing(since_last: Option<Duration>, min: Duration) -> Option<Duration> {
    let since = since_last?;
    (since < min).then(|| min - since)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::RestartFacts;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn restart_annotations_are_read_bounded() {
        let spec = parse(&annotations(&[])).unwrap();
        assert_eq!(
            spec,
            RestartSpec {
                containers: RestartContainers::Changed,
                grace: None,
                timeout: DEFAULT_TIMEOUT,
                drain: DEFAULT_DRAIN,
            }
        );
        let spec = parse(&annotations(&[
            (RESTART_CONTAINERS, " app, sidecar "),
            (RESTART_GRACE, "5s"),
            (RESTART_TIMEOUT, "2m"),
            (DRAIN, "20s"),
        ]))
        .unwrap();
        assert_eq!(spec.drain, Duration::from_secs(20));
        assert_eq!(
            spec.containers,
            RestartContainers::Named(vec!["app".into(), "sidecar".into()])
        );
        assert_eq!(spec.grace, Some(Duration::from_secs(5)));
        assert_eq!(spec.timeout, Duration::from_secs(120));
        assert_eq!(
            parse(&annotations(&[(RESTART_CONTAINERS, "ALL")]))
                .unwrap()
                .containers,
            RestartContainers::All
        );
        let long = "a,".repeat(100);
        let huge = "x".repeat(100_000);
        for (key, value) in [
            (RESTART_CONTAINERS, ""),
            (RESTART_CONTAINERS, "App"),
            (RESTART_CONTAINERS, long.as_str()),
            (RESTART_CONTAINERS, huge.as_str()),
            (RESTART_GRACE, "300000000000y"),
            (RESTART_GRACE, "2h"),
            (RESTART_TIMEOUT, "soon"),
            (RESTART_TIMEOUT, huge.as_str()),
            (DRAIN, "-1s"),
            (DRAIN, "2h"),
            (DRAIN, huge.as_str()),
        ] {
            let err = parse(&annotations(&[(key, value)])).unwrap_err();
            assert!(err.to_string().starts_with(key), "{err}");
            assert!(err.to_string().len() < 400, "bounded: {err}");
        }
    }

    fn pod(policy: Option<&str>) -> PodInfo {
        PodInfo {
            name: "web-1".into(),
            restart: Box::new(RestartFacts {
                restart_policy: policy.map(String::from),
                termination_grace_seconds: Some(7),
                drain_gate: false,
                stop_signals: vec![("nginx".into(), "SIGQUIT".into())],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_restart_policy_always_and_api_pods_are_restarted() {
        assert_eq!(refusal(&pod(None)), None);
        assert_eq!(refusal(&pod(Some("Always"))), None);
        for policy in ["Never", "OnFailure"] {
            let why = refusal(&pod(Some(policy))).unwrap();
            assert!(why.contains(policy), "{why}");
        }
        let mut mirror = pod(None);
        mirror
            .annotations
            .insert(MIRROR_ANNOTATION.into(), "abc".into());
        assert!(refusal(&mirror).unwrap().contains("static pod"));
    }

    #[test]
    fn stop_signal_then_kill_after_the_grace() {
        let spec = parse(&annotations(&[])).unwrap();
        let p = pod(None);
        assert_eq!(
            stop_plan(&p, &spec, "app").unwrap(),
            StopPlan {
                signal: ReloadSignal::Term,
                grace: Duration::from_secs(7),
                drain: None,
                timeout: DEFAULT_TIMEOUT,
            }
        );
        let mut gated = pod(None);
        gated.restart.drain_gate = true;
        let drained = parse(&annotations(&[(DRAIN, "9s")])).unwrap();
        assert_eq!(
            stop_plan(&gated, &drained, "app").unwrap().drain,
            Some(Duration::from_secs(9))
        );
        assert_eq!(
            stop_plan(&gated, &spec, "app").unwrap().drain,
            Some(DEFAULT_DRAIN),
            "the gate alone drains for the default"
        );
        assert_eq!(
            stop_plan(&p, &drained, "app").unwrap().drain,
            None,
            "no gate, no drain"
        );
        assert_eq!(
            stop_plan(&p, &spec, "nginx").unwrap().signal,
            ReloadSignal::Quit
        );
        let spec = parse(&annotations(&[(RESTART_GRACE, "2s")])).unwrap();
        assert_eq!(
            stop_plan(&p, &spec, "app").unwrap().grace,
            Duration::from_secs(2)
        );
        let mut odd = pod(None);
        odd.restart.stop_signals = vec![("app".into(), "SIGRTMIN+3".into())];
        odd.restart.termination_grace_seconds = Some(i64::MAX);
        let spec = parse(&annotations(&[])).unwrap();
        assert!(stop_plan(&odd, &spec, "app")
            .unwrap_err()
            .contains("SIGRTMIN+3"));
        odd.restart.stop_signals.clear();
        assert_eq!(
            stop_plan(&odd, &spec, "app").unwrap().grace,
            MAX_RESTART_DURATION
        );
    }

    #[test]
    fn a_container_restarts_at_most_once_per_crash_loop_window() {
        let ten = MIN_SPACING;
        assert_eq!(spacing(None, ten), None);
        assert_eq!(
            spacing(Some(Duration::from_secs(60)), ten),
            Some(Duration::from_secs(540))
        );
        assert_eq!(spacing(Some(ten), ten), None);
        assert_eq!(spacing(Some(Duration::MAX), ten), None);
    }
}
