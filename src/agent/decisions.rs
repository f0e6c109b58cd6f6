//! The decisions of each pod version, per change, reused while neither differs.
//!
//! [`policy::decide_changes`] is a pure function of the pod (an immutable `Arc<PodInfo>`:
//! an update replaces it) and the changed sources, so its result can be kept. The pod's
//! annotations are parsed once per pod version, when the version arrives
//! ([`Decisions::prepare`], reusing the check the agent makes of every update anyway), and each
//! change is decided once per version and remembered. A pod version's first swap of a volume
//! still decides (a nudge of the controller is a pod update just before the swap it
//! announces; in the benchmark each volume swaps about once per agent turn), but no longer
//! parses: the parse was 7 % of the hot thread's work before the signal at most swaps
//! (docs/architecture.md, "Shared names, the policy checked on arrival").
//!
//! A decision is shared (`Arc`): a swap that finds its decision allocates nothing for it (a
//! trace of the benchmark counted 65 allocations before each signal, 5 of them copying the
//! remembered decision; docs/architecture.md, "Allocations before the signal").

use crate::core::model::{PodInfo, SourceRef};
use crate::core::policy::{self, ChangedVolumes, CheckedPolicy, Decision, HttpFence};
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// Most changes a pod version remembers decisions for (a pod with more volumes than this
/// recomputes the oldest).
const PER_POD: usize = 8;

/// A change as the memory keeps it: [`ChangedVolumes`]' entries in their order, one
/// allocation per volume and its sources. (A `BTreeMap` or `BTreeSet` of one entry allocates a
/// whole node, about half a KiB: kept as maps, four changes of each of 250 pods held 0.6 MiB
/// at 1,000 volumes, measured with heaptrack, docs/architecture.md.)
type Key = Box<[(Box<str>, Option<Box<[SourceRef]>>)]>;

fn key_of(changed: &ChangedVolumes) -> Key {
    changed
        .iter()
        .map(|(volume, sources)| {
            (
                volume.as_str().into(),
                sources.as_ref().map(|s| s.iter().cloned().collect()),
            )
        })
        .collect()
}

/// Whether `key` is `changed` (compared in place: no allocation on the path of a swap).
fn is(key: &Key, changed: &ChangedVolumes) -> bool {
    key.len() == changed.len()
        && key.iter().zip(changed).all(|((volume, sources), (v, s))| {
            **volume == **v
                && match (sources, s) {
                    (None, None) => true,
                    (Some(a), Some(b)) => a.len() == b.len() && a.iter().eq(b.iter()),
                    _ => false,
                }
        })
}

struct Last {
    /// The pod version decided for: a `Weak` keeps its allocation (so no later pod can reuse
    /// the address) but not its content.
    pod: Weak<PodInfo>,
    /// [`policy::validated_policy`] of that version.
    policy: CheckedPolicy,
    /// Newest last.
    decided: Vec<(Key, Arc<Decision>)>,
}

impl Last {
    fn new(pod: &Arc<PodInfo>, policy: CheckedPolicy) -> Self {
        Self {
            pod: Arc::downgrade(pod),
            policy,
            decided: Vec::new(),
        }
    }

    fn remember(&mut self, key: Key, decision: Arc<Decision>) {
        if self.decided.len() == PER_POD {
            self.decided.remove(0);
        }
        self.decided.push((key, decision));
    }
}

/// The decisions of each pod's current version, per change.
#[derive(Default)]
pub struct Decisions {
    last: HashMap<String, Last>,
    /// `--http-allow-host-network`, for a pod version checked here (not by `prepare`).
    fence: HttpFence,
}

impl Decisions {
    pub fn new(fence: HttpFence) -> Self {
        Self {
            last: HashMap::new(),
            fence,
        }
    }

    /// Takes in a pod version as it arrives, with its policy as checked then
    /// ([`policy::validated_policy`] of this `pod`): its decisions use that policy instead of
    /// parsing the annotations again. A version taken in already keeps what it has.
    pub fn prepare(&mut self, pod: &Arc<PodInfo>, policy: CheckedPolicy) {
        match self.last.get_mut(&pod.uid) {
            Some(last) if std::ptr::eq(last.pod.as_ptr(), Arc::as_ptr(pod)) => {}
            Some(last) => *last = Last::new(pod, policy),
            None => {
                self.last.insert(pod.uid.clone(), Last::new(pod, policy));
            }
        }
    }

    /// `policy::decide_changes(pod, &changed)`, from memory when the same pod version had the
    /// same change before.
    pub fn decide(&mut self, pod: &Arc<PodInfo>, changed: ChangedVolumes) -> Arc<Decision> {
        // Looked up by `&str` first: no UID copy on the path of every swap.
        let last = match self.last.get_mut(&pod.uid) {
            Some(last) => {
                if !std::ptr::eq(last.pod.as_ptr(), Arc::as_ptr(pod)) {
                    // A version not taken in by `prepare` (it was not checked on arrival).
                    *last = Last::new(pod, policy::validated_policy_with(pod, self.fence));
                }
                last
            }
            None => self
                .last
                .entry(pod.uid.clone())
                .or_insert_with(|| Last::new(pod, policy::validated_policy_with(pod, self.fence))),
        };
        if let Some((_, decision)) = last.decided.iter().find(|(k, _)| is(k, &changed)) {
            return decision.clone();
        }
        let decision = Arc::new(policy::decide_with(pod, &last.policy, &changed));
        last.remember(key_of(&changed), decision.clone());
        decision
    }

