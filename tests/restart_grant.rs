//! The controller's grant of restarts in place (issue #45 §2) end to end: `reloadlet
//! controller` and the agent against the simulated node. Three replicas of one Deployment
//! behind a PodDisruptionBudget with `maxUnavailable: 1`, all `action: restart`: one
//! ConfigMap change restarts all three in place (same pod UIDs, `restartCount` + 1; each app,
//! which reads its config only at start, serves the new one), and at
//! no moment are two of them not Ready; a controller restart in the middle restarts nothing
//! twice, and neither does an agent restart. A restarted pod that does not turn Ready again
//! within `reloadlet.io/restart-timeout` stops its owner's sequence (`RestartStuck`).
//! Without a controller holding the Lease each request gets one Warning and nothing restarts.
//! `env-action: restart` restarts env-only consumers in place the same way; on the only pod
//! of its owner with `on-blocked: rollout` the owner is rolled instead.

mod common;
#[path = "support/controller_process.rs"]
mod controller_process;

use common::fixtures::{configmap, sandboxed};
use common::*;
use controller_process::ControllerProcess;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use nodesim::apiserver::WorkloadKind;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

const NS: &str = "apps";
const NO_ELECTION: &str = "--leader-elect=false";
/// A deadline, not a timing claim (three restarts one after another on a loaded machine).
const WAIT: Duration = Duration::from_secs(120);

/// Three replicas of an app that reads `/etc/app/app.conf` only at start and writes what it
/// serves to `<base>/served-<pod name>` (no SIGHUP handler, no reload endpoint, no SIGTERM
/// handler: SIGKILL after the grace), `action: restart`, with more template `annotations`.
fn deployment(base: &Path, annotations: &[(&str, &str)]) -> Deployment {
    let conf = sandboxed(base, "/etc/app");
    let script = format!(
        "echo \"serving $(cat {conf}/app.conf)\" > {base}/served-$POD_NAME; while :; do sleep 3600 & wait $!; done",
        base = base.display()
    );
    let mut d: serde_json::Value = json!({
        "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {
                    "labels": {"app": "web"},
                    "annotations": {
                        "reloadlet.io/action": "restart",
                        "reloadlet.io/restart-grace": "1s",
                        "nodesim.reloadlet.io/ready-delay-ms": "1000"
                    }
                },
                "spec": {
                    "containers": [{"name": "app", "image": "example/start-only:1",
                        "command": ["/bin/sh", "-c", script],
                        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "volumeMounts": [{"name": "cfg", "mountPath": conf}]}],
                    "volumes": [{"name": "cfg", "configMap": {"name": "web-cfg"}}]
                }
            }
        }
    });
    for (k, v) in annotations {
        d["spec"]["template"]["metadata"]["annotations"][*k] = json!(v);
    }
    serde_json::from_value(d).unwrap()
}

/// What each pod's app serves: pod name → its line.
fn served(node: &Node) -> BTreeMap<String, String> {
    pods(node)
        .iter()
        .filter_map(|p| {
            let name = p.metadata.name.clone()?;
            let line = std::fs::read_to_string(node.path(&format!("served-{name}"))).ok()?;
            Some((name, line.trim().to_owned()))
        })
        .collect()
}

/// Every pod serves `conf`.
async fn all_serve(node: &Node, conf: &str) {
    let want = format!("serving {conf}");
    eventually(&format!("the three pods serve {conf}"), WAIT, || {
        let served = served(node);
        (served.len() == 3 && served.values().all(|l| *l == want)).then_some(())
    })
    .await;
}

fn pdb() -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap()
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn restart_count(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == "app"))
        .map_or(-1, |c| c.restart_count)
}

fn annotation<'a>(p: &'a Pod, key: &str) -> Option<&'a str> {
    p.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn pods(node: &Node) -> Vec<Pod> {
    node.api
        .pods_of_workload(WorkloadKind::Deployment, NS, "web")
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// uid → restartCount of the three pods once all run Ready.
async fn settled(node: &Node, what: &str, done: impl Fn(&Pod) -> bool) -> BTreeMap<String, i32> {
    eventually(what, WAIT, || {
        let pods = pods(node);
        (pods.len() == 3 && pods.iter().all(|p| ready(p) && done(p))).then(|| {
            pods.iter()
                .map(|p| (p.metadata.uid.clone().unwrap(), restart_count(p)))
                .collect()
        })
    })
    .await
}

/// Restarted for the request it made: request, grant and restarted all the same id.
fn restarted_for_its_request(p: &Pod) -> bool {
    let request = annotation(p, "reloadlet.io/restart-request");
    request.is_some()
        && annotation(p, "reloadlet.io/restart-grant") == request
        && annotation(p, "reloadlet.io/restarted") == request
}

/// Waits until the controller took the pod's rollout baseline (what it reads now): a change
/// before that is the pod's starting point, not a change (docs/rollout.md), so a test's
/// change must come after it.
async fn rollout_baselined(node: &Node, pod: &str) {
    eventually("the controller's rollout baseline on the pod", WAIT, || {
        node.pod_annotation(NS, pod, "reloadlet.io/rollout-baseline")
    })
    .await;
}

/// Waits for the first grant of the sequence.
async fn first_grant(node: &Node) {
    eventually("a first grant", WAIT, || {
        pods(node)
            .iter()
            .any(|p| annotation(p, "reloadlet.io/restart-grant").is_some())
            .then_some(())
    })
    .await;
}

/// All three restarted for their request: each app, restarted in its pod, reads the new
/// config; the same pods, each restarted exactly once.
async fn each_restarted_once_serving_v2(node: &Node, before: &BTreeMap<String, i32>) {
    let after = settled(node, "all three restarted for their request", |p| {
        restarted_for_its_request(p)
    })
    .await;
    all_serve(node, "v2").await;
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "same pod UIDs"
    );
    for (uid, count) in &after {
        assert_eq!(*count, before[uid] + 1, "pod {uid}: {before:?} → {after:?}");
    }
}

