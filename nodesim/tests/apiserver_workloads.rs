//! apps/v1 Deployments, StatefulSets and DaemonSets through the real kube client, and
//! their controllers rolling a changed template as kube-controller-manager does: what a
//! rollout looks like from the API (pods, ReplicaSets, statuses, Ready pods at every
//! moment through `ApiServer::track_readiness`).

mod apiserver_support;

use apiserver_support::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy, Deployment, DeploymentSpec,
    DeploymentStrategy, RollingUpdateDaemonSet, StatefulSet, StatefulSetSpec,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{watcher, WatchStreamExt};
use nodesim::apiserver::{
    ApiChange, ApiServer, ApiServerOptions, Rollout, RolloutSpec, WorkloadKind,
};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;
use test_support::wait::until;
use tokio::task::JoinHandle;

const NS: &str = "apps";

fn selector(app: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels(&[("app", app)])),
        ..Default::default()
    }
}

fn deployment(name: &str, replicas: i32, strategy: Option<DeploymentStrategy>) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: selector(name),
            template: template(&[("app", name)]),
            strategy,
            ..Default::default()
        }),
        status: None,
    }
}

fn statefulset(name: &str, replicas: i32, strategy: &str) -> StatefulSet {
    StatefulSet {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            selector: selector(name),
            template: template(&[("app", name)]),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some(strategy.into()),
                rolling_update: None,
            }),
            ..Default::default()
        }),
        status: None,
    }
}

fn daemonset(name: &str, strategy: DaemonSetUpdateStrategy) -> DaemonSet {
    DaemonSet {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: Some(DaemonSetSpec {
            selector: selector(name),
            template: template(&[("app", name)]),
            update_strategy: Some(strategy),
            ..Default::default()
        }),
        status: None,
    }
}

/// What `kubectl rollout restart` changes (as a merge patch).
fn restart_patch(at: &str) -> serde_json::Value {
    json!({"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": at}}}}})
}

fn restarted_at(p: &Pod) -> Option<String> {
    p.metadata
        .annotations
        .as_ref()?
        .get("kubectl.kubernetes.io/restartedAt")
        .cloned()
}

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

