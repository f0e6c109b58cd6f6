use super::*;
use crate::controller::consumed::env_refs::references;
use crate::core::annotations::ENV_BASELINE;
use crate::core::model::{EnvKeys, EnvRef, SourceKind};
use crate::core::volume_digest::HashKey;

fn pod(uid: &str, keys: &[&str], baseline: Option<&str>) -> PodInfo {
    let mut annotations = BTreeMap::from([("reloadlet.io/action".to_owned(), "evict".to_owned())]);
    if let Some(b) = baseline {
        annotations.insert(ENV_BASELINE.into(), b.into());
    }
    PodInfo {
        uid: uid.into(),
        namespace: "ns".into(),
        name: format!("pod-{uid}"),
        annotations: annotations.into(),
        phase: "Running".into(),
        env: keys
            .iter()
            .map(|k| EnvRef {
                source: SourceRef {
                    kind: SourceKind::ConfigMap,
                    name: "app-env".into(),
                },
                keys: EnvKeys::Key((*k).into()),
                optional: false,
                container: "app".into(),
            })
            .collect(),
        ..PodInfo::default()
    }
}

fn cm() -> ObjectKey {
    ObjectKey {
        kind: SourceKind::ConfigMap,
        namespace: "ns".into(),
        name: "app-env".into(),
    }
}

fn data(pairs: &[(&str, &str)]) -> ObjectData {
    ObjectData::of(pairs, &[])
}

fn fetch(t: &mut Tracker, rv: &str, d: &ObjectData) -> Vec<String> {
    let seq = t.start_fetch(&cm(), Some(rv));
    let mut v: Vec<String> = t
        .fetched(&cm(), seq, Some(d))
        .into_iter()
        .map(|c| c.uid)
        .collect();
    v.sort();
    v
}

#[test]
fn a_first_sight_is_a_baseline_and_only_readers_of_the_changed_key_change() {
    let mut t = Tracker::with(references, ENV_BASELINE, true, false).settling();
    assert_eq!(t.put_pod(&pod("a", &["LOG"], None)), vec![cm()]);
    assert_eq!(t.put_pod(&pod("b", &["PORT"], None)), vec![cm()]);
    assert_eq!(t.unrequested(), vec![cm()]);
    let v1 = data(&[("LOG", "info"), ("PORT", "80")]);
    assert!(fetch(&mut t, "1", &v1).is_empty(), "baselines only");
    assert!(t.unrequested().is_empty(), "one GET per object");
    assert!(t.needs_fetch(&cm(), Some("2")));
    assert!(!t.needs_fetch(&cm(), Some("1")));
    assert!(
        fetch(&mut t, "2", &v1).is_empty(),
        "identical re-apply / metadata edit"
    );
    let v3 = data(&[("LOG", "debug"), ("PORT", "80")]);
    assert_eq!(fetch(&mut t, "3", &v3), ["a"]);
    // Neither acknowledged nor acted on: reported again.
    let changes = {
        let seq = t.start_fetch(&cm(), Some("4"));
        t.fetched(&cm(), seq, Some(&v3))
    };
    assert_eq!(changes.len(), 1);
    t.acknowledge(&changes[0]);
    assert!(fetch(&mut t, "5", &v3).is_empty());
}

#[test]
fn an_eviction_requested_for_a_change_is_not_requested_again_for_the_same_data() {
    let mut t = Tracker::with(references, ENV_BASELINE, true, false).settling();
    t.put_pod(&pod("a", &["LOG"], None));
    fetch(&mut t, "1", &data(&[("LOG", "info")]));
    let baseline = t.writes()[0].value.clone();
    let v2 = data(&[("LOG", "debug")]);
    let changes = {
        let seq = t.start_fetch(&cm(), Some("2"));
        t.fetched(&cm(), seq, Some(&v2))
    };
    assert_eq!(changes.len(), 1);
    t.acting(&changes[0]);
    // A replacement pod's first GET returns the same data: the pod is not evicted twice.
    t.put_pod(&pod("b", &["LOG"], None));
    assert!(fetch(&mut t, "2", &v2).is_empty());
    assert!(
        t.writes().iter().all(|w| w.uid != "a"),
        "the evicted pod's baseline is not moved ({baseline})"
    );
    // A newer change still is reported (to the replacement too).
    assert_eq!(fetch(&mut t, "3", &data(&[("LOG", "warn")])), ["a", "b"]);
}

