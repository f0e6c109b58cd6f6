//! Env consumers (`reloadlet controller --env-consumers`) against the simulated API server and
//! node: a change of a key a pod reads through env evicts exactly its readers, PDB-respecting,
//! once; everything else does nothing.

mod common;
#[path = "support/controller_process.rs"]
mod controller_process;

use common::fixtures::{configmap, env_key, pod, secret};
use common::*;
use controller_process::ControllerProcess;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

const NS: &str = "apps";
const BASELINE: &str = "reloadlet.io/env-baseline";
/// One controller, no Lease (tests/controller.rs covers leader election).
const NO_ELECTION: &str = "--leader-elect=false";
const WAIT: Duration = Duration::from_secs(30);

fn template(app: &str, action: &str, env: Vec<Value>) -> PodTemplateSpec {
    serde_json::from_value(json!({
        "metadata": {
            "labels": {"app": app},
            "annotations": {
                "reloadlet.io/action": action,
                "nodesim.reloadlet.io/ready-delay-ms": "700"
            }
        },
        "spec": {"containers": [{"name": "app", "image": "app", "env": env}]}
    }))
    .unwrap()
}

fn pdb(app: &str, spec: Value) -> PodDisruptionBudget {
    let mut spec = spec;
    spec["selector"] = json!({"matchLabels": {"app": app}});
    serde_json::from_value(json!({"metadata": {"name": app, "namespace": NS}, "spec": spec}))
        .unwrap()
}

fn uids(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter().filter_map(|p| p.metadata.uid.clone()).collect()
}

fn eviction_requests(node: &Node) -> usize {
    node.api.evictions().len()
}

