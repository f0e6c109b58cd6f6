//! ConfigMap updated through the API → SIGHUP received by the pod's main process, on a node
//! whose kubelet keeps its real sync timing (`SyncMode::Faithful` at the default
//! `syncFrequency` 60 s: a periodic sync 1–1.5 × 60 s after the pod's last sync, an
//! immediate one when the pod object changes — `pkg/kubelet/pod_workers.go` `completeWork`,
//! `pkg/kubelet/kubelet.go` `syncLoop`, `pkg/kubelet/config/config.go`
//! `podsDifferSemantically`; see `nodesim/src/kubelet_sync.rs`), agent and controller at
//! their default flags.
//!
//! - with the controller: `samples` pods, each with its own ConfigMap, changed one after the
//!   other `gap` apart (each change is nudged at once, then at 1 s and 3 s);
//! - without: `slow` pods that say `reloadlet.io/fast-projection: "false"` (the controller
//!   leaves them alone, exactly as if it were not installed), their ConfigMaps changed
//!   spread evenly over the first 60 s after their last sync, so each change lands at
//!   another point of the pod's resync timer. Every timer started at the same sync and runs
//!   out by 90 s after it, so all of them are measured in parallel in about 90 s.
//!
//! Both sets run at the same time on the same node. The latency is the recorder's
//! `CLOCK_MONOTONIC` at SIGHUP receipt − the clock just before the API's update.
//!
//! Beside it, the kubelet's own update → swap on the same updates: the simulated kubelet
//! records the monotonic clock just after each `..data` swap (`SimKubelet::swaps`; with the
//! real timing its volume manager swaps 0–200 ms after the sync, `nodesim/src/kubelet_sync.rs`).
//! The bar of issue 30: update → SIGHUP p50 ≤ 1.3 × the kubelet's update → swap p50, and
//! exactly one SIGHUP per update (counted after the re-nudges at 1 s and 3 s).

use crate::procs::{example, quantile, secs, Reloadlet};
use crate::{Knobs, NODE};
use nodesim::clock::monotonic_ns;
use nodesim::kubelet_sync::{SyncReason, DEFAULT_SYNC_FREQUENCY};
use nodesim::node::SimNode;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const NS: &str = "bench";
/// The bar with the controller.
const BAR_P50: Duration = Duration::from_secs(1);
const BAR_P99: Duration = Duration::from_secs(2);
/// Issue 30: update → SIGHUP p50 at most this many times the kubelet's update → swap p50.
const BAR_RATIO: f64 = 1.3;
/// Past the controller's last re-nudge (3 s) before the signals are counted.
const RENUDGES_DONE: Duration = Duration::from_secs(4);
/// A fast sample without SIGHUP this long after its change is a miss.
const FAST_DEADLINE: Duration = Duration::from_secs(20);
/// The longest the periodic sync can take (1.5 × 60 s) and a margin.
const SLOW_DEADLINE: Duration = Duration::from_secs(100);

struct Sample {
    pod: String,
    record: PathBuf,
    changed_ns: Option<i128>,
    uid: String,
}

fn configmap(name: &str, value: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": NS}, "data": {"app.conf": value}}),
    )
    .unwrap()
}

fn create_pod(node: &SimNode, name: &str, record: &Path, fast: bool) {
    node.api.apply_configmap(configmap(name, "v1"));
    let mut annotations = json!({"reloadlet.io/action": "signal"});
    if !fast {
        annotations["reloadlet.io/fast-projection"] = json!("false");
    }
    let recorder = example("sigrecorder");
    let mount = record.with_extension("mnt");
    let pod = json!({
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"nodeName": NODE,
            "volumes": [{"name": "conf", "configMap": {"name": name}}],
            "containers": [{
                "name": "app", "image": "x",
                "command": [recorder.display().to_string(), record.display().to_string()],
                "volumeMounts": [{"name": "conf", "mountPath": mount.display().to_string()}]
            }]}
    });
    node.api.create_pod(serde_json::from_value(pod).unwrap());
}

/// The recorder's clock at each SIGHUP.
fn sighups(record: &Path) -> Vec<i128> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.strip_prefix("SIGHUP ")
                .and_then(|ns| ns.trim().parse().ok())
        })
        .collect()
}

/// The recorder's clock at its first SIGHUP.
fn sighup_at(record: &Path) -> Option<i128> {
    sighups(record).first().copied()
}

