//! The state of one consumer for the object's current data, and the summary line (pure).
//!
//! Facts: how the pod consumes the object ([`Consumer`]), the object's published data version
//! ([`Published`]), the pod's record of what was applied to it ([`Entry`]), and when its
//! containers started. A pod started after the data was first seen runs it, whatever the
//! record says; otherwise only a record of the current version tells it runs it.

use crate::core::annotations::EnvAction;
use crate::core::status::applied::{Entry, Recorded};
use crate::core::status::consumers::{Consumer, ConsumerAction, KeysRead, Via};
use crate::core::status::data_version::Published;
use jiff::{SignedDuration, Timestamp};
use std::collections::BTreeSet;
use std::fmt;

/// Why a consumer does not run the current data yet, though it will.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pending {
    /// The kubelet has not projected the new data into the volume yet (or the agent has not
    /// acted on it yet).
    NotProjected,
    /// Pacing holds the action until then (`None`: until the flap breaker lets go).
    Pacing(Option<Timestamp>),
    /// A PodDisruptionBudget refuses the eviction for now.
    Budget,
    /// A PodDisruptionBudget allows no restart for now (the controller grants none).
    RestartBudget,
    /// Waiting for the controller (`what` it does).
    Controller(String),
    /// The workload rolls: this pod will be replaced.
    Rollout,
    /// The pod has not started yet.
    Starting,
}

impl fmt::Display for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotProjected => f.write_str(
                "the kubelet has not projected the new data yet (it syncs every 60-90s)",
            ),
            Self::Pacing(Some(t)) => write!(f, "held by pacing until {}", short_time(*t)),
            Self::Pacing(None) => f.write_str("held by pacing (flapping)"),
            Self::Budget => f.write_str("waiting for a PodDisruptionBudget to allow the eviction"),
            Self::RestartBudget => f.write_str(
                "waiting for a PodDisruptionBudget to allow the restart (the controller grants none now)",
            ),
            Self::Controller(what) => write!(f, "waiting for the controller: {what}"),
            Self::Rollout => f.write_str("rollout in progress: the pod will be replaced"),
            Self::Starting => f.write_str("the pod has not started yet"),
        }
    }
}

/// The state of one consumer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Runs the current data: since when, by what (`started` when it started after the change).
    Current {
        since: Option<Timestamp>,
        by: String,
    },
    Pending(Pending),
    /// The last action for the current data failed.
    Failed {
        error: String,
    },
    /// Nothing will reload it: it runs old data until someone restarts it; `fix` says how.
    NotReloaded {
        fix: String,
    },
    /// Its action cannot bring the data to it (subPath, env).
    Cannot {
        why: String,
    },
    /// The data versions cannot be compared.
    Unknown {
        why: String,
    },
}

impl State {
    /// The `STATE` column.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Current { .. } => "current",
            Self::Pending(_) => "pending",
            Self::Failed { .. } => "failed",
            Self::NotReloaded { .. } => "not reloaded",
            Self::Cannot { .. } => "cannot",
            Self::Unknown { .. } => "unknown",
        }
    }

    /// The `DETAIL` column.
    pub fn detail(&self) -> String {
        match self {
            Self::Current { since, by } => match since {
                Some(t) => format!("since {} ({by})", short_time(*t)),
                None => format!("({by})"),
            },
            Self::Pending(p) => p.to_string(),
            Self::Failed { error } => error.clone(),
            Self::NotReloaded { fix } => fix.clone(),
            Self::Cannot { why } => why.clone(),
            Self::Unknown { why } => why.clone(),
        }
    }

    pub fn is_current(&self) -> bool {
        matches!(self, Self::Current { .. })
    }
}

/// `HH:MM:SS` in UTC (the day is dropped: states are about the last minutes).
pub fn short_time(t: Timestamp) -> String {
    let s = t.to_string();
    s.get(11..19).map(str::to_owned).unwrap_or(s)
}

/// What is known about one consumer beyond its spec.
#[derive(Clone, Copy, Debug, Default)]
pub struct Facts<'a> {
    /// The object's published data version; `None`: not published (yet).
    pub published: Option<&'a Published>,
    /// The pod's record for this object.
    pub record: Option<&'a Entry>,
    /// When the pod's longest-running container started; `None`: not all running.
    pub started: Option<Timestamp>,
    /// `status.phase`.
    pub phase: &'a str,
    /// The controller holds this env consumer's eviction for the object ([`env_held`]): until
    /// then (`None`: while the source flaps).
    pub env_held: Option<Option<Timestamp>>,
}

