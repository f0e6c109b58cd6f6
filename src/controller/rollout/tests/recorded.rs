//! What the controller records on the pods that asked for a rollout (`reloadlet.io/applied`,
//! issue #46 §2): in progress once it is requested, failed with the reason when the patch is
//! refused; one write per pod and outcome.

use super::*;
use crate::core::status::applied::{Applied, Entry, Recorded};
use test_support::wait::until;

/// The last entry written on each pod, by name.
pub(super) fn last_entries(h: &Harness) -> BTreeMap<String, Entry> {
    h.patcher
        .applied_writes()
        .into_iter()
        .map(|(_, name, value)| (name, Applied::parse(&value).unwrap().objects[0].clone()))
        .collect()
}

/// The last record written on each pod: `name → (by, action, result, error)`.
fn records(h: &Harness) -> BTreeMap<String, (String, String, Recorded, Option<String>)> {
    h.patcher
        .applied_writes()
        .into_iter()
        .map(|(_, name, value)| {
            let r = Applied::parse(&value).unwrap();
            let e = &r.objects[0];
            let facts = (e.by.clone(), e.action.clone(), e.result, e.error.clone());
            (name, facts)
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn every_asking_pod_records_the_rollout_in_progress_once() {
    let (pods, workloads) = three_pods_of_web();
    let h = start(objects(), workloads, FakePatcher::default(), false);
    h.list(pods).await;
    assert!(
        h.patcher.applied_writes().is_empty(),
        "nothing before a change"
    );
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(h.workloads.patched().len(), 1);
    let records = records(&h);
    assert_eq!(
        records.keys().map(String::as_str).collect::<Vec<_>>(),
        ["web-a", "web-b", "web-c"]
    );
    for (by, action, result, error) in records.values() {
        assert_eq!(
            (by.as_str(), action.as_str(), *result, error),
            ("controller", "rollout", Recorded::RolloutRequested, &None)
        );
    }
    assert_eq!(h.patcher.applied_writes().len(), 3, "one write per pod");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_refused_rollout_patch_is_recorded_as_failed_with_the_reason() {
    let (pods, workloads) = three_pods_of_web();
    workloads
        .fail
        .lock()
        .unwrap()
        .push_back(PatchError::Forbidden(
            "denied by ValidatingAdmissionPolicy".into(),
        ));
    let h = start(objects(), workloads, FakePatcher::default(), false);
    h.list(pods).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let records = records(&h);
    assert_eq!(records.len(), 3, "{records:?}");
    for (_, _, result, error) in records.values() {
        assert_eq!(*result, Recorded::Failed);
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.contains("denied by ValidatingAdmissionPolicy")),
            "{error:?}"
        );
    }
    h.stop().await;
}

/// `cfg` as published: `app.conf` = `value`, first seen long before the pods' start.
fn published_cfg(value: &str) -> crate::core::status::data_version::Published {
    crate::core::status::data_version::Published::of(
        &crate::core::volume_digest::HashKey::from_bytes([7; 32]),
        NS,
        &source("cfg"),
        [("app.conf", value.as_bytes())],
        jiff::Timestamp::from_second(1_700_000_000).unwrap(),
    )
}

/// The state `reloadlet status` derives for `pod` (its owner reference `owner`) from the
/// record the fake API holds on it now.
fn status(
    h: &Harness,
    name: &str,
    owner: Option<(&str, &str, &str)>,
    published: &crate::core::status::data_version::Published,
) -> crate::core::status::state::State {
    use crate::core::status::state::{derive, Facts};
    let mut p = pod(name);
    p.controller = owner.map(|(api_version, kind, name)| {
        Box::new(crate::core::rollout::OwnerRef {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: String::new(),
        })
    });
    let stored = h.patcher.stored(NS, name).unwrap();
    let record = Applied::of_pod(&stored.annotations).unwrap();
    let c = crate::core::status::consumers::consumer(&p, &source("cfg")).unwrap();
    let facts = Facts {
        published: Some(published),
        record: record.as_ref().and_then(|r| r.get(&source("cfg"))),
        started: None,
        phase: "Running",
        env_held: None,
    };
    derive(&c, &facts)
}

#[tokio::test(start_paused = true)]
async fn a_rollout_nothing_will_do_is_recorded_unless_the_pod_alone_tells_why() {
    let workloads = Arc::new(FakeWorkloads::default());
    workloads.owned_pod(NS, "job-pod", "Job", "nightly");
    // "bare": no owner at all.
    workloads.owned_pod(NS, "db-0", "StatefulSet", "db");
    let db = WorkloadRef {
        kind: WorkloadKind::StatefulSet,
        namespace: NS.into(),
        name: "db".into(),
    };
    workloads
        .strategies
        .lock()
        .unwrap()
        .insert(db, Strategy::OnDelete);
    workloads.pod_owners.lock().unwrap().insert(
        (NS.into(), "rs-pod".into()),
        crate::core::rollout::OwnerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "lonely".into(),
            uid: String::new(),
        },
    );
    let names = ["job-pod", "bare", "db-0", "rs-pod"];
    let pods = names.iter().map(|n| pod(n)).collect();
    let h = start(objects(), workloads, FakePatcher::default(), false);
    h.list(pods).await;
    let v2 = published_cfg("v2");
    h.versions.set(&cm("cfg"), Some(v2.clone()));
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    until(
        "two status record writes",
        std::time::Duration::from_secs(60),
        || h.patcher.applied_writes().len() >= 2,
    )
    .await;
    // What the pod does not show (the ReplicaSet's missing owner, the StatefulSet's
    // strategy): recorded as failed, once per pod, with the data version.
    let written = last_entries(&h);
    assert_eq!(
        written.keys().map(String::as_str).collect::<Vec<_>>(),
        ["db-0", "rs-pod"],
        "the Job's pod and the unowned one tell it themselves: nothing written on them"
    );
    for entry in written.values() {
        assert_eq!(
            (entry.by.as_str(), entry.action.as_str(), entry.result),
            ("controller", "rollout", Recorded::Failed)
        );
        assert!(entry.version.is_some(), "{entry:?}");
    }
    let failed = |name, owner, why: &str| match status(&h, name, owner, &v2) {
        crate::core::status::state::State::Failed { error } => {
            assert!(error.contains(why), "{name}: {error}")
        }
        other => panic!("{name}: {other:?}"),
    };
    failed(
        "db-0",
        Some(("apps/v1", "StatefulSet", "db")),
        "StatefulSet db uses updateStrategy OnDelete",
    );
    failed(
        "rs-pod",
        Some(("apps/v1", "ReplicaSet", "lonely")),
        "ReplicaSet lonely has no Deployment",
    );
    let cannot = |name, owner, why: &str| match status(&h, name, owner, &v2) {
        crate::core::status::state::State::Cannot { why: got } => {
            assert!(got.contains(why), "{name}: {got}")
        }
        other => panic!("{name}: {other:?}"),
    };
    cannot(
        "job-pod",
        Some(("batch/v1", "Job", "nightly")),
        "Job nightly",
    );
    cannot("bare", None, "no controlling owner");
    // The same data again: nothing more written.
    h.change("cfg", "3", &[("app.conf", "v2")]).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.patcher.applied_writes().len(), 2);
    h.stop().await;
}
