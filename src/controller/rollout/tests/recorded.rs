//! What the controller records on the pods that asked for a rollout (`reloadlet.io/applied`,
//! issue #46 §2): in progress once it is requested, failed with the reason when the patch is
//! refused; one write per pod and outcome.

use super::*;
use crate::core::status::applied::{Applied, Entry, Recorded};

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