fn terminating(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

/// A stand-in kubelet: every new pod becomes Running and Ready, every terminating pod
/// is removed. Started before the workloads, so it sees every pod.
fn kubelet(server: &ApiServer) -> JoinHandle<()> {
    let mut rx = server.subscribe();
    let server = server.clone();
    tokio::spawn(async move {
        while let Ok(change) = rx.recv().await {
            let ApiChange::PodUpserted(pod) = change else {
                continue;
            };
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
            if terminating(&pod) {
                server.finalize_pod(&ns, &name(&pod));
            } else if phase.as_deref() == Some("Pending") {
                server.set_pod_status(&ns, &name(&pod), running(true));
            }
        }
    })
}

fn all_pods_of(server: &ApiServer, kind: WorkloadKind, n: &str) -> Vec<Pod> {
    server.pods_of_workload(kind, NS, n)
}

/// The workload's pods all carry the restart annotation, are Ready, and number `n`.
fn rolled(server: &ApiServer, kind: WorkloadKind, w: &str, n: usize, at: &str) -> bool {
    let pods = all_pods_of(server, kind, w);
    pods.len() == n
        && pods.iter().all(|p| {
            restarted_at(p).as_deref() == Some(at)
                && !terminating(p)
                && p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
}

#[tokio::test]
async fn one_replica_deployment_rolls_surge_first_and_is_never_without_a_ready_pod() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<Deployment> = Api::namespaced(client(&server), NS);
    let created = api
        .create(&PostParams::default(), &deployment("web", 1, None))
        .await
        .unwrap();
    // Defaults as the API server sets them.
    let strategy = created.spec.as_ref().unwrap().strategy.clone().unwrap();
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    let ru = strategy.rolling_update.unwrap();
    assert_eq!(ru.max_surge, Some(IntOrString::String("25%".into())));
    assert_eq!(ru.max_unavailable, Some(IntOrString::String("25%".into())));
    assert_eq!(created.metadata.generation, Some(1));

    // No kubelet: the test plays it, one step at a time.
    let first = all_pods_of(&server, WorkloadKind::Deployment, "web");
    assert_eq!(first.len(), 1);
    let old = name(&first[0]);
    let owner = &first[0].metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("ReplicaSet", Some(true))
    );
    // The pod's ReplicaSet is served and controlled by the Deployment.
    let rs: Api<k8s_openapi::api::apps::v1::ReplicaSet> = Api::namespaced(client(&server), NS);
    let old_rs = rs.get(&owner.name).await.unwrap();
    let rs_owner = &old_rs.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            rs_owner.kind.as_str(),
            rs_owner.name.as_str(),
            rs_owner.controller
        ),
        ("Deployment", "web", Some(true))
    );
    assert_eq!(rs_owner.uid, created.metadata.uid.clone().unwrap());
    let hash = old_rs.metadata.labels.as_ref().unwrap()["pod-template-hash"].clone();
    assert_eq!(owner.name, format!("web-{hash}"));
    server.set_pod_status(NS, &old, running(true));
    let readiness = server
        .track_readiness(WorkloadKind::Deployment, NS, "web")
        .unwrap();

    let patched = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(restart_patch("2026-01-01T00:00:00Z")),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(2), "one bump per change");

    // Surge: a new pod starts beside the old one, which keeps running.
    let pods = all_pods_of(&server, WorkloadKind::Deployment, "web");
    assert_eq!(pods.len(), 2, "{pods:?}");
    let new = pods.iter().find(|p| name(p) != old).unwrap();
    assert!(!terminating(pods.iter().find(|p| name(p) == old).unwrap()));
    assert_eq!(restarted_at(new).as_deref(), Some("2026-01-01T00:00:00Z"));
    let sets = server.replicasets_of_deployment(NS, "web");
    assert_eq!(sets.len(), 2);
    assert_eq!((sets[0].1, sets[1].1), (1, 1));

    // The old pod goes only once the new one is Ready.
    let new = name(new);
    server.set_pod_status(NS, &new, running(false));
    assert!(!terminating(&server.get_pod(NS, &old).unwrap()));
    server.set_pod_status(NS, &new, running(true));
    assert!(terminating(&server.get_pod(NS, &old).unwrap()));
    server.finalize_pod(NS, &old);

    let pods = all_pods_of(&server, WorkloadKind::Deployment, "web");
    assert_eq!(pods.iter().map(name).collect::<Vec<_>>(), vec![new]);
    let log = readiness.log();
    assert!(!log.ever_zero_ready(), "{log:?}");
    assert_eq!(log.max_running(), 2);
    let status = api.get("web").await.unwrap().status.unwrap();
    assert_eq!(status.observed_generation, Some(2));
    assert_eq!(
        (
            status.replicas,
            status.updated_replicas,
            status.ready_replicas,
            status.available_replicas
        ),
        (Some(1), Some(1), Some(1), Some(1))
    );
    assert_eq!(
        server.replicasets_of_deployment(NS, "web")[0].1,
        0,
        "the old ReplicaSet is scaled to 0"
    );
}

#[tokio::test]
async fn recreate_has_a_moment_without_a_ready_pod() {
    let server = ApiServer::start().await.unwrap();
    let _kubelet = kubelet(&server);
    let strategy = DeploymentStrategy {
        type_: Some("Recreate".into()),
        rolling_update: None,
    };
    server
        .apply_deployment(deployment("db", 2, Some(strategy)))
        .unwrap();
    until("2 ready pods", Duration::from_secs(10), || {
        server
            .get_deployment(NS, "db")
            .and_then(|d| d.status?.ready_replicas)
            == Some(2)
    })
    .await;
    let readiness = server
        .track_readiness(WorkloadKind::Deployment, NS, "db")
        .unwrap();
    server
        .merge_patch_workload(WorkloadKind::Deployment, NS, "db", &restart_patch("t1"))
        .unwrap();
    until("the rollout ends", Duration::from_secs(10), || {
        rolled(&server, WorkloadKind::Deployment, "db", 2, "t1")
    })
    .await;
    let log = readiness.log();
    assert!(log.ever_zero_ready(), "{log:?}");
    assert_eq!(log.max_running(), 2, "Recreate never surges: {log:?}");
    assert!(log
        .samples
        .iter()
        .any(|s| s.running == 0 && s.terminating == 0));
}

