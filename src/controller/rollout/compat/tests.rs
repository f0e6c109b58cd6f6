//! Which pods Reloader's annotations govern, what the tracker follows for them, and which of
//! their changes roll.

use super::*;
use crate::core::model::{EnvKeys, EnvRef};
use crate::core::rollout::OwnerRef;
use crate::ports::WorkloadMeta;

const NS: &str = "ns";

fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn cm(name: &str) -> SourceRef {
    SourceRef {
        kind: SourceKind::ConfigMap,
        name: name.into(),
    }
}

fn workload(kind: WorkloadKind, name: &str) -> WorkloadRef {
    WorkloadRef {
        kind,
        namespace: NS.into(),
        name: name.into(),
    }
}

/// A running pod of Deployment `web` (ReplicaSet `web-5d9c7`), mounting `cfg`, reading
/// `env-cfg` through env.
fn pod(template: &[(&str, &str)]) -> PodInfo {
    PodInfo {
        uid: "u1".into(),
        namespace: NS.into(),
        name: "web-5d9c7-abcde".into(),
        annotations: ann(template).into(),
        labels: ann(&[("app", "web"), ("pod-template-hash", "5d9c7")]).into(),
        volumes: vec![VolumeSpec {
            name: "v".into(),
            sources: vec![cm("cfg")],
            ..VolumeSpec::default()
        }],
        env: vec![EnvRef {
            source: cm("env-cfg"),
            keys: EnvKeys::Key("LOG".into()),
            optional: false,
            container: "app".into(),
        }],
        has_controller: true,
        controller: Some(Box::new(OwnerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "web-5d9c7".into(),
            uid: String::new(),
        })),
        phase: "Running".into(),
        ..PodInfo::default()
    }
}

fn compat_with(kind: WorkloadKind, name: &str, own: &[(&str, &str)]) -> Compat {
    let mut c = Compat::new(true, false, true);
    let world = World::new(true);
    c.workload(
        &WorkloadChange::Applied(WorkloadMeta {
            workload: workload(kind, name),
            annotations: ann(own),
        }),
        &world,
    );
    c
}

#[test]
fn a_deployment_pod_is_governed_through_its_replica_set_and_hash_label() {
    let c = compat_with(WorkloadKind::Deployment, "web", &[(rc::AUTO, "true")]);
    let (w, _) = c.governing(&pod(&[])).expect("governed");
    assert_eq!(w, &workload(WorkloadKind::Deployment, "web"));
    // Another hash label: not this Deployment's ReplicaSet naming.
    let mut other = pod(&[]);
    other
        .labels
        .insert("pod-template-hash".into(), "zzz".into());
    assert!(c.governing(&other).is_none());
    // An unknown workload, or one without Reloader's annotations (here or on the template).
    let bare = compat_with(WorkloadKind::Deployment, "web", &[("team", "a")]);
    assert!(bare.governing(&pod(&[])).is_none());
    assert!(bare
        .governing(&pod(&[(rc::CONFIGMAP_AUTO, "true")]))
        .is_some());
    let elsewhere = compat_with(WorkloadKind::Deployment, "api", &[(rc::AUTO, "true")]);
    assert!(elsewhere.governing(&pod(&[])).is_none());
}

#[test]
fn statefulset_daemonset_and_argo_rollout_pods_are_found_too() {
    let owned = |kind: &str, api: &str, name: &str| {
        let mut p = pod(&[]);
        p.controller = Some(Box::new(OwnerRef {
            api_version: api.into(),
            kind: kind.into(),
            name: name.into(),
            uid: String::new(),
        }));
        p
    };
    let sts = compat_with(WorkloadKind::StatefulSet, "db", &[(rc::AUTO, "true")]);
    assert!(sts
        .governing(&owned("StatefulSet", "apps/v1", "db"))
        .is_some());
    let ds = compat_with(WorkloadKind::DaemonSet, "agent", &[(rc::AUTO, "true")]);
    assert!(ds
        .governing(&owned("DaemonSet", "apps/v1", "agent"))
        .is_some());
    assert!(ds.governing(&owned("Job", "batch/v1", "agent")).is_none());
    let argo = compat_with(WorkloadKind::ArgoRollout, "canary", &[(rc::AUTO, "true")]);
    let mut p = owned("ReplicaSet", "apps/v1", "canary-77f");
    p.labels = ann(&[("rollouts-pod-template-hash", "77f")]).into();
    assert!(argo.governing(&p).is_some());
    let mut no_argo = Compat::new(true, false, false);
    no_argo.workloads = argo.workloads.clone();
    assert!(
        no_argo.governing(&p).is_none(),
        "Argo Rollouts need --argo-rollouts"
    );
}

#[test]
fn the_pods_own_action_wins_and_compat_off_governs_nothing() {
    let mut c = compat_with(WorkloadKind::Deployment, "web", &[(rc::AUTO, "true")]);
    assert!(c
        .governing(&pod(&[("reloadlet.io/action", "signal")]))
        .is_none());
    assert!(c
        .tracked(&pod(&[("reloadlet.io/action", "signal")]))
        .is_none());
    let mut stopped = pod(&[]);
    stopped.terminating = true;
    assert!(c.governing(&stopped).is_none());
    let mut off = Compat::new(false, false, false);
    let world = World::new(true);
    off.workload(
        &WorkloadChange::Applied(WorkloadMeta {
            workload: workload(WorkloadKind::Deployment, "web"),
            annotations: ann(&[(rc::AUTO, "true")]),
        }),
        &world,
    );
    assert!(off.tracked(&pod(&[])).is_none());
}