/// Nothing more comes of it: no pod restarted a second time.
async fn no_second_restart(node: &Node, before: &BTreeMap<String, i32>) {
    never("a second restart", CONTROLLER_QUIET, || {
        pods(node)
            .iter()
            .any(|p| restart_count(p) > before[p.metadata.uid.as_ref().unwrap()] + 1)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn three_replicas_behind_max_unavailable_one_restart_in_place_one_at_a_time() {
    if !root_or_skip() {
        return;
    }
    let (node, before) = three_replicas(&[]).await;
    let readiness = node
        .api
        .track_readiness(WorkloadKind::Deployment, NS, "web")
        .unwrap();
    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;

    node.api
        .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "v2")]));

    // A controller restart once the first pod is granted: nothing restarts twice.
    first_grant(&node).await;
    controller.stop().await;
    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;

    each_restarted_once_serving_v2(&node, &before).await;
    let log = readiness.log();
    assert!(
        log.min_ready().is_some_and(|n| n >= 2),
        "two pods were not Ready at once: {log:?}"
    );
    // nothing more comes of it
    no_second_restart(&node, &before).await;
    controller.stop().await;
}

/// The node with the ConfigMap, the budget, the Deployment `d` and the agent, and the three
/// pods once they run Ready: uid → restartCount.
async fn three_replicas(annotations: &[(&str, &str)]) -> (Node, BTreeMap<String, i32>) {
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.set_nodes(&[NODE]);
    node.api
        .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "v1")]));
    node.api.create_pdb(pdb());
    let base = node.path("served").parent().unwrap().to_owned();
    node.api
        .apply_deployment(deployment(&base, annotations))
        .unwrap();
    node.start_agent(&[]).await;
    let before = settled(&node, "three Ready pods", |_| true).await;
    all_serve(&node, "v1").await;
    (node, before)
}

