//! Table tests of the consumed objects' pure parts: the digest of what a pod reads, the signed
//! baseline annotation, a pod's env references; and how [`super::Consumed`] reads them.

use super::baseline::{format_baseline, parse_baseline};
use super::digest::{digest, Selector};
use super::env_refs::references;
use crate::core::model::{EnvKeys, EnvRef, PodInfo, SourceKind, SourceRef};
use crate::core::volume_digest::HashKey;
use crate::ports::ObjectData;
use std::collections::BTreeMap;

fn key(k: &str) -> Selector {
    Selector {
        keys: EnvKeys::Key(k.into()),
        optional: false,
        volume: false,
    }
}
fn all(prefix: &str) -> Selector {
    Selector {
        keys: EnvKeys::All {
            prefix: prefix.into(),
        },
        optional: false,
        volume: false,
    }
}
fn data(text: &[(&str, &str)], binary: &[(&str, &[u8])]) -> ObjectData {
    ObjectData::of(text, binary)
}

/// (what, selectors, before, after, changed?)
type Case = (
    &'static str,
    Vec<Selector>,
    Option<ObjectData>,
    Option<ObjectData>,
    bool,
);

#[test]
fn a_digest_changes_exactly_when_what_the_pod_reads_changes() {
    let base = data(&[("LOG", "info"), ("PORT", "80")], &[]);
    // (what, selectors, before, after, changed?)
    let cases: Vec<Case> = vec![
        (
            "referenced key changed",
            vec![key("LOG")],
            Some(base.clone()),
            Some(data(&[("LOG", "debug"), ("PORT", "80")], &[])),
            true,
        ),
        (
            "unreferenced key changed",
            vec![key("LOG")],
            Some(base.clone()),
            Some(data(&[("LOG", "info"), ("PORT", "81")], &[])),
            false,
        ),
        (
            "unreferenced key added",
            vec![key("LOG")],
            Some(base.clone()),
            Some(data(&[("LOG", "info"), ("PORT", "80"), ("X", "1")], &[])),
            false,
        ),
        (
            "identical re-apply",
            vec![key("LOG")],
            Some(base.clone()),
            Some(base.clone()),
            false,
        ),
        (
            "missing vs empty",
            vec![key("NEW")],
            Some(base.clone()),
            Some(data(&[("LOG", "info"), ("PORT", "80"), ("NEW", "")], &[])),
            true,
        ),
        (
            "text vs binary with the same bytes",
            vec![key("K")],
            Some(data(&[("K", "v")], &[])),
            Some(data(&[], &[("K", b"v")])),
            true,
        ),
        (
            "envFrom: any key changed",
            vec![all("")],
            Some(base.clone()),
            Some(data(&[("LOG", "info"), ("PORT", "81")], &[])),
            true,
        ),
        (
            "envFrom: key added",
            vec![all("")],
            Some(base.clone()),
            Some(data(&[("LOG", "info"), ("PORT", "80"), ("X", "")], &[])),
            true,
        ),
        (
            "envFrom: binaryData of a ConfigMap is not read",
            vec![all("")],
            Some(base.clone()),
            Some(data(&[("LOG", "info"), ("PORT", "80")], &[("B", b"x")])),
            false,
        ),
        (
            "optional object appears",
            vec![Selector {
                optional: true,
                ..key("LOG")
            }],
            None,
            Some(base.clone()),
            true,
        ),
        (
            "optional object disappears",
            vec![Selector {
                optional: true,
                ..all("")
            }],
            Some(base.clone()),
            None,
            true,
        ),
        (
            "missing object stays missing",
            vec![key("LOG")],
            None,
            None,
            false,
        ),
        (
            "empty object vs missing object",
            vec![all("")],
            Some(ObjectData::default()),
            None,
            true,
        ),
    ];
    for (what, sels, before, after, changed) in cases {
        let a = digest(&k(), &sels, before.as_ref());
        let b = digest(&k(), &sels, after.as_ref());
        assert_eq!(a != b, changed, "{what}");
        assert_eq!(a.len(), 16, "{what}");
    }
}

