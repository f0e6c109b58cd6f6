//! A missing permission is never silent (issue #48): against an API server that enforces
//! exactly the rules the kustomize base renders (the chart's defaults: `hack/render-rbac.sh`
//! checks they are the same), a feature turned on by its flag without its kustomize
//! component makes the controller not Ready, naming the feature and the rule to add, with a
//! metric, one error line and one Warning Event per missing rule on the controller's own pod;
//! the other features keep working; granting the component's rules (checked equal to the
//! chart value's by `hack/render-rbac.sh`) makes it Ready without a restart. And `explain`,
//! run as documented in the agent's pod, names what it may not read instead of dumping it.

mod common;
#[path = "support/controller_process.rs"]
mod controller_process;

use common::fixtures::{configmap, pod};
use common::*;
use controller_process::ControllerProcess as Controller;
use nodesim::apiserver::RecordedEvent;
use std::process::Command;
use std::time::Duration;

const NS: &str = "shop";
/// The controller's pod, as the downward API names it.
const POD: &str = "reloadlet-controller-7d9f8b6c5-x2x4q";
const NUDGE: &str = "reloadlet.io/projection-nudge";
/// A refused watch is retried from 1 s, doubling (jittered up to twice as long): granted
/// after a few refusals, the next try is well within this.
const GRANTED: Duration = Duration::from_secs(45);

fn forbidden_events(node: &Node) -> Vec<RecordedEvent> {
    node.api
        .events()
        .into_iter()
        .filter(|e| e.reason == "Forbidden" && e.regarding_name == POD)
        .collect()
}

/// The `/readyz` body at `listen` once it is 503 and names every one of `parts` (the watches
/// are refused each on its own task, in any order).
async fn readyz_refusal(listen: &str, parts: &[&str]) -> String {
    eventually(
        &format!("/readyz 503 naming {parts:?}"),
        Duration::from_secs(20),
        || {
            http_get(listen, "/readyz").and_then(|(code, body)| {
                (code == 503 && parts.iter().all(|p| body.contains(p))).then_some(body)
            })
        },
    )
    .await
}

/// `/readyz` at `listen` answers 200 (once a refused rule is granted).
async fn ready(listen: &str) {
    eventually("/readyz 200 once granted", GRANTED, || {
        http_get(listen, "/readyz").and_then(|(code, _)| (code == 200).then_some(()))
    })
    .await;
}

