//! `cargo bench --bench node` (or `hack/bench.sh`): reloadlet on a simulated node, as root.
//!
//! 1. signal: 250 pods × 4 ConfigMap volumes (+ each pod's kube-api-access volume), reloadlet
//!    with `--debounce 0s`; ≥ 300 `..data` swaps done exactly as the kubelet's AtomicWriter does
//!    them; latency = the target process's CLOCK_MONOTONIC at signal receipt − the clock just
//!    before `rename(..data_tmp, ..data)`. Also: reloadlet's RSS, and start → /readyz.
//! 2. evict: 100 annotated pods without a PDB swap at once; time from the last swap to the
//!    last eviction request, and the most requests in flight (the API answers in 20 ms).
//!
//! Figures are medians/percentiles over many runs of one machine: compare, don't assert.

use nodesim::node::SimNode;
use nodesim::probe::http_get;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NODE: &str = "bench-node";

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let updates: usize = std::env::var("BENCH_UPDATES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let pods: usize = std::env::var("BENCH_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(250);
    rt.block_on(async {
        signal_bench(pods, 4, updates).await;
        evict_bench(100).await;
    });
}

fn monotonic_ns() -> i128 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as i128 * 1_000_000_000 + t.tv_nsec() as i128
}

/// The simulated node (reached through `Deref`) and the reloadlet process under test.
struct Setup {
    agent: Option<Child>,
    node: SimNode,
    listen: String,
    log: PathBuf,
}

impl std::ops::Deref for Setup {
    type Target = SimNode;
    fn deref(&self) -> &SimNode {
        &self.node
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(mut a) = self.agent.take() {
            let _ = a.kill();
            let _ = a.wait();
        }
    }
}

async fn setup(delay: Option<Duration>) -> Setup {
    let node = SimNode::start(NODE, "reloadlet-bench-", |_| {})
        .await
        .unwrap();
    node.api.set_response_delay(delay);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    Setup {
        log: node.path("reloadlet.log"),
        node,
        agent: None,
        listen: format!("127.0.0.1:{port}"),
    }
}

impl Setup {
    fn start_agent(&mut self) -> Duration {
        let t0 = Instant::now();
        let bin = std::env::var("RELOADLET_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_reloadlet").to_owned());
        let child = Command::new(bin)
            .args([
                "--node-name",
                NODE,
                "--debounce",
                "0s",
                "--listen",
                &self.listen,
            ])
            .arg("--kubelet-root")
            .arg(self.kubelet_root())
            .arg("--state-dir")
            .arg(self.path("state"))
            .env("KUBECONFIG", self.kubeconfig())
            .env("RUST_LOG", "warn,reloadlet=info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&self.log).unwrap())
            .spawn()
            .unwrap();
        self.agent = Some(child);
        while http_get(&self.listen, "/readyz").is_none_or(|(c, _)| c != 200) {
            assert!(t0.elapsed() < Duration::from_secs(60), "not ready");
            std::thread::sleep(Duration::from_millis(1));
        }
        t0.elapsed()
    }

    fn metric(&self, series: &str) -> f64 {
        let text = http_get(&self.listen, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default();
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                l.rsplit_once(' ')
                    .filter(|(n, _)| *n == series)
                    .and_then(|(_, v)| v.parse().ok())
            })
            .unwrap_or(0.0)
    }

    fn wait_metric(&self, series: &str, at_least: f64) {
        let t0 = Instant::now();
        while self.metric(series) < at_least {
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "{series} never reached {at_least}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn memory(&self) -> String {
        let kib = |f| self.rss_kib(f) as f64 / 1024.0;
        format!(
            "RSS {:.1} MiB ({:.1} MiB heap and stacks, {:.1} MiB mapped binary), peak {:.1} MiB",
            kib("VmRSS:"),
            kib("RssAnon:"),
            kib("RssFile:"),
            kib("VmHWM:")
        )
    }

    fn rss_kib(&self, field: &str) -> u64 {
        let pid = self.agent.as_ref().unwrap().id();
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix(field)
                    .map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap())
            })
            .unwrap()
    }

    fn volume_dir(&self, uid: &str, volume: &str) -> PathBuf {
        self.kubelet_root()
            .join("pods")
            .join(uid)
            .join("volumes/kubernetes.io~configmap")
            .join(volume)
    }
}