#[test]
fn a_digest_does_not_depend_on_order_and_a_prefix_is_part_of_it() {
    let d = data(&[("A", "1"), ("B", "2")], &[]);
    assert_eq!(
        digest(&k(), &[key("A"), key("B")], Some(&d)),
        digest(&k(), &[key("B"), key("A"), key("B")], Some(&d))
    );
    assert_ne!(
        digest(&k(), &[all("")], Some(&d)),
        digest(&k(), &[all("X_")], Some(&d))
    );
    // Key and value boundaries are length-prefixed: ("AB","") ≠ ("A","B").
    assert_ne!(
        digest(&k(), &[all("")], Some(&data(&[("AB", "")], &[]))),
        digest(&k(), &[all("")], Some(&data(&[("A", "B")], &[])))
    );
}

#[test]
fn the_baseline_annotation_round_trips_and_skips_garbage() {
    let mut m = BTreeMap::new();
    let cm = SourceRef {
        kind: SourceKind::ConfigMap,
        name: "app-env".into(),
    };
    let s = SourceRef {
        kind: SourceKind::Secret,
        name: "db".into(),
    };
    m.insert(cm.clone(), "0123456789abcdef".to_owned());
    m.insert(s, "fedcba9876543210".to_owned());
    let text = format_baseline(&k(), "reloadlet.io/env-baseline", "uid-1", &m);
    let (entries, mac) = text.split_once(";mac=").unwrap();
    assert_eq!(
        entries,
        "configmap/app-env=0123456789abcdef,secret/db=fedcba9876543210"
    );
    assert_eq!(mac.len(), 32);
    assert_eq!(
        parse_baseline(&k(), "reloadlet.io/env-baseline", "uid-1", &text),
        Some(m)
    );
    // Garbage entries inside a signed value are left out.
    let mut junk_map = BTreeMap::new();
    junk_map.insert(cm.clone(), "0123456789abcdef".to_owned());
    let signed = format_baseline(&k(), "a", "u", &junk_map);
    let junk = parse_baseline(&k(), "a", "u", &signed).unwrap();
    assert_eq!(junk.len(), 1);
    assert!(junk.contains_key(&cm));
}

/// Issue #43 §2: a baseline a pod author wrote is not trusted. Unsigned (the format before
/// baselines were signed, or a forgery), signed for another pod or another annotation,
/// signed by another controller's key, or edited after signing: `None`.
#[test]
fn a_baseline_not_signed_by_this_controller_for_this_pod_is_not_trusted() {
    let mut m = BTreeMap::new();
    m.insert(
        SourceRef {
            kind: SourceKind::ConfigMap,
            name: "app".into(),
        },
        "0123456789abcdef".to_owned(),
    );
    let signed = format_baseline(&k(), "reloadlet.io/rollout-baseline", "uid-1", &m);
    let parse = |key: &HashKey, annotation: &str, uid: &str, value: &str| {
        parse_baseline(key, annotation, uid, value)
    };
    assert!(parse(&k(), "reloadlet.io/rollout-baseline", "uid-1", &signed).is_some());
    let other_key = HashKey::from_bytes([9; 32]);
    for (what, key, annotation, uid, value) in [
        (
            "unsigned",
            k(),
            "reloadlet.io/rollout-baseline",
            "uid-1",
            "configmap/app=0123456789abcdef".to_owned(),
        ),
        (
            "another pod",
            k(),
            "reloadlet.io/rollout-baseline",
            "uid-2",
            signed.clone(),
        ),
        (
            "another annotation",
            k(),
            "reloadlet.io/env-baseline",
            "uid-1",
            signed.clone(),
        ),
        (
            "another key",
            other_key,
            "reloadlet.io/rollout-baseline",
            "uid-1",
            signed.clone(),
        ),
        (
            "edited",
            k(),
            "reloadlet.io/rollout-baseline",
            "uid-1",
            signed.replace("0123", "9999"),
        ),
        (
            "truncated mac",
            k(),
            "reloadlet.io/rollout-baseline",
            "uid-1",
            signed[..signed.len() - 1].to_owned(),
        ),
    ] {
        assert_eq!(parse(&key, annotation, uid, &value), None, "{what}");
    }
}

/// Issue #43 §3: the digest of a Secret's data is keyed — the same data under another key
/// digests apart, so a reader of pod annotations cannot test guesses.
#[test]
fn digests_are_keyed() {
    let d = data(&[("PASSWORD", "hunter2")], &[]);
    let a = digest(&k(), &[key("PASSWORD")], Some(&d));
    let b = digest(&HashKey::from_bytes([9; 32]), &[key("PASSWORD")], Some(&d));
    assert_ne!(a, b);
    assert_eq!(a, digest(&k(), &[key("PASSWORD")], Some(&d)));
}

fn k() -> HashKey {
    HashKey::from_bytes([7; 32])
}

