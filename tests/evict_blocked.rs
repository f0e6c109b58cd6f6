//! `reloadlet.io/on-blocked` on a simulated node: a PodDisruptionBudget that can never allow
//! an eviction (structural) is told at once and asked about rarely (`wait`), or not asked at
//! all (`rollout`: the change is left to the controller); a transient block is retried as
//! usual; a bad value is refused with a Warning and nothing else. With `reloadlet controller`
//! running, a structural block under `rollout` rolls the owner at once, once.

mod common;
#[path = "support/controller_process.rs"]
mod controller_process;

use common::fixtures::configmap;
use common::*;
use controller_process::ControllerProcess;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use nodesim::apiserver::WorkloadKind;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

const NS: &str = "apps";
/// Fast pacing for the usual retries; the structural retry stays at its 5 minutes.
const FAST: [&str; 4] = [
    "--eviction-backoff",
    "200ms",
    "--eviction-backoff-max",
    "1s",
];
const PLAIN_WORDS: &str = "PodDisruptionBudget web needs 2 of 2 pods healthy: no eviction can \
                           succeed while the workload keeps its size; see reloadlet.io/on-blocked";

fn template(ready_delay_ms: u64, mount: &str, on_blocked: Option<&str>) -> PodTemplateSpec {
    let mut annotations = json!({
        "reloadlet.io/action": "evict",
        "nodesim.reloadlet.io/ready-delay-ms": ready_delay_ms.to_string()
    });
    if let Some(v) = on_blocked {
        annotations["reloadlet.io/on-blocked"] = json!(v);
    }
    serde_json::from_value(json!({
        "metadata": {"labels": {"app": "web"}, "annotations": annotations},
        "spec": {
            "containers": [{"name": "app", "image": "app", "volumeMounts": [{"name": "conf", "mountPath": mount}]}],
            "volumes": [{"name": "conf", "configMap": {"name": "app-conf"}}]
        }
    }))
    .unwrap()
}

fn pdb(spec: serde_json::Value) -> PodDisruptionBudget {
    let mut spec = spec;
    spec["selector"] = json!({"matchLabels": {"app": "web"}});
    serde_json::from_value(json!({"metadata": {"name": "web", "namespace": NS}, "spec": spec}))
        .unwrap()
}

fn uids(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter().filter_map(|p| p.metadata.uid.clone()).collect()
}

