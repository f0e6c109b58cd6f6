//! The counts behind `reloadlet_consumers` (pure): every (pod, ConfigMap/Secret) consumption
//! the controller keeps, in the state `reloadlet status` would show for it
//! ([`crate::status::state_of`], one derivation for both).

use crate::core::model::{PodInfo, SourceKind, SourceRef};
use crate::core::status::applied::Applied;
use crate::core::status::consumers::consumer;
use crate::core::status::data_version::Published;
use crate::core::status::state::{Facts, State};
use crate::ports::ObjectKey;
use std::collections::{BTreeMap, HashMap};

/// The `state` label's values, in the CLI's order (`not reloaded` with an underscore).
pub const STATES: [&str; 6] = [
    "current",
    "pending",
    "failed",
    "not_reloaded",
    "cannot",
    "unknown",
];

/// The index of `state` in [`STATES`].
pub fn index(state: &State) -> usize {
    match state {
        State::Current { .. } => 0,
        State::Pending(_) => 1,
        State::Failed { .. } => 2,
        State::NotReloaded { .. } => 3,
        State::Cannot { .. } => 4,
        State::Unknown { .. } => 5,
    }
}

/// Consumers per state, indexed as [`STATES`].
pub type Counts = [u64; STATES.len()];

/// The counts by namespace and, when asked for, by object.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub by_namespace: BTreeMap<String, Counts>,
    /// Empty unless `per_object`.
    pub by_object: BTreeMap<ObjectKey, Counts>,
}

/// Counts every consumption by `pods` of a ConfigMap/Secret of a `followed` kind, with
/// `published` the data versions read from the objects (an object missing there reads
/// `pending`: the controller has not published it, as the CLI would say). Pods that have
/// finished run nothing and are left out, as in the CLI.
pub fn tally<'a>(
    pods: impl IntoIterator<Item = &'a PodInfo>,
    followed: impl Fn(SourceKind) -> bool,
    published: &HashMap<ObjectKey, Published>,
    per_object: bool,
) -> Tally {
    let mut out = Tally::default();
    for pod in pods {
        if matches!(pod.phase.as_str(), "Succeeded" | "Failed") {
            continue;
        }
        // A malformed record is ignored, as the CLI ignores it (with a note there).
        let record = Applied::of_pod(&pod.annotations).ok().flatten();
        let objects = crate::status::consumed_objects(std::iter::once(pod));
        for object in objects.iter().filter(|o| followed(o.kind)) {
            let Some(c) = consumer(pod, object) else {
                continue;
            };
            let key = key_of(&pod.namespace, object);
            let facts = Facts {
                published: published.get(&key),
                record: record.as_ref().and_then(|r| r.get(object)),
                started: pod.started,
                phase: &pod.phase,
                env_held: None,
            };
            let i = index(&crate::status::state_of(pod, object, &c, facts));
            if let Some(counts) = out.by_namespace.get_mut(&pod.namespace) {
                counts[i] += 1;
            } else {
                let mut counts = Counts::default();
                counts[i] = 1;
                out.by_namespace.insert(pod.namespace.clone(), counts);
            }
            if per_object {
                out.by_object.entry(key).or_default()[i] += 1;
            }
        }
    }
    out
}

fn key_of(namespace: &str, object: &SourceRef) -> ObjectKey {
    ObjectKey {
        kind: object.kind,
        namespace: namespace.to_owned(),
        name: object.name.clone(),
    }
}

#[cfg(test)]
mod tests;