/// Longest `reloadlet.io/env-pacing` read: the controller writes at most 4,096 characters (its
/// admission policy says so); anything longer was written by someone else and is ignored.
const MAX_ENV_PACING: usize = 4096;

/// Whether the controller holds the pod's env eviction for `object`, from the record it keeps
/// on the pod (`reloadlet.io/env-pacing`, docs/pacing.md): `Some(Some(until))` deferred,
/// `Some(None)` held as flapping, `None` not held (or no readable record: a pod author may
/// write anything there; it only changes that pod's reason).
pub fn env_held(
    annotations: &std::collections::BTreeMap<String, String>,
    object: &crate::core::model::SourceRef,
) -> Option<Option<Timestamp>> {
    use crate::core::pacing::record::{PacingRecord, ENV_PACING};
    let value = annotations
        .get(ENV_PACING)
        .filter(|v| v.len() <= MAX_ENV_PACING)?;
    let record = PacingRecord::parse(value).ok()?;
    let source = object.to_string();
    if let Some(d) = record.deferred.filter(|d| d.source == source) {
        return Some(Some(d.until));
    }
    record.flapping.filter(|e| e.source == source).map(|_| None)
}

/// The keys the agent's record covers: what the volumes project (env is the controller's).
fn volume_keys(consumer: &Consumer) -> KeysRead {
    let volumes = Consumer {
        via: consumer
            .via
            .iter()
            .filter(|v| !v.is_env())
            .cloned()
            .collect(),
        ..consumer.clone()
    };
    if volumes.via.is_empty() {
        return consumer.keys();
    }
    volumes.keys()
}