#[tokio::test]
async fn three_replicas_roll_within_surge_and_unavailable() {
    let server = ApiServer::start().await.unwrap();
    server.set_nodes(&["node-a", "node-b", "node-c"]);
    let _kubelet = kubelet(&server);
    server.apply_deployment(deployment("api", 3, None)).unwrap();
    until("3 ready pods", Duration::from_secs(10), || {
        rolled_count(&server, "api") == 3
    })
    .await;
    let before: BTreeSet<String> = all_pods_of(&server, WorkloadKind::Deployment, "api")
        .iter()
        .map(name)
        .collect();
    let readiness = server
        .track_readiness(WorkloadKind::Deployment, NS, "api")
        .unwrap();
    server
        .merge_patch_workload(WorkloadKind::Deployment, NS, "api", &restart_patch("t1"))
        .unwrap();
    until("the rollout ends", Duration::from_secs(10), || {
        rolled(&server, WorkloadKind::Deployment, "api", 3, "t1")
    })
    .await;
    let after: BTreeSet<String> = all_pods_of(&server, WorkloadKind::Deployment, "api")
        .iter()
        .map(name)
        .collect();
    assert!(before.is_disjoint(&after), "every pod replaced");
    // Spread over the three nodes, as a scheduler would.
    let nodes: BTreeSet<String> = all_pods_of(&server, WorkloadKind::Deployment, "api")
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(nodes.len(), 3, "{nodes:?}");
    // 25%/25% of 3: surge 1 (rounded up), unavailable 0 (rounded down).
    let log = readiness.log();
    assert_eq!(log.min_ready(), Some(3), "{log:?}");
    assert_eq!(log.max_running(), 4, "{log:?}");
}

fn rolled_count(server: &ApiServer, d: &str) -> i32 {
    server
        .get_deployment(NS, d)
        .and_then(|d| d.status?.ready_replicas)
        .unwrap_or(0)
}

#[tokio::test]
async fn statefulset_replaces_one_pod_at_a_time_from_the_highest_ordinal() {
    let server = ApiServer::start().await.unwrap();
    let _kubelet = kubelet(&server);
    let mut changes = server.subscribe();
    server
        .apply_statefulset(statefulset("db", 3, "RollingUpdate"))
        .unwrap();
    until("3 ready pods", Duration::from_secs(10), || {
        server
            .get_statefulset(NS, "db")
            .and_then(|s| s.status?.ready_replicas)
            == Some(3)
    })
    .await;
    // Created in order.
    let mut created = Vec::new();
    while let Ok(c) = changes.try_recv() {
        if let ApiChange::PodUpserted(p) = c {
            if !created.contains(&name(&p)) {
                created.push(name(&p));
            }
        }
    }
    assert_eq!(created, vec!["db-0", "db-1", "db-2"]);
    let readiness = server
        .track_readiness(WorkloadKind::StatefulSet, NS, "db")
        .unwrap();
    server
        .merge_patch_workload(WorkloadKind::StatefulSet, NS, "db", &restart_patch("t1"))
        .unwrap();
    until("the rollout ends", Duration::from_secs(10), || {
        rolled(&server, WorkloadKind::StatefulSet, "db", 3, "t1")
    })
    .await;
    let mut deleted = Vec::new();
    while let Ok(c) = changes.try_recv() {
        if let ApiChange::PodDeleted(p) = c {
            deleted.push(name(&p));
        }
    }
    assert_eq!(deleted, vec!["db-2", "db-1", "db-0"]);
    let log = readiness.log();
    assert_eq!(log.min_ready(), Some(2), "one at a time: {log:?}");
    assert_eq!(log.max_running(), 3, "no surge: {log:?}");
    let status = server.get_statefulset(NS, "db").unwrap().status.unwrap();
    assert_eq!(status.current_revision, status.update_revision);
    assert_eq!(status.updated_replicas, Some(3));
    let pod = server.get_pod(NS, "db-0").unwrap();
    assert_eq!(
        pod.metadata.labels.as_ref().unwrap()["controller-revision-hash"],
        status.update_revision.unwrap()
    );
}