/// Three Ready replicas without a budget and no controller; the agent reads the controller's
/// Lease in `lease_namespace` (`before`: what the API server is told before the agent starts).
async fn three_replicas_without_a_budget(
    lease_namespace: &str,
    before: impl FnOnce(&Node),
) -> (Node, BTreeMap<String, i32>) {
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.set_nodes(&[NODE]);
    node.api
        .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "v1")]));
    let base = node.path("served").parent().unwrap().to_owned();
    node.api.apply_deployment(deployment(&base, &[])).unwrap();
    before(&node);
    node.start_agent(&["--controller-lease-namespace", lease_namespace])
        .await;
    let ready = settled(&node, "three Ready pods", |_| true).await;
    (node, ready)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_restart_in_the_middle_of_a_sequence_restarts_nothing_twice_and_loses_nothing() {
    if !root_or_skip() {
        return;
    }
    let (mut node, before) = three_replicas(&[]).await;
    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;

    node.api
        .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "v2")]));

    // The agent stops once the first pod is granted, while the others wait for theirs, and
    // a new one starts: it reads the requests, grants and volume digests the first left.
    first_grant(&node).await;
    node.stop_agent().await;
    node.start_agent(&[]).await;

    each_restarted_once_serving_v2(&node, &before).await;
    no_second_restart(&node, &before).await;
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_pod_that_stays_unready_stops_the_sequence_of_its_owner() {
    if !root_or_skip() {
        return;
    }
    let (node, before) = three_replicas(&[("reloadlet.io/restart-timeout", "3s")]).await;
    // From now on a container start takes 10 minutes to pass its readiness probe, on every
    // pod: whichever is restarted first stays unready. The app has no SIGTERM handler and a
    // 20 s grace: a granted pod is being restarted (its old process still runs) for 20 s.
    for p in pods(&node) {
        let name = p.metadata.name.clone().unwrap();
        node.api
            .merge_patch_pod(
                NS,
                &name,
                &json!({"metadata": {"annotations": {
                    "nodesim.reloadlet.io/ready-delay-ms": "600000",
                    "reloadlet.io/restart-grace": "20s"
                }}}),
            )
            .unwrap();
    }
    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;

    node.api
        .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "v2")]));

    // explain with the grant in flight: the granted pod is being restarted, its siblings
    // asked and wait.
    let (granted, waiting) = eventually("one pod granted, two requests waiting", WAIT, || {
        let pods = pods(&node);
        let granted = pods.iter().find(|p| {
            let request = annotation(p, "reloadlet.io/restart-request");
            request.is_some()
                && annotation(p, "reloadlet.io/restart-grant") == request
                && annotation(p, "reloadlet.io/restarted").is_none()
        })?;
        let waiting: Vec<(String, String)> = pods
            .iter()
            .filter(|p| p.metadata.uid != granted.metadata.uid)
            .filter_map(|p| {
                let request = annotation(p, "reloadlet.io/restart-request")?;
                Some((p.metadata.name.clone()?, request.to_owned()))
            })
            .collect();
        (waiting.len() == 2).then(|| (granted.clone(), waiting))
    })
    .await;
    let name = granted.metadata.name.clone().unwrap();
    let id = annotation(&granted, "reloadlet.io/restart-request")
        .unwrap()
        .to_owned();
    let explained = node.explain_output(NS, &name);
    assert!(
        explained.contains(&format!(
            "pending: granted: request {id} is being restarted (reloadlet.io/restarted not written yet)"
        )) && explained.contains("budget: PodDisruptionBudget web allows"),
        "{explained}"
    );
    for (sibling, request) in &waiting {
        let explained = node.explain_output(NS, sibling);
        assert!(
            explained.contains(&format!(
                "pending: requested and waiting: request {request}, no grant yet"
            )),
            "{sibling}: {explained}"
        );
    }

    // The first restart happens (the positive control) and its pod stays unready.
    let stuck = eventually("one pod restarted for its request", WAIT, || {
        pods(&node)
            .into_iter()
            .find(|p| restarted_for_its_request(p) && !ready(p))
    })
    .await;
    assert_eq!(stuck.metadata.name.as_deref(), Some(name.as_str()));
    let uid = stuck.metadata.uid.clone().unwrap();
    assert_eq!(restart_count(&stuck), before[&uid] + 1, "{name}");
    let explained = node.explain_output(NS, &name);
    assert!(
        explained.contains(&format!(
            "pending: restarted for request {id}, not Ready yet: the owner's next restart waits for it"
        )),
        "{explained}"
    );
    let ev = node.wait_event(NS, &name, "RestartStuck").await;
    assert_eq!(ev.type_, "Warning");
    assert!(
        ev.note
            .contains("not Ready within reloadlet.io/restart-timeout 3s")
            && ev.note.contains("no further restarts"),
        "{}",
        ev.note
    );
    // Its siblings keep their request, ungranted, and are never restarted.
    never("a sibling granted or restarted", CONTROLLER_QUIET, || {
        pods(&node).iter().any(|p| {
            let sibling = p.metadata.uid.as_deref() != Some(uid.as_str());
            sibling
                && (annotation(p, "reloadlet.io/restart-grant").is_some()
                    || restart_count(p) != before[p.metadata.uid.as_ref().unwrap()])
        })
    })
    .await;
    let waiting = pods(&node)
        .iter()
        .filter(|p| annotation(p, "reloadlet.io/restart-request").is_some())
        .count();
    assert_eq!(waiting, 3, "every pod asked for its restart");
    // the stuck pod's new process reads v2, its siblings still serve v1
    let served = served(&node);
    for (pod, line) in &served {
        let want = if *pod == name {
            "serving v2"
        } else {
            "serving v1"
        };
        assert_eq!(line, want, "{served:?}");
    }
    controller.stop().await;
}

/// One replica of a Deployment whose pod asks `on-blocked: rollout`, serving v1, with the
/// agent running (and `before`, e.g. a budget, made first).
struct OneReplica {
    node: Node,
    old_name: String,
    old_uid: String,
    readiness: nodesim::apiserver::ReadinessWatch,
}

async fn one_replica(before: impl FnOnce(&Node)) -> OneReplica {
    one_replica_with(&[], ROLLS, before).await
}

/// The pod asks `on-blocked: rollout`.
const ROLLS: &[(&str, &str)] = &[("reloadlet.io/on-blocked", "rollout")];

