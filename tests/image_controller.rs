//! `reloadlet controller` from the shipped image, under the chart's Deployment posture
//! (UID 65534, every capability dropped, read-only root, no_new_privs, RuntimeDefault seccomp)
//! with in-cluster credentials against the TLS + bearer-token simulated API server: the
//! token of the controller's service account, authorized by the chart's RBAC (the rules of
//! the same render, enforced). A ConfigMap update nudges the pod that projects it
//! (tests/controller.rs has the semantics), with no request refused.
//!
//! Skips in one line where podman, runc, conmon or the image archive is missing;
//! `RELOADLET_REQUIRE_IMAGE=1` (hack/test.sh) makes that a failure instead.

#[path = "support/image.rs"]
mod image_support;
use test_support::wait;

use image_support::*;
use nodesim::probe::http_get;
use serde_json::json;
use std::time::Duration;

const NS: &str = "shop";
const NUDGE: &str = "reloadlet.io/projection-nudge";

#[tokio::test(flavor = "multi_thread")]
async fn the_controller_image_nudges_under_the_deployment_posture() {
    if !wait::root_or_skip() {
        return;
    }
    if let Some(why) = missing() {
        wait::skipped(why);
        return;
    }
    let mut node = ImageNode::start().await;
    node.podman.load(&archive());

    node.api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v1")]));
    node.api.create_pod(
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": NS,
                         "annotations": {"reloadlet.io/action": "signal"}},
            "spec": {
                "nodeName": NODE,
                "containers": [{"name": "app", "image": "app", "volumeMounts": [
                    {"name": "conf", "mountPath": node.path("mnt/etc-app").display().to_string()}
                ]}],
                "volumes": [{"name": "conf", "configMap": {"name": "app-cfg"}}]
            }
        }))
        .unwrap(),
    );
    // The controller nudges running pods only.
    wait::eventually(
        "pod web Running in the API",
        Duration::from_secs(30),
        || {
            let phase = node.api.get_pod(NS, "web")?.status?.phase?;
            (phase == "Running").then_some(())
        },
    )
    .await;

    let port = free_port();
    let docs = render_chart(&[format!("--set=controller.metricsPort={port}")]);
    let deployment = find_kind(&docs, "Deployment");
    let template = &deployment["spec"]["template"];
    assert_eq!(template["spec"]["securityContext"]["runAsUser"], 65534);
    let token = node.authorize_as(&docs, deployment);
    let args = node.run_args(
        template,
        "reloadlet-controller-5f7d9-abcde",
        "reloadlet-system",
    );
    let id = node.podman.run_detached("reloadlet-controller", &args);
    let listen = format!("127.0.0.1:{port}");
    let fail =
        |what: &str| -> ! { panic!("{what}\n--- controller log ---\n{}", node.podman.logs(&id)) };
    let ready = wait::within(Duration::from_secs(30), || {
        http_get(&listen, "/readyz").is_some_and(|(code, _)| code == 200)
    })
    .await;
    if !ready {
        fail("the controller never answered /readyz with 200");
    }
    let pid = node.podman.inspect(&id, "{{.State.Pid}}");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    assert!(line("Uid").starts_with("65534\t"), "{status}");
    assert_eq!(line("CapEff"), "0000000000000000");
    assert_eq!(line("NoNewPrivs"), "1");
    assert_eq!(line("Seccomp"), "2");

    node.api
        .apply_configmap(configmap(NS, "app-cfg", &[("app.conf", "v2")]));
    let nudged = wait::within(Duration::from_secs(30), || {
        node.api
            .get_pod(NS, "web")
            .and_then(|p| p.metadata.annotations)
            .is_some_and(|a| a.contains_key(NUDGE))
    })
    .await;
    if !nudged {
        fail("pod web was never nudged");
    }
    let patches: Vec<String> = node
        .api
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/pods/web"))
        .map(|r| r.token)
        .collect();
    assert!(!patches.is_empty(), "the nudge is a PATCH of the pod");
    assert!(
        patches.iter().all(|t| *t == token),
        "the nudge used the service account token: {patches:?}"
    );
    // The controller did all of it with the chart's controller roles.
    node.assert_no_forbidden();
}
