//! What a notification is about: a typed value the executor (agent or controller) builds
//! from its own typed outcome. Formatting, filtering and dedupe all read this value.

use crate::core::model::SourceRef;
use std::time::Duration;

/// How long an eviction must stay blocked (by a PodDisruptionBudget) before it is worth
/// telling a human under `--notify-on failure`.
pub const EVICTION_BLOCKED_NOTIFY_AFTER: Duration = Duration::from_secs(10 * 60);

/// The action reloadlet took (or tried) on the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Signal,
    Http,
    Evict,
    /// The controller's projection nudge (a pod annotation patch).
    Nudge,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Signal => "signal",
            Self::Http => "http",
            Self::Evict => "evict",
            Self::Nudge => "nudge",
        }
    }
}

/// The outcome of the action; [`Outcome::reason`] is the Kubernetes Event reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Signaled,
    SignalFailed,
    /// The signal was delivered but the process ignores or blocks it.
    SignalNotHandled,
    Reloaded,
    ReloadFailed,
    EvictionRequested,
    EvictionFailed,
    /// A PodDisruptionBudget keeps refusing the eviction; `blocked_for` counts from the
    /// first refusal.
    EvictionBlocked {
        blocked_for: Duration,
    },
    /// The controller: an env source changed and the pod's action cannot refresh env.
    EnvNotReloaded,
    /// The controller: a projection nudge failed (the change waits for the kubelet's
    /// periodic sync).
    NudgeFailed,
}

impl Outcome {
    /// The Event reason, also the `outcome` field of the `json` format and part of the
    /// dedupe key.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Signaled => "Signaled",
            Self::SignalFailed => "SignalFailed",
            Self::SignalNotHandled => "SignalNotHandled",
            Self::Reloaded => "Reloaded",
            Self::ReloadFailed => "ReloadFailed",
            Self::EvictionRequested => "EvictionRequested",
            Self::EvictionFailed => "EvictionFailed",
            Self::EvictionBlocked { .. } => "EvictionBlocked",
            Self::EnvNotReloaded => "EnvNotReloaded",
            Self::NudgeFailed => "NudgeFailed",
        }
    }

    /// Does a human need to act? (`--notify-on failure` sends only these.)
    pub fn is_failure(self) -> bool {
        match self {
            Self::SignalFailed
            | Self::SignalNotHandled
            | Self::ReloadFailed
            | Self::EvictionFailed
            | Self::EnvNotReloaded
            | Self::NudgeFailed => true,
            Self::EvictionBlocked { blocked_for } => blocked_for >= EVICTION_BLOCKED_NOTIFY_AFTER,
            Self::Signaled | Self::Reloaded | Self::EvictionRequested => false,
        }
    }

    /// Good, bad, or waiting: the Slack attachment colour.
    pub fn severity(self) -> Severity {
        match self {
            Self::Signaled | Self::Reloaded | Self::EvictionRequested => Severity::Ok,
            Self::EvictionBlocked { .. } => Severity::Warning,
            _ => Severity::Failure,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Ok,
    Warning,
    Failure,
}

/// One thing that happened to one pod, as a human should read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notification {
    /// The node that acted (the agent's node, or the controller's pod node for the
    /// controller).
    pub node: String,
    pub namespace: String,
    pub pod: String,
    pub action: Action,
    /// The ConfigMaps/Secrets whose change led to the action (in `namespace`).
    pub sources: Vec<SourceRef>,
    pub outcome: Outcome,
    /// The Event message (e.g. `kill(SIGHUP) of pid 4242: EPERM`).
    pub message: String,
}

/// `--notify-on`: which outcomes are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum NotifyOn {
    /// SignalFailed, SignalNotHandled, ReloadFailed, EvictionFailed, and EvictionBlocked
    /// once it has lasted 10 minutes.
    #[default]
    Failure,
    /// Every outcome, including successful reloads.
    All,
}

impl NotifyOn {
    /// Pure filter: is this notification sent at all (before dedupe)?
    pub fn wants(self, n: &Notification) -> bool {
        match self {
            Self::All => true,
            Self::Failure => n.outcome.is_failure(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(outcome: Outcome) -> Notification {
        Notification {
            node: "n1".into(),
            namespace: "ns".into(),
            pod: "web-0".into(),
            action: Action::Signal,
            sources: vec![],
            outcome,
            message: String::new(),
        }
    }

    #[test]
    fn which_outcomes_each_setting_sends() {
        let min = |m: u64| Duration::from_secs(60 * m);
        let table = [
            (Outcome::Signaled, false),
            (Outcome::Reloaded, false),
            (Outcome::EvictionRequested, false),
            (Outcome::SignalFailed, true),
            (Outcome::SignalNotHandled, true),
            (Outcome::ReloadFailed, true),
            (Outcome::EvictionFailed, true),
            (
                Outcome::EvictionBlocked {
                    blocked_for: min(1),
                },
                false,
            ),
            (
                Outcome::EvictionBlocked {
                    blocked_for: min(9),
                },
                false,
            ),
            (
                Outcome::EvictionBlocked {
                    blocked_for: min(10),
                },
                true,
            ),
            (
                Outcome::EvictionBlocked {
                    blocked_for: min(60),
                },
                true,
            ),
        ];
        for (outcome, on_failure) in table {
            assert_eq!(
                NotifyOn::Failure.wants(&with(outcome)),
                on_failure,
                "{outcome:?}"
            );
            assert!(NotifyOn::All.wants(&with(outcome)), "{outcome:?}");
        }
    }
}