/// [`one_replica`], the agent started with `agent_args`, the pod's template `annotations`.
async fn one_replica_with(
    agent_args: &[&str],
    annotations: &[(&str, &str)],
    before: impl FnOnce(&Node),
) -> OneReplica {
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.set_nodes(&[NODE]);
    node.api
        .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "v1")]));
    before(&node);
    let base = node.path("served").parent().unwrap().to_owned();
    let mut d = deployment(&base, annotations);
    d.spec.as_mut().unwrap().replicas = Some(1);
    node.api.apply_deployment(d).unwrap();
    node.start_agent(agent_args).await;
    let old = eventually("one Ready pod serving v1", WAIT, || {
        let pods = pods(&node);
        let served = served(&node);
        (pods.len() == 1 && ready(&pods[0]) && served.values().all(|l| l == "serving v1"))
            .then(|| pods[0].clone())
    })
    .await;
    node.wait_tracked(2).await;
    let readiness = node
        .api
        .track_readiness(WorkloadKind::Deployment, NS, "web")
        .unwrap();
    OneReplica {
        old_name: old.metadata.name.clone().unwrap(),
        old_uid: old.metadata.uid.clone().unwrap(),
        node,
        readiness,
    }
}

impl OneReplica {
    /// A controller, once it took the pod's baseline, and then the change to v2.
    async fn change_under_a_controller(&self) -> ControllerProcess {
        let controller = ControllerProcess::start(&self.node, &[NO_ELECTION], &[]).await;
        rollout_baselined(&self.node, &self.old_name).await;
        self.node
            .api
            .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "v2")]));
        controller
    }

    /// The controller rolled the Deployment (the positive control): a new pod, not
    /// restarted, serves v2, and there was never a moment without a Ready pod.
    async fn rolled_surge_first(&self) {
        let node = &self.node;
        let new = eventually("a new pod serving v2, the old one gone", WAIT, || {
            let pods = pods(node);
            let served = served(node);
            let new = pods.first()?;
            let name = new.metadata.name.as_deref()?;
            (pods.len() == 1
                && new.metadata.uid.as_deref() != Some(self.old_uid.as_str())
                && ready(new)
                && served.get(name).is_some_and(|l| l == "serving v2"))
            .then(|| new.clone())
        })
        .await;
        assert_eq!(restart_count(&new), 0, "the new pod was not restarted");
        let log = self.readiness.log();
        assert!(
            log.min_ready().is_some_and(|n| n >= 1),
            "a moment without a Ready pod: {log:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_replica_under_min_available_one_with_on_blocked_rollout_is_rolled_not_restarted() {
    if !root_or_skip() {
        return;
    }
    // One replica, one needed: a restart would leave no Ready pod, whatever the timing.
    let one = one_replica(|node| {
        node.api.create_pdb(
            serde_json::from_value(json!({
                "metadata": {"name": "web", "namespace": NS},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}
            }))
            .unwrap(),
        );
    })
    .await;
    let (node, old_name) = (&one.node, &one.old_name);
    // The disruption controller has counted the pod: the block is known as structural.
    eventually("the budget's status: 1 of 1 needed", WAIT, || {
        let st = node.api.get_pdb(NS, "web")?.status?;
        (st.expected_pods == 1 && st.desired_healthy == 1 && st.disruptions_allowed == 0)
            .then_some(())
    })
    .await;
    let controller = one.change_under_a_controller().await;

    // The agent hands the restart off at once...
    let ev = node.wait_event(NS, old_name, "RestartHandedOff").await;
    assert_eq!(ev.type_, "Normal");
    assert!(
        ev.note
            .starts_with("PodDisruptionBudget web needs 1 of 1 pods healthy")
            && ev
                .note
                .contains("reloadlet.io/on-blocked is rollout: app not restarted")
            && ev.note.ends_with("configmap web-cfg changed)"),
        "{}",
        ev.note
    );
    // ...and the controller rolls the Deployment; nothing restarted or requested.
    one.rolled_surge_first().await;
    for reason in ["RestartRequested", "Restarted"] {
        assert!(
            node.events(NS, old_name, reason).is_empty(),
            "{reason} on {old_name}"
        );
    }
    assert_eq!(
        node.metric("reloadlet_actions_total{action=\"restart\",outcome=\"restart_handed_off\"}"),
        1.0
    );
    controller.stop().await;
}