/// A ConfigMap projected by an opted-in pod: fast projection must keep working.
async fn projected_pod(node: &Node) {
    node.api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v1")]));
    let out = node.path("web.sig");
    node.api.create_pod(
        pod(NS, "web")
            .signal()
            .configmap_volume("conf", "app-cfg")
            .recorder("app", &out, &[("conf", "/etc/app")])
            .build(),
    );
    node.wait_running(NS, "web").await;
    eventually("web Running in the API", Duration::from_secs(15), || {
        (node
            .api
            .get_pod(NS, "web")
            .and_then(|p| p.status?.phase)
            .as_deref()
            == Some("Running"))
        .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn reloader_compat_without_its_rules_is_not_ready_names_them_and_the_rest_keeps_working() {
    let node = Node::start(NodeOptions::default()).await;
    projected_pod(&node).await;
    for resource in ["deployments", "statefulsets", "daemonsets"] {
        node.api.expect_forbidden("list", "apps", resource);
    }
    // As `kubectl apply -k deploy/` with the flag added but not the component.
    let ctl = Controller::start_under(
        &node,
        &[],
        &["--reloader-compat"],
        &[("POD_NAME", POD)],
        "/healthz",
    )
    .await;
    let body = readyz_refusal(
        &ctl.listen,
        &["deployments.apps", "statefulsets.apps", "daemonsets.apps"],
    )
    .await;
    for kind in ["deployments", "statefulsets", "daemonsets"] {
        let line = format!(
            "feature reloader-compat (--reloader-compat): forbidden to list {kind}.apps cluster-wide (HTTP 403): add the rule {{apiGroups: [\"apps\"], resources: [\"{kind}\"], verbs: [\"list\", \"watch\"]}} to the ServiceAccount's ClusterRole; shipped as the kustomize component deploy/components/controller-reloader-compat, or Helm controller.reloaderCompat=true"
        );
        assert!(
            body.contains(&line),
            "{line}\nmissing from /readyz:\n{body}"
        );
    }
    // Retried with backoff, counted each time, told once per rule.
    eventually("a second refused list", Duration::from_secs(15), || {
        (ctl.metric("reloadlet_forbidden_total{verb=\"list\",resource=\"deployments.apps\"}")
            >= 2.0)
            .then_some(())
    })
    .await;
    // One Warning per missing rule (its action names the request, so kube's recorder folds
    // only its repeats); each note lists every rule missing at that moment.
    let events = eventually(
        "a Warning for each of the three refusals",
        Duration::from_secs(10),
        || {
            let e = forbidden_events(&node);
            (e.len() == 3).then_some(e)
        },
    )
    .await;
    for e in &events {
        assert_eq!(
            (e.type_.as_str(), e.regarding_kind.as_str()),
            ("Warning", "Pod")
        );
        assert_eq!(e.namespace, "reloadlet-system");
        assert_eq!(e.count, 1, "told once, not at every retry: {e:#?}");
    }
    for kind in ["deployments", "statefulsets", "daemonsets"] {
        let rule = format!(
            "list {kind}.apps cluster-wide for reloader-compat (--reloader-compat) (rule {{apiGroups: [apps], resources: [{kind}], verbs: [list, watch]}})"
        );
        assert!(
            events.iter().any(|e| e.note.contains(&rule)),
            "{rule}\nmissing from {events:#?}"
        );
    }
    let log = ctl.log();
    let errors = log
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("forbidden to list deployments.apps"))
        .count();
    assert_eq!(
        errors, 1,
        "one error line for the rule, not one per retry:\n{log}"
    );

    // Fast projection does not depend on it: a change of the ConfigMap is still nudged.
    assert_eq!(node.pod_annotation(NS, "web", NUDGE), None);
    node.api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v2")]));
    eventually("web nudged", Duration::from_secs(15), || {
        node.pod_annotation(NS, "web", NUDGE)
    })
    .await;

    // The operator adds the component (the same rules as the chart's value): Ready again,
    // without a restart, and nothing more is reported.
    node.load_chart_rbac(&["controller.reloaderCompat=true".to_string()]);
    ready(&ctl.listen).await;
    let after = forbidden_events(&node);
    assert_eq!(after, events, "nothing more reported");
    assert!(
        ctl.log().contains("permission granted now"),
        "{}",
        ctl.log()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn env_consumers_of_secrets_without_their_rules_are_not_ready_and_name_the_rule() {
    let node = Node::start(NodeOptions::default()).await;
    node.api.expect_forbidden("*", "", "secrets");
    let ctl = Controller::start_under(
        &node,
        &[],
        &["--env-consumers-secrets"],
        &[("POD_NAME", POD)],
        "/healthz",
    )
    .await;
    let body = readyz_refusal(&ctl.listen, &["secrets cluster-wide"]).await;
    assert!(
        body.contains("feature env-consumers-secrets (--env-consumers-secrets): forbidden to")
            && body.contains("add the rule {apiGroups: [\"\"], resources: [\"secrets\"], verbs: [\"list\", \"watch\"]}")
            && body.contains("deploy/components/controller-env-consumers-secrets"),
        "{body}"
    );
    let event = eventually("one Warning Event", Duration::from_secs(10), || {
        forbidden_events(&node).pop()
    })
    .await;
    assert!(
        event
            .note
            .contains("secrets cluster-wide for env-consumers-secrets"),
        "{}",
        event.note
    );
    let refused = ctl.metric("reloadlet_forbidden_total{verb=\"watch\",resource=\"secrets\"}")
        + ctl.metric("reloadlet_forbidden_total{verb=\"list\",resource=\"secrets\"}");
    assert!(refused >= 1.0, "{refused}");
    node.load_chart_rbac(&["controller.envConsumersSecrets=true".to_string()]);
    ready(&ctl.listen).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn explain_in_the_agents_pod_names_what_it_may_not_read() {
    let node = Node::start(NodeOptions::default()).await;
    node.api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v1")]));
    let out = node.path("web.sig");
    node.api.create_pod(
        pod(NS, "web-5d8c7b9f4-abcde")
            .annotate("reloadlet.io/action", "rollout")
            .owned_by_replicaset("web-5d8c7b9f4")
            .configmap_volume("conf", "app-cfg")
            .recorder("app", &out, &[("conf", "/etc/app")])
            .build(),
    );
    node.wait_running(NS, "web-5d8c7b9f4-abcde").await;
    node.api.expect_forbidden("get", "apps", "replicasets");
    // As docs/explain.md says to run it: `kubectl exec ds/reloadlet -- reloadlet explain`,
    // i.e. as the agent's service account.
    let output = Command::new(env!("CARGO_BIN_EXE_reloadlet"))
        .args(["explain", "--pod", "shop/web-5d8c7b9f4-abcde"])
        .env("KUBECONFIG", node.agent_kubeconfig())
        .env_remove("POD_NAME")
        .env_remove("POD_NAMESPACE")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{text}\n{stderr}");
    assert!(
        text.contains("ReplicaSet web-5d8c7b9f4 could not be read: forbidden (HTTP 403): this identity may not get replicasets.apps in namespace shop"),
        "{text}"
    );
    assert!(
        text.contains("NOTE: the identity explain runs as may not get replicasets.apps")
            && text.contains("KUBECONFIG=… reloadlet explain --pod shop/web-5d8c7b9f4-abcde"),
        "{text}"
    );
    // Named, not dumped.
    for raw in ["ErrorResponse", "system:serviceaccount"] {
        assert!(!text.contains(raw), "{raw} in:\n{text}");
        assert!(!stderr.contains(raw), "{raw} in stderr:\n{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn with_every_component_the_chart_grants_reloader_compat_on_argo_rollouts_is_ready() {
    // A cluster with Argo Rollouts' CRD: the simulated API server serves argoproj.io.
    let node = Node::start_with_argo_rollouts().await;
    // The components controller-reloader-compat, controller-argo-rollouts and
    // controller-reloader-compat-argo-rollouts grant what these values do
    // (hack/render-rbac.sh); the Rollouts' metadata is listed and watched.
    let values = [
        "controller.reloaderCompat=true".to_string(),
        "controller.rollout.argoRollouts=true".to_string(),
    ];
    let ctl = Controller::start_under(
        &node,
        &values,
        &["--reloader-compat", "--argo-rollouts"],
        &[("POD_NAME", POD)],
        "/readyz",
    )
    .await;
    eventually("the Rollouts listed", Duration::from_secs(10), || {
        node.api
            .requests()
            .iter()
            .any(|r| {
                r.path.contains("argoproj.io") && r.path.ends_with("/rollouts") && r.status < 400
            })
            .then_some(())
    })
    .await;
    assert!(forbidden_events(&node).is_empty());
    assert_eq!(
        ctl.metric("reloadlet_forbidden_total{verb=\"list\",resource=\"rollouts.argoproj.io\"}"),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn data_version_publishing_without_configmaps_patch_is_not_ready_names_the_rule_and_nudges_go_on(
) {
    let node = Node::start(NodeOptions::default()).await;
    // Ready under the chart's defaults while no pod reads a ConfigMap (nothing to publish).
    let ctl = Controller::start_under(
        &node,
        &[],
        &["--leader-elect=false"],
        &[("POD_NAME", POD)],
        "/readyz",
    )
    .await;
    // Then the ClusterRole of a chart from before `reloadlet status`: no configmaps patch.
    node.api.set_rbac(
        nodesim::apiserver::rbac_chart::policy_without(&[], "", "configmaps", "patch").unwrap(),
    );
    node.api.expect_forbidden("patch", "", "configmaps");
    projected_pod(&node).await;
    let body = readyz_refusal(&ctl.listen, &["data-version publishing"]).await;
    let line = "feature data-version publishing: forbidden to patch configmaps in namespace shop (HTTP 403): add the rule {apiGroups: [\"\"], resources: [\"configmaps\"], verbs: [\"patch\"]} to the ServiceAccount's ClusterRole (or a Role in namespace shop)";
    assert!(body.contains(line), "{line}\nmissing from /readyz:\n{body}");
    assert!(ctl.metric("reloadlet_forbidden_total{verb=\"patch\",resource=\"configmaps\"}") >= 1.0);
    let event = eventually("one Warning Event", Duration::from_secs(10), || {
        forbidden_events(&node).pop()
    })
    .await;
    assert!(
        event
            .note
            .contains("patch configmaps in namespace shop for data-version publishing"),
        "{}",
        event.note
    );
    // Fast projection keeps working: the next change still nudges web.
    node.api
        .merge_patch_configmap(
            NS,
            "app-cfg",
            &serde_json::json!({"data": {"app.conf": "v2"}}),
        )
        .unwrap();
    eventually("web nudged for v2", Duration::from_secs(15), || {
        node.pod_annotation(NS, "web", NUDGE)
    })
    .await;
    // Granted again (the chart's defaults): the next change is published and it is Ready.
    node.load_chart_rbac(&[]);
    node.api
        .merge_patch_configmap(
            NS,
            "app-cfg",
            &serde_json::json!({"data": {"app.conf": "v3"}}),
        )
        .unwrap();
    ready(&ctl.listen).await;
    let published = node.api.get_configmap(NS, "app-cfg").and_then(|c| {
        c.metadata
            .annotations?
            .get("reloadlet.io/data-version")
            .cloned()
    });
    assert!(
        published
            .as_deref()
            .is_some_and(|v| v.starts_with("v1 since=")),
        "{published:?}\n{}",
        ctl.log()
    );
}

/// The agent follows the controller's key with a list and watch of that one Secret, which its
/// Role grants by name (`resourceNames`). A Role without that rule (hand-trimmed, or older)
/// makes the agent not Ready with the rule to add — naming the Secret, never every Secret of
/// its namespace — and the rest keeps working; granted again, the key is taken up and the
/// agent is Ready without a restart.
#[tokio::test(flavor = "multi_thread")]
async fn the_agent_refused_its_key_names_the_rule_by_name_and_takes_the_key_once_granted() {
    let mut node = Node::start(NodeOptions::default()).await;
    let key = String::from_utf8(vec![9u8; 32]).unwrap();
    node.api.apply_secret(common::fixtures::secret(
        "reloadlet-system",
        "reloadlet-controller-key",
        &[("key", &key)],
    ));
    node.api.set_rbac(
        nodesim::apiserver::rbac_chart::policy_without(&[], "", "secrets", "list").unwrap(),
    );
    node.api.expect_forbidden("list", "", "secrets");
    node.spawn_agent(&[
        "--pod-namespace",
        "reloadlet-system",
        "--pod-name",
        "reloadlet-x",
    ]);
    let listen = node.agent().listen.clone();
    let body = readyz_refusal(&listen, &["status-record"]).await;
    let line = "feature status-record: forbidden to list secrets reloadlet-controller-key in namespace reloadlet-system (HTTP 403): add the rule {apiGroups: [\"\"], resources: [\"secrets\"], resourceNames: [\"reloadlet-controller-key\"], verbs: [\"list\", \"watch\"]} to the ServiceAccount's ClusterRole (or a Role in namespace reloadlet-system)";
    assert!(body.contains(line), "{line}\nmissing from /readyz:\n{body}");
    assert!(
        !body.contains("pod-watch"),
        "only the key is refused: {body}"
    );
    // Signals go on without the key (records carry no version meanwhile).
    projected_pod(&node).await;
    let out = node.path("web.sig");
    eventually("recorder ready", Duration::from_secs(20), || {
        recorder_ready(&out).then_some(())
    })
    .await;
    node.wait_tracked(1).await;
    node.api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v2")]));
    eventually("web got SIGHUP", Duration::from_secs(20), || {
        (signals_in(&out) == ["SIGHUP"]).then_some(())
    })
    .await;
    // Granted: the watch's next try lists the key, and the agent is Ready.
    node.load_chart_rbac(&[]);
    ready(&listen).await;
    eventually("the key taken up", Duration::from_secs(10), || {
        node.agent_log()
            .contains("the controller's key is read")
            .then_some(())
    })
    .await;
}
