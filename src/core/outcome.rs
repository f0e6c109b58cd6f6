//! What became of an action, as one typed vocabulary: the `outcome` metric label, the
//! `outcome` log field ([`Outcome::as_str`]), the Kubernetes Event's reason and type
//! ([`Outcome::event`]) and the Event's action verb ([`ActionKind::event_action`]) are all
//! derived from these values, so the three can never drift apart.

/// The kind of action (the `action` metric label and log field).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, strum::EnumIter)]
pub enum ActionKind {
    Signal,
    Evict,
    /// `reloadlet.io/action: http`: a reload request to the pod.
    Http,
    /// `reloadlet.io/action: rollout`: the controller patched the owning workload.
    Rollout,
    /// `reloadlet.io/action: restart`: a container's main process stopped, the kubelet
    /// starts it again in the same pod.
    Restart,
    /// No action: an annotation was validated.
    None,
}

impl ActionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Signal => "signal",
            Self::Evict => "evict",
            Self::Http => "http",
            Self::Rollout => "rollout",
            Self::Restart => "restart",
            Self::None => "none",
        }
    }

    /// The Event's `action` (a short PascalCase verb).
    pub fn event_action(self) -> &'static str {
        match self {
            Self::Signal => "Signal",
            Self::Evict => "Evict",
            Self::Http => "Reload",
            Self::Rollout => "Rollout",
            Self::Restart => "Restart",
            Self::None => "Validate",
        }
    }
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, strum::EnumIter)]
pub enum Outcome {
    Signaled,
    /// Sent, but the process has no handler and does not block it (Warning `SignalNotHandled`).
    SignalNotHandled,
    /// Not sent: the process ignores it or would be killed by it (Warning `SignalNotHandled`).
    SignalWithheld,
    SignalFailed,
    Evicted,
    EvictionBlocked,
    EvictionFailed,
    /// `reloadlet.io/on-blocked: rollout` and a PodDisruptionBudget that can never allow the
    /// eviction: no eviction sent (or no more), the change left to the controller's rollout
    /// (Normal `EvictionHandedOff`).
    EvictionHandedOff,
    Refused,
    /// The pod's reload endpoint answered 2xx (Normal `Reloaded`).
    Reloaded,
    /// A 4xx other than 408/429, or no 2xx within the retry budget (Warning `ReloadFailed`).
    ReloadFailed,
    InvalidAnnotation,
    /// A volume over one of the agent's limits (depth, entries, bytes): not followed
    /// (Warning `VolumeOverLimit`, once per volume and limit).
    VolumeOverLimit,
    SubPathNotUpdated,
    DryRun,
    /// An evict pod that no PodDisruptionBudget selects (a warning, not counted).
    NoDisruptionBudget,
    /// The pod is already terminating: nothing to do (not counted, no Event).
    Skipped,
    /// The controller: an env source changed for a pod whose action cannot refresh env
    /// (Warning `EnvNotReloaded`).
    EnvNotReloaded,
    /// The controller: a projection nudge (pod patch) failed (a notification, no Event; the
    /// nudge metrics count it).
    NudgeFailed,
    /// The controller's pod patches (`reloadlet_nudges_total{outcome}`; no Event, not in
    /// `reloadlet_actions_total`): written.
    Patched,
    /// The pod was gone (404, and still gone on re-read; or another pod of the same name).
    PodGone,
    /// 409 twice, or the pod changed identity.
    PatchConflict,
    /// 403: the controller's RBAC (or an admission policy) refuses the patch.
    PatchForbidden,
    PatchFailed,
    /// A nudge over `--max-nudges-per-second`, not sent.
    NudgeDropped,
    /// Pacing (docs/pacing.md): the action waits for a maintenance window or the end of a
    /// minimum interval (Normal `ReloadDeferred`, once per deferral).
    Deferred,
    /// Pacing: the flap breaker holds the pod (Warning `ReloadFlapping`, once per episode).
    Flapping,
    /// The controller patched a workload's pod template (Normal `RolloutRequested`).
    RolloutRequested,
    /// No rollout: the owner cannot be rolled, or the patch failed (Warning
    /// `RolloutUnsupported` / `RolloutFailed`).
    RolloutUnsupported,
    RolloutFailed,
    /// No rollout: the pod's owner chain does not verify, or the workload's template does not
    /// ask for what the pod's annotations ask (Warning `RolloutNotGranted`).
    RolloutNotGranted,
    /// `action: restart`: the stop signal (and SIGKILL after the grace) reached the
    /// container's main process (Normal `Restarted`).
    Restarted,
    /// `action: restart`: the container restarted less than the crash-loop window ago; the
    /// restart waits for its end (Normal `RestartDeferred`, kept, never dropped).
    RestartDeferred,
    /// `action: restart` cannot bring this pod its new config (Warning `RestartRefused`).
    RestartRefused,
    /// The main process could not be found or stopped (Warning `RestartFailed`).
    RestartFailed,
    /// `action: restart` without `--restart-without-grant`: the agent wrote its request
    /// (`reloadlet.io/restart-request`) and waits for the controller's grant (Normal
    /// `RestartRequested`).
    RestartRequested,
    /// The controller grants no restart: the PodDisruptionBudget allows no disruption now
    /// (Warning `RestartBlocked`).
    RestartBlocked,
    /// A restarted pod is not Ready within `reloadlet.io/restart-timeout`: no further grants
    /// for its owner until it is (Warning `RestartStuck`).
    RestartStuck,
    /// `reloadlet.io/on-blocked: rollout` and a PodDisruptionBudget that can never allow the
    /// restart while the workload keeps its size (e.g. one replica under `minAvailable: 1`): nothing stopped, the change left to the controller's surge-first rollout
    /// (Normal `RestartHandedOff`).
    RestartHandedOff,
    /// A panic was caught while handling the pod (`crate::contain`): it is skipped until it
    /// changes (Warning `InternalError`; counted in `reloadlet_handler_panics_total`).
    InternalError,
}