/// The kubelet's update → swap of each sample's `conf` volume (sorted), and the samples
/// without a swap after their change.
fn kubelet_swaps(node: &SimNode, samples: &[Sample]) -> (Vec<Duration>, usize) {
    let mut took = Vec::new();
    let mut missed = 0;
    for s in samples {
        let swap = s.changed_ns.and_then(|c| {
            node.kubelet
                .swaps(&s.uid)
                .iter()
                .find(|w| w.volume == "conf" && w.monotonic_ns >= c)
                .map(|w| Duration::from_nanos((w.monotonic_ns - c) as u64))
        });
        match swap {
            Some(d) => took.push(d),
            None => missed += 1,
        }
    }
    took.sort();
    (took, missed)
}

async fn wait(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An offset in `[0, 100 ms)` for the `i`-th change, spread evenly by the golden ratio: the
/// kubelet's volume manager works in 100 ms passes, and a gap that is a multiple of 100 ms
/// would meet every pass at the same phase.
fn phase(i: usize) -> Duration {
    Duration::from_micros((i as u64 * 61_803) % 100_000)
}

/// Latencies (sorted) and the number of misses.
fn latencies(samples: &[Sample]) -> (Vec<Duration>, usize) {
    let mut took = Vec::new();
    let mut missed = 0;
    for s in samples {
        match (s.changed_ns, sighup_at(&s.record)) {
            (Some(c), Some(r)) if r >= c => took.push(Duration::from_nanos((r - c) as u64)),
            _ => missed += 1,
        }
    }
    took.sort();
    (took, missed)
}

/// Runs both cases; `true` when the controller's figures meet the bar.
pub async fn run(k: &Knobs) -> bool {
    let node = SimNode::start(NODE, "reloadlet-bench-ctl-", |o| {
        *o = o.clone().faithful(DEFAULT_SYNC_FREQUENCY);
    })
    .await
    .expect("simulated node");
    let records = node.path("records");
    std::fs::create_dir_all(&records).unwrap();
    let mut agent = Reloadlet::agent(&node, NODE);
    let mut controller = Reloadlet::controller(&node, "bench-ctl");
    controller.wait_until("the leader", Duration::from_secs(30), |c| {
        c.metric("reloadlet_controller_leader") == 1.0
    });

    let sample = |name: String| Sample {
        record: records.join(&name),
        pod: name,
        changed_ns: None,
        uid: String::new(),
    };
    let mut fast: Vec<Sample> = (0..k.samples)
        .map(|i| sample(format!("fast-{i}")))
        .collect();
    let mut slow: Vec<Sample> = (0..k.slow).map(|i| sample(format!("slow-{i}"))).collect();
    for s in &fast {
        create_pod(&node, &s.pod, &s.record, true);
    }
    for s in &slow {
        create_pod(&node, &s.pod, &s.record, false);
    }
    let all: Vec<&Sample> = fast.iter().chain(&slow).collect();
    let t0 = Instant::now();
    wait("every recorder ready", Duration::from_secs(180), || {
        all.iter()
            .all(|s| std::fs::read_to_string(&s.record).is_ok_and(|r| r.contains("READY")))
    })
    .await;
    let uids: Vec<String> = all
        .iter()
        .map(|s| node.api.get_pod(NS, &s.pod).unwrap().metadata.uid.unwrap())
        .collect();
    drop(all);
    for (s, uid) in fast.iter_mut().chain(slow.iter_mut()).zip(&uids) {
        s.uid = uid.clone();
    }
    // The kubelet syncs a pod once more right after Pending → Running: wait for that sync,
    // the start of each pod's resync timer.
    wait("the post-start syncs", Duration::from_secs(60), || {
        uids.iter().all(|u| {
            node.kubelet
                .syncs(u)
                .iter()
                .any(|s| s.reason == SyncReason::PhaseTransition)
        })
    })
    .await;
    // Each pod: its ConfigMap volume and the kube-api-access projected volume.
    let volumes = (2 * uids.len()) as f64;
    agent.wait_until("tracking every volume", Duration::from_secs(60), |a| {
        a.metric("reloadlet_volumes_tracked") >= volumes
    });
    eprintln!(
        "controller: {} pods with fast projection, {} without, running after {:.1} s",
        fast.len(),
        slow.len(),
        t0.elapsed().as_secs_f64()
    );

    // One schedule for both sets, in time order.
    let start = Instant::now();
    let spread = DEFAULT_SYNC_FREQUENCY.as_secs_f64();
    let mut plan: Vec<(Duration, bool, usize)> = (0..fast.len())
        .map(|i| {
            (
                Duration::from_millis(500) + k.gap * i as u32 + phase(i),
                true,
                i,
            )
        })
        .chain((0..slow.len()).map(|i| {
            (
                Duration::from_secs_f64(spread * i as f64 / slow.len() as f64),
                false,
                i,
            )
        }))
        .collect();
    plan.sort();
    for (at, is_fast, i) in plan {
        tokio::time::sleep_until((start + at).into()).await;
        let s = if is_fast { &mut fast[i] } else { &mut slow[i] };
        s.changed_ns = Some(monotonic_ns());
        node.api.apply_configmap(configmap(&s.pod, "v2"));
    }
    let done = |set: &[Sample], deadline: Duration| {
        set.iter().all(|s| {
            sighup_at(&s.record).is_some()
                || s.changed_ns
                    .is_some_and(|c| monotonic_ns() - c > deadline.as_nanos() as i128)
        })
    };
    wait("the fast set", FAST_DEADLINE * 2, || {
        done(&fast, FAST_DEADLINE)
    })
    .await;
    // The re-nudges of the last change (1 s, 3 s) re-project identical bytes: no swap, and
    // no second signal may follow.
    tokio::time::sleep(RENUDGES_DONE).await;
    let (with, with_missed) = latencies(&fast);
    let (kubelet, kubelet_missed) = kubelet_swaps(&node, &fast);
    let signals: Vec<usize> = fast.iter().map(|s| sighups(&s.record).len()).collect();
    let doubled = signals.iter().filter(|n| **n > 1).count();
    let nudged = controller.series("reloadlet_nudges_total");
    let p50 = quantile(&with, 0.5);
    let p99 = quantile(&with, 0.99);
    let pass = with_missed == 0 && !with.is_empty() && p50 <= BAR_P50 && p99 <= BAR_P99;
    let k50 = quantile(&kubelet, 0.5);
    let ratio = p50.as_secs_f64() / k50.as_secs_f64().max(1e-9);
    let pass_ratio = pass && kubelet_missed == 0 && doubled == 0 && ratio <= BAR_RATIO;
    println!(
        "controller: ConfigMap update -> SIGHUP WITH the controller ({} samples, {} ms apart, \
         kubelet syncFrequency 60 s, both at default flags): p50 {}  p99 {}  max {}  misses {}  \
         [bar p50 <= 1 s, p99 <= 2 s: {}]",
        fast.len(),
        k.gap.as_millis(),
        secs(p50),
        secs(p99),
        secs(with.last().copied().unwrap_or_default()),
        with_missed,
        if pass { "PASS" } else { "FAIL" }
    );
    println!(
        "controller: the kubelet's own update -> swap on the same updates: p50 {}  p99 {}  \
         max {}  (no swap: {kubelet_missed})",
        secs(k50),
        secs(quantile(&kubelet, 0.99)),
        secs(kubelet.last().copied().unwrap_or_default()),
    );
    println!(
        "controller: update -> SIGHUP p50 / kubelet update -> swap p50 = {ratio:.2}x; SIGHUPs \
         per update: {} with one, {doubled} with more, {} with none  \
         [bar <= {BAR_RATIO}x, never two signals for one sync: {}]",
        signals.iter().filter(|n| **n == 1).count(),
        signals.iter().filter(|n| **n == 0).count(),
        if pass_ratio { "PASS" } else { "FAIL" }
    );
    println!("controller: {nudged}");

    if !slow.is_empty() {
        wait("the slow set", SLOW_DEADLINE * 2, || {
            done(&slow, SLOW_DEADLINE)
        })
        .await;
        let (without, without_missed) = latencies(&slow);
        let touched = slow
            .iter()
            .filter(|s| {
                node.api.get_pod(NS, &s.pod).is_some_and(|p| {
                    p.metadata
                        .annotations
                        .is_some_and(|a| a.contains_key("reloadlet.io/projection-nudge"))
                })
            })
            .count();
        println!(
            "controller: ConfigMap update -> SIGHUP WITHOUT (the kubelet's periodic sync; {} pods, \
             changes spread over the 60 s after their last sync): p50 {}  p99 {}  max {}  \
             misses (> {} s) {}  nudged {touched}",
            slow.len(),
            secs(quantile(&without, 0.5)),
            secs(quantile(&without, 0.99)),
            secs(without.last().copied().unwrap_or_default()),
            SLOW_DEADLINE.as_secs(),
            without_missed,
        );
    } else {
        println!("controller: the case without the controller skipped (BENCH_CTL_SLOW=0)");
    }
    drop(controller);
    drop(agent);
    drop(node);
    pass && pass_ratio
}