#[tokio::test]
async fn on_delete_never_replaces_a_running_pod() {
    let server = ApiServer::start().await.unwrap();
    let _kubelet = kubelet(&server);
    server
        .apply_statefulset(statefulset("db", 2, "OnDelete"))
        .unwrap();
    let on_delete = DaemonSetUpdateStrategy {
        type_: Some("OnDelete".into()),
        rolling_update: None,
    };
    server
        .apply_daemonset(daemonset("agent", on_delete))
        .unwrap();
    until("pods ready", Duration::from_secs(10), || {
        server
            .get_statefulset(NS, "db")
            .and_then(|s| s.status?.ready_replicas)
            == Some(2)
            && server
                .get_daemonset(NS, "agent")
                .and_then(|s| s.status)
                .is_some_and(|s| s.number_ready == 1)
    })
    .await;
    let uids = |kind, w| -> BTreeSet<String> {
        all_pods_of(&server, kind, w)
            .iter()
            .filter_map(|p| p.metadata.uid.clone())
            .collect()
    };
    let (sts_before, ds_before) = (
        uids(WorkloadKind::StatefulSet, "db"),
        uids(WorkloadKind::DaemonSet, "agent"),
    );
    server
        .merge_patch_workload(WorkloadKind::StatefulSet, NS, "db", &restart_patch("t1"))
        .unwrap();
    server
        .merge_patch_workload(WorkloadKind::DaemonSet, NS, "agent", &restart_patch("t1"))
        .unwrap();
    // The controllers saw the change (status observes the new generation and revision)…
    let sts = server.get_statefulset(NS, "db").unwrap().status.unwrap();
    assert_eq!(sts.observed_generation, Some(2));
    assert_ne!(sts.current_revision, sts.update_revision);
    assert_eq!(sts.updated_replicas, Some(0));
    let ds = server.get_daemonset(NS, "agent").unwrap().status.unwrap();
    assert_eq!(ds.observed_generation, Some(2));
    assert_eq!(ds.updated_number_scheduled, Some(0));
    // …and replaced nothing.
    assert_eq!(uids(WorkloadKind::StatefulSet, "db"), sts_before);
    assert_eq!(uids(WorkloadKind::DaemonSet, "agent"), ds_before);
    // A pod deleted by hand comes back at the new revision.
    server.delete_pod(NS, "db-1");
    until("db-1 recreated", Duration::from_secs(10), || {
        server
            .get_pod(NS, "db-1")
            .is_some_and(|p| restarted_at(&p).as_deref() == Some("t1"))
    })
    .await;
    assert!(restarted_at(&server.get_pod(NS, "db-0").unwrap()).is_none());
}