fn running(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

fn ready(p: &Pod) -> bool {
    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A ReplicaSet of `n` pods on the node, all Running and Ready in the API: their UIDs.
async fn replicaset(
    node: &Node,
    app: &str,
    n: i32,
    action: &str,
    env: Vec<Value>,
) -> BTreeSet<String> {
    node.api
        .create_replicaset(NS, app, n, template(app, action, env), NODE);
    let pods = eventually(&format!("{app}: {n} Running and Ready"), WAIT, || {
        let pods = node.api.pods_of_replicaset(NS, app);
        (pods.len() == n as usize && pods.iter().all(|p| running(p) && ready(p))).then_some(pods)
    })
    .await;
    uids(&pods)
}

fn baseline_of(node: &Node, name: &str) -> Option<String> {
    node.pod_annotation(NS, name, BASELINE)
}

/// Waits until the controller has written the baseline of every pod of `app`.
async fn baselined(node: &Node, app: &str) {
    until(&format!("{app}: baselines written"), WAIT, || {
        let pods = node.api.pods_of_replicaset(NS, app);
        !pods.is_empty()
            && pods.iter().all(|p| {
                p.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(BASELINE))
            })
    })
    .await
}

fn app_env(log: &str, port: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    configmap(NS, "app-env", &[("LOG", log), ("PORT", port)])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_change_evicts_exactly_its_readers_one_at_a_time_under_a_pdb() {
    if !root_or_skip() {
        return;
    }
    let node = Node::start(NodeOptions::default()).await;
    node.api.apply_configmap(app_env("info", "80"));
    node.api
        .create_pdb(pdb("web", json!({"maxUnavailable": 1})));
    let web = replicaset(
        &node,
        "web",
        3,
        "evict",
        vec![env_key("LOG", "configmap", "app-env", "LOG")],
    )
    .await;
    let other = replicaset(
        &node,
        "other",
        2,
        "evict",
        vec![env_key("PORT", "configmap", "app-env", "PORT")],
    )
    .await;
    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;
    baselined(&node, "web").await;
    baselined(&node, "other").await;
    never("an eviction at startup", CONTROLLER_QUIET, || {
        eviction_requests(&node) > 0
    })
    .await;

    node.api.apply_configmap(app_env("debug", "80"));
    until(
        "the three readers of LOG evicted",
        Duration::from_secs(60),
        || evicted_set(&node) == web,
    )
    .await;
    never(
        "a reader of PORT, or a replacement, evicted",
        CONTROLLER_QUIET,
        || evicted_uids(&node).iter().any(|u| !web.contains(u)),
    )
    .await;
    assert!(other.iter().all(|u| !evicted_uids(&node).contains(u)));
    let violations = node.api.invariant_violations();
    assert!(violations.is_empty(), "PDB violated: {violations:?}");
    // Each original evicted exactly once (refusals are retried, acceptances never repeated).
    assert_eq!(evicted_uids(&node).len(), 3);
    let requested: Vec<String> = node
        .api
        .events()
        .into_iter()
        .filter(|e| e.reason == "EvictionRequested")
        .map(|e| e.note)
        .collect();
    assert_eq!(requested.len(), 3, "{requested:?}");
    assert!(
        requested
            .iter()
            .all(|n| n.contains("configmap app-env (env) changed")),
        "{requested:?}"
    );
    assert_eq!(
        controller.metric("reloadlet_actions_total{action=\"evict\",outcome=\"evicted\"}"),
        3.0
    );
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreferenced_key_a_label_change_or_an_identical_apply_does_nothing() {
    if !root_or_skip() {
        return;
    }
    let node = Node::start(NodeOptions::default()).await;
    node.api.apply_configmap(app_env("info", "80"));
    node.api
        .apply_configmap(configmap(NS, "unread", &[("X", "1")]));
    replicaset(
        &node,
        "web",
        2,
        "evict",
        vec![env_key("LOG", "configmap", "app-env", "LOG")],
    )
    .await;
    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;
    baselined(&node, "web").await;

    node.api.apply_configmap(app_env("info", "81"));
    never("an eviction for an unread key", CONTROLLER_QUIET, || {
        eviction_requests(&node) > 0
    })
    .await;
    let mut labelled = app_env("info", "81");
    labelled.metadata.labels = Some([("team".to_owned(), "a".to_owned())].into());
    node.api.apply_configmap(labelled.clone());
    never("an eviction for a label change", CONTROLLER_QUIET, || {
        eviction_requests(&node) > 0
    })
    .await;
    node.api.apply_configmap(labelled);
    node.api
        .apply_configmap(configmap(NS, "unread", &[("X", "2")]));
    never(
        "an eviction for an identical apply or an unread object",
        CONTROLLER_QUIET,
        || eviction_requests(&node) > 0,
    )
    .await;
    // The positive control: the key the pods do read changes, and an eviction is asked for.
    let mut read = app_env("debug", "81");
    read.metadata.labels = Some([("team".to_owned(), "a".to_owned())].into());
    node.api.apply_configmap(read);
    until("an eviction for the key the pods read", WAIT, || {
        eviction_requests(&node) > 0
    })
    .await;
    // Only the object some pod reads through env was ever read with its data.
    let full_reads: BTreeSet<String> = node
        .api
        .requests()
        .into_iter()
        .filter(|r| {
            r.path.contains("/configmaps") && !r.accept.contains("as=PartialObjectMetadata")
        })
        .map(|r| r.path)
        .collect();
    assert_eq!(
        full_reads,
        BTreeSet::from([format!("/api/v1/namespaces/{NS}/configmaps/app-env")])
    );
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_reader_is_ignored_unless_secrets_are_enabled() {
    if !root_or_skip() {
        return;
    }
    let node = Node::start(NodeOptions::default()).await;
    node.api
        .apply_secret(secret(NS, "db", &[("PASSWORD", "s1")]));
    let web = replicaset(
        &node,
        "web",
        1,
        "evict",
        vec![env_key("PASSWORD", "secret", "db", "PASSWORD")],
    )
    .await;
    let name = node.api.pods_of_replicaset(NS, "web")[0]
        .metadata
        .name
        .clone()
        .unwrap();
    let secret_requests = || {
        node.api
            .requests()
            .into_iter()
            // The tenants' Secrets (not the controller's own key, in its namespace).
            .filter(|r| {
                r.path.contains("/secrets")
                    && !r.path.contains("/namespaces/reloadlet-system/secrets")
            })
            .count()
    };

    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;
    node.api
        .apply_secret(secret(NS, "db", &[("PASSWORD", "s2")]));
    never(
        "an eviction for a Secret without --env-consumers-secrets",
        CONTROLLER_QUIET,
        || eviction_requests(&node) > 0,
    )
    .await;
    assert_eq!(secret_requests(), 0, "Secrets not even read");
    assert_eq!(baseline_of(&node, &name), None);
    controller.stop().await;

    let controller =
        ControllerProcess::start(&node, &[NO_ELECTION, "--env-consumers-secrets"], &[]).await;
    baselined(&node, "web").await;
    node.api
        .apply_secret(secret(NS, "db", &[("PASSWORD", "s3")]));
    until("the Secret's reader evicted", WAIT, || {
        evicted_set(&node) == web
    })
    .await;
    assert!(
        !controller.log().contains("s3"),
        "a Secret value in the log"
    );
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_change_made_while_the_controller_is_stopped_is_acted_on_once_and_a_newer_pod_is_not_evicted(
) {
    if !root_or_skip() {
        return;
    }
    let node = Node::start(NodeOptions::default()).await;
    node.api.apply_configmap(app_env("info", "80"));
    let web = replicaset(
        &node,
        "web",
        1,
        "evict",
        vec![env_key("LOG", "configmap", "app-env", "LOG")],
    )
    .await;
    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;
    baselined(&node, "web").await;
    controller.stop().await;

    node.api.apply_configmap(app_env("debug", "80"));
    // Created after the change (it already reads "debug"), while no controller runs.
    let late = replicaset(
        &node,
        "late",
        1,
        "evict",
        vec![env_key("LOG", "configmap", "app-env", "LOG")],
    )
    .await;

    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;
    until("the old reader evicted after the restart", WAIT, || {
        evicted_set(&node) == web
    })
    .await;
    baselined(&node, "late").await;
    never(
        "the newer pod evicted, or the old one twice",
        CONTROLLER_QUIET,
        || evicted_uids(&node).len() > 1 || late.iter().any(|u| evicted_uids(&node).contains(u)),
    )
    .await;
    controller.stop().await;

    // Nothing changed since: a restart acts on nothing.
    let before = eviction_requests(&node);
    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;
    never(
        "an eviction after a restart with nothing changed",
        CONTROLLER_QUIET,
        || eviction_requests(&node) > before,
    )
    .await;
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signal_pod_gets_env_not_reloaded_once_per_change_and_is_not_evicted() {
    if !root_or_skip() {
        return;
    }
    let node = Node::start(NodeOptions::default()).await;
    node.api.apply_configmap(app_env("info", "80"));
    let out = node.path("sig.sig");
    let mut p = pod(NS, "sig")
        .signal()
        .owned_by_replicaset("sig")
        .recorder("app", &out, &[])
        .build();
    p.spec.as_mut().unwrap().containers[0].env_from = Some(vec![serde_json::from_value(
        json!({"configMapRef": {"name": "app-env"}, "prefix": "APP_"}),
    )
    .unwrap()]);
    node.api.create_pod(p);
    node.wait_running(NS, "sig").await;
    until("sig Running in the API", WAIT, || {
        node.api.get_pod(NS, "sig").is_some_and(|p| running(&p))
    })
    .await;
    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;
    until("sig baselined", WAIT, || {
        baseline_of(&node, "sig").is_some()
    })
    .await;

    node.api.apply_configmap(app_env("info", "81"));
    let ev = node.wait_event(NS, "sig", "EnvNotReloaded").await;
    assert_eq!(ev.type_, "Warning");
    assert!(
        ev.note.contains("configmap app-env") && ev.note.contains("reloadlet.io/env-action: evict"),
        "{}",
        ev.note
    );
    never(
        "a second EnvNotReloaded, or an eviction",
        CONTROLLER_QUIET,
        || node.events(NS, "sig", "EnvNotReloaded").len() > 1 || eviction_requests(&node) > 0,
    )
    .await;
    assert!(
        signals_in(&out).is_empty(),
        "a signal cannot refresh env: none sent"
    );
    controller.stop().await;
    let controller = ControllerProcess::start(&node, &[NO_ELECTION], &[]).await;
    never(
        "EnvNotReloaded repeated after a restart",
        CONTROLLER_QUIET,
        || node.events(NS, "sig", "EnvNotReloaded").len() > 1,
    )
    .await;
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn under_dry_run_no_baseline_is_written_and_the_eviction_is_asked_with_dry_run_all() {
    if !root_or_skip() {
        return;
    }
    let node = Node::start(NodeOptions::default()).await;
    node.api.apply_configmap(app_env("info", "80"));
    let web = replicaset(
        &node,
        "web",
        1,
        "evict",
        vec![env_key("LOG", "configmap", "app-env", "LOG")],
    )
    .await;
    let controller = ControllerProcess::start(&node, &[NO_ELECTION, "--dry-run"], &[]).await;
    // The baseline is taken (in memory only: its write is a dry run).
    until("the baseline write logged as a dry run", WAIT, || {
        let log = controller.log();
        log.contains("dry-run: would patch") && log.contains(BASELINE)
    })
    .await;
    node.api.apply_configmap(app_env("debug", "80"));
    let asked = eventually("an eviction asked with dryRun=All", WAIT, || {
        let evictions = node.api.evictions();
        (!evictions.is_empty()).then_some(evictions)
    })
    .await;
    assert!(asked.iter().all(|e| e.dry_run), "{asked:?}");
    assert!(evicted_uids(&node).is_empty());
    let pods = node.api.pods_of_replicaset(NS, "web");
    assert_eq!(uids(&pods), web, "the pod stays");
    assert!(pods.iter().all(running));
    for p in &pods {
        let name = p.metadata.name.clone().unwrap_or_default();
        assert_eq!(
            baseline_of(&node, &name),
            None,
            "{name}: no baseline written"
        );
    }
    controller.stop().await;
}
