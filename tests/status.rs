//! `reloadlet status` end to end against the simulated API server, run as an operator runs it:
//! the binary, a kubeconfig whose user may only read pods and get ConfigMaps/Secrets.
//!
//! The data version on the object (`reloadlet.io/data-version`) and the pods' records
//! (`reloadlet.io/applied`) are written here the way the controller and the agent write them
//! (with the library's own types and a test key); what is checked is what the operator reads:
//! each consumer's state and reason, the summary line, the exit code, `--wait`, and that a
//! Secret's data is never asked for nor shown. The controller's writer of the data version
//! (`the_controller_publishes_…`, `under_dry_run_…`) and the agent's writer of the records
//! are run for real too, and the whole story with both
//! (`with_the_real_agent_and_controller_status_follows_a_change_to_each_consumers_state`).

mod common;
#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/http.rs"]
mod http_support;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodStatus, Secret};
use nodesim::apiserver::rbac::{Policy, User};
use nodesim::apiserver::ApiServer;
use reloadlet::core::model::{SourceKind, SourceRef};
use reloadlet::core::outcome::ActionKind;
use reloadlet::core::status::applied::{Applied, Entry, Recorded};
use reloadlet::core::status::data_version::{version_of_files, Published, ANNOTATION};
use reloadlet::core::volume_digest::HashKey;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const NS: &str = "shop";

fn key() -> HashKey {
    HashKey::from_bytes([9; 32])
}

fn cm() -> SourceRef {
    SourceRef {
        kind: SourceKind::ConfigMap,
        name: "app".into(),
    }
}

/// A read-only operator: list pods, get ConfigMaps and Secrets (metadata is all it asks for).
fn reader_kubeconfig(api: &ApiServer, dir: &Path) -> PathBuf {
    let policy = Policy::from_objects(&[
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "status-reader", "namespace": NS},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
                {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get"]}
            ]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "status-reader", "namespace": NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "status-reader"},
            "subjects": [{"kind": "User", "name": "operator"}]}),
    ])
    .unwrap();
    api.set_rbac(policy);
    let token = api.mint_token(User {
        name: "operator".into(),
        groups: vec!["system:authenticated".into()],
    });
    let path = dir.join("kubeconfig");
    api.write_kubeconfig_with_token(&path, Some(&token))
        .unwrap();
    path
}

fn status_command(kubeconfig: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_reloadlet"));
    cmd.arg("status")
        .args(args)
        .args(["-n", NS, "--kubeconfig"])
        .arg(kubeconfig)
        .env_remove("KUBECONFIG");
    cmd
}

fn status(kubeconfig: &Path, args: &[&str]) -> (i32, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = status_command(kubeconfig, args).output().unwrap();
    let out = String::from_utf8_lossy(&stdout).to_string();
    let code = status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 1,
        "exit {code}\n{out}\n{}",
        String::from_utf8_lossy(&stderr)
    );
    (code, out)
}

/// The line of `pod` in the table.
fn line<'a>(out: &'a str, pod: &str) -> &'a str {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(pod))
        .unwrap_or_else(|| panic!("no line for {pod} in:\n{out}"))
}

fn publish(api: &ApiServer, value: &str, since: Timestamp) {
    let published = Published::of(&key(), NS, &cm(), [("app.conf", value.as_bytes())], since);
    api.merge_patch_configmap(
        NS,
        "app",
        &json!({"metadata": {"annotations": {ANNOTATION: published.render()}}}),
    )
    .unwrap();
}

/// What the agent writes on a pod after acting for `value`.
fn record(
    api: &ApiServer,
    pod: &str,
    value: &str,
    action: ActionKind,
    entry: impl FnOnce(Entry) -> Entry,
) {
    let version = version_of_files(&key(), NS, &cm(), [("app.conf", value.as_bytes())]);
    let mut applied = Applied::default();
    applied.record(entry(Entry::new(
        &cm(),
        Some(&version),
        Timestamp::now(),
        "agent",
        action,
        Recorded::Applied,
    )));
    api.merge_patch_pod(
        NS,
        pod,
        &json!({"metadata": {"annotations": {"reloadlet.io/applied": applied.render()}}}),
    )
    .unwrap();
}

fn pod(
    api: &ApiServer,
    name: &str,
    action: Option<&str>,
    container: serde_json::Value,
    volumes: serde_json::Value,
    started: Timestamp,
) {
    let mut annotations = serde_json::Map::new();
    if let Some(a) = action {
        annotations.insert("reloadlet.io/action".into(), a.into());
    }
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": true}]},
        "spec": {"nodeName": "node-a", "containers": [container], "volumes": volumes}
    }))
    .unwrap();
    api.create_pod(pod);
    let status: PodStatus = serde_json::from_value(json!({
        "phase": "Running",
        "podIP": "10.0.0.7",
        "containerStatuses": [{"name": "app", "image": "app", "imageID": "", "ready": true, "restartCount": 0,
            "containerID": "containerd://abc", "state": {"running": {"startedAt": started.to_string()}}}]
    }))
    .unwrap();
    api.set_pod_status(NS, name, status);
}

fn mount(sub_path: bool) -> serde_json::Value {
    let mut m = json!({"name": "config", "mountPath": "/etc/app"});
    if sub_path {
        m["subPath"] = "app.conf".into();
        m["mountPath"] = "/etc/app/app.conf".into();
    }
    json!({"name": "app", "image": "app", "volumeMounts": [m],
        "ports": [{"name": "web", "containerPort": 9090}]})
}

fn config_volume() -> serde_json::Value {
    json!([{"name": "config", "configMap": {"name": "app"}}])
}

