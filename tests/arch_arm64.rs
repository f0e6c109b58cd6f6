//! The arm64 release binary, run on this amd64 machine under qemu-user against the simulated
//! node: `qemu-aarch64-static BINARY ARGS` (Debian's qemu-user-static; no binfmt registration
//! is needed when qemu is invoked directly). What the test binaries run elsewhere is the
//! host's build; here it is the static `aarch64-unknown-linux-musl` binary of
//! `hack/build-release.sh --arch arm64`, so aarch64's syscall numbers and struct layouts
//! (epoll_event, stat, the inotify and signal paths), its libc (musl's aarch64 port) and
//! ring's aarch64 assembly (TLS to the API server) all run. qemu-user translates each syscall
//! and forwards it to this machine's kernel: the inotify watches, pidfds and signals are the
//! host kernel's, which is the point (docs/arm64.md says what qemu cannot show).
//!
//! Both agents run as the chart's agent service account (its token in their kubeconfig),
//! authorized by the chart's agent role, enforced: no request of theirs may be refused.
//!
//! - the hot path: inotify on a ConfigMap volume -> the pod's container found through /proc
//!   and its cgroup -> pidfd signal to a real process, over an API server with TLS and a
//!   bearer token; then the swap -> signal latency of 40 AtomicWriter swaps, printed (a
//!   sanity figure for README, not a goal);
//! - an eviction behind a PodDisruptionBudget through the Eviction API;
//! - `reloadlet explain` for both pods (the main process found, the budget named);
//! - the ELF itself: aarch64, static, its segments aligned for 64 KiB pages (what qemu
//!   cannot check by running it: this machine's pages are 4 KiB).
//!
//! The binary is `RELOADLET_ARM64_BIN` (default `target/dist/arm64/reloadlet`, where
//! hack/test.sh builds it), qemu is `RELOADLET_QEMU_AARCH64` (default `qemu-aarch64-static` on
//! the PATH). Without either the tests skip in one line; `RELOADLET_REQUIRE_ARM64=1`
//! (hack/test.sh) makes that a failure instead.

mod common;

use bench_support::timed_update;
use common::fixtures::{configmap, pod};
use common::*;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use nodesim::apiserver::ApiServerOptions;
use nodesim::node::SimNode;
use serde_json::json;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The admin's token (`reloadlet explain`, as an operator runs it).
const TOKEN: &str = "arm64-admin-token";
const WAIT: Duration = Duration::from_secs(30);
/// Swaps timed for the latency figure.
const TIMED_SWAPS: usize = 40;

/// qemu-user and the aarch64 binary.
struct Arm64 {
    qemu: PathBuf,
    bin: PathBuf,
}

impl Arm64 {
    /// Both present, or why not in one line (a panic under `RELOADLET_REQUIRE_ARM64=1`).
    fn find() -> Result<Arm64, String> {
        let bin = std::env::var_os("RELOADLET_ARM64_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("target/dist/arm64/reloadlet")
            });
        let qemu = std::env::var_os("RELOADLET_QEMU_AARCH64")
            .map(PathBuf::from)
            .or_else(|| which("qemu-aarch64-static"));
        let mut why = Vec::new();
        if !bin.is_file() {
            why.push(format!(
                "no arm64 binary at {} (hack/build-release.sh --arch arm64 --out target/dist/arm64)",
                bin.display()
            ));
        }
        match &qemu {
            Some(q) if q.is_file() => {}
            _ => why.push(
                "no qemu-aarch64-static (apt-get install qemu-user-static; hack/install-test-deps.sh)"
                    .into(),
            ),
        }
        if why.is_empty() {
            return Ok(Arm64 {
                qemu: qemu.unwrap(),
                bin,
            });
        }
        let line = why.join("; ");
        if std::env::var("RELOADLET_REQUIRE_ARM64").as_deref() == Ok("1") {
            panic!("RELOADLET_REQUIRE_ARM64=1 but {line}");
        }
        Err(line)
    }

    /// `qemu-aarch64-static BINARY`, arguments to follow.
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.qemu);
        nodesim::runtime::default_signals(&mut cmd).arg(&self.bin);
        cmd
    }

    /// `reloadlet explain --pod NS/POD` against the node, as an operator runs it.
    fn explain(&self, node: &Node, namespace: &str, pod: &str) -> String {
        let out = self
            .command()
            .args(["explain", "--pod", &format!("{namespace}/{pod}")])
            .env("KUBECONFIG", node.kubeconfig())
            .env("NODE_NAME", NODE)
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "explain under qemu: {}\n{text}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(tool))
            .find(|p| p.is_file())
    })
}