/// A Kubernetes Event's reason and type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventKind {
    pub reason: &'static str,
    pub warning: bool,
}

impl Outcome {
    /// The metric label and the log field.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Signaled => "signaled",
            Self::SignalNotHandled => "signal_not_handled",
            Self::SignalWithheld => "signal_withheld",
            Self::SignalFailed => "signal_failed",
            Self::Evicted => "evicted",
            Self::EvictionBlocked => "eviction_blocked",
            Self::EvictionFailed => "eviction_failed",
            Self::EvictionHandedOff => "eviction_handed_off",
            Self::Refused => "refused",
            Self::Reloaded => "reloaded",
            Self::ReloadFailed => "reload_failed",
            Self::InvalidAnnotation => "invalid_annotation",
            Self::VolumeOverLimit => "volume_over_limit",
            Self::SubPathNotUpdated => "subpath_not_updated",
            Self::DryRun => "dry_run",
            Self::NoDisruptionBudget => "no_disruption_budget",
            Self::Skipped => "skipped",
            Self::EnvNotReloaded => "env_not_reloaded",
            Self::NudgeFailed => "nudge_failed",
            Self::Patched => "patched",
            Self::PodGone => "gone",
            Self::PatchConflict => "conflict",
            Self::PatchForbidden => "forbidden",
            Self::PatchFailed => "failed",
            Self::NudgeDropped => "dropped",
            Self::Deferred => "deferred",
            Self::Flapping => "flapping",
            Self::RolloutRequested => "rollout_requested",
            Self::RolloutUnsupported => "rollout_unsupported",
            Self::RolloutFailed => "rollout_failed",
            Self::RolloutNotGranted => "rollout_not_granted",
            Self::Restarted => "restarted",
            Self::RestartDeferred => "restart_deferred",
            Self::RestartRefused => "restart_refused",
            Self::RestartFailed => "restart_failed",
            Self::RestartRequested => "restart_requested",
            Self::RestartBlocked => "restart_blocked",
            Self::RestartStuck => "restart_stuck",
            Self::RestartHandedOff => "restart_handed_off",
            Self::InternalError => "internal_error",
        }
    }

    /// The Event published for this outcome (`None`: no Event).
    pub fn event(self) -> Option<EventKind> {
        let (reason, warning) = match self {
            Self::Signaled => ("Signaled", false),
            Self::SignalNotHandled | Self::SignalWithheld => ("SignalNotHandled", true),
            Self::SignalFailed => ("SignalFailed", true),
            Self::Evicted => ("EvictionRequested", false),
            Self::EvictionBlocked => ("EvictionBlocked", true),
            Self::EvictionFailed => ("EvictionFailed", true),
            Self::EvictionHandedOff => ("EvictionHandedOff", false),
            Self::Refused => ("EvictionRefused", true),
            Self::Reloaded => ("Reloaded", false),
            Self::ReloadFailed => ("ReloadFailed", true),
            Self::InvalidAnnotation => ("InvalidAnnotation", true),
            Self::VolumeOverLimit => ("VolumeOverLimit", true),
            Self::SubPathNotUpdated => ("SubPathNotUpdated", true),
            Self::NoDisruptionBudget => ("NoDisruptionBudget", true),
            Self::EnvNotReloaded => ("EnvNotReloaded", true),
            Self::Deferred => ("ReloadDeferred", false),
            Self::Flapping => ("ReloadFlapping", true),
            Self::RolloutRequested => ("RolloutRequested", false),
            Self::RolloutUnsupported => ("RolloutUnsupported", true),
            Self::RolloutFailed => ("RolloutFailed", true),
            Self::RolloutNotGranted => ("RolloutNotGranted", true),
            Self::Restarted => ("Restarted", false),
            Self::RestartDeferred => ("RestartDeferred", false),
            Self::RestartRefused => ("RestartRefused", true),
            Self::RestartFailed => ("RestartFailed", true),
            Self::RestartRequested => ("RestartRequested", false),
            Self::RestartBlocked => ("RestartBlocked", true),
            Self::RestartStuck => ("RestartStuck", true),
            Self::RestartHandedOff => ("RestartHandedOff", false),
            Self::InternalError => ("InternalError", true),
            Self::DryRun | Self::Skipped | Self::NudgeFailed => return None,
            Self::Patched
            | Self::PodGone
            | Self::PatchConflict
            | Self::PatchForbidden
            | Self::PatchFailed
            | Self::NudgeDropped => return None,
        };
        Some(EventKind { reason, warning })
    }

    /// Counted in `reloadlet_actions_total`.
    pub fn counted(self) -> bool {
        !self.actions().is_empty()
    }

    /// The `action` labels this outcome is recorded with (the series pre-created at 0).
    pub fn actions(self) -> &'static [ActionKind] {
        use ActionKind::{Evict, Http, None, Restart, Rollout, Signal};
        match self {
            Self::Signaled | Self::SignalFailed | Self::SignalNotHandled | Self::SignalWithheld => {
                &[Signal]
            }
            Self::SubPathNotUpdated => &[Signal, Http],
            Self::Evicted
            | Self::EvictionBlocked
            | Self::EvictionFailed
            | Self::EvictionHandedOff
            | Self::Refused => &[Evict],
            Self::Reloaded | Self::ReloadFailed => &[Http],
            Self::InvalidAnnotation | Self::VolumeOverLimit | Self::EnvNotReloaded => &[None],
            Self::DryRun => &[Signal, Evict, Http, Rollout, Restart],
            Self::Restarted
            | Self::RestartDeferred
            | Self::RestartRefused
            | Self::RestartFailed
            | Self::RestartRequested
            | Self::RestartBlocked
            | Self::RestartStuck
            | Self::RestartHandedOff => &[Restart],
            Self::RolloutRequested
            | Self::RolloutUnsupported
            | Self::RolloutFailed
            | Self::RolloutNotGranted => &[Rollout],
            // Counted apart: reloadlet_pacing_deferrals_total, reloadlet_flap_episodes_total,
            // reloadlet_handler_panics_total.
            Self::InternalError
            | Self::NoDisruptionBudget
            | Self::Skipped
            | Self::NudgeFailed
            | Self::Deferred
            | Self::Flapping => &[],
            Self::Patched
            | Self::PodGone
            | Self::PatchConflict
            | Self::PatchForbidden
            | Self::PatchFailed
            | Self::NudgeDropped => &[],
        }
    }
}