/// The shop: a ConfigMap `app` consumed by a signal pod, an http pod, an env consumer, a
/// subPath pod, a rollout pod and an unannotated pod, all started at `started`.
fn shop(api: &ApiServer, started: Timestamp) {
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "app", "namespace": NS}, "data": {"app.conf": "v1"}}))
    .unwrap();
    api.apply_configmap(cm);
    pod(
        api,
        "signal-0",
        Some("signal"),
        mount(false),
        config_volume(),
        started,
    );
    pod(
        api,
        "http-0",
        Some("http"),
        mount(false),
        config_volume(),
        started,
    );
    api.merge_patch_pod(
        NS,
        "http-0",
        &json!({"metadata": {"annotations": {"reloadlet.io/http-port": "web"}}}),
    )
    .unwrap();
    pod(
        api,
        "env-0",
        Some("signal"),
        json!({"name": "app", "image": "app", "envFrom": [{"configMapRef": {"name": "app"}}]}),
        json!([]),
        started,
    );
    pod(
        api,
        "subpath-0",
        Some("signal"),
        mount(true),
        config_volume(),
        started,
    );
    pod(
        api,
        "rollout-0",
        Some("rollout"),
        mount(false),
        config_volume(),
        started,
    );
    pod(api, "plain-0", None, mount(false), config_volume(), started);
    pod(
        api,
        "evict-0",
        Some("evict"),
        mount(false),
        config_volume(),
        started,
    );
    // Not a consumer: another ConfigMap.
    pod(
        api,
        "other-0",
        Some("signal"),
        mount(false),
        json!([{"name": "config", "configMap": {"name": "other"}}]),
        started,
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn status_follows_a_change_from_all_current_to_each_consumers_state() {
    let api = ApiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = reader_kubeconfig(&api, dir.path());
    let now = Timestamp::now();
    let started = now - jiff::SignedDuration::from_secs(600);
    shop(&api, started);

    // Before the change: the data was first seen before every pod started.
    publish(&api, "v1", now - jiff::SignedDuration::from_secs(3600));
    let (code, out) = status(&kc, &["configmap/app"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.ends_with("configmap app: 7 consumers: 7 current\n"),
        "{out}"
    );
    assert!(
        line(&out, "signal-0").contains("started after the change"),
        "{out}"
    );
    assert!(
        !out.contains("other-0"),
        "a pod of another ConfigMap is no consumer:\n{out}"
    );

    // Right after the change: nobody has acted yet.
    publish(&api, "v2", now - jiff::SignedDuration::from_secs(5));
    let (code, out) = status(&kc, &["cm/app"]);
    assert_eq!(code, 1, "{out}");
    for (pod, state, reason) in [
        (
            "signal-0",
            "pending",
            "the kubelet has not projected the new data yet",
        ),
        ("http-0", "pending", "the kubelet has not projected"),
        ("env-0", "cannot", "read through env"),
        ("subpath-0", "cannot", "mounted only through subPath"),
        (
            "rollout-0",
            "pending",
            "waiting for the controller: a rollout",
        ),
        ("plain-0", "not reloaded", "no reloadlet.io/action"),
        ("evict-0", "pending", "the kubelet has not projected"),
    ] {
        let l = line(&out, pod);
        assert!(
            l.contains(state) && l.contains(reason),
            "{pod}: want {state} / {reason:?}:\n{out}"
        );
    }
    assert!(
        line(&out, "subpath-0").contains("subPath of volume config (app)"),
        "{out}"
    );
    assert!(line(&out, "env-0").contains("envFrom (app)"), "{out}");

    // After the kubelet's sync and the actions: signalled; the reload endpoint answered 500;
    // pacing holds the evict pod.
    let until = Timestamp::now() + jiff::SignedDuration::from_secs(300);
    record(&api, "signal-0", "v2", ActionKind::Signal, |e| e);
    record(&api, "http-0", "v2", ActionKind::Http, |e| Entry {
        result: Recorded::Failed,
        ..e.with_error("POST http://10.0.0.7:9090/-/reload answered 500 Internal Server Error")
    });
    record(&api, "evict-0", "v2", ActionKind::Evict, |e| Entry {
        result: Recorded::Deferred,
        ..e.with_until(Some(until))
    });
    let (code, out) = status(&kc, &["configmap/app"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        line(&out, "signal-0").contains("current") && line(&out, "signal-0").contains("(signal)"),
        "{out}"
    );
    assert!(
        line(&out, "http-0").contains("failed") && line(&out, "http-0").contains("answered 500"),
        "{out}"
    );
    let hold = reloadlet::core::status::state::short_time(until);
    assert!(
        line(&out, "evict-0").contains(&format!("held by pacing until {hold}")),
        "{out}"
    );
    assert!(
        out.ends_with(&format!(
            "configmap app: 7 consumers: 1 current, 2 pending (controller, pacing until {hold}), 1 failed, 1 not reloaded, 2 cannot\n"
        )),
        "{out}"
    );

    // JSON says the same.
    let (_, json_out) = status(&kc, &["configmap/app", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(v["allCurrent"], false);
    let http = v["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["pod"] == "http-0")
        .unwrap();
    assert_eq!(http["state"], "failed");
    assert_eq!(http["action"], "http", "{http}");
    assert!(
        api.unexpected_forbidden().is_empty(),
        "{:?}",
        api.unexpected_forbidden()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_returns_when_the_last_consumer_turns_current_and_times_out_otherwise() {
    let api = ApiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = reader_kubeconfig(&api, dir.path());
    let now = Timestamp::now();
    let cmap: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "app", "namespace": NS}, "data": {"app.conf": "v2"}}))
    .unwrap();
    api.apply_configmap(cmap);
    let started = now - jiff::SignedDuration::from_secs(600);
    pod(
        &api,
        "a-0",
        Some("signal"),
        mount(false),
        config_volume(),
        started,
    );
    pod(
        &api,
        "b-0",
        Some("signal"),
        mount(false),
        config_volume(),
        started,
    );
    publish(&api, "v2", now - jiff::SignedDuration::from_secs(5));
    record(&api, "a-0", "v2", ActionKind::Signal, |e| e);

    // Positive control of the timeout: b-0 stays pending, so --wait gives up with exit 1.
    let (code, out) = status(
        &kc,
        &[
            "configmap/app",
            "--wait",
            "--timeout",
            "1s",
            "--interval",
            "100ms",
        ],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("timed out after 1s"), "{out}");

    let mut child = status_command(
        &kc,
        &[
            "configmap/app",
            "--wait",
            "--timeout",
            "60s",
            "--interval",
            "100ms",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // It is waiting (still running) until b-0 is signalled too.
    assert!(child.try_wait().unwrap().is_none());
    record(&api, "b-0", "v2", ActionKind::Signal, |e| e);
    let exit = common::wait_exit(&mut child, Duration::from_secs(30)).await;
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        exit.success(),
        "{exit}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.ends_with("configmap app: 2 consumers: 2 current\n"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deployment_target_shows_each_object_its_pods_consume() {
    let api = ApiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = reader_kubeconfig(&api, dir.path());
    let now = Timestamp::now();
    let cmap: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "app", "namespace": NS}, "data": {"app.conf": "v1"}}))
    .unwrap();
    api.apply_configmap(cmap);
    publish(&api, "v1", now - jiff::SignedDuration::from_secs(5));
    let started = now - jiff::SignedDuration::from_secs(600);
    for (name, rs, hash) in [
        ("web-abc-1", "web-abc", "abc"),
        ("web-abc-2", "web-abc", "abc"),
        ("api-def-1", "api-def", "def"),
    ] {
        pod(
            &api,
            name,
            Some("signal"),
            mount(false),
            config_volume(),
            started,
        );
        api.merge_patch_pod(
            NS,
            name,
            &json!({"metadata": {"labels": {"pod-template-hash": hash},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": format!("{rs}-uid"), "controller": true}]}}),
        )
        .unwrap();
    }
    record(&api, "web-abc-1", "v1", ActionKind::Signal, |e| e);
    let (code, out) = status(&kc, &["deployment/web"]);
    assert_eq!(code, 1, "{out}");
    assert!(line(&out, "web-abc-1").contains("current"), "{out}");
    assert!(line(&out, "web-abc-2").contains("pending"), "{out}");
    assert!(
        !out.contains("api-def-1"),
        "a pod of another Deployment:\n{out}"
    );
    assert!(
        out.contains("configmap app: 2 consumers: 1 current, 1 pending (kubelet)\n"),
        "{out}"
    );
    assert!(
        out.ends_with("deployment web: 1 object, 0 with every consumer current\n"),
        "{out}"
    );
    record(&api, "web-abc-2", "v1", ActionKind::Signal, |e| e);
    let (code, out) = status(&kc, &["deploy/web", "-o", "json"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["workload"], "deployment/web");
    assert_eq!(v["objects"][0]["summary"], "2 consumers: 2 current");
    // A workload with no pod found is no success.
    let (code, out) = status(&kc, &["deployment/nope"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("deployment nope: no pod of it consumes"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_is_shown_from_its_metadata_without_leaking_its_data() {
    let api = ApiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = reader_kubeconfig(&api, dir.path());
    let db = SourceRef {
        kind: SourceKind::Secret,
        name: "db".into(),
    };
    let password = "correct-horse-battery-staple";
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "db", "namespace": NS},
        "data": {"password": base64(password)}}))
    .unwrap();
    api.apply_secret(secret);
    let now = Timestamp::now();
    let published = Published::of(
        &key(),
        NS,
        &db,
        [("password", password.as_bytes())],
        now - jiff::SignedDuration::from_secs(5),
    );
    let mut s = api.get_secret(NS, "db").unwrap();
    s.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION.into(), published.render());
    api.apply_secret(s);
    pod(
        &api,
        "db-0",
        Some("signal"),
        mount(false),
        json!([{"name": "config", "secret": {"secretName": "db"}}]),
        now - jiff::SignedDuration::from_secs(600),
    );
    let before = api.requests().len();
    let (code, out) = status(&kc, &["secret/db", "-o", "wide"]);
    assert_eq!(code, 1, "{out}");
    assert!(line(&out, "db-0").contains("pending"), "{out}");
    assert!(
        out.ends_with("secret db: 1 consumer: 1 pending (kubelet)\n"),
        "{out}"
    );
    let (_, json_out) = status(&kc, &["secret/db", "-o", "json"]);
    for text in [&out, &json_out] {
        assert!(
            !text.contains(password) && !text.contains(&base64(password)),
            "{text}"
        );
    }
    // The Secret was read as metadata only, every time.
    let secret_gets: Vec<_> = api
        .requests_since(before)
        .into_iter()
        .filter(|r| r.path.contains("/secrets/"))
        .collect();
    assert!(!secret_gets.is_empty());
    for r in &secret_gets {
        assert!(r.accept.contains("as=PartialObjectMetadata"), "{r:?}");
    }
    assert!(
        api.unexpected_forbidden().is_empty(),
        "{:?}",
        api.unexpected_forbidden()
    );
}

fn base64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[test]
fn as_the_kubectl_plugin_it_needs_a_subcommand_and_says_kubectl_reloadlet() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("kubectl-reloadlet");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_reloadlet"), &plugin).unwrap();
    // `kubectl reloadlet` alone: the help, never the node agent.
    let out = Command::new(&plugin)
        .env_remove("NODE_NAME")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("Usage: kubectl reloadlet"), "{text}");
    assert!(text.contains("status"), "{text}");
    let help = Command::new(&plugin)
        .args(["status", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("Usage: kubectl reloadlet status"), "{help}");
    // Under its own name, the same binary is the agent (a missing --node-name is its error).
    let agent = Command::new(env!("CARGO_BIN_EXE_reloadlet"))
        .env_remove("NODE_NAME")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&agent.stderr).contains("--node-name"),
        "{}",
        String::from_utf8_lossy(&agent.stderr)
    );
}

/// `reloadlet.io/data-version` of ConfigMap/Secret `name` in `NS`, as the API server holds it.
fn data_version_of(node: &common::Node, kind: SourceKind, name: &str) -> Option<String> {
    let meta = match kind {
        SourceKind::Secret => node.api.get_secret(NS, name)?.metadata,
        _ => node.api.get_configmap(NS, name)?.metadata,
    };
    meta.annotations?.get(ANNOTATION).cloned()
}

/// The controller's PATCHes of ConfigMaps/Secrets.
fn object_patches(node: &common::Node) -> Vec<String> {
    node.api
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "PATCH" && (r.path.contains("/configmaps/") || r.path.contains("/secrets/"))
        })
        .map(|r| r.path)
        .collect()
}