#[test]
fn objects_named_only_in_a_reload_list_are_followed_whole() {
    let mut c = compat_with(
        WorkloadKind::Deployment,
        "web",
        &[
            (rc::CONFIGMAP_RELOAD, "cfg, flags ,feature-.*"),
            (rc::SECRET_RELOAD, "tls"),
        ],
    );
    let p = pod(&[]);
    let tracked = c.tracked(&p).unwrap();
    let extra: Vec<_> = tracked
        .volumes
        .iter()
        .filter(|v| v.name == NAMED_ONLY)
        .flat_map(|v| v.sources.clone())
        .collect();
    // `cfg` is mounted already; a pattern names no object; Secrets need --secrets.
    assert_eq!(extra, [cm("flags")]);
    let refs = refs::references(&tracked, true, false);
    assert!(refs.contains_key(&cm("flags")));
}

#[test]
fn a_workload_change_names_the_pods_to_look_at_again() {
    let mut c = Compat::new(true, false, false);
    let mut world = World::new(true);
    world.put(pod(&[]));
    let meta = |a: &[(&str, &str)]| WorkloadMeta {
        workload: workload(WorkloadKind::Deployment, "web"),
        annotations: ann(a),
    };
    let applied = WorkloadChange::Applied(meta(&[(rc::AUTO, "true")]));
    assert_eq!(c.workload(&applied, &world), ["u1"]);
    assert!(c.workload(&applied, &world).is_empty(), "unchanged");
    let relisted =
        WorkloadChange::Listed(WorkloadKind::Deployment, vec![meta(&[(rc::AUTO, "true")])]);
    assert!(
        c.workload(&relisted, &world).is_empty(),
        "relisted as it was"
    );
    let listed = WorkloadChange::Listed(WorkloadKind::Deployment, vec![]);
    assert_eq!(c.workload(&listed, &world), ["u1"], "gone from the list");
    assert!(c.governing(&pod(&[])).is_none());
}

/// (what, workload annotations, object annotations, object, rolls?)
type Case<'a> = (
    &'a str,
    &'a [(&'a str, &'a str)],
    &'a [(&'a str, &'a str)],
    &'a str,
    bool,
);

#[test]
fn each_reloader_annotation_decides_which_changes_roll() {
    let cases: &[Case] = &[
        ("auto, mounted", &[(rc::AUTO, "true")], &[], "cfg", true),
        ("auto, env", &[(rc::AUTO, "true")], &[], "env-cfg", true),
        (
            "configmap auto",
            &[(rc::CONFIGMAP_AUTO, "true")],
            &[],
            "cfg",
            true,
        ),
        (
            "secret auto only",
            &[(rc::SECRET_AUTO, "true")],
            &[],
            "cfg",
            false,
        ),
        (
            "reload names it",
            &[(rc::CONFIGMAP_RELOAD, "cfg")],
            &[],
            "cfg",
            true,
        ),
        (
            "reload names another",
            &[(rc::CONFIGMAP_RELOAD, "other")],
            &[],
            "cfg",
            false,
        ),
        (
            "reload, unreferenced",
            &[(rc::CONFIGMAP_RELOAD, "flags")],
            &[],
            "flags",
            true,
        ),
        (
            "search + match",
            &[(rc::SEARCH, "true")],
            &[(rc::MATCH, "true")],
            "cfg",
            true,
        ),
        (
            "search, no match",
            &[(rc::SEARCH, "true")],
            &[],
            "cfg",
            false,
        ),
        (
            "ignore on the object",
            &[(rc::AUTO, "true")],
            &[(rc::IGNORE, "true")],
            "cfg",
            false,
        ),
    ];
    for (what, own, object, name, rolls) in cases {
        let mut c = compat_with(WorkloadKind::Deployment, "web", own);
        let mut world = World::new(true);
        let p = pod(&[]);
        world.put(p.clone());
        let mut tracker = Tracker::with(refs::references, "x", true, false);
        tracker.put_pod(&c.tracked(&p).unwrap());
        let key = ObjectKey {
            kind: SourceKind::ConfigMap,
            namespace: NS.into(),
            name: (*name).into(),
        };
        let data = ObjectData {
            annotations: ann(object),
            ..ObjectData::default()
        };
        let change = Change {
            uid: "u1".into(),
            source: cm(name),
            digest: "new".into(),
        };
        let kept = c.screen(vec![change], &key, Some(&data), &world, &mut tracker);
        assert_eq!(!kept.is_empty(), *rolls, "{what}");
        // A deleted object never rolls (Reloader's --reload-on-delete is off by default).
        let change = Change {
            uid: "u1".into(),
            source: cm(name),
            digest: "gone".into(),
        };
        assert!(
            c.screen(vec![change], &key, None, &world, &mut tracker)
                .is_empty(),
            "{what}: deleted"
        );
    }
}

#[test]
fn explain_names_the_annotation_and_the_missing_secrets_flag() {
    let w = workload(WorkloadKind::Deployment, "web");
    let line = explain_line(
        &w,
        &ann(&[(rc::SECRET_AUTO, "true")]),
        &ann(&[]),
        Some(false),
    );
    assert!(
        line.contains("secret.reloader.stakater.com/auto: true"),
        "{line}"
    );
    assert!(line.contains("Deployment ns/web"), "{line}");
    assert!(line.contains("without --secrets"), "{line}");
    let line = explain_line(&w, &ann(&[]), &ann(&[(rc::CONFIGMAP_AUTO, "true")]), None);
    assert!(line.contains("its pod template"), "{line}");
    assert!(!line.contains("--secrets"), "{line}");
}
