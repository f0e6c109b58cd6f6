//! The pods' status record (`reloadlet.io/applied`) written by the real loop: the version of
//! the write the pod saw before the action, one write per action, nothing for a pod that did
//! not change, `--dry-run` and a reload that failed.

use super::*;
use crate::core::status::applied::{Applied, Recorded};
use crate::core::status::data_version::version_of_files;
use crate::core::volume_digest::HashKey;

fn controller_key() -> HashKey {
    HashKey::from_bytes([5; 32])
}

fn app() -> SourceRef {
    SourceRef {
        kind: SourceKind::ConfigMap,
        name: "app".into(),
    }
}

impl World {
    /// The agent knows the controller's key; the pod edge knows `pod`.
    fn recording(&self, pod: &PodInfo) {
        self.key.send_replace(Some(controller_key()));
        self.patcher.put(pod.clone());
    }

    /// The records written so far, after the writer's turn.
    async fn records(&self) -> Vec<Applied> {
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.patcher
            .applied_writes()
            .iter()
            .map(|(_, _, v)| Applied::parse(v).unwrap())
            .collect()
    }
}

#[tokio::test(start_paused = true)]
async fn a_signal_is_recorded_with_the_version_of_the_data_the_pod_saw() {
    let mut w = world(None);
    let mut p = pod("signal");
    // A second container on the same volume: two signals, the same facts, one write.
    p.containers.push(ContainerInfo {
        name: "sidecar".into(),
        ..p.containers[0].clone()
    });
    w.recording(&p);
    w.agent.on_pod(PodUpdate::Resync(vec![p]));
    let t0 = now();
    w.change_at(t0);
    w.agent.fire_due_at(t0);
    w.settle().await;
    assert_eq!(w.processes.sent(), 2);
    let records = w.records().await;
    assert_eq!(records.len(), 1, "one write for one action: {records:?}");
    let entry = records[0].get(&app()).unwrap();
    let want = version_of_files(
        &controller_key(),
        "web",
        &app(),
        [("app.conf", b"v2".as_slice())],
    );
    assert_eq!(entry.data_version(), Some(want));
    assert_eq!(
        (entry.result, entry.action.as_str()),
        (Recorded::Applied, "signal")
    );
}

#[tokio::test(start_paused = true)]
async fn a_pod_that_did_not_change_or_did_not_opt_in_is_never_written() {
    let mut w = world(None);
    let p = pod("signal");
    w.recording(&p);
    let t0 = now();
    w.discovered("v1", t0);
    w.agent.fire_due_at(t0 + Duration::from_secs(60));
    w.settle().await;
    // Not opted in: changed, but no action and no record.
    let mut plain = pod("signal");
    plain.annotations.clear();
    w.agent.on_pod(PodUpdate::Resync(vec![plain]));
    w.project(2, "v2");
    w.look_at(w.volume_dir(), LookCause::Swap, t0);
    w.agent.fire_due_at(t0 + Duration::from_secs(120));
    w.settle().await;
    assert_eq!(w.processes.sent(), 0);
    assert!(w.records().await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn dry_run_records_dry_run_through_the_edge() {
    let mut w = world_with(None, |s| s.scope.dry_run = true);
    let p = pod("signal");
    w.recording(&p);
    w.agent.on_pod(PodUpdate::Resync(vec![p]));
    let t0 = now();
    w.change_at(t0);
    w.agent.fire_due_at(t0);
    w.settle().await;
    assert_eq!(w.processes.sent(), 0);
    let records = w.records().await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].get(&app()).unwrap().result, Recorded::DryRun);
}

#[tokio::test(start_paused = true)]
async fn a_reload_whose_endpoint_answers_500_reads_failed_with_the_reason() {
    let mut w = world(None);
    w.http
        .script
        .lock()
        .unwrap()
        .extend(std::iter::repeat_n(fake::Reply::Status(500, "boom"), 1000));
    let p = http_pod();
    w.recording(&p);
    w.agent.on_pod(PodUpdate::Resync(vec![p]));
    let t0 = now();
    w.change_at(t0);
    w.agent.fire_due_at(t0);
    // Retried for five minutes, then given up.
    tokio::time::sleep(Duration::from_secs(600)).await;
    w.settle().await;
    assert_eq!(w.events.reasons(), ["ReloadFailed"]);
    let records = w.records().await;
    let entry = records.last().unwrap().get(&app()).unwrap();
    assert_eq!(
        (entry.result, entry.action.as_str()),
        (Recorded::Failed, "http")
    );
    let error = entry.error.as_deref().unwrap();
    assert!(error.contains("500"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_change_held_by_pacing_is_recorded_deferred_until_its_time() {
    let mut w = world(None);
    let mut p = pod("signal");
    p.annotations
        .insert("reloadlet.io/min-interval".into(), "10m".into());
    w.recording(&p);
    w.agent.on_pod(PodUpdate::Resync(vec![p]));
    let t0 = now();
    w.change_at(t0);
    w.agent.fire_due_at(t0);
    w.settle().await;
    // The second change within the interval is held.
    w.project(3, "v3");
    w.look_at(w.volume_dir(), LookCause::Swap, t0 + Duration::from_secs(1));
    w.agent.fire_due_at(t0 + Duration::from_secs(1));
    w.settle().await;
    let records = w.records().await;
    let last = records.last().unwrap().get(&app()).unwrap();
    assert_eq!(last.result, Recorded::Deferred, "{records:?}");
    assert!(last.until.is_some());
    let want = version_of_files(
        &controller_key(),
        "web",
        &app(),
        [("app.conf", b"v3".as_slice())],
    );
    assert_eq!(last.data_version(), Some(want));
}

#[tokio::test(start_paused = true)]
async fn dry_run_records_a_reload_request_not_sent() {
    let mut w = world_with(None, |s| s.scope.dry_run = true);
    let p = http_pod();
    w.recording(&p);
    w.agent.on_pod(PodUpdate::Resync(vec![p]));
    let t0 = now();
    w.change_at(t0);
    w.agent.fire_due_at(t0);
    w.settle().await;
    assert!(w.http.calls().is_empty());
    let records = w.records().await;
    assert_eq!(records.len(), 1, "{records:?}");
    let entry = records[0].get(&app()).unwrap();
    assert_eq!(
        (entry.result, entry.action.as_str()),
        (Recorded::DryRun, "http")
    );
}
