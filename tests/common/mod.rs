//! The integration harness: a simulated node (API server + kubelet + runtime from `nodesim`)
//! and the real `reloadlet` binary running against it.
#![allow(dead_code)] // each test binary uses a different part of the harness

pub mod fixtures;
pub mod rbac;
#[allow(unused_imports)] // not every test binary waits
pub use test_support::wait::*;

use nodesim::apiserver::RecordedEvent;
pub use nodesim::flavor::{CgroupDriver, CgroupVersion, Runtime};
use nodesim::kubelet::PodHandles;
use nodesim::node::SimNode;
pub use nodesim::probe::http_get;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub const NODE: &str = "node-a";

#[derive(Clone, Debug)]
pub struct NodeOptions {
    pub runtime: Runtime,
    pub driver: CgroupDriver,
    pub cgroup_version: CgroupVersion,
    pub tmpfs_mount_delay: Option<Duration>,
}

impl Default for NodeOptions {
    fn default() -> Self {
        Self {
            runtime: Runtime::Containerd,
            driver: CgroupDriver::Systemd,
            cgroup_version: CgroupVersion::V2,
            tmpfs_mount_delay: None,
        }
    }
}

/// The simulated node (API server, kubelet; reached through `Deref`) and the reloadlet
/// process running against it.
pub struct Node {
    pub agent: Option<AgentProcess>,
    pub sim: SimNode,
    /// The agent and the controller run as their chart service accounts, under the chart's
    /// RBAC (see [`rbac`]); on by default. Off: as the admin, for tests of other identities.
    pub rbac: bool,
}

impl std::ops::Deref for Node {
    type Target = SimNode;
    fn deref(&self) -> &SimNode {
        &self.sim
    }
}

pub struct AgentProcess {
    pub child: Child,
    pub listen: String,
    pub log: PathBuf,
}