#[tokio::test]
async fn daemonset_rolls_delete_first_by_default_and_surge_first_with_max_surge() {
    let server = ApiServer::start().await.unwrap();
    server.set_nodes(&["node-a", "node-b"]);
    let _kubelet = kubelet(&server);
    server
        .apply_daemonset(daemonset("agent", DaemonSetUpdateStrategy::default()))
        .unwrap();
    let surge = DaemonSetUpdateStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: Some(RollingUpdateDaemonSet {
            max_surge: Some(IntOrString::Int(1)),
            max_unavailable: Some(IntOrString::Int(0)),
        }),
    };
    server.apply_daemonset(daemonset("proxy", surge)).unwrap();
    let ready = |n: &str| {
        server
            .get_daemonset(NS, n)
            .and_then(|d| d.status)
            .is_some_and(|s| s.number_ready == 2 && s.desired_number_scheduled == 2)
    };
    until("one ready pod per node", Duration::from_secs(10), || {
        ready("agent") && ready("proxy")
    })
    .await;
    let nodes: BTreeSet<String> = all_pods_of(&server, WorkloadKind::DaemonSet, "agent")
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(nodes.len(), 2);
    let agent = server
        .track_readiness(WorkloadKind::DaemonSet, NS, "agent")
        .unwrap();
    let proxy = server
        .track_readiness(WorkloadKind::DaemonSet, NS, "proxy")
        .unwrap();
    for n in ["agent", "proxy"] {
        server
            .merge_patch_workload(WorkloadKind::DaemonSet, NS, n, &restart_patch("t1"))
            .unwrap();
    }
    until("both rolled", Duration::from_secs(10), || {
        rolled(&server, WorkloadKind::DaemonSet, "agent", 2, "t1")
            && rolled(&server, WorkloadKind::DaemonSet, "proxy", 2, "t1")
    })
    .await;
    // maxUnavailable 1 of 2 nodes: one node at a time, deleted before its replacement.
    let log = agent.log();
    assert_eq!(log.min_ready(), Some(1), "{log:?}");
    assert_eq!(log.max_running(), 2, "{log:?}");
    // maxSurge 1: the new pod first, never fewer than 2 Ready.
    let log = proxy.log();
    assert_eq!(log.min_ready(), Some(2), "{log:?}");
    assert_eq!(log.max_running(), 3, "{log:?}");
}

// kube 5 deprecates `metadata_watcher` for `watcher` over `Api<PartialObjectMeta<K>>`;
// both send the same metadata-only requests, and reloadlet may use either.
#[allow(deprecated)]
#[tokio::test]
async fn deployments_are_listed_and_watched_metadata_only() {
    let server = ApiServer::start().await.unwrap();
    server.apply_deployment(deployment("web", 1, None)).unwrap();
    let mut other = deployment("batch", 1, None);
    other.metadata.labels = Some(labels(&[("tier", "batch")]));
    server.apply_deployment(other).unwrap();
    let api: Api<Deployment> = Api::all(client(&server));
    let listed = api
        .list_metadata(&ListParams::default().labels("tier=batch"))
        .await
        .unwrap();
    assert_eq!(
        listed
            .items
            .iter()
            .map(|d| d.metadata.name.clone())
            .collect::<Vec<_>>(),
        vec![Some("batch".to_string())]
    );
    let mut stream = kube::runtime::metadata_watcher(api, watcher::Config::default())
        .applied_objects()
        .boxed();
    let mut seen = BTreeSet::new();
    while seen.len() < 2 {
        let d: PartialObjectMeta<Deployment> = stream.try_next().await.unwrap().unwrap();
        seen.insert(d.metadata.name.clone().unwrap());
    }
    let mut annotated = deployment("web", 1, None);
    annotated.metadata.annotations = Some(labels(&[("reloader.stakater.com/auto", "true")]));
    server.apply_deployment(annotated).unwrap();
    let next = loop {
        let d = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
            .await
            .expect("the change is watched")
            .unwrap()
            .unwrap();
        if d.metadata.annotations.is_some() {
            break d;
        }
    };
    assert_eq!(next.metadata.name.as_deref(), Some("web"));
    // Metadata only: the requests asked for PartialObjectMetadata(List).
    let reqs = server.requests();
    assert!(reqs
        .iter()
        .filter(|r| r.path == "/apis/apps/v1/deployments")
        .all(|r| r.accept.contains("as=PartialObjectMetadata")));
}

