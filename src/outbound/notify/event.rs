//! What a notification is about: the executor's (agent's or controller's) own typed
//! [`ActionKind`] and [`Outcome`], with the pod and the message. Formatting, filtering and
//! dedupe all read this value; its reason, action, failure and colour are derived from the
//! outcome's Event ([`Outcome::event`]), as the metric label and the log field are.

use crate::core::model::SourceRef;
use crate::core::outcome::{ActionKind, EventKind, Outcome};
use std::time::Duration;

/// How long an eviction must stay blocked (by a PodDisruptionBudget) before it is worth
/// telling a human under `--notify-on failure`.
pub const EVICTION_BLOCKED_NOTIFY_AFTER: Duration = Duration::from_secs(10 * 60);

/// Good, bad, or waiting: the Slack attachment colour.
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
    /// The action counted (the `action` metric label).
    pub action: ActionKind,
    /// The ConfigMaps/Secrets whose change led to the action (in `namespace`).
    pub sources: Vec<SourceRef>,
    pub outcome: Outcome,
    /// `EvictionBlocked`: how long a PodDisruptionBudget has refused the eviction, from the
    /// first refusal (zero for every other outcome).
    pub blocked_for: Duration,
    /// The Event message (e.g. `kill(SIGHUP) of pid 4242: EPERM`).
    pub message: String,
}

impl Notification {
    /// The Event reason, also the `outcome` field of the `json` format and part of the
    /// dedupe key.
    pub fn reason(&self) -> &'static str {
        self.outcome.reason()
    }

    /// The `action` field: `signal`, `http`, `evict`, `nudge`, or `none` (`EnvNotReloaded`:
    /// nothing was done).
    pub fn action(&self) -> &'static str {
        self.outcome.named_action(self.action)
    }

    /// Does a human need to act? (`--notify-on failure` sends only these.) Every Warning
    /// outcome, and one with no Event (`NudgeFailed`); `EvictionBlocked` once it has lasted
    /// [`EVICTION_BLOCKED_NOTIFY_AFTER`].
    pub fn is_failure(&self) -> bool {
        match self.outcome {
            Outcome::EvictionBlocked => self.blocked_for >= EVICTION_BLOCKED_NOTIFY_AFTER,
            outcome => outcome.event().is_none_or(|e| e.warning),
        }
    }

    /// Good, bad, or waiting: the Slack attachment colour.
    pub fn severity(&self) -> Severity {
        match (self.outcome, self.outcome.event()) {
            (Outcome::EvictionBlocked, _) => Severity::Warning,
            (_, Some(EventKind { warning: false, .. })) => Severity::Ok,
            _ => Severity::Failure,
        }
    }
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
            Self::Failure => n.is_failure(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with((outcome, blocked_for): (Outcome, Duration)) -> Notification {
        Notification {
            node: "n1".into(),
            namespace: "ns".into(),
            pod: "web-0".into(),
            action: ActionKind::Signal,
            sources: vec![],
            outcome,
            blocked_for,
            message: String::new(),
        }
    }

    #[test]
    fn which_outcomes_each_setting_sends() {
        let min = |m: u64| Duration::from_secs(60 * m);
        let now = Duration::ZERO;
        let table = [
            ((Outcome::Signaled, now), false),
            ((Outcome::Reloaded, now), false),
            ((Outcome::Evicted, now), false),
            ((Outcome::SignalFailed, now), true),
            ((Outcome::SignalNotHandled, now), true),
            ((Outcome::SignalWithheld, now), true),
            ((Outcome::ReloadFailed, now), true),
            ((Outcome::EvictionFailed, now), true),
            ((Outcome::EnvNotReloaded, now), true),
            ((Outcome::NudgeFailed, now), true),
            ((Outcome::EvictionBlocked, min(1)), false),
            ((Outcome::EvictionBlocked, min(9)), false),
            ((Outcome::EvictionBlocked, min(10)), true),
            ((Outcome::EvictionBlocked, min(60)), true),
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
