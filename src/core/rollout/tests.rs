use super::*;
use std::collections::BTreeMap;

fn owner(api_version: &str, kind: &str, name: &str) -> OwnerRef {
    OwnerRef {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: String::new(),
    }
}

fn workload(kind: WorkloadKind, name: &str) -> WorkloadRef {
    WorkloadRef {
        kind,
        namespace: "shop".into(),
        name: name.into(),
    }
}

#[test]
fn owners_are_followed_through_replica_sets() {
    let rs = owner("apps/v1", "ReplicaSet", "web-7d9f");
    assert_eq!(
        workload_of("shop", Some(&rs), |n| {
            assert_eq!(n, "web-7d9f");
            Some(owner("apps/v1", "Deployment", "web"))
        }),
        Ok(workload(WorkloadKind::Deployment, "web"))
    );
    assert_eq!(
        workload_of("shop", Some(&rs), |_| Some(owner(
            "argoproj.io/v1alpha1",
            "Rollout",
            "canary"
        ))),
        Ok(workload(WorkloadKind::ArgoRollout, "canary"))
    );
    assert_eq!(
        workload_of("shop", Some(&owner("apps/v1", "StatefulSet", "db")), |_| {
            None
        }),
        Ok(workload(WorkloadKind::StatefulSet, "db"))
    );
    assert_eq!(
        workload_of(
            "shop",
            Some(&owner("apps/v1", "DaemonSet", "agent")),
            |_| { None }
        ),
        Ok(workload(WorkloadKind::DaemonSet, "agent"))
    );
}

#[test]
fn unsupported_owners_say_why() {
    assert_eq!(
        workload_of("shop", None, |_| None),
        Err(Unsupported::NoOwner)
    );
    let rs = owner("apps/v1", "ReplicaSet", "bare");
    assert_eq!(
        workload_of("shop", Some(&rs), |_| None),
        Err(Unsupported::BareReplicaSet("bare".into()))
    );
    assert_eq!(
        workload_of("shop", Some(&owner("batch/v1", "Job", "migrate")), |_| None),
        Err(Unsupported::Owner {
            kind: "Job".into(),
            name: "migrate".into()
        })
    );
    // A kind named like ours in another group is not ours.
    assert!(workload_of(
        "shop",
        Some(&owner("example.com/v1", "Deployment", "x")),
        |_| None
    )
    .is_err());
    let text = Unsupported::NoOwner.to_string();
    assert!(text.contains("no controlling owner"), "{text}");
}

#[test]
fn strategy_facts_follow_the_deployment_controller() {
    use IntOrPercent::{Int, Percent};
    let facts = |s: Strategy| s.facts(WorkloadKind::Deployment, "web").expect("supported");
    // The default 25 % / 25 % at one replica: surge rounds up to 1, unavailable down to 0.
    let one = facts(Strategy::deployment_default(1));
    assert!(one.surges && !one.downtime);
    // maxSurge 0, maxUnavailable 1 at one replica: the only pod goes first.
    let no_surge = facts(Strategy::Rolling {
        replicas: 1,
        max_surge: Int(0),
        max_unavailable: Int(1),
    });
    assert!(!no_surge.surges && no_surge.downtime);
    // Both resolve to 0 (1 % of 3 rounds down): unavailable becomes 1, no downtime at 3.
    let fencepost = facts(Strategy::Rolling {
        replicas: 3,
        max_surge: Percent(0),
        max_unavailable: Percent(1),
    });
    assert!(!fencepost.surges && !fencepost.downtime);
    let recreate = facts(Strategy::Recreate);
    assert!(recreate.downtime && recreate.note.contains("downtime"));
    let sts = Strategy::OrderedRolling
        .facts(WorkloadKind::StatefulSet, "db")
        .expect("supported");
    assert!(!sts.surges && sts.note.contains("no surge"));
    assert!(
        Strategy::DaemonSetRolling {
            max_surge: Percent(10)
        }
        .facts(WorkloadKind::DaemonSet, "a")
        .expect("supported")
        .surges
    );
    assert_eq!(
        Strategy::OnDelete.facts(WorkloadKind::StatefulSet, "db"),
        Err(Unsupported::OnDelete {
            kind: "StatefulSet",
            name: "db".into()
        })
    );
}

#[test]
fn the_patch_writes_the_two_template_annotations_only() {
    let patch = restart_patch(
        WorkloadKind::Deployment,
        "2026-11-26T12:00:00Z",
        "configmap/app-config",
    );
    assert_eq!(
        patch,
        serde_json::json!({"spec": {"template": {"metadata": {"annotations": {
            "kubectl.kubernetes.io/restartedAt": "2026-11-26T12:00:00Z",
            "reloadlet.io/restarted-for": "configmap/app-config"
        }}}}})
    );
    assert_eq!(
        restart_patch(WorkloadKind::ArgoRollout, "2026-11-26T12:00:00Z", "x"),
        serde_json::json!({"spec": {"restartAt": "2026-11-26T12:00:00Z"}})
    );
}

#[test]
fn on_blocked_annotations() {
    let ann = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(
        on_blocked(&ann(&[])),
        Ok((OnBlocked::Wait, DEFAULT_BLOCKED_TIMEOUT))
    );
    assert_eq!(
        on_blocked(&ann(&[(ON_BLOCKED, "rollout"), (BLOCKED_TIMEOUT, "2m")])),
        Ok((OnBlocked::Rollout, Duration::from_secs(120)))
    );
    let e = on_blocked(&ann(&[(ON_BLOCKED, "force")])).expect_err("refused");
    assert!(e.to_string().contains("reloadlet.io/on-blocked: \"force\""));
    let e = on_blocked(&ann(&[(BLOCKED_TIMEOUT, "soon")])).expect_err("refused");
    assert!(e
        .to_string()
        .contains("reloadlet.io/blocked-timeout: \"soon\""));
    assert!(on_blocked(&ann(&[(BLOCKED_TIMEOUT, "0s")])).is_err());
}

#[test]
fn the_pod_alone_tells_an_owner_no_rollout_applies_to() {
    let cases: Vec<(&str, Option<OwnerRef>, Option<&str>)> = vec![
        ("no owner", None, Some("no controlling owner")),
        (
            "a Job",
            Some(owner("batch/v1", "Job", "migrate")),
            Some("Job migrate, which reloadlet cannot roll"),
        ),
        (
            "a Deployment directly",
            Some(owner("apps/v1", "Deployment", "web")),
            Some("Deployment web"),
        ),
        // The ReplicaSet's owner is read by the controller: not the pod's to tell.
        (
            "a ReplicaSet",
            Some(owner("apps/v1", "ReplicaSet", "web-5d8f9")),
            None,
        ),
        (
            "a StatefulSet",
            Some(owner("apps/v1", "StatefulSet", "db")),
            None,
        ),
        (
            "a DaemonSet",
            Some(owner("apps/v1", "DaemonSet", "agent")),
            None,
        ),
    ];
    for (name, owner, why) in cases {
        let got = unrollable_by_pod(owner.as_ref()).map(|e| e.to_string());
        match (why, got) {
            (None, None) => {}
            (Some(want), Some(got)) => assert!(got.contains(want), "{name}: {got}"),
            (want, got) => panic!("{name}: want {want:?}, got {got:?}"),
        }
    }
}