#[tokio::test]
async fn a_patch_bumps_the_generation_once_and_a_no_op_not_at_all() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<StatefulSet> = Api::namespaced(client(&server), NS);
    api.create(
        &PostParams::default(),
        &statefulset("db", 1, "RollingUpdate"),
    )
    .await
    .unwrap();
    let pp = PatchParams::default();
    let labelled = api
        .patch(
            "db",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        labelled.metadata.generation,
        Some(1),
        "metadata is not spec"
    );
    let rolled = api
        .patch("db", &pp, &Patch::Strategic(restart_patch("t1")))
        .await
        .unwrap();
    assert_eq!(rolled.metadata.generation, Some(2));
    // (The controller has written its status since: compare with what is stored now.)
    let rolled = api.get("db").await.unwrap();
    assert_eq!(rolled.metadata.generation, Some(2));
    let again = api
        .patch("db", &pp, &Patch::Merge(restart_patch("t1")))
        .await
        .unwrap();
    assert_eq!(again.metadata.generation, Some(2));
    assert_eq!(
        again.metadata.resource_version, rolled.metadata.resource_version,
        "a patch that changes nothing writes nothing"
    );
    // A client cannot write status through the main resource.
    let patched = api
        .patch(
            "db",
            &pp,
            &Patch::Merge(json!({"status": {"observedGeneration": 99}})),
        )
        .await
        .unwrap();
    assert_ne!(patched.status.unwrap().observed_generation, Some(99));
    // A selector that does not select the template is refused.
    let mut bad = statefulset("bad", 1, "RollingUpdate");
    bad.spec.as_mut().unwrap().selector = selector("other");
    let err = api.create(&PostParams::default(), &bad).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err:?}"
    );
}

#[tokio::test]
async fn deleting_a_deployment_deletes_its_replicasets_and_pods() {
    let server = ApiServer::start().await.unwrap();
    let _kubelet = kubelet(&server);
    server.apply_deployment(deployment("web", 2, None)).unwrap();
    until("2 ready", Duration::from_secs(10), || {
        rolled_count(&server, "web") == 2
    })
    .await;
    let pods: Vec<String> = all_pods_of(&server, WorkloadKind::Deployment, "web")
        .iter()
        .map(name)
        .collect();
    let api: Api<Deployment> = Api::namespaced(client(&server), NS);
    api.delete("web", &Default::default()).await.unwrap();
    until("pods gone", Duration::from_secs(10), || {
        pods.iter().all(|p| server.get_pod(NS, p).is_none())
    })
    .await;
    assert!(server.replicasets_of_deployment(NS, "web").is_empty());
}