/// What a person is told (`--notify-url`), derived from the same values: the notification's
/// `outcome` is the Event's reason, its `action` the metric label.
impl Outcome {
    /// Notified: what reloadlet did, or failed to do, to a pod. Configuration warnings
    /// (`InvalidAnnotation`, `SubPathNotUpdated`, `NoDisruptionBudget`, `EvictionRefused`)
    /// stay Events and log lines; dry runs and skips are not told.
    pub fn notified(self) -> bool {
        matches!(
            self,
            Self::Signaled
                | Self::SignalNotHandled
                | Self::SignalWithheld
                | Self::SignalFailed
                | Self::Evicted
                | Self::EvictionBlocked
                | Self::EvictionFailed
                | Self::EvictionHandedOff
                | Self::Reloaded
                | Self::ReloadFailed
                | Self::EnvNotReloaded
                | Self::NudgeFailed
                | Self::Deferred
                | Self::Flapping
                | Self::RolloutRequested
                | Self::RolloutFailed
                | Self::Restarted
                | Self::RestartDeferred
                | Self::RestartFailed
                | Self::RestartStuck
                | Self::RestartHandedOff
        )
    }

    /// The name a person reads: the Event's reason (`SignalWithheld` is `SignalNotHandled`
    /// too); an outcome with no Event (`NudgeFailed`) is named as its own.
    pub fn reason(self) -> &'static str {
        match self.event() {
            Some(event) => event.reason,
            None if self == Self::NudgeFailed => "NudgeFailed",
            None => self.as_str(),
        }
    }

    /// The action a person reads: the one the outcome is counted under (`counted`), but a
    /// nudge's failure, counted apart from actions (`reloadlet_nudges_total`), is a nudge's.
    pub fn named_action(self, counted: ActionKind) -> &'static str {
        match self {
            Self::NudgeFailed => "nudge",
            _ => counted.as_str(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::IntoEnumIterator;

    #[test]
    fn every_warning_event_has_a_distinct_log_field_and_the_documented_reason() {
        let reasons: Vec<_> = Outcome::iter()
            .filter_map(|o| o.event().map(|e| (o.as_str(), e.reason, e.warning)))
            .collect();
        assert_eq!(
            reasons,
            [
                ("signaled", "Signaled", false),
                ("signal_not_handled", "SignalNotHandled", true),
                ("signal_withheld", "SignalNotHandled", true),
                ("signal_failed", "SignalFailed", true),
                ("evicted", "EvictionRequested", false),
                ("eviction_blocked", "EvictionBlocked", true),
                ("eviction_failed", "EvictionFailed", true),
                ("eviction_handed_off", "EvictionHandedOff", false),
                ("refused", "EvictionRefused", true),
                ("reloaded", "Reloaded", false),
                ("reload_failed", "ReloadFailed", true),
                ("invalid_annotation", "InvalidAnnotation", true),
                ("volume_over_limit", "VolumeOverLimit", true),
                ("subpath_not_updated", "SubPathNotUpdated", true),
                ("no_disruption_budget", "NoDisruptionBudget", true),
                ("env_not_reloaded", "EnvNotReloaded", true),
                ("deferred", "ReloadDeferred", false),
                ("flapping", "ReloadFlapping", true),
                ("rollout_requested", "RolloutRequested", false),
                ("rollout_unsupported", "RolloutUnsupported", true),
                ("rollout_failed", "RolloutFailed", true),
                ("rollout_not_granted", "RolloutNotGranted", true),
                ("restarted", "Restarted", false),
                ("restart_deferred", "RestartDeferred", false),
                ("restart_refused", "RestartRefused", true),
                ("restart_failed", "RestartFailed", true),
                ("restart_requested", "RestartRequested", false),
                ("restart_blocked", "RestartBlocked", true),
                ("restart_stuck", "RestartStuck", true),
                ("restart_handed_off", "RestartHandedOff", false),
                ("internal_error", "InternalError", true),
            ]
        );
    }
}
