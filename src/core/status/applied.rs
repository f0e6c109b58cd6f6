//! The record whoever acts on a pod leaves on it (`reloadlet.io/applied`): per object, the data
//! version it acted for, when, by which action, and what became of it. One JSON value, bounded
//! ([`MAX_ENTRIES`] objects, [`MAX_VALUE`] bytes, errors cut at [`MAX_ERROR`]); a pod author can
//! write it too, so it is parsed with limits and a malformed one is ignored with the reason,
//! never trusted beyond what it claims about the pod that carries it.

use crate::core::model::SourceRef;
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::status::data_version::DataVersion;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

pub use crate::core::annotations::APPLIED as ANNOTATION;
/// Objects one record holds; the oldest entries go first, and the record says how many went.
pub const MAX_ENTRIES: usize = 16;
/// Longest value read or written.
pub const MAX_VALUE: usize = 8 * 1024;
/// An entry's error text is cut to this many characters.
pub const MAX_ERROR: usize = 200;

/// What became of the action for that data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Recorded {
    /// The action succeeded: the pod runs this data.
    Applied,
    /// Held by pacing until `until`.
    Deferred,
    /// A PodDisruptionBudget refuses the eviction (or, for a restart, its grant) for now.
    Blocked,
    /// A restart in place was requested; the controller's grant has not come yet.
    Requested,
    /// Handed to the controller's rollout.
    HandedOff,
    /// The controller asked the workload to roll; new pods come with the data.
    RolloutRequested,
    /// `--dry-run`: logged, not done.
    DryRun,
    /// It failed (`error` says why, as the Event did).
    Failed,
}

impl Recorded {
    /// The record of an outcome of the executor; `None`: nothing to record (a validation, a
    /// skipped pod, the controller's own patches).
    pub fn of(outcome: Outcome) -> Option<Self> {
        use Outcome::*;
        Some(match outcome {
            Signaled | Evicted | Reloaded | Restarted => Self::Applied,
            Deferred | Flapping | RestartDeferred => Self::Deferred,
            RestartRequested => Self::Requested,
            EvictionBlocked | RestartBlocked => Self::Blocked,
            EvictionHandedOff | RestartHandedOff => Self::HandedOff,
            RolloutRequested => Self::RolloutRequested,
            DryRun => Self::DryRun,
            SignalNotHandled | SignalWithheld | SignalFailed | EvictionFailed | Refused
            | ReloadFailed | RolloutUnsupported | RolloutFailed | RolloutNotGranted
            | InternalError | SubPathNotUpdated | EnvNotReloaded | RestartRefused
            | RestartFailed | RestartStuck => Self::Failed,
            InvalidAnnotation | VolumeOverLimit | NoDisruptionBudget | Skipped | NudgeFailed
            | Patched | PodGone | PatchConflict | PatchForbidden | PatchFailed | NudgeDropped => {
                return None
            }
        })
    }
}

/// One object's entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// `configmap/NAME` or `secret/NAME` (the pod's namespace).
    pub object: String,
    /// The data version acted for (`None`: not known to the writer, e.g. the agent without the
    /// controller's key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub at: Timestamp,
    /// `agent` or `controller`.
    pub by: String,
    /// `signal`, `http`, `evict`, `rollout`.
    pub action: String,
    pub result: Recorded,
    /// Deferred until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Timestamp>,
    /// The error, as the Event said it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Entry {
    pub fn new(
        object: &SourceRef,
        version: Option<&DataVersion>,
        at: Timestamp,
        by: &str,
        action: ActionKind,
        result: Recorded,
    ) -> Self {
        Self {
            object: object_key(object),
            version: version.map(ToString::to_string),
            at,
            by: by.to_owned(),
            action: action.as_str().to_owned(),
            result,
            until: None,
            error: None,
        }
    }

    /// With the error text (cut to [`MAX_ERROR`] characters).
    pub fn with_error(mut self, error: &str) -> Self {
        let cut: String = error.chars().take(MAX_ERROR).collect();
        self.error = Some(cut);
        self
    }

    pub fn with_until(mut self, until: Option<Timestamp>) -> Self {
        self.until = until;
        self
    }

    /// The version, if it is one (a hand-written record may hold anything).
    pub fn data_version(&self) -> Option<DataVersion> {
        self.version.as_deref().and_then(DataVersion::parse)
    }

    /// The same facts, whenever written.
    fn same_as(&self, other: &Entry) -> bool {
        Entry {
            at: other.at,
            ..self.clone()
        } == *other
    }
}