fn rollout(name: &str, replicas: i32) -> Rollout {
    Rollout {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: Some(RolloutSpec {
            replicas: Some(replicas),
            selector: selector(name),
            template: template(&[("app", name)]),
            rest: [("strategy".to_string(), json!({"canary": {}}))].into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn argo_rollouts_are_unknown_unless_enabled() {
    let server = ApiServer::start().await.unwrap();
    let c = client(&server);
    let req = get_request;
    let err = c
        .request_text(req("/apis/argoproj.io/v1alpha1"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );
    let api: Api<Rollout> = Api::namespaced(c, NS);
    let err = api.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );

    let server = ApiServer::start_with(ApiServerOptions {
        argo_rollouts: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let text = client(&server)
        .request_text(req("/apis/argoproj.io/v1alpha1"))
        .await
        .unwrap();
    assert!(text.contains("\"rollouts\""), "{text}");
    // kube's discovery of the pinned group finds the kind.
    let gv = kube::core::GroupVersion::gv("argoproj.io", "v1alpha1");
    let group = kube::discovery::pinned_group(&client(&server), &gv)
        .await
        .unwrap();
    let (ar, caps) = group.recommended_kind("Rollout").unwrap();
    assert_eq!(ar.plural, "rollouts");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
}

fn get_request(path: &str) -> axum::http::Request<Vec<u8>> {
    axum::http::Request::get(path).body(Vec::new()).unwrap()
}

#[tokio::test]
async fn a_rollouts_restart_at_replaces_older_pods_one_at_a_time() {
    let server = ApiServer::start_with(ApiServerOptions {
        argo_rollouts: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let _kubelet = kubelet(&server);
    let api: Api<Rollout> = Api::namespaced(client(&server), NS);
    let created = api
        .create(&PostParams::default(), &rollout("web", 2))
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    until("2 ready pods", Duration::from_secs(10), || {
        server
            .get_rollout(NS, "web")
            .and_then(|r| r.status?.get("readyReplicas")?.as_i64())
            == Some(2)
    })
    .await;
    let before: BTreeSet<String> = all_pods_of(&server, WorkloadKind::Rollout, "web")
        .iter()
        .map(name)
        .collect();
    let pod = server.get_pod(NS, before.iter().next().unwrap()).unwrap();
    let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
    let rs: Api<k8s_openapi::api::apps::v1::ReplicaSet> = Api::namespaced(client(&server), NS);
    let rs_owner = rs
        .get(&owner.name)
        .await
        .unwrap()
        .metadata
        .owner_references
        .unwrap();
    assert_eq!(
        (rs_owner[0].api_version.as_str(), rs_owner[0].kind.as_str()),
        ("argoproj.io/v1alpha1", "Rollout")
    );
    let readiness = server
        .track_readiness(WorkloadKind::Rollout, NS, "web")
        .unwrap();
    // `metav1.Time` has whole seconds: restartAt must fall in a later second than the
    // pods' creation to be after it.
    let created = all_pods_of(&server, WorkloadKind::Rollout, "web")
        .iter()
        .filter_map(|p| Some(p.metadata.creation_timestamp.clone()?.0.as_second()))
        .max()
        .unwrap();
    until("the next second", Duration::from_secs(5), || {
        k8s_openapi::jiff::Timestamp::now().as_second() > created
    })
    .await;
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let patched = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"restartAt": now}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(2));
    until("restartedAt recorded", Duration::from_secs(10), || {
        server
            .get_rollout(NS, "web")
            .and_then(|r| r.status?.get("restartedAt").cloned())
            == Some(serde_json::to_value(&now).unwrap())
    })
    .await;
    let after: BTreeSet<String> = all_pods_of(&server, WorkloadKind::Rollout, "web")
        .iter()
        .map(name)
        .collect();
    assert_eq!(after.len(), 2);
    assert!(before.is_disjoint(&after), "{before:?} {after:?}");
    let log = readiness.log();
    assert_eq!(log.min_ready(), Some(1), "one at a time: {log:?}");
    assert_eq!(log.max_running(), 2, "{log:?}");
}

#[tokio::test]
async fn a_partition_keeps_lower_ordinals_and_a_paused_deployment_does_not_roll() {
    let server = ApiServer::start().await.unwrap();
    let _kubelet = kubelet(&server);
    let mut set = statefulset("db", 3, "RollingUpdate");
    set.spec.as_mut().unwrap().update_strategy = Some(StatefulSetUpdateStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: Some(
            k8s_openapi::api::apps::v1::RollingUpdateStatefulSetStrategy {
                partition: Some(2),
                max_unavailable: None,
            },
        ),
    });
    server.apply_statefulset(set).unwrap();
    let mut paused = deployment("web", 1, None);
    paused.spec.as_mut().unwrap().paused = Some(true);
    server.apply_deployment(paused).unwrap();
    until("ready", Duration::from_secs(10), || {
        server
            .get_statefulset(NS, "db")
            .and_then(|s| s.status?.ready_replicas)
            == Some(3)
    })
    .await;
    // Paused from the start: no ReplicaSet, no pod.
    assert!(server.replicasets_of_deployment(NS, "web").is_empty());
    server
        .merge_patch_workload(WorkloadKind::StatefulSet, NS, "db", &restart_patch("t1"))
        .unwrap();
    until("db-2 replaced", Duration::from_secs(10), || {
        server
            .get_pod(NS, "db-2")
            .is_some_and(|p| restarted_at(&p).as_deref() == Some("t1") && !terminating(&p))
            && server
                .get_statefulset(NS, "db")
                .and_then(|s| s.status?.ready_replicas)
                == Some(3)
    })
    .await;
    for ord in [0, 1] {
        let p = server.get_pod(NS, &format!("db-{ord}")).unwrap();
        assert!(
            restarted_at(&p).is_none(),
            "db-{ord} is below the partition"
        );
    }
    let status = server.get_statefulset(NS, "db").unwrap().status.unwrap();
    assert_eq!(status.updated_replicas, Some(1));
    assert_ne!(status.current_revision, status.update_revision);
}