/// ConfigMap `app` (annotated `team: shop`) and Secret `db`, both read by pod `web`, and
/// ConfigMap `unread` that no pod reads.
async fn published_scene() -> common::Node {
    use common::fixtures::{configmap, pod, secret};
    let node = common::Node::start(common::NodeOptions::default()).await;
    let mut app = configmap(NS, "app", &[("app.conf", "v1")]);
    app.metadata.annotations = Some([("team".to_owned(), "shop".to_owned())].into());
    node.api.apply_configmap(app);
    node.api
        .apply_configmap(configmap(NS, "unread", &[("x.conf", "1")]));
    node.api
        .apply_secret(secret(NS, "db", &[("password", "hunter2")]));
    node.api.create_pod(
        pod(NS, "web")
            .signal()
            .configmap_volume("conf", "app")
            .secret_volume("db", "db")
            .recorder(
                "app",
                &node.path("web.sig"),
                &[("conf", "/etc/app"), ("db", "/etc/db")],
            )
            .build(),
    );
    node.wait_running(NS, "web").await;
    node
}

#[tokio::test(flavor = "multi_thread")]
async fn the_controller_publishes_the_data_version_once_per_change_of_the_data_it_reads() {
    let node = published_scene().await;
    let admin = node.kubeconfig();
    // Nothing published yet: status says it waits for the controller.
    let (code, out) = status(&admin, &["configmap/app"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("has not published this object's data version"),
        "{out}"
    );

    // Under the chart's RBAC (controller.secrets=true: patch on configmaps and secrets).
    let controller = controller_process::ControllerProcess::start(
        &node,
        &["--leader-elect=false", "--secrets"],
        &[],
    )
    .await;
    let wait = Duration::from_secs(20);
    let first = common::eventually("app's data version published", wait, || {
        data_version_of(&node, SourceKind::ConfigMap, "app")
    })
    .await;
    let published = Published::parse(&first).unwrap();
    assert!(
        first.starts_with("v1 since=") && first.contains(" app.conf="),
        "{first}"
    );
    let db = common::eventually("db's data version published", wait, || {
        data_version_of(&node, SourceKind::Secret, "db")
    })
    .await;
    assert!(db.contains(" password=") && !db.contains("hunter2"), "{db}");
    // Only that annotation was written: the data and the other annotation stay.
    let app = node.api.get_configmap(NS, "app").unwrap();
    assert_eq!(app.data.unwrap()["app.conf"], "v1");
    assert_eq!(app.metadata.annotations.unwrap()["team"], "shop");
    // What status reads now: published, so no longer waiting for the controller.
    let (_, out) = status(&admin, &["configmap/app"]);
    assert!(
        !out.contains("has not published this object's data version"),
        "{out}"
    );
    assert!(line(&out, "web").contains("signal"), "{out}");

    // A label edit writes nothing; the next data change does (the positive control).
    node.api
        .merge_patch_configmap(
            NS,
            "app",
            &json!({"metadata": {"labels": {"tier": "front"}}}),
        )
        .unwrap();
    node.api
        .merge_patch_configmap(NS, "app", &json!({"data": {"app.conf": "v2"}}))
        .unwrap();
    let second = common::eventually("app's new data version", wait, || {
        data_version_of(&node, SourceKind::ConfigMap, "app").filter(|v| *v != first)
    })
    .await;
    let republished = Published::parse(&second).unwrap();
    assert_ne!(republished.keys, published.keys, "{first} / {second}");
    assert!(republished.since >= published.since, "{first} / {second}");
    let app_patches = || {
        object_patches(&node)
            .into_iter()
            .filter(|p| p.ends_with("/configmaps/app"))
            .count()
    };
    // The simulated API server logs a request after it applied it: wait for the log of the
    // write just seen before counting.
    common::until("the write of app's new data version logged", wait, || {
        node.api.requests().iter().any(|r| {
            r.method == "PATCH" && r.path.ends_with("/configmaps/app") && r.body.contains(&second)
        })
    })
    .await;
    assert_eq!(
        app_patches(),
        2,
        "one write per data, none for the label edit"
    );
    // A ConfigMap no pod reads is never written (app, in the same namespace, was: above).
    assert_eq!(
        data_version_of(&node, SourceKind::ConfigMap, "unread"),
        None
    );
    assert!(
        !object_patches(&node).iter().any(|p| p.ends_with("/unread")),
        "{:?}",
        object_patches(&node)
    );

    // Not the controller's own write: new data together with an older data version (a
    // restore from a backup, say). Only the annotation looks changed to a metadata watch; it
    // is routed all the same, and the version of the new data published.
    node.api
        .merge_patch_configmap(
            NS,
            "app",
            &json!({"data": {"app.conf": "v3"}, "metadata": {"annotations": {ANNOTATION: first}}}),
        )
        .unwrap();
    let third = common::eventually("app's data version of v3", wait, || {
        data_version_of(&node, SourceKind::ConfigMap, "app").filter(|v| *v != first)
    })
    .await;
    let restored = Published::parse(&third).unwrap();
    assert_ne!(restored.keys, republished.keys, "{second} / {third}");
    assert_ne!(restored.keys, published.keys, "{first} / {third}");
    assert!(
        node.api.unexpected_forbidden().is_empty(),
        "{:?}\n{}",
        node.api.unexpected_forbidden(),
        controller.log()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn under_dry_run_the_controller_publishes_nothing() {
    let node = published_scene().await;
    let controller = controller_process::ControllerProcess::start(
        &node,
        &["--leader-elect=false", "--dry-run"],
        &[],
    )
    .await;
    // The positive control: it would have written app's data version.
    common::until(
        "the data version of app logged as a dry run",
        Duration::from_secs(20),
        || {
            let log = controller.log();
            log.contains("dry-run: would patch the object's annotation")
                && log.contains("reloadlet.io/data-version")
        },
    )
    .await;
    assert_eq!(data_version_of(&node, SourceKind::ConfigMap, "app"), None);
    assert!(
        object_patches(&node).is_empty(),
        "{:?}",
        object_patches(&node)
    );
}

/// The pod `name`'s `reloadlet.io/applied` record, when it has one.
fn applied_on(api: &ApiServer, name: &str) -> Option<Applied> {
    let pod = api.get_pod(NS, name)?;
    let annotations = pod.metadata.annotations.unwrap_or_default();
    Applied::of_pod(&annotations).ok().flatten()
}

/// The PATCH requests that wrote `reloadlet.io/applied` on pod `name` (`dry_run`: only those
/// sent with `dryRun=All`, else only the others).
fn record_patches(api: &ApiServer, name: &str, dry_run: bool) -> usize {
    let path = format!("/api/v1/namespaces/{NS}/pods/{name}");
    api.requests()
        .iter()
        .filter(|r| {
            r.method == "PATCH" && r.path == path && r.body.contains("reloadlet.io/applied")
        })
        .filter(|r| r.query.contains("dryRun=All") == dry_run)
        .count()
}

/// The node agent writes the records itself (issue #46 §2): after a ConfigMap change a signal
/// pod's record names the version of the data it was signalled for — what `version_of_files`
/// gives for the new data under the controller's key, which the agent follows from its Secret
/// (made after the agent started) —
/// and `status` shows it `current` once the object's version is published; an http pod whose
/// endpoint refuses the reload reads `failed` with the reason; the two signals of one change
/// (two containers) are one patch; under `--dry-run` the record is only a dry run.
#[tokio::test(flavor = "multi_thread")]
async fn the_agent_records_what_it_applied_and_status_reads_it() {
    use common::fixtures::{configmap, pod as pod_of, secret};
    use common::*;
    if !root_or_skip() {
        return;
    }
    let wait = Duration::from_secs(20);
    let mut node = Node::start(NodeOptions::default()).await;
    let own = [
        "--pod-namespace",
        "reloadlet-system",
        "--pod-name",
        "reloadlet-x",
    ];
    node.start_agent(&own).await;
    node.api
        .apply_configmap(configmap(NS, "app", &[("app.conf", "v1")]));
    let (app, sidecar) = (node.path("app.sig"), node.path("sidecar.sig"));
    node.api.create_pod(
        pod_of(NS, "signal-0")
            .signal()
            .configmap_volume("config", "app")
            .recorder("app", &app, &[("config", "/etc/app")])
            .recorder("sidecar", &sidecar, &[("config", "/etc/app")])
            .build(),
    );
    // An http pod whose endpoint refuses the reload for good (404: no retry; a 500 is
    // retried for five minutes first, src/agent/tests/record.rs follows that one).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    node.api.create_pod(
        pod_of(NS, "http-0")
            .annotate("reloadlet.io/action", "http")
            .annotate("reloadlet.io/http-port", "web")
            .configmap_volume("config", "app")
            .container(json!({"name": "app", "image": "app",
                "ports": [{"name": "web", "containerPort": port}],
                "volumeMounts": [{"name": "config", "mountPath": common::fixtures::sandboxed(&node.path("http-0"), "/etc/app")}]}))
            .build(),
    );
    node.wait_running(NS, "signal-0").await;
    node.wait_running(NS, "http-0").await;
    let ip = eventually("status.podIP of http-0", wait, || {
        node.api
            .get_pod(NS, "http-0")
            .and_then(|p| p.status?.pod_ip)
            .and_then(|ip| ip.parse::<std::net::IpAddr>().ok())
    })
    .await;
    let _endpoint = http_support::Endpoint::start(
        std::net::SocketAddr::new(ip, port),
        std::iter::repeat_n(http_support::Reply::Status(404, "no such endpoint"), 10),
    )
    .await;
    eventually("recorders ready", wait, || {
        (recorder_ready(&app) && recorder_ready(&sidecar)).then_some(())
    })
    .await;
    node.wait_tracked(4).await;
    // The controller makes its key only now, long after the agent started and found none
    // (installed together, the DaemonSet's pods often start first): the agent follows the
    // Secret, and once its watch has delivered the key (the line it logs then), the record of
    // the next change carries its version. A change that races the key's watch event is
    // recorded without a version (`pending`, the safe side: the unit tests in
    // src/execute/applied/tests.rs hold that case).
    let key_bytes = String::from_utf8(vec![9u8; 32]).unwrap();
    node.api.apply_secret(secret(
        "reloadlet-system",
        "reloadlet-controller-key",
        &[("key", &key_bytes)],
    ));
    eventually("the agent read the controller's key", wait, || {
        node.agent_log()
            .contains("the controller's key is read")
            .then_some(())
    })
    .await;

    // Every container started before the change: only a record can make them current.
    let changed_at = Timestamp::now();
    node.api
        .apply_configmap(configmap(NS, "app", &[("app.conf", "v2")]));
    eventually("both containers got SIGHUP", wait, || {
        (signals_in(&app) == ["SIGHUP"] && signals_in(&sidecar) == ["SIGHUP"]).then_some(())
    })
    .await;
    let record = eventually("signal-0's record", wait, || {
        applied_on(&node.api, "signal-0")
    })
    .await;
    let entry = record
        .get(&cm())
        .expect("an entry for configmap/app")
        .clone();
    let want = version_of_files(&key(), NS, &cm(), [("app.conf", b"v2".as_slice())]);
    assert_eq!(entry.data_version(), Some(want), "{record:?}");
    assert_eq!(
        (entry.result, entry.by.as_str(), entry.action.as_str()),
        (Recorded::Applied, "agent", "signal")
    );
    let failed = eventually("http-0's record", wait, || {
        applied_on(&node.api, "http-0").filter(|r| r.get(&cm()).is_some())
    })
    .await;
    let failed = failed.get(&cm()).unwrap();
    assert_eq!(
        (failed.result, failed.action.as_str()),
        (Recorded::Failed, "http")
    );
    assert!(
        failed.error.as_deref().unwrap_or_default().contains("404"),
        "{failed:?}"
    );

    // The controller's half, by hand: the object's version published.
    publish(&node.api, "v2", changed_at);
    let (_, out) = status(&node.kubeconfig(), &["configmap/app"]);
    let signal = line(&out, "signal-0");
    assert!(
        signal.contains("current") && signal.contains("(signal)"),
        "{out}"
    );
    let http = line(&out, "http-0");
    assert!(http.contains("failed") && http.contains("404"), "{out}");
    // Two signals, the same facts: one write. Nothing more comes.
    never(
        "a second record patch of signal-0",
        Duration::from_secs(2),
        || record_patches(&node.api, "signal-0", false) > 1,
    )
    .await;
    assert_eq!(record_patches(&node.api, "signal-0", false), 1);

    // --dry-run: the record is sent as a dry run and nothing persists.
    node.stop_agent().await;
    let mut dry: Vec<&str> = own.to_vec();
    dry.push("--dry-run");
    node.start_agent(&dry).await;
    node.wait_tracked(4).await;
    node.api
        .apply_configmap(configmap(NS, "app", &[("app.conf", "v3")]));
    eventually("a dry-run record patch of signal-0", wait, || {
        (record_patches(&node.api, "signal-0", true) > 0).then_some(())
    })
    .await;
    assert_eq!(signals_in(&app), ["SIGHUP"], "--dry-run signals nothing");
    assert_eq!(
        applied_on(&node.api, "signal-0").and_then(|r| r.get(&cm()).cloned()),
        Some(entry),
        "nothing persisted"
    );
    assert_eq!(record_patches(&node.api, "signal-0", false), 1);
}

/// `(state, detail)` of every consumer `status <object> -o json` lists.
fn states(kubeconfig: &Path, object: &str) -> BTreeMap<String, (String, String)> {
    let (_, out) = status(kubeconfig, &[object, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    v["consumers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| {
            Some((
                c["pod"].as_str()?.to_owned(),
                (
                    c["state"].as_str()?.to_owned(),
                    c["detail"].as_str()?.to_owned(),
                ),
            ))
        })
        .collect()
}

/// The names of the running pods of Deployment `roll`.
fn roll_pods(node: &common::Node) -> Vec<String> {
    node.api
        .pods_of_workload(nodesim::apiserver::WorkloadKind::Deployment, NS, "roll")
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// The controller's key where it keeps it (read by the agent too), `configmaps` applied, the
/// agent started in its namespace; returns two seconds past the ConfigMaps' write (`since` is
/// the managedFields time taken to the end of its second: pods created after start after it).
async fn agent_with_the_controllers_key(node: &mut common::Node, configmaps: &[ConfigMap]) {
    let key_bytes = String::from_utf8(vec![9u8; 32]).unwrap();
    node.api.apply_secret(common::fixtures::secret(
        "reloadlet-system",
        "reloadlet-controller-key",
        &[("key", &key_bytes)],
    ));
    for cm in configmaps {
        node.api.apply_configmap(cm.clone());
    }
    let written = Timestamp::now();
    node.start_agent(&[
        "--pod-namespace",
        "reloadlet-system",
        "--pod-name",
        "reloadlet-x",
    ])
    .await;
    common::until(
        "two seconds past the ConfigMaps' write",
        Duration::from_secs(60),
        || Timestamp::now().as_second() >= written.as_second() + 2,
    )
    .await;
}

/// The section-3 story (issue #46, `status_follows_a_change_from_all_current_to_each_consumers_state`)
/// with nothing written by hand but the user's own objects: the real agent (holding the
/// controller's key) records what it did on the pods, the real controller publishes
/// `reloadlet.io/data-version` (`since` from the ConfigMap's managedFields) and records its
/// rollouts. ConfigMap `app` is consumed by a signal pod, an http pod whose endpoint refuses
/// the reload, an env consumer, a subPath pod, an unannotated pod, a signal pod held by a
/// maintenance window, and a rollout Deployment; ConfigMap `feature` by the signal pod and the
/// Deployment, which can all become current: `--wait` on it.
#[tokio::test(flavor = "multi_thread")]
async fn with_the_real_agent_and_controller_status_follows_a_change_to_each_consumers_state() {
    use common::fixtures::{configmap, pod as pod_of, sandboxed};
    use common::*;
    if !root_or_skip() {
        return;
    }
    let wait = Duration::from_secs(60);
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.set_nodes(&[NODE]);
    agent_with_the_controllers_key(
        &mut node,
        &[
            configmap(NS, "app", &[("app.conf", "v1")]),
            configmap(NS, "feature", &[("feature.conf", "f1")]),
        ],
    )
    .await;

    let (sig, plain, paced) = (
        node.path("app.sig"),
        node.path("plain.sig"),
        node.path("paced.sig"),
    );
    node.api.create_pod(
        pod_of(NS, "signal-0")
            .signal()
            .configmap_volume("config", "app")
            .configmap_volume("feature", "feature")
            .recorder(
                "app",
                &sig,
                &[("config", "/etc/app"), ("feature", "/etc/feature")],
            )
            .build(),
    );
    // An http pod whose endpoint refuses the reload: a 404 fails at once (a 500 is retried
    // for five minutes first, docs/http-reload.md).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    node.api.create_pod(
        pod_of(NS, "http-0")
            .annotate("reloadlet.io/action", "http")
            .annotate("reloadlet.io/http-port", "web")
            .configmap_volume("config", "app")
            .container(json!({"name": "app", "image": "app",
                "ports": [{"name": "web", "containerPort": port}],
                "volumeMounts": [{"name": "config", "mountPath": sandboxed(&node.path("http-0"), "/etc/app")}]}))
            .build(),
    );
    node.api.create_pod(
        pod_of(NS, "env-0")
            .signal()
            .container(json!({"name": "app", "image": "app",
                "envFrom": [{"configMapRef": {"name": "app"}}]}))
            .build(),
    );
    node.api.create_pod(
        pod_of(NS, "subpath-0")
            .signal()
            .configmap_volume("config", "app")
            .container(json!({"name": "app", "image": "app",
                "volumeMounts": [{"name": "config", "subPath": "app.conf",
                    "mountPath": sandboxed(&node.path("subpath-0"), "/etc/app.conf")}]}))
            .build(),
    );
    node.api.create_pod(
        pod_of(NS, "plain-0")
            .configmap_volume("config", "app")
            .recorder("app", &plain, &[("config", "/etc/app")])
            .build(),
    );
    // Held by pacing: signals too wait for a maintenance window that opens on January 1st.
    node.api.create_pod(
        pod_of(NS, "paced-0")
            .signal()
            .annotate("reloadlet.io/window", "0 0 1 1 *")
            .annotate("reloadlet.io/window-actions", "all")
            .configmap_volume("config", "app")
            .recorder("app", &paced, &[("config", "/etc/app")])
            .build(),
    );
    node.api
        .apply_deployment(
            serde_json::from_value(json!({
                "metadata": {"name": "roll", "namespace": NS},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "roll"}},
                    "template": {
                        "metadata": {"labels": {"app": "roll"}, "annotations": {
                            "reloadlet.io/action": "rollout",
                            "nodesim.reloadlet.io/ready-delay-ms": "10000"}},
                        "spec": {"containers": [{"name": "app", "image": "app", "env": [
                            {"name": "APP", "valueFrom": {"configMapKeyRef": {"name": "app", "key": "app.conf"}}},
                            {"name": "FEATURE", "valueFrom": {"configMapKeyRef": {"name": "feature", "key": "feature.conf"}}}
                        ]}]}}}
            }))
            .unwrap(),
        )
        .unwrap();
    for p in [
        "signal-0",
        "http-0",
        "env-0",
        "subpath-0",
        "plain-0",
        "paced-0",
    ] {
        node.wait_running(NS, p).await;
    }
    let ip = eventually("status.podIP of http-0", wait, || {
        node.api
            .get_pod(NS, "http-0")
            .and_then(|p| p.status?.pod_ip)
            .and_then(|ip| ip.parse::<std::net::IpAddr>().ok())
    })
    .await;
    let _endpoint = http_support::Endpoint::start(
        std::net::SocketAddr::new(ip, port),
        std::iter::repeat_n(http_support::Reply::Status(404, "no such endpoint"), 10),
    )
    .await;
    eventually("recorders ready", wait, || {
        (recorder_ready(&sig) && recorder_ready(&plain) && recorder_ready(&paced)).then_some(())
    })
    .await;
    node.wait_tracked(4).await;

    let controller =
        controller_process::ControllerProcess::start(&node, &["--leader-elect=false"], &[]).await;
    let old_roll = eventually("the rollout pod, baselined", wait, || {
        let pods =
            node.api
                .pods_of_workload(nodesim::apiserver::WorkloadKind::Deployment, NS, "roll");
        let p = pods.first()?;
        let baselined = p
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("reloadlet.io/rollout-baseline"));
        (pods.len() == 1 && baselined).then(|| p.metadata.name.clone().unwrap())
    })
    .await;
    let kc = node.kubeconfig();

    // Before the change: the controller published both data versions; every pod started
    // after the data was written, so all seven consumers of app are current.
    let out = eventually("all seven consumers of app current", wait, || {
        let (code, out) = status(&kc, &["configmap/app"]);
        (code == 0).then_some(out)
    })
    .await;
    assert!(
        out.ends_with("configmap app: 7 consumers: 7 current\n"),
        "{out}"
    );
    assert!(
        line(&out, "signal-0").contains("started after the change"),
        "{out}"
    );
    assert!(line(&out, &old_roll).contains("current"), "{out}");
    let (code, out) = status(&kc, &["configmap/feature"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.ends_with("configmap feature: 2 consumers: 2 current\n"),
        "{out}"
    );
    for pod in ["signal-0", "http-0", "paced-0", old_roll.as_str()] {
        assert_eq!(applied_on(&node.api, pod), None, "no record yet on {pod}");
    }
    let published_v1 = data_version_of(&node, SourceKind::ConfigMap, "app").unwrap();

    // The change.
    node.api
        .apply_configmap(configmap(NS, "app", &[("app.conf", "v2")]));
    eventually("signal-0 got SIGHUP", wait, || {
        (signals_in(&sig) == ["SIGHUP"]).then_some(())
    })
    .await;
    // The old rollout pod reads pending while its replacement starts: 10 s to Ready, so that
    // status calls on a loaded machine still see it (with 3 s, one run in eight under two
    // busy loops missed the window).
    let (state, detail) = eventually("the old rollout pod in progress", wait, || {
        states(&kc, "configmap/app")
            .remove(&old_roll)
            .filter(|(_, d)| d.contains("rollout in progress"))
    })
    .await;
    assert_eq!(state, "pending", "{detail}");
    // The controller published v2's version (not by hand).
    let published = eventually("app's data version of v2", wait, || {
        data_version_of(&node, SourceKind::ConfigMap, "app").filter(|v| *v != published_v1)
    })
    .await;
    let want_version = version_of_files(&key(), NS, &cm(), [("app.conf", b"v2".as_slice())]);
    assert!(Published::parse(&published).is_ok(), "{published}");

    // After the actions: the agent's records and the controller's replacement.
    let out = eventually("each consumer of app in its state", wait, || {
        let (code, out) = status(&kc, &["configmap/app"]);
        let new_roll: Vec<String> = roll_pods(&node)
            .into_iter()
            .filter(|p| *p != old_roll)
            .collect();
        let settled = code == 1
            && !out.contains(&old_roll)
            && new_roll.len() == 1
            && out.contains(&new_roll[0])
            && line(&out, &new_roll[0]).contains("current")
            && line(&out, "signal-0").contains("(signal)")
            && line(&out, "http-0").contains("failed")
            && line(&out, "paced-0").contains("held by pacing until");
        settled.then_some(out)
    })
    .await;
    let signal = applied_on(&node.api, "signal-0").expect("signal-0's record");
    let signal = signal.get(&cm()).expect("an entry for configmap/app");
    assert_eq!(signal.data_version(), Some(want_version), "{signal:?}");
    assert_eq!(
        (signal.result, signal.by.as_str(), signal.action.as_str()),
        (Recorded::Applied, "agent", "signal")
    );
    assert!(
        line(&out, "signal-0").contains("current") && line(&out, "signal-0").contains("(signal)"),
        "{out}"
    );
    let http = applied_on(&node.api, "http-0").expect("http-0's record");
    let http = http.get(&cm()).expect("an entry for configmap/app");
    assert_eq!(
        (http.result, http.by.as_str(), http.action.as_str()),
        (Recorded::Failed, "agent", "http")
    );
    assert!(
        line(&out, "http-0").contains("failed") && line(&out, "http-0").contains("404"),
        "{out}"
    );
    let held = applied_on(&node.api, "paced-0").expect("paced-0's record");
    let held = held.get(&cm()).expect("an entry for configmap/app");
    assert_eq!(
        (held.result, held.by.as_str()),
        (Recorded::Deferred, "agent"),
        "{held:?}"
    );
    let until_t = held.until.expect("deferred until the window opens");
    let hold = reloadlet::core::status::state::short_time(until_t);
    assert!(
        line(&out, "paced-0").contains(&format!("held by pacing until {hold}")),
        "{out}"
    );
    // Held: not signalled (signal-0 was, above).
    never("paced-0 signalled", AGENT_QUIET, || {
        !signals_in(&paced).is_empty()
    })
    .await;
    for (pod, state, reason) in [
        ("env-0", "cannot", "read through env"),
        ("subpath-0", "cannot", "mounted only through subPath"),
        ("plain-0", "not reloaded", "no reloadlet.io/action"),
    ] {
        let l = line(&out, pod);
        assert!(
            l.contains(state) && l.contains(reason),
            "{pod}: want {state} / {reason:?}:\n{out}"
        );
    }
    assert!(
        out.ends_with(&format!(
            "configmap app: 7 consumers: 2 current, 1 pending (pacing until {hold}), 1 failed, 1 not reloaded, 2 cannot\n"
        )),
        "{out}"
    );
    assert!(
        line(&out, "subpath-0").contains("subPath of volume config (app)"),
        "{out}"
    );
    assert!(line(&out, "env-0").contains("envFrom (app)"), "{out}");
    assert!(signals_in(&plain).is_empty(), "{out}");
    // JSON says the same.
    let json_states = states(&kc, "configmap/app");
    assert_eq!(json_states.len(), 7, "{json_states:?}");
    assert_eq!(json_states["http-0"].0, "failed", "{json_states:?}");
    assert_eq!(json_states["paced-0"].0, "pending", "{json_states:?}");

    // --wait on feature, whose consumers can all become current: the signal pod (the agent's
    // record) and the Deployment's pod (replaced by the controller's rollout).
    let feature_v1 = data_version_of(&node, SourceKind::ConfigMap, "feature").unwrap();
    let rolled = roll_pods(&node);
    node.api
        .apply_configmap(configmap(NS, "feature", &[("feature.conf", "f2")]));
    // Once the controller published f2's version, the Deployment's pod runs f1 until it is
    // replaced (a 1 s batch, then 10 s to Ready): --wait gives up with exit 1.
    eventually("feature's data version of f2", wait, || {
        data_version_of(&node, SourceKind::ConfigMap, "feature").filter(|v| *v != feature_v1)
    })
    .await;
    let (code, out) = status(
        &kc,
        &[
            "configmap/feature",
            "--wait",
            "--timeout",
            "1s",
            "--interval",
            "100ms",
        ],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("timed out after 1s"), "{out}");
    let mut child = status_command(
        &kc,
        &[
            "configmap/feature",
            "--wait",
            "--timeout",
            "60s",
            "--interval",
            "100ms",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let exit = wait_exit(&mut child, wait).await;
    let done = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(
        exit.success(),
        "{exit}: {stdout}\n{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(
        stdout.ends_with("configmap feature: 2 consumers: 2 current\n"),
        "{stdout}"
    );
    // Current by the agent's record and by a replacement, not by the pods already there.
    let feature = SourceRef {
        kind: SourceKind::ConfigMap,
        name: "feature".into(),
    };
    let entry = applied_on(&node.api, "signal-0")
        .and_then(|r| r.get(&feature).cloned())
        .expect("signal-0's entry for configmap/feature");
    assert_eq!(
        (entry.result, entry.by.as_str()),
        (Recorded::Applied, "agent")
    );
    let pod_now = roll_pods(&node)
        .into_iter()
        .find(|p| stdout.contains(p.as_str()))
        .expect("the Deployment's pod in the output");
    assert!(!rolled.contains(&pod_now), "{rolled:?} / {stdout}");
    assert!(
        node.api.unexpected_forbidden().is_empty(),
        "{:?}\n{}",
        node.api.unexpected_forbidden(),
        controller.log()
    );
    controller.stop().await;
}

/// Right after a change, the one `pending` reason the story above cannot show for real (the
/// simulated kubelet there projects at once): a pod the kubelet has not synced yet. Here the
/// kubelet keeps its real timing (`syncFrequency` 60 s: without a nudge a change reaches a
/// pod 60–90 s later, nodesim/src/kubelet/sync.rs) and the pod opted out of the controller's
/// nudge (`reloadlet.io/fast-projection: "false"`). While the new data is published and not
/// projected, status reads `pending  the kubelet has not projected …` and the process has had
/// no signal; a pod update (the documented workaround, kubernetes#30189: the kubelet syncs a
/// pod whose annotations changed) makes the kubelet project it, the agent signals, and the
/// pod reads `current` by the agent's record, exit 0.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_the_kubelet_has_not_synced_reads_pending_until_its_sync_then_current() {
    use common::fixtures::{configmap, pod as pod_of};
    use common::*;
    if !root_or_skip() {
        return;
    }
    let wait = Duration::from_secs(60);
    let mut node = Node::start_faithful(Duration::from_secs(60)).await;
    node.api.set_nodes(&[NODE]);
    agent_with_the_controllers_key(&mut node, &[configmap(NS, "app", &[("app.conf", "v1")])]).await;
    let sig = node.path("slow.sig");
    node.api.create_pod(
        pod_of(NS, "slow-0")
            .signal()
            .annotate("reloadlet.io/fast-projection", "false")
            .configmap_volume("config", "app")
            .recorder("app", &sig, &[("config", "/etc/app")])
            .build(),
    );
    node.wait_running(NS, "slow-0").await;
    eventually("recorder ready", wait, || {
        recorder_ready(&sig).then_some(())
    })
    .await;
    node.wait_tracked(1).await;
    // Or the kubelet's sync right after Pending → Running would project the change below.
    node.wait_post_start_syncs(NS, &["slow-0"]).await;
    let controller =
        controller_process::ControllerProcess::start(&node, &["--leader-elect=false"], &[]).await;
    let kc = node.kubeconfig();
    eventually("slow-0 current before the change", wait, || {
        let (code, out) = status(&kc, &["configmap/app"]);
        (code == 0 && out.ends_with("configmap app: 1 consumer: 1 current\n")).then_some(())
    })
    .await;
    let v1 = data_version_of(&node, SourceKind::ConfigMap, "app").unwrap();

    node.api
        .apply_configmap(configmap(NS, "app", &[("app.conf", "v2")]));
    eventually("v2's data version published", wait, || {
        data_version_of(&node, SourceKind::ConfigMap, "app").filter(|v| *v != v1)
    })
    .await;
    let (state, detail) = eventually("slow-0 pending for the kubelet", wait, || {
        states(&kc, "configmap/app").remove("slow-0")
    })
    .await;
    assert_eq!(
        (
            state.as_str(),
            detail.contains("the kubelet has not projected")
        ),
        ("pending", true),
        "{detail}\n{}",
        controller.log()
    );
    // And it really has not: no signal, the volume still holds v1.
    assert!(signals_in(&sig).is_empty(), "{:?}", signals_in(&sig));
    let (code, out) = status(&kc, &["configmap/app"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.ends_with("configmap app: 1 consumer: 1 pending (kubelet)\n"),
        "{out}"
    );

    // A pod update: the kubelet syncs the pod, projects v2, the agent signals and records.
    node.api
        .merge_patch_pod(
            NS,
            "slow-0",
            &json!({"metadata": {"annotations": {"example.com/touched": "1"}}}),
        )
        .unwrap();
    eventually("slow-0 got SIGHUP after its sync", wait, || {
        (signals_in(&sig) == ["SIGHUP"]).then_some(())
    })
    .await;
    let out = eventually("slow-0 current by the agent's record", wait, || {
        let (code, out) = status(&kc, &["configmap/app"]);
        (code == 0).then_some(out)
    })
    .await;
    assert!(
        line(&out, "slow-0").contains("current") && line(&out, "slow-0").contains("(signal)"),
        "{out}"
    );
    // Nothing nudged the opted-out pod: the only pod update is the test's.
    assert!(
        !node
            .api
            .get_pod(NS, "slow-0")
            .and_then(|p| p.metadata.annotations)
            .unwrap_or_default()
            .keys()
            .any(|k| k.contains("nudge")),
        "{out}"
    );
    controller.stop().await;
}