/// `configmap/NAME`, `secret/NAME`.
pub fn object_key(object: &SourceRef) -> String {
    format!("{}/{}", object.kind.as_str(), object.name)
}

/// The whole record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    #[serde(rename = "v")]
    pub version: u32,
    pub objects: Vec<Entry>,
    /// How many older entries were dropped to stay within [`MAX_ENTRIES`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Applied {
    /// Reads the annotation's value; `Err` says why it is ignored.
    pub fn parse(value: &str) -> Result<Self, crate::core::invalid::Invalid> {
        if value.len() > MAX_VALUE {
            return Err(crate::invalid!(
                "{ANNOTATION} is longer than {MAX_VALUE} bytes"
            ));
        }
        let record: Applied = serde_json::from_str(value)
            .map_err(|e| format!("{ANNOTATION} is not a valid record: {e}"))?;
        if record.version != 1 {
            return Err(crate::invalid!(
                "{ANNOTATION}: unknown version {}",
                record.version
            ));
        }
        if record.objects.len() > MAX_ENTRIES {
            return Err(crate::invalid!(
                "{ANNOTATION}: more than {MAX_ENTRIES} objects"
            ));
        }
        Ok(record)
    }

    /// The record a pod carries (`Ok(None)`: none).
    pub fn of_pod(
        annotations: &std::collections::BTreeMap<String, String>,
    ) -> Result<Option<Self>, crate::core::invalid::Invalid> {
        annotations
            .get(ANNOTATION)
            .map(|v| Self::parse(v))
            .transpose()
    }

    /// The value to write.
    pub fn render(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn get(&self, object: &SourceRef) -> Option<&Entry> {
        let key = object_key(object);
        self.objects.iter().find(|e| e.object == key)
    }

    /// Brings a record read from the pod (which the pod watch may show late) up to what this
    /// writer wrote since: each of `own` newer than the record's entry for its object goes in.
    pub fn catch_up(&mut self, own: &[Entry]) {
        for entry in own {
            let newer = self
                .objects
                .iter()
                .find(|e| e.object == entry.object)
                .is_none_or(|e| e.at < entry.at);
            if newer {
                self.record(entry.clone());
            }
        }
    }

    /// Puts `entry` in place of the object's previous one. `false` when the record already says
    /// the same (no write needed). Over [`MAX_ENTRIES`] the oldest entry goes, and is counted.
    pub fn record(&mut self, entry: Entry) -> bool {
        self.version = 1;
        if let Some(old) = self.objects.iter_mut().find(|e| e.object == entry.object) {
            if old.same_as(&entry) {
                return false;
            }
            *old = entry;
        } else {
            self.objects.push(entry);
        }
        self.objects
            .sort_by(|a, b| b.at.cmp(&a.at).then(a.object.cmp(&b.object)));
        while self.objects.len() > MAX_ENTRIES || self.render().len() > MAX_VALUE {
            self.objects.pop();
            self.dropped = self.dropped.saturating_add(1);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::SourceKind;

    fn cm(name: &str) -> SourceRef {
        SourceRef {
            kind: SourceKind::ConfigMap,
            name: name.into(),
        }
    }

    fn at(s: u32) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + i64::from(s)).unwrap()
    }

    fn v(n: u8) -> DataVersion {
        DataVersion::parse(&format!("v1:{}", format!("{n:02x}").repeat(12))).unwrap()
    }

    #[test]
    fn a_record_round_trips_and_keeps_one_entry_per_object() {
        let mut r = Applied::default();
        assert!(r.record(Entry::new(
            &cm("app"),
            Some(&v(1)),
            at(1),
            "agent",
            ActionKind::Signal,
            Recorded::Applied
        )));
        assert!(r.record(
            Entry::new(
                &cm("app"),
                Some(&v(2)),
                at(2),
                "agent",
                ActionKind::Signal,
                Recorded::Failed
            )
            .with_error(&"x".repeat(1000))
        ));
        assert_eq!(r.objects.len(), 1);
        let e = r.get(&cm("app")).unwrap();
        assert_eq!(e.data_version(), Some(v(2)));
        assert_eq!(e.error.as_ref().unwrap().len(), MAX_ERROR);
        let text = r.render();
        assert!(
            text.starts_with(r#"{"v":1,"objects":[{"object":"configmap/app","version":"v1:"#),
            "{text}"
        );
        assert_eq!(Applied::parse(&text), Ok(r));
    }

    #[test]
    fn the_same_facts_again_need_no_write() {
        let mut r = Applied::default();
        let e = |t| {
            Entry::new(
                &cm("app"),
                Some(&v(1)),
                at(t),
                "agent",
                ActionKind::Http,
                Recorded::Deferred,
            )
            .with_until(Some(at(60)))
        };
        assert!(r.record(e(1)));
        assert!(!r.record(e(5)), "same deferral, later: nothing to write");
        assert_eq!(r.get(&cm("app")).unwrap().at, at(1));
        assert!(
            r.record(e(6).with_until(Some(at(90)))),
            "a new until is news"
        );
    }

    #[test]
    fn many_objects_keep_the_newest_and_say_how_many_went() {
        let mut r = Applied::default();
        for i in 0..20u32 {
            r.record(Entry::new(
                &cm(&format!("c{i}")),
                Some(&v(1)),
                at(i),
                "agent",
                ActionKind::Signal,
                Recorded::Applied,
            ));
        }
        assert_eq!(r.objects.len(), MAX_ENTRIES);
        assert_eq!(r.dropped, 4);
        assert!(r.get(&cm("c19")).is_some() && r.get(&cm("c0")).is_none());
        assert!(r.render().len() <= MAX_VALUE);
        assert_eq!(Applied::parse(&r.render()).map(|p| p.dropped), Ok(4));
    }

    #[test]
    fn hostile_records_are_ignored_with_a_reason() {
        for bad in [
            "".to_string(),
            "{".into(),
            r#"{"v":2,"objects":[]}"#.into(),
            r#"{"v":1,"objects":[{"object":"configmap/a"}]}"#.into(),
            format!(r#"{{"v":1,"objects":[],"pad":"{}"}}"#, "x".repeat(MAX_VALUE)),
            format!(r#"{{"v":1,"objects":[{}]}}"#, vec![r#"{"object":"configmap/a","at":"2026-01-01T00:00:00Z","by":"agent","action":"signal","result":"applied"}"#; 17].join(",")),
        ] {
            assert!(Applied::parse(&bad).is_err(), "{bad:.80}");
        }
        // A hand-written version that is not one is no version.
        let r = Applied::parse(r#"{"v":1,"objects":[{"object":"configmap/a","version":"latest","at":"2026-01-01T00:00:00Z","by":"agent","action":"signal","result":"applied"}]}"#).unwrap();
        assert_eq!(r.get(&cm("a")).unwrap().data_version(), None);
    }

    #[test]
    fn a_record_read_late_catches_up_with_what_was_written_since() {
        let entry = |name: &str, t, result| {
            Entry::new(
                &cm(name),
                Some(&v(1)),
                at(t),
                "agent",
                ActionKind::Signal,
                result,
            )
        };
        // The pod as the watch shows it: only the controller's older entry and a newer one.
        let mut shown = Applied::default();
        shown.record(entry("a", 1, Recorded::Deferred));
        shown.record(entry("b", 9, Recorded::Applied));
        let own = [
            entry("a", 5, Recorded::Applied),
            entry("b", 5, Recorded::Failed),
        ];
        shown.catch_up(&own);
        assert_eq!(shown.get(&cm("a")).unwrap().result, Recorded::Applied);
        assert_eq!(
            shown.get(&cm("b")).unwrap().result,
            Recorded::Applied,
            "the newer entry stays"
        );
        // Caught up, the same facts again are no write.
        assert!(!shown.record(entry("a", 7, Recorded::Applied)));
    }

    #[test]
    fn outcomes_map_to_what_the_record_says() {
        assert_eq!(Recorded::of(Outcome::Signaled), Some(Recorded::Applied));
        assert_eq!(Recorded::of(Outcome::Reloaded), Some(Recorded::Applied));
        assert_eq!(Recorded::of(Outcome::ReloadFailed), Some(Recorded::Failed));
        assert_eq!(Recorded::of(Outcome::Deferred), Some(Recorded::Deferred));
        assert_eq!(
            Recorded::of(Outcome::EvictionBlocked),
            Some(Recorded::Blocked)
        );
        assert_eq!(Recorded::of(Outcome::DryRun), Some(Recorded::DryRun));
        assert_eq!(Recorded::of(Outcome::Patched), None);
    }
}