impl Node {
    /// `reloadlet explain --pod <namespace>/<pod>` against this node's API server, as an
    /// operator runs it (outside a pod): its standard output. As the admin: run with the
    /// agent's service account (`kubectl exec ds/reloadlet -- reloadlet explain`), its
    /// workload reads (replicasets/deployments get) are 403 under the chart's agent role.
    #[allow(dead_code)] // not every test binary explains
    pub fn explain_output(&self, namespace: &str, pod: &str) -> String {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_reloadlet"))
            .args(["explain", "--pod", &format!("{namespace}/{pod}")])
            .env("KUBECONFIG", self.kubeconfig())
            .env("NODE_NAME", NODE)
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    pub async fn start(opts: NodeOptions) -> Node {
        let sim = SimNode::start(NODE, "reloadlet-it-", |k| {
            k.runtime = opts.runtime;
            k.driver = opts.driver;
            k.cgroup_version = opts.cgroup_version;
            k.tmpfs_mount_delay = opts.tmpfs_mount_delay;
        })
        .await
        .expect("simulated node");
        Node::from_sim(sim)
    }

    /// A node with the kubelet's real sync timing (`syncFrequency` `sync`: without a nudge a
    /// ConfigMap change reaches a pod after `sync` to 1.5 × `sync`).
    pub async fn start_faithful(sync: Duration) -> Node {
        let sim = SimNode::start(NODE, "reloadlet-it-", |k| {
            *k = k.clone().faithful(sync);
        })
        .await
        .expect("simulated node");
        Node::from_sim(sim)
    }

    /// Publishes CSI volume `volume` of the running pod `uid` as `driver` would, with `files`
    /// written `style`.
    pub fn publish_csi(
        &self,
        uid: &str,
        volume: &str,
        driver: &str,
        style: nodesim::csi::WriteStyle,
        files: &[(&str, &str)],
    ) -> nodesim::csi::CsiVolume {
        nodesim::csi::CsiVolume::publish(&self.kubelet_root(), uid, volume, driver, style, files)
            .expect("publish CSI volume")
    }

    /// A node whose API server also serves Argo Rollouts (argoproj.io/v1alpha1), as a cluster
    /// with Argo Rollouts' CRD does.
    pub async fn start_with_argo_rollouts() -> Node {
        let defaults = NodeOptions::default();
        let sim = SimNode::start_with_api(
            NODE,
            "reloadlet-it-",
            nodesim::apiserver::ApiServerOptions {
                argo_rollouts: true,
                ..Default::default()
            },
            |k| {
                k.runtime = defaults.runtime;
                k.driver = defaults.driver;
                k.cgroup_version = defaults.cgroup_version;
            },
        )
        .await
        .expect("simulated node");
        let node = Node::from_sim(sim);
        node.api.set_nodes(&[NODE]);
        node
    }

    /// A node around a simulated node started elsewhere, with the chart's default RBAC.
    pub fn from_sim(sim: SimNode) -> Node {
        let node = Node {
            agent: None,
            sim,
            rbac: true,
        };
        node.load_chart_rbac(&[]);
        node
    }

    /// Starts reloadlet (`--debounce 0s` unless `args` say otherwise) and waits for /readyz.
    pub async fn start_agent(&mut self, args: &[&str]) {
        self.spawn_agent(args);
        self.wait_ready().await;
    }

    pub fn spawn_agent(&mut self, args: &[&str]) {
        self.spawn_agent_with(Command::new(env!("CARGO_BIN_EXE_reloadlet")), args)
    }

    /// Spawns reloadlet through `cmd` (e.g. a wrapper such as `unshare`).
    pub fn spawn_agent_with(&mut self, mut cmd: Command, args: &[&str]) {
        assert!(self.agent.is_none(), "agent already running");
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let listen = format!("127.0.0.1:{port}");
        let log = self.path(&format!("reloadlet-{port}.log"));
        let mut all: Vec<String> = vec![
            "--node-name".into(),
            NODE.into(),
            "--kubelet-root".into(),
            self.kubelet_root().display().to_string(),
            "--listen".into(),
            listen.clone(),
            "--state-dir".into(),
            self.path("state").display().to_string(),
        ];
        if !args.contains(&"--debounce") {
            all.extend(["--debounce".into(), "0s".into()]);
        }
        all.extend(args.iter().map(|s| s.to_string()));
        let child = nodesim::runtime::default_signals(&mut cmd)
            .args(&all)
            .env("KUBECONFIG", self.agent_kubeconfig())
            .env("RUST_LOG", "reloadlet=debug,info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn reloadlet");
        self.agent = Some(AgentProcess { child, listen, log });
    }

    pub async fn wait_ready(&mut self) {
        let agent = self.agent.as_mut().expect("agent running");
        let (listen, log) = (agent.listen.clone(), agent.log.clone());
        eventually_while_running(
            "reloadlet /readyz",
            Duration::from_secs(20),
            &mut agent.child,
            || std::fs::read_to_string(&log).unwrap_or_default(),
            || http_get(&listen, "/readyz").and_then(|(code, _)| (code == 200).then_some(())),
        )
        .await
    }

    pub fn agent(&self) -> &AgentProcess {
        self.agent.as_ref().expect("agent running")
    }

    pub fn agent_log(&self) -> String {
        std::fs::read_to_string(&self.agent().log).unwrap_or_default()
    }

    /// SIGTERM, then waits (SIGKILL after 15 s).
    pub async fn stop_agent(&mut self) -> ExitStatus {
        let mut agent = self.agent.take().expect("agent running");
        terminate(&mut agent.child).await
    }

    pub fn scrape(&self) -> String {
        http_get(&self.agent().listen, "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// The value of one metric series (exact name with labels), 0 when absent.
    pub fn metric(&self, series: &str) -> f64 {
        metric_value(&self.scrape(), series)
    }

    /// Waits until one metric series reads `want`. Counters of an action are bumped by the
    /// follow-up work, which runs after the action itself (on the SCHED_IDLE worker when the
    /// hot path acted), so a test that saw the action waits for its count too.
    pub async fn wait_metric(&self, series: &str, want: f64) {
        let what = format!("{series} == {want}");
        until(&what, Duration::from_secs(15), || {
            self.metric(series) == want
        })
        .await
    }

    /// Waits until reloadlet knows the content of at least `n` volumes.
    pub async fn wait_tracked(&self, n: usize) {
        let what = format!("reloadlet tracking {n} volumes");
        until(&what, Duration::from_secs(10), || {
            self.metric("reloadlet_volumes_tracked") >= n as f64
        })
        .await
    }

    /// Waits until the kubelet's sync right after Pending → Running (on its next 1 s tick) of
    /// each of `pods` is done, and the volume manager's re-projection after it (at most one
    /// populator and one reconciler period later). Under the kubelet's real timing a change
    /// made before that is projected by that sync, with no nudge and no pod update; made
    /// after it, it waits for the periodic sync (60–90 s). Returns when the last one synced.
    pub async fn wait_post_start_syncs(&self, namespace: &str, pods: &[&str]) -> Instant {
        use nodesim::kubelet_sync::{SyncReason, POPULATOR_PERIOD, RECONCILER_PERIOD};
        let wait = Duration::from_secs(15);
        let synced: Vec<Instant> = eventually("the post-start syncs", wait, || {
            pods.iter()
                .map(|p| {
                    self.sim
                        .kubelet
                        .syncs(&self.uid(namespace, p))
                        .iter()
                        .find(|s| s.reason == SyncReason::PhaseTransition)
                        .map(|s| s.at)
                })
                .collect::<Option<Vec<Instant>>>()
        })
        .await;
        let last = synced.into_iter().max().unwrap_or_else(Instant::now);
        let remounted = last + POPULATOR_PERIOD + RECONCILER_PERIOD;
        until("their re-projection", wait, || Instant::now() > remounted).await;
        last
    }

    pub fn events(&self, namespace: &str, pod: &str, reason: &str) -> Vec<RecordedEvent> {
        self.api
            .events()
            .into_iter()
            .filter(|e| e.namespace == namespace && e.regarding_name == pod && e.reason == reason)
            .collect()
    }

    pub async fn wait_event(&self, namespace: &str, pod: &str, reason: &str) -> RecordedEvent {
        eventually(
            &format!("event {reason} on {namespace}/{pod}"),
            Duration::from_secs(15),
            || self.events(namespace, pod, reason).into_iter().next(),
        )
        .await
    }

    pub fn all_events(&self) -> Vec<RecordedEvent> {
        self.api.events()
    }

    /// Waits until the simulated kubelet runs every container of the pod.
    pub async fn wait_running(&self, namespace: &str, name: &str) -> PodHandles {
        let uid = eventually(
            &format!("pod {namespace}/{name} exists"),
            Duration::from_secs(10),
            || {
                self.api
                    .get_pod(namespace, name)
                    .and_then(|p| p.metadata.uid)
            },
        )
        .await;
        let kubelet = &self.kubelet;
        tokio::task::block_in_place(|| kubelet.wait_for_pod(&uid, Duration::from_secs(20)))
            .unwrap_or_else(|| panic!("pod {namespace}/{name} never ran"))
    }

    /// One annotation of a pod, as the API server holds it now.
    pub fn pod_annotation(&self, namespace: &str, pod: &str, key: &str) -> Option<String> {
        self.api
            .get_pod(namespace, pod)?
            .metadata
            .annotations?
            .get(key)
            .cloned()
    }

    pub fn uid(&self, namespace: &str, name: &str) -> String {
        self.api
            .get_pod(namespace, name)
            .and_then(|p| p.metadata.uid)
            .expect("pod exists")
    }
}

/// SIGTERM to a spawned reloadlet, then waits for it (SIGKILL after 15 s).
pub async fn terminate(child: &mut Child) -> ExitStatus {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    wait_exit(child, Duration::from_secs(15)).await
}

/// The UIDs of the pods evicted for real (answered 201, not dry-run), in request order.
pub fn evicted_uids(node: &Node) -> Vec<String> {
    node.api
        .evictions()
        .into_iter()
        .filter(|e| e.code == 201 && !e.dry_run)
        .filter_map(|e| e.uid)
        .collect()
}

/// [`evicted_uids`] as a set.
pub fn evicted_set(node: &Node) -> std::collections::BTreeSet<String> {
    evicted_uids(node).into_iter().collect()
}

pub fn alive(pid: i32) -> bool {
    // Zombies count as dead: a signal with the default action would have killed it.
    nodesim::proc_stat::state(Path::new(&format!("/proc/{pid}/stat"))).is_some_and(|s| s != 'Z')
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            let _ = agent.child.kill();
            let _ = agent.child.wait();
            if std::thread::panicking() {
                eprintln!(
                    "--- reloadlet log ---\n{}",
                    std::fs::read_to_string(&agent.log).unwrap_or_default()
                );
            }
        }
        self.finish_rbac();
        // `sim` (dropped after this) stops every process and removes mounts and cgroups.
    }
}

pub fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}

