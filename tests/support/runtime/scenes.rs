//! What both runtime tests do alike: start the agent binary against the test's kubelet
//! root, read how many volumes it tracks, and the `action: evict` scene — a ReplicaSet's pod
//! whose container runs in the runtime under test is evicted through the Eviction API after
//! its ConfigMap changes, and replaced.

use super::{free_port, host_mounts, Agent};
use nodesim::apiserver::ApiServer;
use nodesim::atomic_writer::{self, FileProjection};
use nodesim::probe::http_get;
use nodesim::runtime::random_container_id;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use test_support::wait::within;

/// A container runtime as the kubelet drives it through CRI, in the shape a test reproduces.
pub trait PodRuntime {
    /// The scheme of `status.containerStatuses[].containerID` (`cri-o`, `containerd`).
    const SCHEME: &'static str;
    /// Starts `argv` as container `id` of pod `pod_uid` in the cgroup the runtime names.
    fn start(
        &mut self,
        id: &str,
        rootfs: &Path,
        pod_uid: &str,
        mounts: &[(&Path, &str, bool)],
        argv: &[&str],
    );
    /// Stops and removes container `id`, as for a deleted pod.
    fn stop(&mut self, id: &str);
}

impl PodRuntime for super::Conmon {
    const SCHEME: &'static str = "cri-o";
    fn start(
        &mut self,
        id: &str,
        rootfs: &Path,
        pod_uid: &str,
        mounts: &[(&Path, &str, bool)],
        argv: &[&str],
    ) {
        // conmon + runc add `crio-<id>` below the pod's cgroup, as CRI-O does.
        let pod_cgroup = format!("/kubepods/besteffort/pod{pod_uid}");
        self.run(id, rootfs, &pod_cgroup, mounts, argv);
    }
    fn stop(&mut self, id: &str) {
        super::Conmon::stop(self, id);
    }
}

impl PodRuntime for super::Containerd {
    const SCHEME: &'static str = "containerd";
    fn start(
        &mut self,
        id: &str,
        rootfs: &Path,
        pod_uid: &str,
        mounts: &[(&Path, &str, bool)],
        argv: &[&str],
    ) {
        // containerd's CRI plugin with cgroupfs: `<pod cgroup>/<id>`.
        let cgroup = format!("/kubepods/besteffort/pod{pod_uid}/{id}");
        self.run(id, rootfs, &cgroup, mounts, argv);
    }
    fn stop(&mut self, id: &str) {
        super::Containerd::stop(self, id);
    }
}

/// The agent binary on `node`, watching `root`, with the test's kubeconfig and state under
/// `dir`; returns it and its metrics address.
pub fn spawn_agent(dir: &Path, root: &Path, node: &str) -> (Agent, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let log = dir.join("agent.log");
    let agent = Agent {
        child: nodesim::runtime::default_signals(&mut Command::new(env!(
            "CARGO_BIN_EXE_reloadlet"
        )))
        .args(["--node-name", node, "--listen", &listen, "--debounce", "0s"])
        .arg("--kubelet-root")
        .arg(root)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .env("KUBECONFIG", dir.join("kubeconfig"))
        .env("RUST_LOG", "reloadlet=debug,info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn reloadlet"),
        log,
    };
    (agent, listen)
}

