//! Fast projection end to end on a simulated node with the kubelet's real sync timing (its
//! volume manager swaps a synced pod's volumes in one reconciler pass): the agent acts once
//! the volumes a nudge announced have swapped, and never signals twice for one sync.

mod common;
#[path = "support/controller_process.rs"]
mod controller_process;

use common::fixtures::{configmap, pod, sandboxed};
use common::*;
use controller_process::ControllerProcess as Controller;
use std::path::{Path, PathBuf};
use std::time::Duration;

const NS: &str = "shop";
const WAIT: Duration = Duration::from_secs(20);

/// The recorder's clock (`CLOCK_MONOTONIC`) at each SIGHUP.
fn sighups(record: &Path) -> Vec<i128> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("SIGHUP ")?.trim().parse().ok())
        .collect()
}

/// When the kubelet last swapped `volume` of the pod (monotonic ns), after `since`.
fn swapped(node: &Node, uid: &str, volume: &str, since: i128) -> Option<i128> {
    node.sim
        .kubelet
        .swaps(uid)
        .iter()
        .filter(|s| s.volume == volume && s.monotonic_ns >= since)
        .map(|s| s.monotonic_ns)
        .max()
}

struct Scene {
    node: Node,
    uid: String,
    record: PathBuf,
    /// Where the container sees its two volumes (through its main process's root: the
    /// volumes are bind-mounted in the container's own mount namespace).
    mounts: (PathBuf, PathBuf),
    controller: Controller,
}

/// ConfigMaps `a-cfg` and `b-cfg`, each mounted by the signal pod `two` as its own volume;
/// the agent and the controller at their default flags.
async fn scene() -> Scene {
    let sim = nodesim::node::SimNode::start(NODE, "reloadlet-it-", |k| {
        *k = k.clone().faithful(Duration::from_secs(60));
    })
    .await
    .expect("simulated node");
    let mut node = Node::from_sim(sim);
    // The agent's default --debounce (the harness passes 0s unless told).
    node.start_agent(&["--debounce", "250ms"]).await;
    node.api
        .apply_configmap(configmap(NS, "a-cfg", &[("app.conf", "a1")]));
    node.api
        .apply_configmap(configmap(NS, "b-cfg", &[("app.conf", "b1")]));
    let record = node.path("two.sig");
    node.api.create_pod(
        pod(NS, "two")
            .signal()
            .configmap_volume("a", "a-cfg")
            .configmap_volume("b", "b-cfg")
            .recorder("app", &record, &[("a", "/etc/a"), ("b", "/etc/b")])
            .build(),
    );
    let handles = node.wait_running(NS, "two").await;
    eventually("the recorder ready", WAIT, || {
        recorder_ready(&record).then_some(())
    })
    .await;
    eventually("Running in the API", WAIT, || {
        (node
            .api
            .get_pod(NS, "two")
            .and_then(|p| p.status?.phase)
            .as_deref()
            == Some("Running"))
        .then_some(())
    })
    .await;
    // a, b and the injected kube-api-access volume.
    node.wait_tracked(3).await;
    let uid = node.uid(NS, "two");
    // Later changes wait for a nudge.
    node.wait_post_start_syncs(NS, &["two"]).await;
    let controller = Controller::start(&node, &["--leader-elect=false"], &[]).await;
    let base = record.parent().unwrap().to_path_buf();
    let root = PathBuf::from(format!("/proc/{}/root", handles.containers[0].main_pid));
    let seen = |p: &str| root.join(sandboxed(&base, p).trim_start_matches('/'));
    let mounts = (seen("/etc/a"), seen("/etc/b"));
    Scene {
        node,
        uid,
        record,
        mounts,
        controller,
    }
}

impl Scene {
    /// What the container reads in its two volumes.
    fn served(&self) -> (String, String) {
        let read = |dir: &Path| std::fs::read_to_string(dir.join("app.conf")).unwrap_or_default();
        (read(&self.mounts.0), read(&self.mounts.1))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_sync_of_a_pod_with_two_configmap_volumes_gives_one_sighup_whether_one_or_both_changed()
{
    if !root_or_skip() {
        return;
    }
    let s = scene().await;
    assert_eq!(s.served(), ("a1".into(), "b1".into()));

    // One of the two ConfigMaps changes: the nudge names it, its volume swaps, one SIGHUP.
    let t1 = nodesim::clock::monotonic_ns();
    s.node
        .api
        .apply_configmap(configmap(NS, "a-cfg", &[("app.conf", "a2")]));
    eventually("the SIGHUP", WAIT, || {
        (sighups(&s.record).len() == 1).then_some(())
    })
    .await;
    let swap_a = swapped(&s.node, &s.uid, "a", t1).expect("volume a swapped");
    assert!(
        sighups(&s.record)[0] >= swap_a,
        "signalled before its volume swapped"
    );
    assert_eq!(s.served(), ("a2".into(), "b1".into()));
    never("a second SIGHUP", NUDGE_QUIET, || {
        sighups(&s.record).len() > 1
    })
    .await;
    assert_eq!(swapped(&s.node, &s.uid, "b", t1), None, "b is unchanged");

    // Both change at once: one sync swaps both volumes, one SIGHUP (not two).
    let t2 = nodesim::clock::monotonic_ns();
    s.node
        .api
        .apply_configmap(configmap(NS, "a-cfg", &[("app.conf", "a3")]));
    s.node
        .api
        .apply_configmap(configmap(NS, "b-cfg", &[("app.conf", "b2")]));
    eventually("the second SIGHUP", WAIT, || {
        (sighups(&s.record).len() == 2).then_some(())
    })
    .await;
    never("a third SIGHUP", NUDGE_QUIET, || {
        sighups(&s.record).len() > 2
    })
    .await;
    let both = [
        swapped(&s.node, &s.uid, "a", t2).expect("volume a swapped"),
        swapped(&s.node, &s.uid, "b", t2).expect("volume b swapped"),
    ];
    let signal = sighups(&s.record)[1];
    assert!(
        both.iter().all(|at| signal >= *at),
        "signalled before a swap"
    );
    assert_eq!(s.served(), ("a3".into(), "b2".into()));
    // Each volume swapped once for the two changes: one sync.
    let swaps: Vec<String> = s
        .node
        .sim
        .kubelet
        .swaps(&s.uid)
        .into_iter()
        .filter(|w| w.monotonic_ns >= t2)
        .map(|w| w.volume)
        .collect();
    assert_eq!(swaps, ["a", "b"]);
    assert_eq!(signals_in(&s.record), ["SIGHUP", "SIGHUP"]);
    // The agent took the nudges' announcements (not only its debounce).
    let log = s.node.agent_log();
    assert!(
        log.matches("projection nudge: these volumes will swap")
            .count()
            >= 2,
        "{log}"
    );
    s.controller.stop().await;
}
