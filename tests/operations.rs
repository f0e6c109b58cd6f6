//! What an operator running reloadlet on many nodes relies on: metrics that move with the
//! actions, filters that hold, readiness that means something, explain, structured logs.

mod common;

use common::fixtures::{configmap, pod};
use common::*;
use std::process::Command;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(15);

fn opted_in(
    ns: &str,
    name: &str,
    cm: &str,
    out: &std::path::Path,
) -> k8s_openapi::api::core::v1::Pod {
    pod(ns, name)
        .signal()
        .label("tier", "web")
        .configmap_volume("conf", cm)
        .recorder("app", out, &[("conf", "/c")])
        .build()
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_follow_the_actions() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api.apply_configmap(configmap("m", "c", &[("k", "1")]));
    let out = node.path("a.sig");
    node.api.create_pod(opted_in("m", "good", "c", &out));
    node.api.create_pod(
        pod("m", "bad")
            .signal()
            .annotate("reloadlet.io/signal", "KILL")
            .configmap_volume("conf", "c")
            .recorder("app", &node.path("b.sig"), &[("conf", "/c")])
            .build(),
    );
    node.wait_running("m", "good").await;
    node.wait_running("m", "bad").await;
    node.wait_tracked(4).await;
    assert_eq!(node.metric("reloadlet_watched_pods"), 2.0);
    assert_eq!(
        node.metric("reloadlet_actions_total{action=\"none\",outcome=\"invalid_annotation\"}"),
        1.0
    );
    let swaps_before = node.metric("reloadlet_volume_swaps_total{plugin=\"configmap\"}");
    node.api.apply_configmap(configmap("m", "c", &[("k", "2")]));
    eventually("signaled", WAIT, || {
        (signals_in(&out) == ["SIGHUP"]).then_some(())
    })
    .await;
    eventually("metrics updated", WAIT, || {
        let text = node.scrape();
        let ok = metric_value(
            &text,
            "reloadlet_actions_total{action=\"signal\",outcome=\"signaled\"}",
        ) == 1.0
            && metric_value(
                &text,
                "reloadlet_action_latency_seconds_count{action=\"signal\"}",
            ) == 1.0
            && metric_value(&text, "reloadlet_volume_swaps_total{plugin=\"configmap\"}")
                >= swaps_before + 2.0
            && metric_value(
                &text,
                "reloadlet_actions_total{action=\"none\",outcome=\"invalid_annotation\"}",
            ) == 2.0;
        ok.then_some(())
    })
    .await;
    // A no-op resync of every pod: counted as nothing, never acted on.
    let token_swaps = node.metric("reloadlet_volume_swaps_total{plugin=\"projected\"}");
    node.kubelet.resync_all();
    node.kubelet.rotate_tokens();
    eventually("token swaps counted", WAIT, || {
        (node.metric("reloadlet_volume_swaps_total{plugin=\"projected\"}") >= token_swaps + 2.0)
            .then_some(())
    })
    .await;
    assert_eq!(
        node.metric("reloadlet_actions_total{action=\"signal\",outcome=\"signaled\"}"),
        1.0
    );
    assert!(node.metric("reloadlet_inotify_watches") > 0.0);
    for line in node.scrape().lines().filter(|l| !l.starts_with('#')) {
        assert!(
            !line.contains("good") && !line.contains("pod="),
            "no pod names in labels: {line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn namespace_and_label_filters_hold_even_for_opted_in_pods() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[
        "--namespaces",
        "a,b",
        "--exclude-namespaces",
        "b",
        "--pod-selector",
        "tier=web",
    ])
    .await;
    let mut outs = Vec::new();
    for (ns, name, tier) in [
        ("a", "in", "web"),
        ("b", "excluded", "web"),
        ("c", "elsewhere", "web"),
        ("a", "other-tier", "db"),
    ] {
        node.api.apply_configmap(configmap(ns, "c", &[("k", "1")]));
        let out = node.path(&format!("{name}.sig"));
        let mut p = opted_in(ns, name, "c", &out);
        p.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("tier".into(), tier.into());
        node.api.create_pod(p);
        node.wait_running(ns, name).await;
        outs.push((name, out));
    }
    // 4 configMap volumes + the kube-api-access volumes of the 3 pods the selector lets in: a
    // projected volume is hashed only once its pod spec is known, and `other-tier`'s never is.
    node.wait_tracked(7).await;
    for ns in ["a", "b", "c"] {
        node.api.apply_configmap(configmap(ns, "c", &[("k", "2")]));
    }
    eventually("the pod inside the filters is signalled", WAIT, || {
        (signals_in(&outs[0].1) == ["SIGHUP"]).then_some(())
    })
    .await;
    never(
        "a pod outside the filters is signalled",
        AGENT_QUIET,
        || outs[1..].iter().any(|(_, o)| !signals_in(o).is_empty()),
    )
    .await;
    assert!(
        node.all_events().iter().all(|e| e.regarding_name == "in"),
        "{:?}",
        node.all_events()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn readyz_flips_only_after_the_pod_list_is_synced() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.set_outage(Some(503));
    node.spawn_agent(&[]);
    let listen = node.agent().listen.clone();
    eventually("healthz answers", WAIT, || {
        http_get(&listen, "/healthz").filter(|(c, _)| *c == 200)
    })
    .await;
    never("ready without a pod list", Duration::from_secs(2), || {
        http_get(&listen, "/readyz").is_some_and(|(c, _)| c == 200)
    })
    .await;
    assert_eq!(http_get(&listen, "/readyz").map(|(c, _)| c), Some(503));
    node.api.set_outage(None);
    eventually(
        "ready once the API answers",
        Duration::from_secs(30),
        || http_get(&listen, "/readyz").filter(|(c, _)| *c == 200),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn explain_says_what_would_happen_and_why() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api
        .apply_configmap(configmap("x", "conf", &[("k", "1")]));
    let out = node.path("x.sig");
    node.api.create_pod(
        pod("x", "web")
            .signal()
            .configmap_volume("conf", "conf")
            .recorder("app", &out, &[("conf", "/c")])
            .sub_path_mount("app", "conf", "/etc/k", "k")
            .container(serde_json::json!({"name": "env-only", "image": "x", "envFrom": [{"secretRef": {"name": "db"}}]}))
            .build(),
    );
    let handles = node.wait_running("x", "web").await;
    // As `kubectl exec ds/reloadlet -- reloadlet explain` runs it: with the agent's service
    // account, under the chart's agent role (its `get pods` is for this).
    let as_agent = node.agent_kubeconfig();
    let output = Command::new(env!("CARGO_BIN_EXE_reloadlet"))
        .args(["explain", "--pod", "x/web"])
        .env("KUBECONFIG", &as_agent)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let pid = handles.container("app").unwrap().main_pid;
    assert!(text.contains("action: signal SIGHUP"), "{text}");
    assert!(
        text.contains("conf [configmap conf]: triggers SIGHUP to app"),
        "{text}"
    );
    assert!(
        text.contains("never triggers"),
        "token volume explained: {text}"
    );
    assert!(text.contains(&format!("main pid {pid}")), "{text}");
    assert!(
        text.contains("environment variables") && text.contains("secret db"),
        "{text}"
    );
    let missing = Command::new(env!("CARGO_BIN_EXE_reloadlet"))
        .args(["explain", "--pod", "x/nope"])
        .env("KUBECONFIG", &as_agent)
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&missing.stderr).lines().count(),
        1,
        "one-line reason"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_decision_is_one_structured_json_line() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&["--log-format", "json"]).await;
    node.api.apply_configmap(configmap("j", "c", &[("k", "1")]));
    let out = node.path("j.sig");
    node.api.create_pod(opted_in("j", "web", "c", &out));
    node.wait_running("j", "web").await;
    node.wait_tracked(2).await;
    // Running is not yet listening: the recorder says READY once its handler is installed (a
    // SIGHUP before that is dropped by the kernel, as reloadlet's own log line then says).
    eventually("the recorder ready", WAIT, || {
        recorder_ready(&out).then_some(())
    })
    .await;
    node.api.apply_configmap(configmap("j", "c", &[("k", "2")]));
    eventually("signaled", WAIT, || {
        (signals_in(&out) == ["SIGHUP"]).then_some(())
    })
    .await;
    let log = node.agent_log();
    let decision = eventually("a decision line", WAIT, || {
        node.agent_log()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["outcome"] == "signaled")
    })
    .await;
    assert_eq!(decision["pod"], "j/web");
    assert_eq!(decision["action"], "signal");
    assert_eq!(decision["container"], "app");
    assert_eq!(decision["cause"], "configmap c changed");
    assert!(decision["latency_ms"].as_f64().is_some());
    assert!(
        log.lines()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()),
        "every line is JSON"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_flags_and_an_unusable_kubelet_root_exit_with_one_line() {
    for args in [
        vec!["--node-name", "n", "--kubelet-root", "/nonexistent"],
        vec!["--node-name", "n", "--debounce", "soon"],
        vec!["--kubelet-root", "/tmp"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_reloadlet"))
            .args(&args)
            .env_remove("NODE_NAME")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.trim().is_empty(), "{args:?}: a reason is printed");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_reloadlet"))
        .args(["--node-name", "n", "--kubelet-root", "/nonexistent"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim().lines().count(),
        1
    );
}