/// `reloadlet_volumes_tracked` as the agent at `listen` reports it (0 until it answers).
pub fn tracked(listen: &str) -> f64 {
    http_get(listen, "/metrics")
        .and_then(|(_, m)| {
            m.lines()
                .find_map(|l| l.strip_prefix("reloadlet_volumes_tracked "))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .unwrap_or(0.0)
}

/// Where the scene runs.
pub struct Stage<'a> {
    pub api: &'a ApiServer,
    /// The simulated kubelet's root (`pods/<uid>/volumes/...`).
    pub root: &'a Path,
    pub rootfs: &'a Path,
    pub namespace: &'a str,
    pub node: &'a str,
    pub agent: &'a Agent,
    /// The agent's metrics address.
    pub listen: &'a str,
    /// Volumes the agent tracks before the scene.
    pub tracked_before: f64,
}

/// `action: evict`: a ReplicaSet's pod running in `runtime` is evicted through the Eviction
/// API when its ConfigMap changes, and the ReplicaSet replaces it; the test plays the
/// kubelet (writes the volume, reports the container, stops it on deletion).
pub async fn evict_scene<R: PodRuntime>(stage: &Stage<'_>, runtime: &mut R) {
    let (api, ns) = (stage.api, stage.namespace);
    let conf = |v: &str| {
        serde_json::from_value(json!({"metadata": {"name": "app-conf", "namespace": ns},
            "data": {"k": v}}))
        .unwrap()
    };
    api.apply_configmap(conf("v1"));
    let template = serde_json::from_value(json!({
        "metadata": {"labels": {"app": "app"}, "annotations": {"reloadlet.io/action": "evict"}},
        "spec": {
            "containers": [{"name": "app", "image": "busybox",
                            "volumeMounts": [{"name": "conf", "mountPath": "/config"}]}],
            "volumes": [{"name": "conf", "configMap": {"name": "app-conf"}}]
        }
    }))
    .unwrap();
    api.create_replicaset(ns, "app", 1, template, stage.node);
    let old = api
        .pods_of_replicaset(ns, "app")
        .pop()
        .expect("the ReplicaSet's pod");
    let (old_name, old_uid) = (
        old.metadata.name.clone().unwrap(),
        old.metadata.uid.clone().unwrap(),
    );
    let app_conf = stage
        .root
        .join("pods")
        .join(&old_uid)
        .join("volumes/kubernetes.io~configmap/conf");
    std::fs::create_dir_all(&app_conf).unwrap();
    let write_app = |v: &str| {
        let payload = BTreeMap::from([("k".to_string(), FileProjection::new(v))]);
        atomic_writer::write(&app_conf, &payload).unwrap();
    };
    write_app("v1");
    let app_id = random_container_id();
    let mut app_mounts = host_mounts();
    app_mounts.push((app_conf.as_path(), "/config", true));
    runtime.start(
        &app_id,
        stage.rootfs,
        &old_uid,
        &app_mounts,
        &["/usr/bin/busybox", "sleep", "3600"],
    );
    let status = json!({
        "phase": "Running", "qosClass": "BestEffort", "podIP": "127.0.0.1",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [
            {"name": "app", "containerID": format!("{}://{app_id}", R::SCHEME), "image": "busybox",
             "imageID": "", "ready": true, "restartCount": 0, "started": true,
             "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
        ]
    });
    api.set_pod_status(ns, &old_name, serde_json::from_value(status).unwrap());
    let want = stage.tracked_before + 1.0;
    let ok = within(Duration::from_secs(30), || tracked(stage.listen) >= want).await;
    assert!(
        ok,
        "the agent never tracked the app's volume:\n{}",
        stage.agent.log()
    );
    api.apply_configmap(conf("v2"));
    write_app("v2");
    let evicted = within(Duration::from_secs(30), || {
        api.evictions()
            .iter()
            .any(|e| e.pod == old_name && e.code == 201)
    })
    .await;
    assert!(
        evicted,
        "the app's pod was never evicted:\n{}",
        stage.agent.log()
    );
    // The kubelet's part of a deletion: stop the container, confirm the pod is gone.
    runtime.stop(&app_id);
    api.finalize_pod(ns, &old_name);
    let replaced = within(Duration::from_secs(10), || {
        let pods = api.pods_of_replicaset(ns, "app");
        pods.len() == 1 && pods[0].metadata.uid.as_deref() != Some(old_uid.as_str())
    })
    .await;
    assert!(replaced, "the ReplicaSet replaced the evicted pod");
}

/// `status` of a Running, Ready pod whose containers (name, container ID, image) run in a
/// runtime reporting `scheme`, as the kubelet writes it from CRI.
pub fn running_status(scheme: &str, containers: &[(&str, &str, &str)]) -> serde_json::Value {
    let statuses: Vec<serde_json::Value> = containers
        .iter()
        .map(|(name, id, image)| {
            json!({"name": name, "containerID": format!("{scheme}://{id}"), "image": image,
                   "imageID": "", "ready": true, "restartCount": 0, "started": true,
                   "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}})
        })
        .collect();
    json!({
        "phase": "Running", "qosClass": "BestEffort", "podIP": "127.0.0.1",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": statuses
    })
}

/// Pod `nginx-0` as the API knows it (`action: signal` for its `nginx` container, its
/// ConfigMap `nginx-conf`, a `sidecar` sibling) and the kubelet's part: its volumes, written
/// as the kubelet writes them.
pub struct NginxPod {
    pub uid: String,
    /// nginx listens on 127.0.0.1:`port`.
    pub port: u16,
    pub conf_dir: std::path::PathBuf,
    pub run_dir: std::path::PathBuf,
}

impl NginxPod {
    pub fn create(api: &ApiServer, root: &Path, namespace: &str, node: &str) -> NginxPod {
        let port = free_port();
        api.apply_configmap(
            serde_json::from_value(
                json!({"metadata": {"name": "nginx-conf", "namespace": namespace},
                "data": {"nginx.conf": super::nginx_conf(port, "v1")}}),
            )
            .unwrap(),
        );
        let pod = api.create_pod(
            serde_json::from_value(json!({
                "metadata": {"name": "nginx-0", "namespace": namespace, "annotations": {
                    "reloadlet.io/action": "signal",
                    "reloadlet.io/containers": "nginx"
                }},
                "spec": {
                    "nodeName": node,
                    "containers": [
                        {"name": "nginx", "image": "nginx", "volumeMounts": [
                            {"name": "conf", "mountPath": "/config"},
                            {"name": "run", "mountPath": "/run/nginx"}
                        ]},
                        {"name": "sidecar", "image": "busybox"}
                    ],
                    "volumes": [
                        {"name": "conf", "configMap": {"name": "nginx-conf"}},
                        {"name": "run", "emptyDir": {}}
                    ]
                }
            }))
            .unwrap(),
        );
        let uid = pod.metadata.uid.clone().unwrap();
        let volumes = root.join("pods").join(&uid).join("volumes");
        let nginx = NginxPod {
            uid,
            port,
            conf_dir: volumes.join("kubernetes.io~configmap/conf"),
            run_dir: volumes.join("kubernetes.io~empty-dir/run"),
        };
        std::fs::create_dir_all(&nginx.conf_dir).unwrap();
        std::fs::create_dir_all(&nginx.run_dir).unwrap();
        nginx.write_conf("v1");
        nginx
    }

    /// The ConfigMap changed to serve `body`: the API object, and the kubelet's projection.
    pub fn change_conf(&self, api: &ApiServer, namespace: &str, body: &str) {
        api.apply_configmap(
            serde_json::from_value(
                json!({"metadata": {"name": "nginx-conf", "namespace": namespace},
                "data": {"nginx.conf": super::nginx_conf(self.port, body)}}),
            )
            .unwrap(),
        );
        self.write_conf(body);
    }

    /// The ConfigMap changes to serve `v2` (the API object, then the kubelet's swap) and the
    /// agent reloads nginx: it serves v2, its error log shows exactly one SIGHUP, a
    /// `Signaled` Event regards the pod.
    pub async fn change_and_see_one_reload(&self, api: &ApiServer, namespace: &str, agent: &Agent) {
        self.change_conf(api, namespace, "v2");
        let addr = format!("127.0.0.1:{}", self.port);
        let served = within(Duration::from_secs(30), || {
            http_get(&addr, "/").is_some_and(|(c, b)| c == 200 && b == "v2")
        })
        .await;
        assert!(served, "nginx never served v2:\n{}", agent.log());
        let error_log = std::fs::read_to_string(self.run_dir.join("error.log")).unwrap_or_default();
        assert_eq!(
            error_log.matches("signal 1 (SIGHUP) received").count(),
            1,
            "exactly one SIGHUP, to the master:\n{error_log}"
        );
        let signaled = within(Duration::from_secs(10), || {
            api.events()
                .iter()
                .any(|e| e.reason == "Signaled" && e.regarding_name == "nginx-0")
        })
        .await;
        assert!(signaled, "a Signaled event:\n{}", agent.log());
    }

    /// The kubelet's projection of the ConfigMap serving `body`.
    pub fn write_conf(&self, body: &str) {
        let payload = BTreeMap::from([(
            "nginx.conf".to_string(),
            FileProjection::new(super::nginx_conf(self.port, body)),
        )]);
        atomic_writer::write(&self.conf_dir, &payload).unwrap();
    }

    /// nginx's bind mounts: the host's, its config read-only, its run directory.
    pub fn mounts(&self) -> Vec<(&Path, &'static str, bool)> {
        let mut mounts = host_mounts();
        mounts.push((self.conf_dir.as_path(), "/config", true));
        mounts.push((self.run_dir.as_path(), "/run/nginx", false));
        mounts
    }
}