    /// Forgets a pod that is gone.
    pub fn forget(&mut self, uid: &str) {
        self.last.remove(uid);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// How many changes the pod's current version has decisions for.
    #[cfg(test)]
    fn remembered(&self, uid: &str) -> usize {
        self.last.get(uid).map_or(0, |l| l.decided.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The agent tests' pod: container `app` mounts configMap volume `conf`.
    fn pod(action: &str) -> Arc<PodInfo> {
        Arc::new(crate::agent::tests::pod(action))
    }

    fn changed() -> ChangedVolumes {
        ChangedVolumes::from([("conf".to_string(), None)])
    }

    #[test]
    fn the_same_pod_version_and_change_give_the_remembered_decision() {
        let mut d = Decisions::default();
        let p = pod("signal");
        let first = d.decide(&p, changed());
        assert_eq!(*first, policy::decide_changes(&p, &changed()));
        assert!(matches!(*first, Decision::Signal { .. }), "{first:?}");
        // The same allocation: a swap that finds its decision copies nothing.
        assert!(Arc::ptr_eq(&d.decide(&p, changed()), &first));
        assert_eq!((d.len(), d.remembered(&p.uid)), (1, 1));
    }

    #[test]
    fn each_change_of_a_pod_version_is_remembered_up_to_the_bound() {
        let mut d = Decisions::default();
        let p = pod("signal");
        let change = |n: usize| ChangedVolumes::from([(format!("v{n}"), None)]);
        for n in 0..4 {
            d.decide(&p, change(n));
        }
        // Swaps that take turns over a pod's volumes all find theirs.
        for n in 0..4 {
            assert_eq!(
                *d.decide(&p, change(n)),
                policy::decide_changes(&p, &change(n))
            );
        }
        assert_eq!(d.remembered(&p.uid), 4);
        for n in 4..20 {
            d.decide(&p, change(n));
        }
        assert_eq!(d.remembered(&p.uid), PER_POD);
    }

    #[test]
    fn a_new_pod_version_is_decided_afresh() {
        let mut d = Decisions::default();
        let signal = d.decide(&pod("signal"), changed());
        assert!(matches!(*signal, Decision::Signal { .. }), "{signal:?}");
        // Same UID, annotation now invalid: the new version's decision, not the kept one.
        let invalid = d.decide(&pod("explode"), changed());
        assert!(matches!(*invalid, Decision::Invalid { .. }), "{invalid:?}");
        assert_eq!((d.len(), d.remembered(&pod("x").uid)), (1, 1));
    }

    #[test]
    fn another_change_of_the_same_pod_is_decided_afresh() {
        let mut d = Decisions::default();
        let p = pod("signal");
        d.decide(&p, changed());
        let other = ChangedVolumes::from([("not-mounted".to_string(), None)]);
        assert_eq!(
            *d.decide(&p, other.clone()),
            policy::decide_changes(&p, &other)
        );
    }

    #[test]
    fn a_kept_change_is_the_same_change_only_with_the_same_volumes_and_sources() {
        use crate::core::model::SourceKind;
        let cm = |name: &str| SourceRef {
            kind: SourceKind::ConfigMap,
            name: name.into(),
        };
        let change = |entries: &[(&str, Option<&[&str]>)]| -> ChangedVolumes {
            entries
                .iter()
                .map(|(v, s)| (v.to_string(), s.map(|s| s.iter().map(|n| cm(n)).collect())))
                .collect()
        };
        let a = change(&[("conf", Some(&["a"]))]);
        let cases: [(ChangedVolumes, bool); 7] = [
            (a.clone(), true),
            (change(&[("conf", None)]), false),
            (change(&[("conf", Some(&["b"]))]), false),
            (change(&[("conf", Some(&["a", "b"]))]), false),
            (change(&[("conf", Some(&[]))]), false),
            (change(&[("other", Some(&["a"]))]), false),
            (change(&[("conf", Some(&["a"])), ("more", None)]), false),
        ];
        let key = key_of(&a);
        for (changed, same) in cases {
            assert_eq!(is(&key, &changed), same, "{changed:?}");
            assert!(is(&key_of(&changed), &changed), "{changed:?}");
        }
    }

    #[test]
    fn a_prepared_version_is_decided_with_the_policy_checked_on_arrival() {
        let mut d = Decisions::default();
        let p = pod("signal");
        // Not what the annotations say: proof that the decision did not parse them again.
        d.prepare(&p, Err("checked on arrival".into()));
        assert_eq!(
            *d.decide(&p, changed()),
            Decision::Invalid {
                message: "checked on arrival".into()
            }
        );
        // Taking in the same version again keeps its policy and its decisions.
        d.prepare(&p, policy::validated_policy(&p));
        assert!(matches!(*d.decide(&p, changed()), Decision::Invalid { .. }));
        // A new version (same UID) is checked afresh: here by the decision itself.
        let next = pod("signal");
        assert!(matches!(
            *d.decide(&next, changed()),
            Decision::Signal { .. }
        ));
        assert_eq!((d.len(), d.remembered(&p.uid)), (1, 1));
    }

    #[test]
    fn a_decision_with_the_checked_policy_is_the_pure_one() {
        for action in ["signal", "evict", "explode", "http"] {
            let mut d = Decisions::default();
            let p = pod(action);
            d.prepare(&p, policy::validated_policy(&p));
            assert_eq!(
                *d.decide(&p, changed()),
                policy::decide_changes(&p, &changed()),
                "{action}"
            );
        }
    }

    #[test]
    fn forgotten_pods_are_dropped() {
        let mut d = Decisions::default();
        d.decide(&pod("signal"), changed());
        d.forget(&pod("signal").uid);
        assert_eq!(d.len(), 0);
    }
}