/// The state of `consumer` for the object's current data.
pub fn derive(consumer: &Consumer, facts: &Facts<'_>) -> State {
    let Some(published) = facts.published else {
        return State::Pending(Pending::Controller(
            "it has not published this object's data version yet (reloadlet.io/data-version)"
                .into(),
        ));
    };
    if facts.phase == "Pending" {
        return State::Pending(Pending::Starting);
    }
    // Started after the data was first seen: the kubelet set the volumes up and resolved env
    // from the current data (both read the kubelet's watch cache at start).
    if let Some(started) = facts.started.filter(|s| *s >= published.since) {
        return State::Current {
            since: Some(started),
            by: "started after the change".into(),
        };
    }
    let keys = match facts.record.map(|e| e.by.as_str()) {
        Some("controller") => consumer.keys(),
        _ => volume_keys(consumer),
    };
    let Some(current) = published.version_for(&keys) else {
        return State::Unknown {
            why: "the object has too many keys for a per-key data version".into(),
        };
    };
    let stale_env = consumer.via.iter().any(Via::is_env)
        && !consumer.action.restarts()
        && consumer.env_action.is_none();
    if let Some(entry) = facts.record.filter(|e| e.data_version() == Some(current)) {
        let state = match entry.result {
            Recorded::Applied => State::Current {
                since: Some(entry.at),
                by: entry.action.clone(),
            },
            Recorded::Deferred => State::Pending(Pending::Pacing(entry.until)),
            Recorded::Blocked if entry.action == "restart" => {
                State::Pending(Pending::RestartBudget)
            }
            Recorded::Blocked => State::Pending(Pending::Budget),
            Recorded::Requested => State::Pending(Pending::Controller(
                "its grant of the restart in place (as many pods of the owner at once as its PodDisruptionBudget allows)".into(),
            )),
            Recorded::HandedOff => State::Pending(Pending::Controller(format!(
                "the {} was handed to its rollout",
                if entry.action == "restart" {
                    "restart"
                } else {
                    "eviction"
                }
            ))),
            Recorded::RolloutRequested => State::Pending(Pending::Rollout),
            Recorded::DryRun => State::NotReloaded {
                fix: format!("{} only logged (--dry-run)", entry.by),
            },
            Recorded::Failed => State::Failed {
                error: entry
                    .error
                    .clone()
                    .unwrap_or_else(|| format!("{} failed", entry.action)),
            },
        };
        if state.is_current() && stale_env {
            return cannot_env();
        }
        return state;
    }
    // Acted on after the data was first seen, or too close to it to tell, but recorded
    // without a version (an agent that had not read the controller's key yet): it may run the
    // current data, or not. `since` may be the end of its second (`data_written`) and the
    // record's time is another node's clock: within the second before `since` is "cannot
    // tell", not "before".
    if let Some(entry) = facts
        .record
        .filter(|e| e.version.is_none() && e.at >= published.since - SignedDuration::from_secs(1))
    {
        return State::Unknown {
            why: format!(
                "{} recorded {} at {} without a data version (it had not read the controller's key yet); its next action will say",
                entry.by,
                entry.action,
                short_time(entry.at)
            ),
        };
    }
    // The pod runs older data, or nothing says it runs the current one.
    match &consumer.action {
        ConsumerAction::Invalid(message) => {
            return State::NotReloaded {
                fix: format!("fix its reloadlet.io annotations: {message}"),
            }
        }
        ConsumerAction::None => {
            return State::NotReloaded {
                fix: "no reloadlet.io/action: annotate the pod template (signal, http, evict or rollout), or restart it".into(),
            }
        }
        _ if !consumer.counted => {
            return State::NotReloaded {
                fix: "its reloadlet.io/configmaps / reloadlet.io/secrets leave this object out: add it".into(),
            }
        }
        _ => {}
    }
    if consumer.env_only() {
        return match &consumer.action {
            ConsumerAction::Rollout => rollout_pending(consumer),
            a if a.restarts() || consumer.env_action.is_some() => {
                let restarts = match consumer.env_action {
                    Some(EnvAction::Restart) => true,
                    Some(EnvAction::Evict) => false,
                    None => *a == ConsumerAction::Restart,
                };
                let what = if restarts {
                    "a restart in place of an env consumer"
                } else {
                    "an eviction of an env consumer"
                };
                refused(consumer).unwrap_or_else(|| match facts.env_held {
                    Some(until) => State::Pending(Pending::Pacing(until)),
                    None => State::Pending(Pending::Controller(what.into())),
                })
            }
            _ => cannot_env(),
        };
    }
    if consumer.sub_path_only() && !consumer.action.restarts() {
        return State::Cannot {
            why: format!(
                "mounted only through subPath, which the kubelet never updates; a {} cannot bring it: mount the whole volume, or use reloadlet.io/action: evict or rollout",
                consumer.action
            ),
        };
    }
    match &consumer.action {
        ConsumerAction::Rollout => rollout_pending(consumer),
        _ => refused(consumer).unwrap_or(State::Pending(Pending::NotProjected)),
    }
}

/// Invalid pacing annotations: whoever would act (the agent, the controller's eviction or
/// rollout) refuses to until they are fixed, so nothing is waiting (told by the pod alone).
fn refused(consumer: &Consumer) -> Option<State> {
    consumer
        .pacing_invalid
        .as_ref()
        .map(|message| State::NotReloaded {
            fix: format!("fix its reloadlet.io pacing annotation: {message}"),
        })
}

/// A rollout not asked for yet: waiting for the controller, unless the pod alone shows that
/// nothing would roll it (no controlling owner, or one no rollout applies to) or that the
/// controller refuses to (invalid pacing).
fn rollout_pending(consumer: &Consumer) -> State {
    if let Some(why) = &consumer.unrollable {
        return State::Cannot {
            why: format!("reloadlet.io/action: rollout: {why}"),
        };
    }
    refused(consumer).unwrap_or_else(|| State::Pending(Pending::Controller("a rollout".into())))
}

fn cannot_env() -> State {
    State::Cannot {
        why: "read through env, which a running container never sees again; a signal or HTTP reload cannot refresh it: set reloadlet.io/env-action: restart (or evict), or mount it as a volume".into(),
    }
}