/// A running pod `ns/web` reading `configmap app-env` (LOG, twice), `configmap shared`
/// (envFrom, prefix `S_`) and `secret db` (PASSWORD) through env (shared with the env
/// consumers' decision tests).
pub(crate) fn pod(ann: &[(&str, &str)], owned: bool) -> PodInfo {
    let r = |kind, name: &str, keys| EnvRef {
        source: SourceRef {
            kind,
            name: name.into(),
        },
        keys,
        optional: false,
        container: "app".into(),
    };
    PodInfo {
        uid: "u".into(),
        namespace: "ns".into(),
        name: "web".into(),
        annotations: ann
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        has_controller: owned,
        phase: "Running".into(),
        env: vec![
            r(SourceKind::ConfigMap, "app-env", EnvKeys::Key("LOG".into())),
            r(SourceKind::ConfigMap, "app-env", EnvKeys::Key("LOG".into())),
            r(
                SourceKind::ConfigMap,
                "shared",
                EnvKeys::All {
                    prefix: "S_".into(),
                },
            ),
            r(SourceKind::Secret, "db", EnvKeys::Key("PASSWORD".into())),
        ],
        ..PodInfo::default()
    }
}

#[test]
fn references_follow_the_kinds_enabled_and_the_narrowing_lists() {
    let p = pod(&[("reloadlet.io/action", "evict")], true);
    let names = |m: BTreeMap<SourceRef, Vec<Selector>>| {
        m.into_iter()
            .map(|(s, sel)| (s.to_string(), sel.len()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(references(&p, true, false)),
        [
            ("configmap app-env".into(), 1),
            ("configmap shared".into(), 1)
        ]
    );
    assert_eq!(references(&p, true, true).len(), 3);
    let narrowed = pod(
        &[
            ("reloadlet.io/action", "evict"),
            ("reloadlet.io/configmaps", "shared"),
        ],
        true,
    );
    assert_eq!(
        names(references(&narrowed, true, true)),
        [("configmap shared".into(), 1)]
    );
}

#[tokio::test(flavor = "current_thread")]
async fn every_object_due_at_once_is_read_by_a_few_tasks_not_one_per_object() {
    use super::fetch::FETCHES_IN_FLIGHT;
    use super::{Consumed, Tracker};
    use crate::controller::fake::FakeEnvApi;
    use crate::controller::feature::World;
    use crate::core::annotations::ENV_BASELINE;
    use crate::ports::ObjectKey;
    use std::sync::Arc;

    let api = Arc::new(FakeEnvApi::default());
    let tracker = Tracker::with(references, ENV_BASELINE, true, false);
    let stop = tokio_util::sync::CancellationToken::new();
    let mut consumed = Consumed::new(tracker, api.clone(), stop.clone());
    let objects = 10 * FETCHES_IN_FLIGHT;
    for i in 0..objects {
        let name = format!("cm-{i:03}");
        let object = ObjectKey {
            kind: SourceKind::ConfigMap,
            namespace: "ns".into(),
            name: name.clone(),
        };
        let value = data(&[("LOG", "info")], &[]);
        api.objects.lock().unwrap().insert(object, value);
        let mut reader = pod(&[("reloadlet.io/action", "evict")], true);
        reader.uid = format!("u{i}");
        reader.env.truncate(1);
        reader.env[0].source.name = name;
        consumed.tracker.put_pod(&reader);
    }
    let mut world = World::default();
    world.leader = true;
    world.pods_listed = true;
    let tasks = tokio::runtime::Handle::current().metrics();
    let before = tasks.num_alive_tasks();
    // Leadership gained: every object due at once.
    consumed.fetch_all(&world);
    let mut most = tasks.num_alive_tasks() - before;
    assert!(most > 0, "no read started");
    let mut answered = std::collections::BTreeSet::new();
    while answered.len() < objects {
        let next = tokio::time::timeout(std::time::Duration::from_secs(10), consumed.next());
        let fetched = next.await.expect("every object is read").unwrap();
        assert!(fetched.data.is_some(), "{}", fetched.key.name);
        answered.insert(fetched.key.name);
        most = most.max(tasks.num_alive_tasks() - before);
    }
    assert!(
        most <= FETCHES_IN_FLIGHT,
        "{most} read tasks alive at once for {objects} objects"
    );
    assert_eq!(api.reads.lock().unwrap().len(), objects, "one read each");
    stop.cancel();
}
