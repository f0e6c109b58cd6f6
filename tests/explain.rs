//! `reloadlet explain`, run as `kubectl exec ds/reloadlet -- reloadlet explain --pod NS/NAME`
//! would run it: with the DaemonSet's environment and no agent flags. It must apply the
//! agent's filters, say which one excludes the pod, point at the right agent for a pod of
//! another node, and warn about an evict pod no PodDisruptionBudget protects.

use nodesim::apiserver::ApiServer;
use serde_json::json;
use std::path::Path;
use std::process::Command;

fn explain(kubeconfig: &Path, pod: &str, env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_reloadlet"));
    cmd.args(["explain", "--pod", pod])
        .env("KUBECONFIG", kubeconfig)
        .env("NODE_NAME", "node-a");
    for var in [
        "RELOADLET_NAMESPACES",
        "RELOADLET_EXCLUDE_NAMESPACES",
        "RELOADLET_POD_SELECTOR",
        "RELOADLET_DRY_RUN",
        "POD_NAME",
        "POD_NAMESPACE",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn pod(
    name: &str,
    node: &str,
    action: &str,
    labels: serde_json::Value,
) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "shop", "labels": labels,
            "annotations": {"reloadlet.io/action": action},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app"}]}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn explain_applies_the_agents_filters_nodes_and_budgets() {
    let api = ApiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kubeconfig).unwrap();
    api.create_pod(pod(
        "web-0",
        "node-a",
        "evict",
        json!({"app": "web", "tier": "front"}),
    ));
    api.create_pod(pod("db-0", "node-b", "signal", json!({"app": "db"})));
    // The agent's own pod, as the DaemonSet creates it (kubectl exec runs explain in it).
    api.create_pod(
        serde_json::from_value(json!({
            "metadata": {"name": "reloadlet-x7k2p", "namespace": "reloadlet", "labels": {
                "app.kubernetes.io/name": "reloadlet", "app.kubernetes.io/instance": "prod",
                "controller-revision-hash": "5d9c", "pod-template-generation": "3"}},
            "spec": {"nodeName": "node-a", "containers": [{"name": "reloadlet", "image": "r"}]}
        }))
        .unwrap(),
    );
    let kc = kubeconfig.as_path();
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("RELOADLET_EXCLUDE_NAMESPACES", "kube-system,shop")],
            "not acted on: namespace shop is excluded by --exclude-namespaces",
        ),
        (
            &[("RELOADLET_NAMESPACES", "payments")],
            "not acted on: namespace shop is not in --namespaces",
        ),
        (
            &[("RELOADLET_POD_SELECTOR", "tier in (back)")],
            "not acted on: the pod's labels do not match --pod-selector \"tier in (back)\"",
        ),
        (
            &[("RELOADLET_DRY_RUN", "true")],
            "DRY-RUN (--dry-run / RELOADLET_DRY_RUN)",
        ),
        (&[], "WARNING (NoDisruptionBudget): reloadlet.io/action is evict, but no PodDisruptionBudget selects this pod"),
    ];
    for (env, expected) in cases {
        let text = explain(kc, "shop/web-0", env);
        assert!(
            text.contains(expected),
            "{env:?}: expected {expected:?} in:\n{text}"
        );
    }

    api.create_pdb(
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .unwrap(),
    );
    // The manifests set RELOADLET_DRY_RUN="false": that is off.
    let text = explain(kc, "shop/web-0", &[("RELOADLET_DRY_RUN", "false")]);
    assert!(!text.contains("DRY-RUN"), "{text}");
    assert!(
        text.contains("protected by PodDisruptionBudget web"),
        "{text}"
    );
    assert!(!text.contains("NoDisruptionBudget"), "{text}");

    let text = explain(
        kc,
        "shop/db-0",
        &[
            ("POD_NAME", "reloadlet-x7k2p"),
            ("POD_NAMESPACE", "reloadlet"),
        ],
    );
    assert!(
        text.contains("runs on node node-b, not on this agent's node"),
        "{text}"
    );
    assert!(
        text.contains("kubectl -n reloadlet get pod -l app.kubernetes.io/instance=prod,app.kubernetes.io/name=reloadlet --field-selector spec.nodeName=node-b"),
        "{text}"
    );
    assert!(!text.contains("main process not found"), "{text}");
    api.shutdown().await;
}