fn is_ready(p: &Pod) -> bool {
    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Starts reloadlet and a ReplicaSet of `replicas` on the node; waits until all are Ready,
/// reloadlet knows their volumes, and the budget's status counts them.
async fn replicas(
    node: &mut Node,
    replicas: i32,
    ready_delay_ms: u64,
    on_blocked: Option<&str>,
) -> BTreeSet<String> {
    node.start_agent(&FAST).await;
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v1")]));
    node.api.create_replicaset(
        NS,
        "web",
        replicas,
        template(
            ready_delay_ms,
            &node.path("mnt/conf").display().to_string(),
            on_blocked,
        ),
        NODE,
    );
    let pods = eventually("replicas exist", Duration::from_secs(10), || {
        let pods = node.api.pods_of_replicaset(NS, "web");
        (pods.len() == replicas as usize).then_some(pods)
    })
    .await;
    for p in &pods {
        node.wait_running(NS, p.metadata.name.as_deref().unwrap())
            .await;
    }
    node.wait_tracked(2 * replicas as usize).await;
    eventually("replicas Ready", Duration::from_secs(10), || {
        let ready = node
            .api
            .pods_of_replicaset(NS, "web")
            .iter()
            .filter(|p| is_ready(p))
            .count();
        (ready == replicas as usize).then_some(())
    })
    .await;
    uids(&pods)
}

fn eviction_requests(node: &Node) -> usize {
    node.api
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/eviction"))
        .count()
}

fn events(node: &Node, reason: &str) -> Vec<nodesim::apiserver::RecordedEvent> {
    node.all_events()
        .into_iter()
        .filter(|e| e.reason == reason)
        .collect()
}

/// `reloadlet explain` for a pod of the node, as an operator runs it with their own
/// kubeconfig: the workload part (its ReplicaSet and Deployment) needs `replicasets` get,
/// which the agent's role does not grant (tests/operations.rs runs it as the agent).
fn explain(node: &Node, pod: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_reloadlet"))
        .args(["explain", "--pod", &format!("{NS}/{pod}")])
        .env("KUBECONFIG", node.kubeconfig())
        .env("NODE_NAME", NODE)
        .env_remove("RELOADLET_DRY_RUN")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn a_pod_name(node: &Node) -> String {
    node.api.pods_of_replicaset(NS, "web")[0]
        .metadata
        .name
        .clone()
        .unwrap()
}

fn assert_budgets_held(node: &Node) {
    let violations = node.api.invariant_violations();
    assert!(violations.is_empty(), "{violations:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_on_a_structural_block_warns_at_once_in_plain_words_and_stops_asking() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.create_pdb(pdb(json!({"minAvailable": 2})));
    replicas(&mut node, 2, 300, None).await;
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v2")]));

    let warned = eventually(
        "EvictionBlocked on both pods",
        Duration::from_secs(10),
        || {
            let blocked = events(&node, "EvictionBlocked");
            (blocked.len() >= 2).then_some(blocked)
        },
    )
    .await;
    for e in &warned {
        assert_eq!(e.type_, "Warning");
        assert!(e.note.starts_with(PLAIN_WORDS), "{}", e.note);
        assert!(e.note.contains("will retry every 5m"), "{}", e.note);
    }
    // Each pod was asked about once; the next ask is 5 minutes away.
    let asked = eviction_requests(&node);
    assert_eq!(asked, 2, "one request per pod, then the long wait");
    never("another eviction request", Duration::from_secs(3), || {
        eviction_requests(&node) > asked
    })
    .await;
    assert!(evicted_set(&node).is_empty());
    assert!(node.metric("reloadlet_evictions_pending") >= 2.0);
    assert_budgets_held(&node);
    let text = explain(&node, &a_pod_name(&node));
    for expected in [
        "protected by PodDisruptionBudget web",
        "expected pods 2, desired healthy 2, currently healthy 2, disruptions allowed 0",
        "structural block: PodDisruptionBudget web needs 2 of 2 pods healthy",
        "on a change (on-blocked: wait): Warning EvictionBlocked at once, the eviction asked again every 5m",
    ] {
        assert!(text.contains(expected), "{expected:?} not in:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workload_scaled_up_during_the_long_wait_is_evicted_without_waiting_it_out() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.create_pdb(pdb(json!({"minAvailable": 2})));
    let originals = replicas(&mut node, 2, 300, None).await;
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v2")]));
    eventually(
        "EvictionBlocked on both pods",
        Duration::from_secs(10),
        || (events(&node, "EvictionBlocked").len() >= 2).then_some(()),
    )
    .await;
    // Three replicas, two needed: no longer structural; the 5-minute wait ends.
    assert!(node.api.scale_replicaset(NS, "web", 3));
    eventually(
        "both originals evicted, one at a time",
        Duration::from_secs(60),
        || (evicted_set(&node) == originals).then_some(()),
    )
    .await;
    assert_budgets_held(&node);
}

#[tokio::test(flavor = "multi_thread")]
async fn rollout_on_a_structural_block_sends_no_eviction_request_at_all() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.create_pdb(pdb(json!({"minAvailable": 2})));
    let originals = replicas(&mut node, 2, 0, Some("rollout")).await;
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v2")]));

    let handed = eventually(
        "EvictionHandedOff on both pods",
        Duration::from_secs(10),
        || {
            let handed = events(&node, "EvictionHandedOff");
            (handed.len() >= 2).then_some(handed)
        },
    )
    .await;
    for e in &handed {
        assert_eq!(e.type_, "Normal");
        assert!(e.note.starts_with(PLAIN_WORDS), "{}", e.note);
        assert!(e.note.contains("no eviction sent"), "{}", e.note);
    }
    never(
        "an eviction request reaching the API server",
        Duration::from_secs(2),
        || eviction_requests(&node) > 0,
    )
    .await;
    assert_eq!(node.metric("reloadlet_evictions_pending"), 0.0);
    assert_eq!(
        node.metric("reloadlet_actions_total{action=\"evict\",outcome=\"eviction_handed_off\"}"),
        2.0
    );
    assert_eq!(uids(&node.api.pods_of_replicaset(NS, "web")), originals);
    assert!(events(&node, "EvictionBlocked").is_empty());
    let text = explain(&node, &a_pod_name(&node));
    assert!(
        text.contains("on a change (on-blocked: rollout): no eviction is sent"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transient_block_is_retried_as_usual_and_every_pod_is_evicted() {
    for on_blocked in [None, Some("rollout")] {
        let mut node = Node::start(NodeOptions::default()).await;
        // Three pods, two needed: one eviction at a time, the others wait for the
        // replacement to become Ready (a transient block). 3 s to Ready, so that the other
        // two are asked while it starts even on a loaded machine (with 700 ms, one run under
        // two busy loops asked only after it was Ready, and nothing was refused).
        node.api.create_pdb(pdb(json!({"minAvailable": 2})));
        let originals = replicas(&mut node, 3, 3000, on_blocked).await;
        node.api
            .apply_configmap(configmap(NS, "app-conf", &[("k", "v2")]));
        eventually(
            "all three originals evicted",
            Duration::from_secs(40),
            || (evicted_set(&node) == originals).then_some(()),
        )
        .await;
        assert_budgets_held(&node);
        let blocked = events(&node, "EvictionBlocked");
        assert!(
            !blocked.is_empty(),
            "{on_blocked:?}: some refusals were expected"
        );
        assert!(
            blocked
                .iter()
                .all(|e| !e.note.contains("no eviction can succeed")),
            "{on_blocked:?}: a transient block called structural: {blocked:?}"
        );
        assert!(
            events(&node, "EvictionHandedOff").is_empty(),
            "{on_blocked:?}"
        );
        assert!(
            eviction_requests(&node) > 3,
            "{on_blocked:?}: refusals were retried"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_on_blocked_value_gets_a_warning_and_nothing_else() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.create_pdb(pdb(json!({"minAvailable": 2})));
    let originals = replicas(&mut node, 2, 0, Some("force")).await;
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v2")]));
    let invalid = eventually(
        "InvalidAnnotation warnings",
        Duration::from_secs(10),
        || {
            let e = events(&node, "InvalidAnnotation");
            (!e.is_empty()).then_some(e)
        },
    )
    .await;
    for e in &invalid {
        assert_eq!(e.type_, "Warning");
        assert!(
            e.note.contains("reloadlet.io/on-blocked") && e.note.contains("\"force\""),
            "{}",
            e.note
        );
    }
    never("an eviction request", Duration::from_secs(2), || {
        eviction_requests(&node) > 0
    })
    .await;
    assert_eq!(uids(&node.api.pods_of_replicaset(NS, "web")), originals);
    assert!(events(&node, "EvictionBlocked").is_empty());
    assert!(events(&node, "EvictionHandedOff").is_empty());
}

/// PATCH requests to the Deployment `name`.
fn deployment_patches(node: &Node, name: &str) -> usize {
    node.api
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with(&format!("/deployments/{name}")))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn rollout_on_a_structural_block_rolls_the_deployment_once_within_seconds_and_evicts_nothing()
{
    if !root_or_skip() {
        return;
    }
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.set_nodes(&[NODE]);
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v1")]));
    // One replica, minAvailable 1: no eviction can ever succeed. The default blocked-timeout
    // (10 m) is far beyond this test: a rollout within seconds comes from the structural
    // block alone.
    node.api.create_pdb(pdb(json!({"minAvailable": 1})));
    let template = template(
        500,
        &node.path("mnt/conf").display().to_string(),
        Some("rollout"),
    );
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": template}
    }))
    .unwrap();
    node.api.apply_deployment(deployment).unwrap();
    node.start_agent(&FAST).await;
    let controller = ControllerProcess::start(&node, &["--leader-elect=false"], &[]).await;
    let live = |node: &Node| -> Vec<Pod> {
        node.api
            .pods_of_workload(WorkloadKind::Deployment, NS, "web")
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && is_ready(p))
            .collect()
    };
    let old = eventually(
        "one Ready pod with its rollout baseline, the budget counting it",
        Duration::from_secs(30),
        || {
            let pods = live(&node);
            let baseline = pods.len() == 1
                && pods[0]
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key("reloadlet.io/rollout-baseline"));
            let status = node.api.get_pdb(NS, "web").and_then(|p| p.status);
            let counted = status.is_some_and(|s| s.expected_pods == 1 && s.current_healthy == 1);
            (baseline && counted).then(|| uids(&pods))
        },
    )
    .await;
    node.wait_tracked(2).await;
    let readiness = node
        .api
        .track_readiness(WorkloadKind::Deployment, NS, "web")
        .unwrap();

    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v2")]));
    until(
        "the Deployment patched within seconds of the change",
        Duration::from_secs(10),
        || deployment_patches(&node, "web") >= 1,
    )
    .await;
    eventually(
        "the old pod replaced by a Ready one",
        Duration::from_secs(30),
        || {
            let ids = uids(&live(&node));
            (ids.len() == 1 && ids.is_disjoint(&old)).then_some(())
        },
    )
    .await;
    never("a second rollout", CONTROLLER_QUIET, || {
        deployment_patches(&node, "web") > 1
    })
    .await;
    assert_eq!(eviction_requests(&node), 0, "no eviction was ever sent");
    let rolled: Vec<_> = events(&node, "RolloutRequested");
    assert_eq!(rolled.len(), 1, "{rolled:?}");
    assert_budgets_held(&node);
    assert!(!readiness.log().ever_zero_ready(), "{:?}", readiness.log());
    controller.stop().await;
}