/// The tools, or `None` after saying why the test is skipped.
fn arm64_or_skip() -> Option<Arm64> {
    if !root_or_skip() {
        return None;
    }
    Arm64::find().map_err(skipped).ok()
}

/// A simulated node whose API server speaks TLS and wants a bearer token, with an admin
/// kubeconfig that trusts its CA and carries [`TOKEN`] (as `explain` runs), and the chart's
/// default RBAC for the agent's service account (whose kubeconfig the agent gets).
async fn tls_node() -> Node {
    let sim = SimNode::start_with_api(
        NODE,
        "reloadlet-arm64-",
        ApiServerOptions {
            tls: true,
            bearer_tokens: Some(vec![TOKEN.into()]),
            ..Default::default()
        },
        |_| {},
    )
    .await
    .expect("simulated node");
    let kubeconfig = std::fs::read_to_string(sim.kubeconfig()).unwrap();
    let with_token = kubeconfig.replace("  user: {}\n", &format!("  user:\n    token: {TOKEN}\n"));
    assert_ne!(with_token, kubeconfig, "nodesim's kubeconfig changed shape");
    std::fs::write(sim.kubeconfig(), with_token).unwrap();
    // The agent's flags here (--eviction-backoff*) change no RBAC: the chart's defaults.
    Node::from_sim(sim)
}

/// Every request but `explain`'s (the admin's [`TOKEN`]) carried the agent's service
/// account token, and none was refused by the chart's agent role.
fn assert_agent_authorized(node: &Node) {
    let (ns, name) = nodesim::apiserver::rbac_chart::AGENT;
    let agent = format!("system:serviceaccount:{ns}:{name}");
    let requests = node.api.requests();
    assert!(
        requests.iter().any(|r| r.token != TOKEN),
        "no agent request"
    );
    let others: Vec<String> = requests
        .iter()
        .filter(|r| r.token != TOKEN && node.api.user_of(&r.token) != agent)
        .map(|r| format!("{} {} by {}", r.method, r.path, node.api.user_of(&r.token)))
        .collect();
    assert!(
        others.is_empty(),
        "requests not made as {agent}: {others:#?}"
    );
    let refused: Vec<String> = node.api.forbidden().iter().map(|f| f.to_string()).collect();
    assert!(
        refused.is_empty(),
        "403s under the chart's RBAC: {refused:#?}"
    );
}