/// One replica and no PodDisruptionBudget (docs/restart.md, "One replica"): nothing tells
/// the agent that a restart would leave no Ready pod, so it asks; the controller sees the
/// only pod of its ReplicaSet, grants nothing (Normal `RestartHandedOff`, from the
/// controller) and, the pod asking `reloadlet.io/on-blocked: rollout`, rolls the
/// Deployment surge-first. The positive control: a new pod serves v2.
#[tokio::test(flavor = "multi_thread")]
async fn one_replica_without_a_budget_with_on_blocked_rollout_is_rolled_not_granted() {
    if !root_or_skip() {
        return;
    }
    let one = one_replica(|_| {}).await;
    let (node, old_name) = (&one.node, &one.old_name);
    // Said ahead of time.
    let explained = node.explain_output(NS, old_name);
    assert!(
        explained.contains("WARNING: the only pod of ReplicaSet")
            && explained.contains("reloadlet.io/on-blocked is rollout: the controller grants nothing and rolls the workload instead"),
        "{explained}"
    );
    let controller = one.change_under_a_controller().await;

    let ev = node.wait_event(NS, old_name, "RestartHandedOff").await;
    assert_eq!(ev.type_, "Normal");
    assert!(
        ev.note.contains("the only pod of ReplicaSet")
            && ev
                .note
                .contains("reloadlet.io/on-blocked is rollout: reloadlet controller rolls the workload instead"),
        "{}",
        ev.note
    );
    one.rolled_surge_first().await;
    // The old pod asked, and was never granted nor restarted.
    assert!(node.events(NS, old_name, "Restarted").is_empty());
    assert!(
        !node
            .agent_log()
            .contains("restart granted by the controller"),
        "nothing granted"
    );
    controller.stop().await;
}

/// The same under the agent's `--restart-without-grant` (docs/restart.md, "Under
/// `--restart-without-grant`"): the agent cannot see whether its pod is the only one of its
/// owner, and the controller rolls it whatever the agent's flag, so the agent asks instead of
/// restarting at once; the controller hands the request off and rolls the Deployment. Exactly
/// one of them acts: the old pod is never restarted, the new pod serves v2.
#[tokio::test(flavor = "multi_thread")]
async fn one_replica_with_on_blocked_rollout_is_rolled_not_restarted_under_restart_without_grant() {
    if !root_or_skip() {
        return;
    }
    let one = one_replica_with(&["--restart-without-grant"], ROLLS, |_| {}).await;
    let (node, old_name) = (&one.node, &one.old_name);
    let explained = node.explain_output(NS, old_name);
    assert!(
        explained.contains("an agent with --restart-without-grant asks for such a pod too, and leaves it to the controller"),
        "{explained}"
    );
    let controller = one.change_under_a_controller().await;

    // The agent asked (though it may restart without a grant), the controller handed off.
    node.wait_event(NS, old_name, "RestartRequested").await;
    let ev = node.wait_event(NS, old_name, "RestartHandedOff").await;
    assert!(
        ev.note.contains("the only pod of ReplicaSet"),
        "{}",
        ev.note
    );
    one.rolled_surge_first().await;
    assert!(
        node.events(NS, old_name, "Restarted").is_empty(),
        "restarted by the agent as well"
    );
    assert!(
        node.agent_log().contains(
            "is rollout: whether this is the only pod of its owner (then the controller rolls the owner instead) only the controller sees"
        ),
        "the agent's reason to ask"
    );
    controller.stop().await;
}

/// One replica without `on-blocked: rollout` under `--restart-without-grant`: restarted at
/// once in the same pod, and the `Restarted` Event says that no other pod of its ReplicaSet
/// runs on the node, so the workload may have had no Ready pod meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn one_replica_under_restart_without_grant_is_restarted_and_the_event_says_it_was_alone() {
    if !root_or_skip() {
        return;
    }
    let one = one_replica_with(&["--restart-without-grant"], &[], |_| {}).await;
    let (node, old_name) = (&one.node, &one.old_name);
    node.api
        .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "v2")]));
    let ev = node.wait_event(NS, old_name, "Restarted").await;
    assert!(
        ev.note.contains("; no other pod of ReplicaSet web-")
            && ev.note.contains("runs on this node")
            && ev
                .note
                .contains("the workload had no Ready pod until this one is Ready again")
            && ev.note.ends_with(": configmap web-cfg changed"),
        "{}",
        ev.note
    );
    // the same pod, restarted in place, serves v2
    eventually("the same pod serving v2", WAIT, || {
        let pods = pods(node);
        let served = served(node);
        (pods.len() == 1
            && pods[0].metadata.uid.as_deref() == Some(one.old_uid.as_str())
            && restart_count(&pods[0]) == 1
            && served.get(old_name).is_some_and(|l| l == "serving v2"))
        .then_some(())
    })
    .await;
    assert!(node.events(NS, old_name, "RestartRequested").is_empty());
}