/// The AtomicWriter's steps 4–9 for one key; returns the monotonic clock just before the
/// rename (the swap) and removes the old data dir afterwards, as the kubelet does.
fn kubelet_swap(volume: &Path, key: &str, content: &str, seq: usize) -> i128 {
    let old = std::fs::read_link(volume.join("..data")).unwrap();
    let ts = format!("..2026_11_22_00_00_00.{seq}");
    let new = volume.join(&ts);
    std::fs::create_dir(&new).unwrap();
    std::fs::write(new.join(key), content).unwrap();
    std::os::unix::fs::symlink(&ts, volume.join("..data_tmp")).unwrap();
    let t0 = monotonic_ns();
    std::fs::rename(volume.join("..data_tmp"), volume.join("..data")).unwrap();
    std::fs::remove_dir_all(volume.join(old)).unwrap();
    t0
}

fn sigrecorder() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe.parent().and_then(Path::parent).unwrap();
    let p = target.join("examples/sigrecorder");
    assert!(
        p.exists(),
        "{} missing: run hack/bench.sh (it builds the examples first)",
        p.display()
    );
    p
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn signal_bench(pods: usize, vols: usize, updates: usize) {
    let mut s = setup(None).await;
    let rec_dir = s.path("rec");
    std::fs::create_dir_all(&rec_dir).unwrap();
    let recorder = sigrecorder();
    let t_pods = Instant::now();
    let mut uids = Vec::new();
    for i in 0..pods {
        let mut volumes = Vec::new();
        let mut mounts = Vec::new();
        for j in 0..vols {
            let cm = format!("p{i}-c{j}");
            s.api.apply_configmap(
                serde_json::from_value(
                    json!({"metadata": {"name": cm, "namespace": "bench"}, "data": {"k": "v0"}}),
                )
                .unwrap(),
            );
            volumes.push(json!({"name": format!("conf{j}"), "configMap": {"name": cm}}));
            mounts.push(json!({"name": format!("conf{j}"), "mountPath": rec_dir.join(format!("mnt/conf{j}")).display().to_string()}));
        }
        let pod = json!({
            "metadata": {"name": format!("p{i}"), "namespace": "bench", "annotations": {"reloadlet.io/action": "signal"}},
            "spec": {"nodeName": NODE, "volumes": volumes, "containers": [{
                "name": "app", "image": "x",
                "command": [recorder.display().to_string(), rec_dir.join(format!("p{i}")).display().to_string()],
                "volumeMounts": mounts
            }]}
        });
        let created = s.api.create_pod(serde_json::from_value(pod).unwrap());
        uids.push(created.metadata.uid.unwrap());
    }
    for uid in &uids {
        s.kubelet
            .wait_for_pod(uid, Duration::from_secs(120))
            .expect("pod runs");
    }
    let pods_took = t_pods.elapsed();
    let watched = pods * (vols + 1);
    let ready = s.start_agent();
    s.wait_metric("reloadlet_volumes_tracked", watched as f64);
    let tracked_after = s.agent.as_ref().map(|_| ready).unwrap();
    let armed_log = std::fs::read_to_string(&s.log).unwrap_or_default();
    let armed = armed_log
        .lines()
        .find(|l| l.contains("volume watches armed"))
        .unwrap_or("")
        .to_owned();
    let memory_ready = s.memory();

    let mut lat_ms = Vec::with_capacity(updates);
    for k in 0..updates {
        let i = (k * 7919) % pods;
        let j = k % vols;
        let rec = rec_dir.join(format!("p{i}"));
        let before = std::fs::read_to_string(&rec)
            .unwrap_or_default()
            .lines()
            .count();
        let t0 = kubelet_swap(
            &s.volume_dir(&uids[i], &format!("conf{j}")),
            "k",
            &format!("v{}", k + 1),
            k,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        let got = loop {
            let text = std::fs::read_to_string(&rec).unwrap_or_default();
            if text.lines().count() > before {
                let line = text.lines().nth(before).unwrap().to_owned();
                break line;
            }
            assert!(
                Instant::now() < deadline,
                "no signal for update {k} (pod p{i})"
            );
            std::thread::sleep(Duration::from_micros(200));
        };
        let ns: i128 = got.split_whitespace().nth(1).unwrap().parse().unwrap();
        lat_ms.push((ns - t0) as f64 / 1e6);
    }
    lat_ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let memory_end = s.memory();
    println!(
        "== signal: {pods} pods, {} ConfigMap volumes + {pods} token volumes ({watched} watched)",
        pods * vols
    );
    println!(
        "pods started by the simulated kubelet in {:.1} s",
        pods_took.as_secs_f64()
    );
    println!(
        "reloadlet start -> /readyz: {:.0} ms; {}",
        tracked_after.as_secs_f64() * 1e3,
        armed.trim()
    );
    println!(
        "swap -> signal received, {updates} updates: p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms, mean {:.3} ms",
        percentile(&lat_ms, 0.5),
        percentile(&lat_ms, 0.9),
        percentile(&lat_ms, 0.99),
        lat_ms[lat_ms.len() - 1],
        lat_ms.iter().sum::<f64>() / lat_ms.len() as f64
    );
    println!("reloadlet after the pod list: {memory_ready}");
    println!("reloadlet after the updates: {memory_end}");
    println!(
        "signals counted by reloadlet: {}",
        s.metric("reloadlet_actions_total{action=\"signal\",outcome=\"signaled\"}")
    );
}

async fn evict_bench(pods: usize) {
    let mut s = setup(Some(Duration::from_millis(20))).await;
    let template = serde_json::from_value(json!({
        "metadata": {"labels": {"app": "burst"}, "annotations": {"reloadlet.io/action": "evict"}},
        "spec": {"containers": [{"name": "app", "image": "x", "volumeMounts": [{"name": "conf", "mountPath": s.path("mnt/conf").display().to_string()}]}],
                 "volumes": [{"name": "conf", "configMap": {"name": "burst"}}]}
    }))
    .unwrap();
    s.api.apply_configmap(
        serde_json::from_value(
            json!({"metadata": {"name": "burst", "namespace": "bench"}, "data": {"k": "v0"}}),
        )
        .unwrap(),
    );
    s.api
        .create_replicaset("bench", "burst", pods as i32, template, NODE);
    let originals: Vec<String> = s
        .api
        .pods_of_replicaset("bench", "burst")
        .into_iter()
        .filter_map(|p| p.metadata.uid)
        .collect();
    for uid in &originals {
        s.kubelet
            .wait_for_pod(uid, Duration::from_secs(120))
            .expect("pod runs");
    }
    s.api.set_response_delay(None);
    s.start_agent();
    s.wait_metric("reloadlet_volumes_tracked", (2 * pods) as f64);
    s.api.set_response_delay(Some(Duration::from_millis(20)));
    // The kubelet re-projects the ConfigMap into every pod: all swaps land within a burst.
    let first = Instant::now();
    for (k, uid) in originals.iter().enumerate() {
        kubelet_swap(&s.volume_dir(uid, "conf"), "k", "v1", k);
    }
    let last_swap = Instant::now();
    let t0 = Instant::now();
    let evictions = loop {
        let reqs: Vec<_> = s
            .api
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/eviction"))
            .collect();
        if reqs.len() >= pods {
            break reqs;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "only {} eviction requests",
            reqs.len()
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let last_sent = evictions.iter().map(|r| r.at).max().unwrap();
    let max_in_flight = evictions.iter().map(|r| r.in_flight).max().unwrap();
    println!("== evict: {pods} pods without a PDB, one ConfigMap swapped in all of them");
    println!(
        "swaps took {:.1} ms; last eviction request {:.0} ms after the last swap; at most {max_in_flight} requests in flight (limit 10, API answers in 20 ms)",
        (last_swap - first).as_secs_f64() * 1e3,
        last_sent.saturating_duration_since(last_swap).as_secs_f64() * 1e3
    );
}
