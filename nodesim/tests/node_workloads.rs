//! A Deployment rolled on a whole simulated node (root): the real simulated kubelet starts
//! the new pod's process, reports it Ready after its delay, and only then does the old pod
//! get deleted, stopped and finalized — surge-first end to end, never without a Ready pod.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use nodesim::apiserver::WorkloadKind;
use nodesim::kubelet::READY_DELAY_ANNOTATION;
use nodesim::node::SimNode;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;
use test_support::wait::until;

const NS: &str = "apps";
const NODE: &str = "node-w";

fn deployment() -> Deployment {
    let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
    Deployment {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    // Ready some time after start, as an app that loads its config.
                    annotations: Some(BTreeMap::from([(
                        READY_DELAY_ANNOTATION.to_string(),
                        "300".to_string(),
                    )])),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "app".into(),
                        image: Some("example/app:1".into()),
                        command: Some(vec!["sleep".into(), "600".into()]),
                        ..Default::default()
                    }],
                    termination_grace_period_seconds: Some(1),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

fn alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_replica_deployment_rolls_surge_first_on_the_node() {
    let node = SimNode::start(NODE, "nodesim-workloads-", |_| {})
        .await
        .unwrap();
    let api = node.api.clone();
    api.set_nodes(&[NODE]);
    api.apply_deployment(deployment()).unwrap();
    until("the first pod Ready", Duration::from_secs(20), || {
        api.get_deployment(NS, "web")
            .and_then(|d| d.status?.ready_replicas)
            == Some(1)
    })
    .await;
    let old = api.pods_of_workload(WorkloadKind::Deployment, NS, "web");
    assert_eq!(old.len(), 1);
    let old_uid = old[0].metadata.uid.clone().unwrap();
    let old_pid = node
        .kubelet
        .wait_for_pod(&old_uid, Duration::from_secs(10))
        .unwrap()
        .container("app")
        .unwrap()
        .main_pid;
    assert!(alive(old_pid));

    let readiness = api
        .track_readiness(WorkloadKind::Deployment, NS, "web")
        .unwrap();
    api.merge_patch_workload(
        WorkloadKind::Deployment,
        NS,
        "web",
        &json!({"spec": {"template": {"metadata": {"annotations": {
            "kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}}}}}),
    )
    .unwrap();
    until(
        "one new pod, Ready, and the old one gone",
        Duration::from_secs(20),
        || {
            let pods = api.pods_of_workload(WorkloadKind::Deployment, NS, "web");
            pods.len() == 1
                && pods[0].metadata.uid.as_deref() != Some(old_uid.as_str())
                && api
                    .get_deployment(NS, "web")
                    .and_then(|d| d.status)
                    .is_some_and(|s| s.ready_replicas == Some(1) && s.updated_replicas == Some(1))
        },
    )
    .await;
    until("the old process stopped", Duration::from_secs(10), || {
        !alive(old_pid)
    })
    .await;
    let new = &api.pods_of_workload(WorkloadKind::Deployment, NS, "web")[0];
    let new_pid = node
        .kubelet
        .wait_for_pod(
            new.metadata.uid.as_deref().unwrap(),
            Duration::from_secs(10),
        )
        .unwrap()
        .container("app")
        .unwrap()
        .main_pid;
    assert!(alive(new_pid));
    let log = readiness.log();
    assert!(!log.ever_zero_ready(), "{log:?}");
    assert_eq!(log.max_running(), 2, "surged: {log:?}");
}