/// Without a controller (no Lease holder, docs/restart.md "Without a controller"): each
/// pod's request waits with one Warning `RestartUncoordinated` that nothing grants it, and
/// nothing is restarted. The positive control: once a controller holds the Lease it grants
/// them all, and the next change's requests get no Warning.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_controller_each_request_is_warned_about_once_and_nothing_restarts() {
    if !root_or_skip() {
        return;
    }
    const WARNING: &str = "RestartUncoordinated";
    // the chart's Lease namespace (the agent's own, which the test process does not set)
    let (node, before) = three_replicas_without_a_budget("reloadlet-system", |_| {}).await;
    let warnings = |p: &Pod| node.events(NS, p.metadata.name.as_deref().unwrap(), WARNING);

    node.api
        .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "v2")]));
    eventually("a request and its Warning on each pod", WAIT, || {
        let pods = pods(&node);
        (pods.len() == 3
            && pods.iter().all(|p| {
                annotation(p, "reloadlet.io/restart-request").is_some() && !warnings(p).is_empty()
            }))
        .then_some(())
    })
    .await;
    for p in pods(&node) {
        let w = warnings(&p);
        assert_eq!((w.len(), w[0].type_.as_str()), (1, "Warning"), "{w:?}");
        let note = &w[0].note;
        let request = annotation(&p, "reloadlet.io/restart-request").unwrap();
        for part in [
            "no controller holds the Lease",
            "reloadlet-system/reloadlet-controller does not exist",
            request,
        ] {
            assert!(note.contains(part), "{part} in {note}");
        }
    }
    never("a restart without a grant", Duration::from_secs(3), || {
        pods(&node).iter().any(|p| {
            restart_count(p) != before[p.metadata.uid.as_ref().unwrap()]
                || annotation(p, "reloadlet.io/restart-grant").is_some()
        })
    })
    .await;
    assert!(
        !node.agent_log().contains("forbidden"),
        "the chart's agent Role reads the Lease"
    );

    // a controller that holds the Lease grants them
    let controller = ControllerProcess::start(&node, &[], &[]).await;
    let after = settled(&node, "all three restarted for their request", |p| {
        restarted_for_its_request(p)
    })
    .await;
    for (uid, count) in &after {
        assert_eq!(*count, before[uid] + 1, "pod {uid}");
    }
    // the next change: requests with a holder, no Warning
    let done: BTreeMap<String, String> = pods(&node)
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap(),
                annotation(p, "reloadlet.io/restart-request")
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect();
    node.api
        .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "v3")]));
    eventually("a new request on each pod", WAIT, || {
        pods(&node)
            .iter()
            .all(|p| {
                annotation(p, "reloadlet.io/restart-request")
                    .is_some_and(|r| r != done[p.metadata.name.as_deref().unwrap()])
            })
            .then_some(())
    })
    .await;
    never(
        "a Warning with a Lease holder",
        Duration::from_secs(3),
        || pods(&node).iter().any(|p| warnings(p).len() != 1),
    )
    .await;
    controller.stop().await;
}

/// The agent may not read the controller's Lease (here: pointed at a namespace its Role does
/// not cover, as a misconfigured install would be): it does not guess. No
/// `RestartUncoordinated` claims that no controller runs; the refusal is named where an
/// operator looks (`/readyz` 503 with the rule to add, the log, the metric), and nothing
/// restarts without a grant.
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_the_agent_may_not_read_is_named_on_readyz_not_guessed_and_nothing_restarts() {
    if !root_or_skip() {
        return;
    }
    let (node, before) = three_replicas_without_a_budget("elsewhere", |node| {
        node.api
            .expect_forbidden("get", "coordination.k8s.io", "leases");
    })
    .await;

    node.api
        .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "v2")]));
    eventually("a request on each pod", WAIT, || {
        let pods = pods(&node);
        (pods.len() == 3
            && pods
                .iter()
                .all(|p| annotation(p, "reloadlet.io/restart-request").is_some()))
        .then_some(())
    })
    .await;
    let listen = node.agent().listen.clone();
    let body = eventually("/readyz 503 naming the Lease rule", WAIT, || {
        http_get(&listen, "/readyz").and_then(|(code, body)| {
            (code == 503 && body.contains("restart-coordination")).then_some(body)
        })
    })
    .await;
    let line = "feature restart-coordination: forbidden to get leases.coordination.k8s.io in namespace elsewhere (HTTP 403)";
    assert!(body.contains(line), "{line}\nmissing from /readyz:\n{body}");
    assert!(
        node.metric(
            "reloadlet_forbidden_total{verb=\"get\",resource=\"leases.coordination.k8s.io\"}"
        ) >= 1.0
    );
    never(
        "a restart without a grant, or a Warning that guesses",
        Duration::from_secs(3),
        || {
            pods(&node).iter().any(|p| {
                restart_count(p) != before[p.metadata.uid.as_ref().unwrap()]
                    || !node
                        .events(
                            NS,
                            p.metadata.name.as_deref().unwrap(),
                            "RestartUncoordinated",
                        )
                        .is_empty()
            })
        },
    )
    .await;
}