/// `(signal name, CLOCK_MONOTONIC ns)` for each line a sigrecorder wrote.
fn recorded(path: &Path) -> Vec<(String, i128)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (name, ns) = l.split_once(' ')?;
            if name == "READY" {
                return None;
            }
            Some((name.to_string(), ns.trim().parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn arm64_agent_signals_a_real_process_over_tls_and_explains_it() {
    let Some(arm) = arm64_or_skip() else { return };
    let mut node = tls_node().await;
    node.spawn_agent_with(arm.command(), &[]);
    node.wait_ready().await;
    const NS: &str = "shop";
    node.api.apply_configmap(configmap(NS, "c", &[("k", "1")]));
    let out = node.path("app.sig");
    node.api.create_pod(
        pod(NS, "web-0")
            .signal()
            // The timed swaps below are more than the default flap breaker lets through.
            .annotate("reloadlet.io/flap-threshold", "off")
            .configmap_volume("conf", "c")
            .recorder("app", &out, &[("conf", "/c")])
            .build(),
    );
    let handles = node.wait_running(NS, "web-0").await;
    let main_pid = handles.container("app").expect("app container").main_pid;
    eventually("recorder ready", WAIT, || {
        recorder_ready(&out).then_some(())
    })
    .await;
    node.wait_tracked(2).await;

    // The ConfigMap changes in the API; the kubelet swaps the volume; the agent signals.
    node.api.apply_configmap(configmap(NS, "c", &[("k", "2")]));
    eventually("SIGHUP from the arm64 agent", WAIT, || {
        (signals_in(&out) == ["SIGHUP"]).then_some(())
    })
    .await;
    let ev = node.wait_event(NS, "web-0", "Signaled").await;
    assert_eq!(
        ev.note,
        format!("sent SIGHUP to container app (pid {main_pid}): configmap c changed")
    );
    // Through a pidfd, not the kill(2) fallback the agent takes when pidfd_open or
    // pidfd_send_signal fail (src/host/process/pidfd.rs): qemu-user passes both through to
    // the host kernel, so the arm64 build's syscall numbers and struct layouts are exercised.
    let log = node.agent_log();
    assert!(!log.contains("pidfds are not available"), "{log}");

    let text = arm.explain(&node, NS, "web-0");
    assert!(text.contains("action: signal SIGHUP"), "{text}");
    assert!(
        text.contains(&format!("main pid {main_pid}")),
        "explain found the main process through /proc:\n{text}"
    );

    // Swap -> signal latency: AtomicWriter swaps made here (the kubelet projects only on a
    // ConfigMap change, so it leaves them alone), the clock read just before each rename
    // and at the recorder's receipt (both CLOCK_MONOTONIC).
    let uid = node.uid(NS, "web-0");
    let dir = node
        .kubelet_root()
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~configmap/conf");
    let mut latencies_us = Vec::with_capacity(TIMED_SWAPS);
    for i in 0..TIMED_SWAPS {
        let before = recorded(&out).len();
        let swapped = timed_update(&dir, "k", format!("timed-{i}").as_bytes()).unwrap();
        let (name, at) = eventually(&format!("signal for timed swap {i}"), WAIT, || {
            recorded(&out).get(before).cloned()
        })
        .await;
        assert_eq!(name, "SIGHUP");
        latencies_us.push(((at - swapped) / 1000) as u64);
    }
    latencies_us.sort_unstable();
    let pct = |p: usize| latencies_us[(latencies_us.len() - 1) * p / 100];
    eprintln!(
        "arm64 under qemu-user: swap -> signal over {TIMED_SWAPS} swaps: p50 {:.2} ms, p90 {:.2} ms, max {:.2} ms",
        pct(50) as f64 / 1000.0,
        pct(90) as f64 / 1000.0,
        pct(100) as f64 / 1000.0
    );
    // The hot thread signals; the async side (SCHED_IDLE) counts and records it later.
    until("every signal counted", WAIT, || {
        node.metric("reloadlet_actions_total{action=\"signal\",outcome=\"signaled\"}")
            == (1 + TIMED_SWAPS) as f64
    })
    .await;
    assert_agent_authorized(&node);
    assert_eq!(
        node.stop_agent().await.code(),
        Some(0),
        "clean exit on SIGTERM"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn arm64_agent_evicts_behind_a_pod_disruption_budget() {
    let Some(arm) = arm64_or_skip() else { return };
    let mut node = tls_node().await;
    const NS: &str = "apps";
    node.spawn_agent_with(
        arm.command(),
        &[
            "--eviction-backoff",
            "200ms",
            "--eviction-backoff-max",
            "1s",
        ],
    );
    node.wait_ready().await;
    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v1")]));
    node.api.create_pdb(
        serde_json::from_value::<PodDisruptionBudget>(json!({
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .unwrap(),
    );
    let template: PodTemplateSpec = serde_json::from_value(json!({
        "metadata": {"labels": {"app": "web"}, "annotations": {
            "reloadlet.io/action": "evict",
            "nodesim.reloadlet.io/ready-delay-ms": "300"
        }},
        "spec": {
            "containers": [{"name": "app", "image": "app", "volumeMounts": [{"name": "conf", "mountPath": node.path("mnt/conf").display().to_string()}]}],
            "volumes": [{"name": "conf", "configMap": {"name": "app-conf"}}]
        }
    }))
    .unwrap();
    node.api.create_replicaset(NS, "web", 2, template, NODE);
    let uids = |node: &Node| -> BTreeSet<String> {
        node.api
            .pods_of_replicaset(NS, "web")
            .iter()
            .filter_map(|p| p.metadata.uid.clone())
            .collect()
    };
    let before = eventually("two replicas", WAIT, || {
        let u = uids(&node);
        (u.len() == 2).then_some(u)
    })
    .await;
    node.wait_tracked(4).await;
    let first = node.api.pods_of_replicaset(NS, "web")[0]
        .metadata
        .name
        .clone()
        .unwrap();
    let text = arm.explain(&node, NS, &first);
    assert!(
        text.contains("protected by PodDisruptionBudget web"),
        "{text}"
    );

    node.api
        .apply_configmap(configmap(NS, "app-conf", &[("k", "v2")]));
    eventually("both originals evicted", Duration::from_secs(60), || {
        (evicted_set(&node) == before).then_some(())
    })
    .await;
    eventually("two fresh replicas", WAIT, || {
        let now = uids(&node);
        (now.len() == 2 && now.is_disjoint(&before)).then_some(())
    })
    .await;
    let violations = node.api.invariant_violations();
    assert!(violations.is_empty(), "the budget held: {violations:?}");
    assert_agent_authorized(&node);
    assert_eq!(
        node.stop_agent().await.code(),
        Some(0),
        "clean exit on SIGTERM"
    );
}

/// The fields of an ELF64 little-endian file this test needs.
struct Elf {
    machine: u16,
    /// (p_type, p_align) of each program header.
    segments: Vec<(u32, u64)>,
}

fn parse_elf(bytes: &[u8]) -> Elf {
    assert_eq!(&bytes[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(bytes[4], 2, "ELFCLASS64");
    assert_eq!(bytes[5], 1, "little-endian");
    let u16_at = |o: usize| u16::from_le_bytes(bytes[o..o + 2].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36) as usize, u16_at(0x38));
    let segments = (0..phnum as usize)
        .map(|i| {
            let ph = phoff + i * phentsize;
            (u32_at(ph), u64_at(ph + 0x30))
        })
        .collect();
    Elf {
        machine: u16_at(0x12),
        segments,
    }
}

#[test]
fn arm64_binary_is_static_aarch64_and_loads_on_64k_page_kernels() {
    let arm = match Arm64::find() {
        Ok(a) => a,
        Err(why) => return skipped(why),
    };
    let elf = parse_elf(&std::fs::read(&arm.bin).unwrap());
    const EM_AARCH64: u16 = 183;
    const PT_LOAD: u32 = 1;
    const PT_INTERP: u32 = 3;
    assert_eq!(elf.machine, EM_AARCH64, "{}", arm.bin.display());
    assert!(
        elf.segments.iter().all(|(t, _)| *t != PT_INTERP),
        "static: no program interpreter"
    );
    // arm64 kernels run with 4, 16 or 64 KiB pages (RHEL's and some Ampere configurations
    // use 64 KiB): every loadable segment must be aligned to the largest.
    for (t, align) in &elf.segments {
        if *t == PT_LOAD {
            assert!(
                *align >= 0x10000,
                "PT_LOAD aligned to {align:#x}, below 64 KiB"
            );
        }
    }
    let out = arm.command().arg("--version").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("reloadlet {}", env!("CARGO_PKG_VERSION"))
    );
}
