//! Faults a node agent lives through for months: its own restarts and upgrades, a corrupt
//! state file, an API server outage, SIGTERM with work in flight, pod churn.

mod common;

use common::fixtures::{configmap, pod};
use common::*;
use std::time::{Duration, Instant};

const NS: &str = "f";
const WAIT: Duration = Duration::from_secs(15);

async fn node_with_pod(args: &[&str]) -> (Node, std::path::PathBuf) {
    Node::with_signal_pod(args, NS, "web").await
}

fn hups(out: &std::path::Path) -> usize {
    signals_in(out).iter().filter(|s| *s == "SIGHUP").count()
}

#[tokio::test(flavor = "multi_thread")]
async fn restarting_with_nothing_changed_signals_nothing() {
    let (mut node, out) = node_with_pod(&[]).await;
    let status = node.stop_agent().await;
    assert!(status.success(), "SIGTERM exits 0: {status}");
    let state: serde_json::Value = serde_json::from_slice(
        &std::fs::read(node.path("state/state.json")).expect("state flushed"),
    )
    .unwrap();
    assert_eq!(
        state["volumes"].as_object().map(|m| m.len()),
        Some(2),
        "{state}"
    );
    node.start_agent(&[]).await;
    node.wait_tracked(2).await;
    never(
        "a signal after a restart without changes",
        Duration::from_secs(2),
        || hups(&out) > 0,
    )
    .await;
    assert!(node.all_events().is_empty());
    // The positive control: the restarted agent does watch; a change made now signals.
    node.api.apply_configmap(configmap(NS, "c", &[("k", "2")]));
    until("a change after the restart signals", WAIT, || {
        hups(&out) == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_change_made_while_reloadlet_was_down_is_acted_on_once() {
    let (mut node, out) = node_with_pod(&[]).await;
    assert!(node.stop_agent().await.success());
    node.api.apply_configmap(configmap(NS, "c", &[("k", "2")]));
    node.start_agent(&[]).await;
    eventually("the missed change is acted on", WAIT, || {
        (hups(&out) == 1).then_some(())
    })
    .await;
    node.wait_event(NS, "web", "Signaled").await;
    never(
        "a second signal for the same change",
        Duration::from_secs(1),
        || hups(&out) > 1,
    )
    .await;
    // And it is not acted on again after one more restart.
    assert!(node.stop_agent().await.success());
    node.start_agent(&[]).await;
    never(
        "a signal for an already handled change",
        AGENT_QUIET,
        || hups(&out) > 1,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn first_sight_is_a_baseline_and_a_corrupt_state_file_means_a_clean_start() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "1")]));
    let out = node.path("app.sig");
    node.api.create_pod(
        pod(NS, "web")
            .signal()
            .configmap_volume("conf", "c")
            .recorder("app", &out, &[("conf", "/c")])
            .build(),
    );
    node.wait_running(NS, "web").await;
    std::fs::create_dir_all(node.path("state")).unwrap();
    std::fs::write(
        node.path("state/state.json"),
        b"{\"version\":1,\"volumes\":{\"torn",
    )
    .unwrap();
    node.start_agent(&[]).await;
    node.wait_tracked(2).await;
    never("an action on first sight", AGENT_QUIET, || hups(&out) > 0).await;
    assert!(
        node.agent_log().contains("corrupt"),
        "the corrupt state is reported"
    );
    assert!(
        node.path("state/state.json.corrupt").exists(),
        "and kept for inspection"
    );
    node.api.apply_configmap(configmap(NS, "c", &[("k", "2")]));
    eventually("later changes still work", WAIT, || {
        (hups(&out) == 1).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_finishes_the_change_in_its_debounce_window_and_exits_zero() {
    let (mut node, out) = node_with_pod(&["--debounce", "30s"]).await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "2")]));
    eventually("the change is pending", WAIT, || {
        node.agent_log()
            .contains("volume content changed")
            .then_some(())
    })
    .await;
    let t0 = Instant::now();
    let status = node.stop_agent().await;
    assert!(status.success(), "{status}");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "shutdown within the grace period"
    );
    assert_eq!(hups(&out), 1, "in-flight work was finished, not dropped");
}

#[tokio::test(flavor = "multi_thread")]
async fn signals_keep_working_from_the_cached_pods_while_the_api_server_is_down() {
    let (node, out) = node_with_pod(&[]).await;
    node.api.set_outage(Some(503));
    node.api.apply_configmap(configmap(NS, "c", &[("k", "2")]));
    eventually("signal during the outage", WAIT, || {
        (hups(&out) == 1).then_some(())
    })
    .await;
    assert_eq!(
        http_get(&node.agent().listen, "/healthz").map(|(c, _)| c),
        Some(200)
    );
    node.api.set_outage(None);
    node.api.apply_configmap(configmap(NS, "c", &[("k", "3")]));
    eventually("and after it", WAIT, || (hups(&out) == 2).then_some(())).await;
    node.wait_event(NS, "web", "Signaled").await;
}

/// Inotify watches the agent holds, read from its /proc/<pid>/fdinfo.
fn inotify_watches_of(pid: u32) -> usize {
    let mut n = 0;
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
    {
        let text = std::fs::read_to_string(fd.path()).unwrap_or_default();
        n += text
            .lines()
            .filter(|l| l.starts_with("inotify wd:"))
            .count();
    }
    n
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_thousand_pods_come_and_go_watches_and_memory_return_to_baseline() {
    use nodesim::atomic_writer::{write, FileProjection};
    let (node, _out) = node_with_pod(&[]).await;
    let pid = node.agent().child.id();
    let pods_dir = node.kubelet_root().join("pods");
    let churn = |round: usize| {
        for i in 0..1000 {
            let uid = format!("00000000-0000-4000-8000-{round:04}{i:08}");
            for (plugin, vol) in [
                ("kubernetes.io~configmap", "conf"),
                ("kubernetes.io~secret", "tls"),
            ] {
                let dir = pods_dir.join(&uid).join("volumes").join(plugin).join(vol);
                std::fs::create_dir_all(&dir).unwrap();
                let payload = [(
                    "k".to_string(),
                    FileProjection::new(format!("{round}-{i}").into_bytes()),
                )]
                .into();
                write(&dir, &payload).unwrap();
            }
        }
        for i in 0..1000 {
            let uid = format!("00000000-0000-4000-8000-{round:04}{i:08}");
            std::fs::remove_dir_all(pods_dir.join(uid)).unwrap();
        }
    };
    // Warm up once so the allocator has its working set, then take the baseline.
    churn(0);
    let settle = |what: &'static str| {
        let node = &node;
        async move {
            eventually(what, Duration::from_secs(30), || {
                (node.metric("reloadlet_volumes_tracked") == 2.0
                    && node.metric("reloadlet_watched_pods") == 1.0)
                    .then_some(())
            })
            .await
        }
    };
    settle("warm-up churn settled").await;
    let (watches, rss) = (inotify_watches_of(pid), rss_kib(pid));
    assert!(
        watches >= 7,
        "the agent's watches are visible in fdinfo: {watches}"
    );

    churn(1);
    settle("churn settled").await;
    eventually(
        "inotify watches back to the baseline",
        Duration::from_secs(30),
        || {
            (inotify_watches_of(pid) == watches
                && node.metric("reloadlet_inotify_watches") as usize == watches)
                .then_some(())
        },
    )
    .await;
    let after = rss_kib(pid);
    assert!(
        after <= rss + 2048,
        "RSS grew from {rss} KiB to {after} KiB over 1,000 pods"
    );
}