/// `reloadlet.io/env-action: restart` (docs/restart.md, "Env consumers"): three replicas of an
/// app that reads its config from env only (`configMapKeyRef`, no volume), behind
/// `maxUnavailable: 1`. A change of the ConfigMap makes the controller request a restart of
/// each (its own id, naming the container), grant them one at a time, and the node agent
/// restart each in place: the new process's environment has the new value, same pod UIDs,
/// `restartCount` + 1, never two unready. A request and grant a pod author writes on another
/// pod (an id shaped like the controller's, made without its key) restart nothing. Then the
/// key rotates (its Secret deleted, the controller restarted) and the next change restarts
/// each once more, under the new key.
/// [`deployment`] whose app reads `app.conf` of ConfigMap `web-env` only through env
/// (`APP_CONF`, `configMapKeyRef`): no volume.
fn env_only_deployment(base: &Path, annotations: &[(&str, &str)]) -> Deployment {
    let mut d = serde_json::to_value(deployment(base, annotations)).unwrap();
    let container = &mut d["spec"]["template"]["spec"]["containers"][0];
    container["command"] = json!([
        "/bin/sh",
        "-c",
        format!(
            "echo \"serving $APP_CONF\" > {}/served-$POD_NAME; while :; do sleep 3600 & wait $!; done",
            base.display()
        )
    ]);
    container["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "APP_CONF", "valueFrom": {"configMapKeyRef": {"name": "web-env", "key": "app.conf"}}}));
    container.as_object_mut().unwrap().remove("volumeMounts");
    d["spec"]["template"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("volumes");
    serde_json::from_value(d).unwrap()
}

/// `env-action: restart` and `on-blocked: rollout` on the only pod of a Deployment (no
/// budget) whose app reads its config only through env, its `action` a signal: the controller
/// requests the env restart, the grant hands it off (the only pod) and the rollout feature
/// rolls the Deployment surge-first: a new pod runs the new env value, never a moment without
/// a Ready pod, the old one never restarted.
#[tokio::test(flavor = "multi_thread")]
async fn one_replica_env_only_with_env_action_restart_and_on_blocked_rollout_is_rolled() {
    if !root_or_skip() {
        return;
    }
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.set_nodes(&[NODE]);
    node.api
        .apply_configmap(configmap(NS, "web-env", &[("app.conf", "v1")]));
    let base = node.path("served").parent().unwrap().to_owned();
    let mut d = env_only_deployment(
        &base,
        &[
            ("reloadlet.io/action", "signal"),
            ("reloadlet.io/env-action", "restart"),
            ("reloadlet.io/on-blocked", "rollout"),
        ],
    );
    d.spec.as_mut().unwrap().replicas = Some(1);
    node.api.apply_deployment(d).unwrap();
    node.start_agent(&[
        "--pod-namespace",
        "reloadlet-system",
        "--pod-name",
        "reloadlet-x",
    ])
    .await;
    let old = eventually("one Ready pod serving v1", WAIT, || {
        let pods = pods(&node);
        let served = served(&node);
        (pods.len() == 1 && ready(&pods[0]) && served.values().all(|l| l == "serving v1"))
            .then(|| pods[0].clone())
    })
    .await;
    let readiness = node
        .api
        .track_readiness(WorkloadKind::Deployment, NS, "web")
        .unwrap();
    let one = OneReplica {
        old_name: old.metadata.name.clone().unwrap(),
        old_uid: old.metadata.uid.clone().unwrap(),
        node,
        readiness,
    };
    let (node, old_name) = (&one.node, &one.old_name);
    let controller = ControllerProcess::start(node, &[NO_ELECTION], &[]).await;
    rollout_baselined(node, old_name).await;
    eventually("the controller's env baseline on the pod", WAIT, || {
        node.pod_annotation(NS, old_name, "reloadlet.io/env-baseline")
    })
    .await;
    node.api
        .apply_configmap(configmap(NS, "web-env", &[("app.conf", "v2")]));

    let ev = node.wait_event(NS, old_name, "RestartHandedOff").await;
    assert!(
        ev.note.contains("the only pod of ReplicaSet"),
        "{}",
        ev.note
    );
    one.rolled_surge_first().await;
    assert!(node.events(NS, old_name, "Restarted").is_empty());
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn env_action_restart_restarts_env_only_consumers_in_place_one_at_a_time() {
    if !root_or_skip() {
        return;
    }
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.set_nodes(&[NODE]);
    node.api
        .apply_configmap(configmap(NS, "web-env", &[("app.conf", "v1")]));
    node.api.create_pdb(pdb());
    let base = node.path("served").parent().unwrap().to_owned();
    let d = env_only_deployment(&base, &[("reloadlet.io/env-action", "restart")]);
    node.api.apply_deployment(d).unwrap();
    // Another workload's pod, on which its author writes a request and its grant.
    node.api
        .apply_configmap(configmap(NS, "web-cfg", &[("app.conf", "other")]));
    let mut other = serde_json::to_value(deployment(&base, &[])).unwrap();
    other["metadata"]["name"] = json!("other");
    other["spec"]["replicas"] = json!(1);
    other["spec"]["selector"]["matchLabels"]["app"] = json!("other");
    other["spec"]["template"]["metadata"]["labels"]["app"] = json!("other");
    node.api
        .apply_deployment(serde_json::from_value(other).unwrap())
        .unwrap();
    // The agent follows the controller's key in the controller's namespace. A short crash-loop
    // window (10m by default), so that the second change below, after the key's rotation, is
    // not deferred for ten minutes.
    node.start_agent(&[
        "--pod-namespace",
        "reloadlet-system",
        "--pod-name",
        "reloadlet-x",
        "--restart-spacing",
        "10s",
    ])
    .await;
    let before = settled(&node, "three Ready pods", |_| true).await;
    all_serve(&node, "v1").await;
    let readiness = node
        .api
        .track_readiness(WorkloadKind::Deployment, NS, "web")
        .unwrap();
    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;
    for p in pods(&node) {
        let name = p.metadata.name.unwrap();
        eventually("the controller's env baseline on the pod", WAIT, || {
            node.pod_annotation(NS, &name, "reloadlet.io/env-baseline")
        })
        .await;
    }
    let forged_pod = eventually("the other pod", WAIT, || {
        let pods = node
            .api
            .pods_of_workload(WorkloadKind::Deployment, NS, "other");
        pods.into_iter().find(ready)
    })
    .await;
    let forged_name = forged_pod.metadata.name.clone().unwrap();
    let forged_count = restart_count(&forged_pod);
    let forged = "0a1b2c3d-0123456789abcdef-1f2e";
    node.api
        .merge_patch_pod(
            NS,
            &forged_name,
            &json!({"metadata": {"annotations": {
                "reloadlet.io/env-action": "restart",
                "reloadlet.io/restart-request": forged,
                "reloadlet.io/restart-grant": forged
            }}}),
        )
        .unwrap();

    node.api
        .apply_configmap(configmap(NS, "web-env", &[("app.conf", "v2")]));
    each_restarted_once_serving_v2(&node, &before).await;
    for p in pods(&node) {
        let request = annotation(&p, "reloadlet.io/restart-request").unwrap();
        assert_eq!(
            request.split('-').count(),
            3,
            "the controller's id names the container: {request}"
        );
    }
    let log = readiness.log();
    assert!(
        log.min_ready().is_some_and(|n| n >= 2),
        "two pods were not Ready at once: {log:?}"
    );
    no_second_restart(&node, &before).await;
    // The forged request on the other pod restarted nothing, and nothing recorded it.
    let other = node.api.get_pod(NS, &forged_name).unwrap();
    assert_eq!(
        restart_count(&other),
        forged_count,
        "a forged request is not acted on"
    );
    assert_eq!(annotation(&other, "reloadlet.io/restarted"), None);

    // The key rotated as docs/install.md says (its Secret deleted, the controller restarted):
    // the new controller makes a new key and takes every baseline afresh under it, the agent
    // follows the new key as it is written (its watch of the Secret), and the next change
    // restarts each pod once more, for a request that verifies only under the new key.
    let baselines = |node: &Node| -> BTreeMap<String, String> {
        pods(node)
            .iter()
            .map(|p| {
                let baseline = annotation(p, "reloadlet.io/env-baseline").unwrap_or_default();
                (p.metadata.uid.clone().unwrap(), baseline.to_owned())
            })
            .collect()
    };
    let (old_baselines, old_requests) = (baselines(&node), requests(&node));
    controller.stop().await;
    let old_key = node
        .api
        .delete_secret("reloadlet-system", "reloadlet-controller-key")
        .expect("the controller made its key");
    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;
    let new_key = eventually("a new key", WAIT, || {
        node.api
            .get_secret("reloadlet-system", "reloadlet-controller-key")
    })
    .await;
    assert_ne!(new_key.data, old_key.data, "a key made anew");
    eventually(
        "every env baseline taken afresh under the new key",
        WAIT,
        || {
            let now = baselines(&node);
            now.iter()
                .all(|(uid, b)| !b.is_empty() && old_baselines.get(uid) != Some(b))
                .then_some(())
        },
    )
    .await;
    node.api
        .apply_configmap(configmap(NS, "web-env", &[("app.conf", "v3")]));
    let after = settled(&node, "all three restarted for a new request", |p| {
        restarted_for_its_request(p)
            && annotation(p, "reloadlet.io/restart-request")
                != old_requests
                    .get(p.metadata.uid.as_deref().unwrap())
                    .map(String::as_str)
    })
    .await;
    all_serve(&node, "v3").await;
    for (uid, count) in &after {
        assert_eq!(*count, before[uid] + 2, "pod {uid}: {before:?} → {after:?}");
    }
    controller.stop().await;
}

/// uid → the pod's `reloadlet.io/restart-request`.
fn requests(node: &Node) -> BTreeMap<String, String> {
    pods(node)
        .iter()
        .filter_map(|p| {
            let request = annotation(p, "reloadlet.io/restart-request")?;
            Some((p.metadata.uid.clone()?, request.to_owned()))
        })
        .collect()
}