/// `12 consumers: 10 current, 1 pending (pacing until 14:05:00), 1 not reloaded`.
pub fn summary<'a>(states: impl IntoIterator<Item = &'a State>) -> String {
    let mut counts: Vec<(&'static str, usize)> = Vec::new();
    let mut total = 0;
    let mut pacing: Option<Timestamp> = None;
    let mut pending_reasons: BTreeSet<&'static str> = BTreeSet::new();
    for s in states {
        total += 1;
        match counts.iter_mut().find(|(n, _)| *n == s.name()) {
            Some((_, c)) => *c += 1,
            None => counts.push((s.name(), 1)),
        }
        if let State::Pending(p) = s {
            pending_reasons.insert(match p {
                Pending::Pacing(until) => {
                    pacing = pacing.max(*until);
                    "pacing"
                }
                Pending::NotProjected => "kubelet",
                Pending::Budget | Pending::RestartBudget => "budget",
                Pending::Controller(_) => "controller",
                Pending::Rollout => "rollout",
                Pending::Starting => "starting",
            });
        }
    }
    let order = [
        "current",
        "pending",
        "failed",
        "not reloaded",
        "cannot",
        "unknown",
    ];
    counts.sort_by_key(|(n, _)| order.iter().position(|o| o == n));
    let parts: Vec<String> = counts
        .iter()
        .map(|(name, n)| {
            if *name == "pending" {
                let reasons: Vec<String> = pending_reasons
                    .iter()
                    .map(|r| match (*r, pacing) {
                        ("pacing", Some(t)) => format!("pacing until {}", short_time(t)),
                        (r, _) => r.to_string(),
                    })
                    .collect();
                format!("{n} pending ({})", reasons.join(", "))
            } else {
                format!("{n} {name}")
            }
        })
        .collect();
    let noun = if total == 1 { "consumer" } else { "consumers" };
    if parts.is_empty() {
        return "0 consumers".to_owned();
    }
    format!("{total} {noun}: {}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::SourceKind;
    use crate::core::model::SourceRef;
    use crate::core::outcome::{ActionKind, Outcome};
    use crate::core::status::consumers::Via;
    use crate::core::status::data_version::{version_of_files, DataVersion};
    use crate::core::volume_digest::HashKey;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_764_406_800 + s).unwrap() // 2025-11-29T09:00:00Z
    }

    fn app() -> SourceRef {
        SourceRef {
            kind: SourceKind::ConfigMap,
            name: "app".into(),
        }
    }

    fn published(value: &[u8], since: i64) -> Published {
        Published::of(
            &HashKey::from_bytes([3; 32]),
            "web",
            &app(),
            [("k", value)],
            t(since),
        )
    }

    fn version(value: &[u8]) -> DataVersion {
        version_of_files(&HashKey::from_bytes([3; 32]), "web", &app(), [("k", value)])
    }

    fn volume() -> Via {
        Via::Volume {
            volume: "v".into(),
            items: None,
            containers: vec!["app".into()],
        }
    }

    fn env() -> Via {
        Via::Env {
            container: "app".into(),
            keys: vec!["k".into()],
            env_from: false,
        }
    }

    fn sub() -> Via {
        Via::SubPath {
            volume: "v".into(),
            containers: vec!["app".into()],
        }
    }

    fn consumer(action: ConsumerAction, via: Vec<Via>) -> Consumer {
        Consumer {
            via,
            action,
            counted: true,
            env_action: None,
            pacing_invalid: None,
            unrollable: None,
        }
    }

    fn bad_window() -> String {
        r#"reloadlet.io/window: "sometimes": not a window"#.into()
    }

    fn entry(value: &[u8], result: Recorded, at: i64) -> Entry {
        Entry::new(
            &app(),
            Some(&version(value)),
            t(at),
            "agent",
            ActionKind::Signal,
            result,
        )
    }

    /// A restart's records read as what happens next: waiting for the controller's grant, for
    /// a budget that allows a restart, or for the rollout it was handed to; a spacing
    /// deferral (`until`) is a pacing hold. Never "flapping", which only the flap breaker is.
    #[test]
    fn a_restarts_records_say_what_it_waits_for() {
        let new = published(b"new", 100);
        let restart = |result| Entry {
            action: "restart".into(),
            ..entry(b"new", result, 120)
        };
        let cases = [
            (
                Recorded::of(Outcome::RestartRequested).unwrap(),
                None,
                "waiting for the controller: its grant of the restart in place",
            ),
            (
                Recorded::of(Outcome::RestartBlocked).unwrap(),
                None,
                "waiting for a PodDisruptionBudget to allow the restart",
            ),
            (
                Recorded::of(Outcome::RestartHandedOff).unwrap(),
                None,
                "waiting for the controller: the restart was handed to its rollout",
            ),
            (
                Recorded::of(Outcome::RestartDeferred).unwrap(),
                Some(t(400)),
                "held by pacing until",
            ),
        ];
        for (result, until, want) in cases {
            let record = restart(result).with_until(until);
            let got = derive(
                &consumer(ConsumerAction::Restart, vec![volume()]),
                &Facts {
                    published: Some(&new),
                    record: Some(&record),
                    started: Some(t(0)),
                    phase: "Running",
                    env_held: Option::None,
                },
            );
            assert_eq!(got.name(), "pending", "{result:?}: {got:?}");
            assert!(
                got.detail().starts_with(want),
                "{result:?}: {}",
                got.detail()
            );
        }
    }

    #[test]
    fn states_from_the_facts() {
        use ConsumerAction::*;
        let new = published(b"new", 100);
        let applied = entry(b"new", Recorded::Applied, 130);
        let old_applied = entry(b"old", Recorded::Applied, 10);
        let deferred = entry(b"new", Recorded::Deferred, 120).with_until(Some(t(400)));
        let failed =
            entry(b"new", Recorded::Failed, 120).with_error("POST /-/reload: 500 bad config");
        let blocked = entry(b"new", Recorded::Blocked, 120);
        let rolling = entry(b"new", Recorded::RolloutRequested, 120);
        let unversioned = Entry {
            version: Option::None,
            ..entry(b"new", Recorded::Applied, 130)
        };
        let unversioned_before = Entry {
            version: Option::None,
            ..entry(b"new", Recorded::Applied, 50)
        };
        // In the second before `since` (the end of the data's second): cannot be told apart.
        let unversioned_same_second = Entry {
            version: Option::None,
            ..entry(b"new", Recorded::Applied, 99)
        };
        // Two seconds before: before the change.
        let unversioned_two_before = Entry {
            version: Option::None,
            ..entry(b"new", Recorded::Applied, 98)
        };
        let running = |record| Facts {
            published: Some(&new),
            record,
            started: Some(t(0)),
            phase: "Running",
            env_held: Option::None,
        };
        let cases: Vec<(&str, Consumer, Facts, &str, &str)> = vec![
            (
                "started after the change",
                consumer(None, vec![volume()]),
                Facts {
                    started: Some(t(200)),
                    ..running(Option::None)
                },
                "current",
                "started after the change",
            ),
            (
                "signalled for the current data",
                consumer(Signal, vec![volume()]),
                running(Some(&applied)),
                "current",
                "(signal)",
            ),
            (
                "a record of older data",
                consumer(Signal, vec![volume()]),
                running(Some(&old_applied)),
                "pending",
                "has not projected",
            ),
            (
                "no record at all",
                consumer(Http, vec![volume()]),
                running(Option::None),
                "pending",
                "has not projected",
            ),
            (
                "acted on after the change, recorded without a version",
                consumer(Signal, vec![volume()]),
                running(Some(&unversioned)),
                "unknown",
                "without a data version",
            ),
            (
                "recorded without a version before the change",
                consumer(Signal, vec![volume()]),
                running(Some(&unversioned_before)),
                "pending",
                "has not projected",
            ),
            (
                "recorded without a version in the second before the change's bound",
                consumer(Signal, vec![volume()]),
                running(Some(&unversioned_same_second)),
                "unknown",
                "without a data version",
            ),
            (
                "recorded without a version two seconds before the change's bound",
                consumer(Signal, vec![volume()]),
                running(Some(&unversioned_two_before)),
                "pending",
                "has not projected",
            ),
            (
                "held by pacing",
                consumer(Signal, vec![volume()]),
                running(Some(&deferred)),
                "pending",
                "pacing until 09:06:40",
            ),
            (
                "a failed reload",
                consumer(Http, vec![volume()]),
                running(Some(&failed)),
                "failed",
                "500 bad config",
            ),
            (
                "a budget in the way",
                consumer(Evict, vec![volume()]),
                running(Some(&blocked)),
                "pending",
                "PodDisruptionBudget",
            ),
            (
                "a rollout asked",
                consumer(Rollout, vec![volume()]),
                running(Some(&rolling)),
                "pending",
                "rollout in progress",
            ),
            (
                "a rollout not asked yet",
                consumer(Rollout, vec![volume()]),
                running(Option::None),
                "pending",
                "controller: a rollout",
            ),
            (
                "no action",
                consumer(None, vec![volume()]),
                running(Option::None),
                "not reloaded",
                "no reloadlet.io/action",
            ),
            (
                "invalid annotations",
                consumer(Invalid("bad port".into()), vec![volume()]),
                running(Option::None),
                "not reloaded",
                "bad port",
            ),
            (
                "subPath and a signal",
                consumer(Signal, vec![sub()]),
                running(Option::None),
                "cannot",
                "subPath",
            ),
            (
                "subPath and an eviction",
                consumer(Evict, vec![sub()]),
                running(Option::None),
                "pending",
                "kubelet",
            ),
            (
                "env and a signal",
                consumer(Signal, vec![env()]),
                running(Option::None),
                "cannot",
                "env",
            ),
            (
                "env and an eviction",
                consumer(Evict, vec![env()]),
                running(Option::None),
                "pending",
                "controller: an eviction",
            ),
            (
                "env and env-action evict",
                Consumer {
                    env_action: Some(EnvAction::Evict),
                    ..consumer(Signal, vec![env()])
                },
                running(Option::None),
                "pending",
                "controller",
            ),
            (
                "env eviction deferred by the controller",
                consumer(Evict, vec![env()]),
                Facts {
                    env_held: Some(Some(t(900))),
                    ..running(Option::None)
                },
                "pending",
                "held by pacing until",
            ),
            (
                "env eviction held as flapping",
                Consumer {
                    env_action: Some(EnvAction::Evict),
                    ..consumer(Signal, vec![env()])
                },
                Facts {
                    env_held: Some(Option::None),
                    ..running(Option::None)
                },
                "pending",
                "flapping",
            ),
            (
                "env eviction refused for an invalid pacing annotation",
                Consumer {
                    pacing_invalid: Some(bad_window()),
                    ..consumer(Evict, vec![env()])
                },
                running(Option::None),
                "not reloaded",
                "fix its reloadlet.io pacing annotation: reloadlet.io/window",
            ),
            (
                "env-action evict refused for an invalid pacing annotation, even when held",
                Consumer {
                    env_action: Some(EnvAction::Evict),
                    pacing_invalid: Some(bad_window()),
                    ..consumer(Signal, vec![env()])
                },
                Facts {
                    env_held: Some(Some(t(900))),
                    ..running(Option::None)
                },
                "not reloaded",
                "pacing annotation",
            ),
            (
                "a volume signal refused for an invalid pacing annotation",
                Consumer {
                    pacing_invalid: Some(bad_window()),
                    ..consumer(Signal, vec![volume()])
                },
                running(Some(&old_applied)),
                "not reloaded",
                "pacing annotation",
            ),
            (
                "an invalid pacing annotation does not hide a record of the current data",
                Consumer {
                    pacing_invalid: Some(bad_window()),
                    ..consumer(Signal, vec![volume()])
                },
                running(Some(&applied)),
                "current",
                "(signal)",
            ),
            (
                "an invalid pacing annotation beside env a signal cannot reach",
                Consumer {
                    pacing_invalid: Some(bad_window()),
                    ..consumer(Signal, vec![env()])
                },
                running(Option::None),
                "cannot",
                "env",
            ),
            (
                "a rollout refused for an invalid pacing annotation",
                Consumer {
                    pacing_invalid: Some(bad_window()),
                    ..consumer(Rollout, vec![volume()])
                },
                running(Option::None),
                "not reloaded",
                "pacing annotation",
            ),
            (
                "a rollout of a pod without a controlling owner",
                Consumer {
                    unrollable: Some("the pod has no controlling owner: nothing would roll it; use action evict or signal".into()),
                    ..consumer(Rollout, vec![volume()])
                },
                running(Option::None),
                "cannot",
                "rollout: the pod has no controlling owner",
            ),
            (
                "a rollout of an env consumer owned by a Job",
                Consumer {
                    unrollable: Some("the pod is owned by Job migrate, which reloadlet cannot roll".into()),
                    ..consumer(Rollout, vec![env()])
                },
                running(Option::None),
                "cannot",
                "Job migrate",
            ),
            (
                "an unrollable pod whose rollout was recorded for the current data says so",
                Consumer {
                    unrollable: Some("no owner".into()),
                    ..consumer(Rollout, vec![volume()])
                },
                running(Some(&rolling)),
                "pending",
                "rollout in progress",
            ),
            (
                "volume signalled but env stale",
                consumer(Signal, vec![volume(), env()]),
                running(Some(&applied)),
                "cannot",
                "env",
            ),
            (
                "not published",
                consumer(Signal, vec![volume()]),
                Facts {
                    published: Option::None,
                    ..running(Some(&applied))
                },
                "pending",
                "data version",
            ),
            (
                "not started",
                consumer(Signal, vec![volume()]),
                Facts {
                    phase: "Pending",
                    started: Option::None,
                    ..running(Option::None)
                },
                "pending",
                "not started",
            ),
        ];
        for (name, c, facts, state, detail) in cases {
            let got = derive(&c, &facts);
            assert_eq!(got.name(), state, "{name}: {got:?}");
            assert!(
                got.detail().contains(detail),
                "{name}: {:?} lacks {detail:?}",
                got.detail()
            );
        }
    }

    #[test]
    fn the_controllers_env_hold_is_read_for_its_source_only_and_bounded() {
        use crate::core::model::{SourceKind, SourceRef};
        let app = SourceRef {
            kind: SourceKind::ConfigMap,
            name: "app-env".into(),
        };
        let other = SourceRef {
            kind: SourceKind::ConfigMap,
            name: "other".into(),
        };
        let on = |value: String| {
            std::collections::BTreeMap::from([("reloadlet.io/env-pacing".to_owned(), value)])
        };
        let deferred = on(r#"{"deferred":{"until":"2026-11-29T10:00:00Z","why":"maintenance window","since":"2026-11-29T09:00:00Z","source":"configmap app-env"}}"#.to_owned());
        let until: Timestamp = "2026-11-29T10:00:00Z".parse().unwrap();
        assert_eq!(env_held(&deferred, &app), Some(Some(until)));
        assert_eq!(env_held(&deferred, &other), None, "another object's hold");
        let flapping = on(
            r#"{"flapping":{"since":"2026-11-29T09:00:00Z","source":"configmap app-env","changes":4}}"#
                .to_owned(),
        );
        assert_eq!(env_held(&flapping, &app), Some(None));
        assert_eq!(env_held(&on("{not json".into()), &app), None);
        assert_eq!(env_held(&Default::default(), &app), None);
        // Longer than the controller ever writes: someone else's, ignored (the same hold
        // padded to 4,097 characters; at 4,096 it is read).
        let padded = |len: usize| {
            let base = r#"{"deferred":{"until":"2026-11-29T10:00:00Z","why":"maintenance window","since":"2026-11-29T09:00:00Z","source":"configmap app-env"}}"#;
            on(format!("{base}{}", " ".repeat(len - base.len())))
        };
        assert_eq!(env_held(&padded(4096), &app), Some(Some(until)));
        assert_eq!(env_held(&padded(4097), &app), None);
    }

    #[test]
    fn a_narrowed_out_object_is_not_reloaded_and_says_so() {
        let new = published(b"new", 100);
        let c = Consumer {
            counted: false,
            ..consumer(ConsumerAction::Signal, vec![volume()])
        };
        let s = derive(
            &c,
            &Facts {
                published: Some(&new),
                record: None,
                started: Some(t(0)),
                phase: "Running",
                env_held: None,
            },
        );
        assert_eq!(s.name(), "not reloaded");
        assert!(
            s.detail().contains("leave this object out"),
            "{}",
            s.detail()
        );
    }

    #[test]
    fn the_summary_counts_states_and_says_until_when_pacing_holds() {
        let mut states = vec![
            State::Current {
                since: None,
                by: "signal".into()
            };
            10
        ];
        states.push(State::Pending(Pending::Pacing(Some(t(300)))));
        states.push(State::NotReloaded { fix: String::new() });
        assert_eq!(
            summary(&states),
            "12 consumers: 10 current, 1 pending (pacing until 09:05:00), 1 not reloaded"
        );
        assert_eq!(summary(&[]), "0 consumers");
        assert_eq!(
            summary(&[State::Pending(Pending::NotProjected)]),
            "1 consumer: 1 pending (kubelet)"
        );
    }
}
