//! The hot path end to end: with `--debounce 0s` a change is signalled from the hot thread
//! through the pidfd kept for the container; a big volume is hashed on the hasher thread
//! and still signals.

mod common;

use common::fixtures::{configmap, pod};
use common::*;
use std::time::Duration;

const NS: &str = "shop";
const WAIT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread")]
async fn with_debounce_0s_a_change_is_signalled_through_the_kept_pidfd() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&["--debounce", "0s"]).await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "v1")]));
    let out = node.path("app.sig");
    node.api.create_pod(
        pod(NS, "web")
            .signal()
            .configmap_volume("conf", "c")
            .recorder("app", &out, &[("conf", "/c")])
            .build(),
    );
    node.wait_running(NS, "web").await;
    eventually("recorder ready", WAIT, || {
        recorder_ready(&out).then_some(())
    })
    .await;
    node.wait_tracked(2).await;
    // The first change may race the look-up made when the pod arrived; the second finds
    // the kept pidfd.
    node.api.apply_configmap(configmap(NS, "c", &[("k", "v2")]));
    eventually("first SIGHUP", WAIT, || {
        (signals_in(&out).len() == 1).then_some(())
    })
    .await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "v3")]));
    eventually("second SIGHUP", WAIT, || {
        (signals_in(&out) == ["SIGHUP", "SIGHUP"]).then_some(())
    })
    .await;
    eventually("the hot path's log line", WAIT, || {
        node.agent_log()
            .lines()
            .any(|l| l.contains("signal sent") && l.contains("hot_path=true"))
            .then_some(())
    })
    .await;
    node.wait_metric(
        "reloadlet_actions_total{action=\"signal\",outcome=\"signaled\"}",
        2.0,
    )
    .await;
    // The follow-up work (log, metrics, Events) runs on the runtime's worker at SCHED_IDLE
    // (`--background-sched idle`, the default) and still arrives; the hot thread is untouched.
    // (Two occurrences of one Event: one object with a series count of 2.)
    eventually("both Signaled Events", WAIT, || {
        let seen: i32 = node
            .events(NS, "web", "Signaled")
            .iter()
            .map(|e| e.count)
            .sum();
        (seen == 2).then_some(())
    })
    .await;
    let policies = thread_policies(node.agent().child.id());
    let idle = |name: &str| {
        policies
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, idle)| *idle)
            .collect::<Vec<_>>()
    };
    assert_eq!(idle("reloadlet-hot"), [false], "{policies:?}");
    assert!(idle("tokio-rt-worker").contains(&true), "{policies:?}");
}

/// Each thread of `pid`: its name and whether it runs at SCHED_IDLE.
fn thread_policies(pid: u32) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = task.unwrap().path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("stat")),
        ) else {
            continue; // the thread ended meanwhile
        };
        let idle = reloadlet::host::sched::thread_is_idle(&stat).unwrap();
        out.push((comm.trim_end().to_owned(), idle));
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_big_volume_is_hashed_off_the_hot_thread_and_still_signals() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&["--debounce", "0s"]).await;
    // Above the in-place limit (256 KiB), below a ConfigMap's 1 MiB.
    let big = |c: char| c.to_string().repeat(600 * 1024);
    node.api
        .apply_configmap(configmap(NS, "big", &[("blob", big('a').as_str())]));
    let out = node.path("app.sig");
    node.api.create_pod(
        pod(NS, "web")
            .signal()
            .configmap_volume("conf", "big")
            .recorder("app", &out, &[("conf", "/c")])
            .build(),
    );
    node.wait_running(NS, "web").await;
    eventually("recorder ready", WAIT, || {
        recorder_ready(&out).then_some(())
    })
    .await;
    node.wait_tracked(2).await;
    node.api
        .apply_configmap(configmap(NS, "big", &[("blob", big('b').as_str())]));
    eventually("SIGHUP after the big change", WAIT, || {
        (signals_in(&out) == ["SIGHUP"]).then_some(())
    })
    .await;
    assert!(
        node.agent_log()
            .contains("big volume: hashed on the hasher thread"),
        "{}",
        node.agent_log()
    );
}
