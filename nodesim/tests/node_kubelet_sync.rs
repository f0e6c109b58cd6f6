//! The simulated kubelet's faithful sync timing (root): a ConfigMap change reaches a pod's
//! volume only when the pod syncs — at once after a semantic change of the pod (an
//! annotation), never for a status-only change, and otherwise at the periodic sync.

use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, Pod, PodCondition, PodSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nodesim::kubelet::SyncReason;
use nodesim::kubelet_sync::{POPULATOR_PERIOD, RECONCILER_PERIOD};
use nodesim::node::SimNode;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use test_support::wait::eventually_blocking;

fn configmap(value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some("app-cfg".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("app.conf".into(), value.into())])),
        ..Default::default()
    }
}

fn pod(node: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            termination_grace_period_seconds: Some(1),
            containers: vec![Container {
                name: "app".into(),
                command: Some(vec!["sleep".into(), "3600".into()]),
                volume_mounts: Some(vec![VolumeMount {
                    name: "config".into(),
                    mount_path: "/etc/app".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }],
            volumes: Some(vec![Volume {
                name: "config".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: "app-cfg".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

struct Running {
    node: SimNode,
    uid: String,
    file: PathBuf,
}

impl Running {
    async fn start(sync_frequency: Duration) -> Running {
        let node = SimNode::start("node-sync", "nodesim-sync-", |o| {
            *o = o.clone().faithful(sync_frequency);
        })
        .await
        .unwrap();
        node.api.apply_configmap(configmap("v1"));
        let created = node.api.create_pod(pod("node-sync"));
        let uid = created.metadata.uid.unwrap();
        node.kubelet
            .wait_for_pod(&uid, Duration::from_secs(20))
            .expect("the pod runs");
        // The sync right after Pending → Running (pod_workers.go completeWork).
        let phase_sync =
            eventually_blocking("the phase-transition sync", Duration::from_secs(10), || {
                node.kubelet
                    .syncs(&uid)
                    .iter()
                    .find(|s| s.reason == SyncReason::PhaseTransition)
                    .map(|s| s.at)
            });
        // Its re-projection by the volume manager: at most one populator and one reconciler
        // period after it (`kubelet_sync::remount_at`), so a change made later is projected
        // by a later sync only.
        let remounted = phase_sync + POPULATOR_PERIOD + RECONCILER_PERIOD;
        eventually_blocking(
            "the phase-transition sync's remount",
            Duration::from_secs(10),
            || (Instant::now() > remounted).then_some(()),
        );
        let file = node.kubelet_root().join(format!(
            "pods/{uid}/volumes/kubernetes.io~configmap/config/app.conf"
        ));
        Running { node, uid, file }
    }

    fn content(&self) -> String {
        std::fs::read_to_string(&self.file).unwrap_or_default()
    }

    /// A status-only change of the pod, and the wait until the kubelet has seen it:
    /// every change before it (the ConfigMap's) has been handled too.
    fn status_only_change_seen(&self) {
        let mut status = self
            .node
            .api
            .get_pod("default", "web")
            .unwrap()
            .status
            .unwrap();
        status
            .conditions
            .get_or_insert_with(Vec::new)
            .push(PodCondition {
                type_: "example.com/Probe".into(),
                status: "True".into(),
                ..Default::default()
            });
        self.node.api.set_pod_status("default", "web", status);
        let rv: u64 = self.node.api.resource_version();
        eventually_blocking(
            "the kubelet sees the status change",
            Duration::from_secs(10),
            || {
                self.node
                    .kubelet
                    .observed_resource_version(&self.uid)
                    .and_then(|v| v.parse::<u64>().ok())
                    .filter(|v| *v >= rv)
            },
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_change_waits_for_the_pods_sync_which_an_annotation_triggers() {
    // 60 s: no periodic sync during this test.
    let r = Running::start(Duration::from_secs(60)).await;
    assert_eq!(r.content(), "v1");
    let syncs_before = r.node.kubelet.syncs(&r.uid).len();

    r.node.api.apply_configmap(configmap("v2"));
    r.status_only_change_seen();
    assert_eq!(
        r.content(),
        "v1",
        "the kubelet projects a ConfigMap change only when it syncs the pod"
    );
    assert_eq!(
        r.node.kubelet.syncs(&r.uid).len(),
        syncs_before,
        "a status-only change does not sync the pod"
    );

    r.node
        .api
        .merge_patch_pod(
            "default",
            "web",
            &json!({"metadata": {"annotations": {"reloadlet.io/projection-nudge": "configmap/app-cfg@1"}}}),
        )
        .unwrap();
    eventually_blocking(
        "the nudged pod's projection",
        Duration::from_secs(10),
        || (r.content() == "v2").then_some(()),
    );
    let syncs = r.node.kubelet.syncs(&r.uid);
    assert_eq!(syncs.last().unwrap().reason, SyncReason::PodUpdate);
    assert_eq!(syncs.len(), syncs_before + 1);
    // The volume manager's pass after the sync swapped the one volume, once.
    let swaps = r.node.kubelet.swaps(&r.uid);
    assert_eq!(
        swaps.iter().map(|s| s.volume.as_str()).collect::<Vec<_>>(),
        ["config"],
        "{swaps:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_pod_change_the_periodic_sync_projects_it() {
    let freq = Duration::from_secs(2);
    let r = Running::start(freq).await;
    let changed_at = Instant::now();
    r.node.api.apply_configmap(configmap("v2"));
    r.status_only_change_seen();
    let synced_since = |r: &Running| {
        r.node
            .kubelet
            .syncs(&r.uid)
            .iter()
            .any(|s| s.at >= changed_at)
    };
    // Unless the periodic sync already came, nothing is projected yet.
    assert!(r.content() == "v1" || synced_since(&r));
    eventually_blocking("the periodic sync", Duration::from_secs(15), || {
        (r.content() == "v2").then_some(())
    });
    let syncs = r.node.kubelet.syncs(&r.uid);
    let after: Vec<_> = syncs.iter().filter(|s| s.at >= changed_at).collect();
    assert!(!after.is_empty());
    assert!(
        after.iter().all(|s| s.reason == SyncReason::Periodic),
        "{syncs:?}"
    );
    // The timer restarts after every sync and waits at least syncFrequency.
    eventually_blocking("a second periodic sync", Duration::from_secs(15), || {
        (r.node.kubelet.syncs(&r.uid).len() >= 4).then_some(())
    });
    let syncs = r.node.kubelet.syncs(&r.uid);
    assert_eq!(syncs[0].reason, SyncReason::Start);
    assert_eq!(syncs[1].reason, SyncReason::PhaseTransition);
    for pair in syncs[1..].windows(2) {
        assert!(pair[1].at.duration_since(pair[0].at) >= freq, "{syncs:?}");
    }
}