#[test]
fn a_source_back_at_the_baseline_settles_what_was_asked_and_its_return_is_a_change_again() {
    let mut t = Tracker::with(references, ENV_BASELINE, true, false).settling();
    t.put_pod(&pod("a", &["LOG"], None));
    let v1 = data(&[("LOG", "info")]);
    let v2 = data(&[("LOG", "debug")]);
    fetch(&mut t, "1", &v1);
    let changes = {
        let seq = t.start_fetch(&cm(), Some("2"));
        t.fetched(&cm(), seq, Some(&v2))
    };
    t.acting(&changes[0]);
    assert!(t.take_settled().is_empty());
    // Back to v1: settled, not a change.
    assert!(fetch(&mut t, "3", &v1).is_empty());
    let settled = t.take_settled();
    assert_eq!(settled.len(), 1);
    assert_eq!(settled[0].uid, "a");
    assert!(t.take_settled().is_empty(), "once");
    // v2 again: a change again.
    assert_eq!(fetch(&mut t, "4", &v2), ["a"]);
    // The rollout feature's tracker keeps no such list.
    let mut r = Tracker::with(references, ENV_BASELINE, true, false);
    r.put_pod(&pod("a", &["LOG"], None));
    fetch(&mut r, "1", &v1);
    let seq = r.start_fetch(&cm(), Some("2"));
    let changes = r.fetched(&cm(), seq, Some(&v2));
    r.acting(&changes[0]);
    fetch(&mut r, "3", &v1);
    assert!(r.take_settled().is_empty());
}

#[test]
fn a_baseline_written_before_a_restart_detects_a_change_made_meanwhile() {
    let v1 = data(&[("LOG", "info")]);
    let mut first = Tracker::with(references, ENV_BASELINE, true, false)
        .settling()
        .keyed(key());
    first.put_pod(&pod("a", &["LOG"], None));
    fetch(&mut first, "1", &v1);
    let writes = first.writes();
    assert_eq!(writes.len(), 1);
    assert!(first.writes().is_empty(), "one write in flight at a time");
    let baseline = writes[0].value.clone();

    // Restarted; changed while down; a pod created meanwhile has no baseline yet.
    let mut second = Tracker::with(references, ENV_BASELINE, true, false)
        .settling()
        .keyed(key());
    assert!(second
        .put_pod(&pod("a", &["LOG"], Some(&baseline)))
        .is_empty());
    assert_eq!(second.put_pod(&pod("new", &["LOG"], None)), vec![cm()]);
    let v2 = data(&[("LOG", "debug")]);
    assert_eq!(fetch(&mut second, "2", &v2), ["a"], "only the old pod");
    // Nothing changed while down: nothing.
    let mut third = Tracker::with(references, ENV_BASELINE, true, false)
        .settling()
        .keyed(key());
    third.put_pod(&pod("a", &["LOG"], Some(&baseline)));
    assert!(fetch(&mut third, "1", &v1).is_empty());
    assert!(third.writes().is_empty(), "the annotation already says it");

    // Issue #43 §2: a restarted controller with another key (or a forged baseline) trusts
    // nothing in it: a fresh baseline, no change reported, and the annotation rewritten.
    let mut other = Tracker::with(references, ENV_BASELINE, true, false)
        .settling()
        .keyed(HashKey::from_bytes([1; 32]));
    assert_eq!(
        other.put_pod(&pod("a", &["LOG"], Some(&baseline))),
        vec![cm()],
        "fetched afresh"
    );
    assert!(
        fetch(&mut other, "2", &v2).is_empty(),
        "not taken as changed"
    );
    assert_eq!(
        other.writes().len(),
        1,
        "its own baseline written over the one it distrusts"
    );
}

fn key() -> HashKey {
    HashKey::from_bytes([7; 32])
}

#[test]
fn stale_fetches_neither_baseline_a_newer_pod_nor_apply_out_of_order() {
    let mut t = Tracker::with(references, ENV_BASELINE, true, false).settling();
    t.put_pod(&pod("a", &["LOG"], None));
    let old_seq = t.start_fetch(&cm(), Some("1"));
    // The pod "b" is first seen after that GET was sent.
    t.put_pod(&pod("b", &["LOG"], None));
    let new_seq = t.start_fetch(&cm(), Some("2"));
    let v1 = data(&[("LOG", "info")]);
    let v2 = data(&[("LOG", "debug")]);
    assert!(t.fetched(&cm(), new_seq, Some(&v2)).is_empty());
    assert!(
        t.fetched(&cm(), old_seq, Some(&v1)).is_empty(),
        "stale: dropped"
    );
    assert_eq!(fetch(&mut t, "3", &v2), Vec::<String>::new());
}

#[test]
fn an_object_appearing_or_disappearing_is_a_change_and_unreferenced_objects_are_not_fetched() {
    let mut t = Tracker::with(references, ENV_BASELINE, true, false).settling();
    t.put_pod(&pod("a", &["LOG"], None));
    let seq = t.start_fetch(&cm(), None);
    assert!(t.fetched(&cm(), seq, None).is_empty());
    assert_eq!(fetch(&mut t, "7", &data(&[("LOG", "x")])), ["a"]);
    let other = ObjectKey {
        name: "other".into(),
        ..cm()
    };
    assert!(!t.needs_fetch(&other, Some("1")));
    t.remove_pod("a");
    assert!(!t.needs_fetch(&cm(), Some("8")));
    assert_eq!(t.objects_len(), 0);
}