/// Lines a `sigrecorder` wrote, without the READY line: e.g. `["SIGHUP"]`.
pub fn signals_in(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|s| *s != "READY")
        .map(str::to_owned)
        .collect()
}

pub fn recorder_ready(path: &Path) -> bool {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .contains("READY")
}

/// `examples/sigrecorder`, which `cargo test` builds next to the test binaries.
pub fn sigrecorder() -> String {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let path = dir.join("examples/sigrecorder");
    assert!(
        path.exists(),
        "{} is missing: run through `cargo test`",
        path.display()
    );
    path.display().to_string()
}

/// Signals a stand-in process (the pause process, or a container without a command) logged.
pub fn stand_in_signals(handle: &nodesim::runtime::ContainerHandle) -> Vec<String> {
    std::fs::read_to_string(&handle.log_path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("received ").map(str::to_owned))
        .collect()
}

impl Node {
    /// The common scene: reloadlet started with `args`, ConfigMap `c` (`k=1`) in `namespace`,
    /// and a pod `name` with `reloadlet.io/action: signal` whose `sigrecorder` container
    /// `app` mounts it; returns once reloadlet knows both of the pod's volumes. The second
    /// value is the recorder's output file.
    pub async fn with_signal_pod(args: &[&str], namespace: &str, name: &str) -> (Node, PathBuf) {
        let mut node = Node::start(NodeOptions::default()).await;
        node.start_agent(args).await;
        node.api
            .apply_configmap(fixtures::configmap(namespace, "c", &[("k", "1")]));
        let out = node.path(&format!("{name}.sig"));
        node.api.create_pod(
            fixtures::pod(namespace, name)
                .signal()
                .configmap_volume("conf", "c")
                .recorder("app", &out, &[("conf", "/c")])
                .build(),
        );
        node.wait_running(namespace, name).await;
        eventually("recorder ready", Duration::from_secs(10), || {
            recorder_ready(&out).then_some(())
        })
        .await;
        node.wait_tracked(2).await;
        (node, out)
    }
}
