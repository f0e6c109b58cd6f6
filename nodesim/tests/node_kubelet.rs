//! SimKubelet against an in-memory fake of the API (root): pods become volumes, processes
//! and status; ConfigMap changes reach full mounts but not subPath mounts; tokens rotate;
//! terminating pods are stopped, cleaned up and finalized.

use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, Pod, PodSpec, PodStatus, Secret, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use nodesim::apiserver::ApiChange;
use nodesim::kubelet::{
    KubeletApi, KubeletOptions, PodHandles, SimKubelet, READY_DELAY_ANNOTATION,
};
use nodesim::projection::{inject_kube_api_access, SourceLookup};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use test_support::wait::eventually_blocking;
use tokio::sync::broadcast;

type Key = (String, String);

#[derive(Default)]
struct State {
    pods: BTreeMap<Key, Pod>,
    configmaps: BTreeMap<Key, ConfigMap>,
    secrets: BTreeMap<Key, Secret>,
    finalized: Vec<Key>,
}

/// Enough of the API server for the kubelet: objects in maps, changes on a broadcast.
#[derive(Clone)]
struct FakeApi {
    state: Arc<Mutex<State>>,
    tx: broadcast::Sender<ApiChange>,
}

fn key(ns: &str, name: &str) -> Key {
    (ns.to_owned(), name.to_owned())
}

impl FakeApi {
    fn new() -> Self {
        Self {
            state: Arc::default(),
            tx: broadcast::channel(1024).0,
        }
    }
    fn upsert_pod(&self, pod: Pod) {
        let k = key(
            pod.metadata.namespace.as_deref().unwrap(),
            pod.metadata.name.as_deref().unwrap(),
        );
        self.state.lock().unwrap().pods.insert(k, pod.clone());
        let _ = self.tx.send(ApiChange::PodUpserted(Box::new(pod)));
    }
    fn put_configmap(&self, cm: ConfigMap) {
        let (ns, name) = (
            cm.metadata.namespace.clone().unwrap(),
            cm.metadata.name.clone().unwrap(),
        );
        self.state
            .lock()
            .unwrap()
            .configmaps
            .insert(key(&ns, &name), cm);
        let _ = self.tx.send(ApiChange::ConfigMapChanged {
            namespace: ns,
            name,
        });
    }
    fn pod(&self, ns: &str, name: &str) -> Option<Pod> {
        self.state.lock().unwrap().pods.get(&key(ns, name)).cloned()
    }
    fn finalized(&self, ns: &str, name: &str) -> bool {
        self.state
            .lock()
            .unwrap()
            .finalized
            .contains(&key(ns, name))
    }
}

impl SourceLookup for FakeApi {
    fn configmap(&self, ns: &str, name: &str) -> Option<ConfigMap> {
        self.state
            .lock()
            .unwrap()
            .configmaps
            .get(&key(ns, name))
            .cloned()
    }
    fn secret(&self, ns: &str, name: &str) -> Option<Secret> {
        self.state
            .lock()
            .unwrap()
            .secrets
            .get(&key(ns, name))
            .cloned()
    }
}

impl KubeletApi for FakeApi {
    fn subscribe(&self) -> broadcast::Receiver<ApiChange> {
        self.tx.subscribe()
    }
    fn list_pods(&self) -> Vec<Pod> {
        self.state.lock().unwrap().pods.values().cloned().collect()
    }
    fn set_pod_status(&self, ns: &str, name: &str, status: PodStatus) {
        let pod = {
            let mut state = self.state.lock().unwrap();
            let Some(pod) = state.pods.get_mut(&key(ns, name)) else {
                return;
            };
            pod.status = Some(status);
            pod.clone()
        };
        let _ = self.tx.send(ApiChange::PodUpserted(Box::new(pod)));
    }
    fn finalize_pod(&self, ns: &str, name: &str) {
        let removed = {
            let mut state = self.state.lock().unwrap();
            state.finalized.push(key(ns, name));
            state.pods.remove(&key(ns, name))
        };
        if let Some(pod) = removed {
            let _ = self.tx.send(ApiChange::PodDeleted(Box::new(pod)));
        }
    }
    fn apply_configmap(&self, cm: ConfigMap) {
        self.put_configmap(cm);
    }
    fn lookup(&self) -> &dyn SourceLookup {
        self
    }
}

fn configmap(name: &str, conf: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("app.conf".into(), conf.into())])),
        ..Default::default()
    }
}

fn unique() -> String {
    nodesim::runtime::random_container_id()[..10].to_owned()
}

/// A pod on `node` with a ConfigMap volume mounted whole at `<mnt>/full` and by subPath
/// at `<mnt>/sub.conf`, a sidecar and a classic init container.
fn web_pod(name: &str, node: &str, cm: &str, mnt: &Path) -> Pod {
    let mount = |path: PathBuf, sub: Option<&str>| VolumeMount {
        name: "config".into(),
        mount_path: path.to_string_lossy().into_owned(),
        sub_path: sub.map(String::from),
        ..Default::default()
    };
    let sleeper = |name: &str, secs: &str| Container {
        name: name.into(),
        command: Some(vec!["sleep".into()]),
        args: Some(vec![secs.into()]),
        ..Default::default()
    };
    let mut pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!(
                "{}-0000-4000-8000-{}",
                unique()[..8].to_owned(),
                &unique()[..10]
            )),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            termination_grace_period_seconds: Some(1),
            containers: vec![Container {
                volume_mounts: Some(vec![
                    mount(mnt.join("full"), None),
                    mount(mnt.join("sub.conf"), Some("app.conf")),
                ]),
                ..sleeper("app", "3600")
            }],
            init_containers: Some(vec![
                Container {
                    command: Some(vec!["sh".into(), "-c".into(), "exit 0".into()]),
                    ..sleeper("setup", "0")
                },
                Container {
                    restart_policy: Some("Always".into()),
                    ..sleeper("sidecar", "3601")
                },
            ]),
            volumes: Some(vec![Volume {
                name: "config".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: cm.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    inject_kube_api_access(&mut pod);
    pod
}

fn read_in(h: &PodHandles, container: &str, path: &Path) -> String {
    let pid = h.container(container).unwrap().main_pid;
    // resolve host symlinks such as /var/run -> /run first: through /proc/<pid>/root an
    // absolute symlink is followed from the reader's root, which lacks the container's mounts
    let parent = std::fs::canonicalize(path.parent().unwrap()).unwrap();
    let path = parent.join(path.file_name().unwrap());
    std::fs::read_to_string(
        PathBuf::from(format!("/proc/{pid}/root")).join(path.strip_prefix("/").unwrap()),
    )
    .unwrap()
}

fn condition(pod: &Pod, type_: &str) -> Option<String> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

#[test]
fn pod_lifecycle_updates_rotation_and_termination() {
    let tmp = tempfile::tempdir().unwrap();
    let api = FakeApi::new();
    let node = format!("node-{}", unique());
    let cm = format!("cfg-{}", unique());
    api.put_configmap(configmap(&cm, "v1"));
    let mnt = tmp.path().join("mnt");
    let pod = web_pod("web", &node, &cm, &mnt);
    let uid = pod.metadata.uid.clone().unwrap();
    api.upsert_pod(pod);
    // a pod of another node is none of this kubelet's business
    let other = web_pod("elsewhere", "other-node", &cm, &tmp.path().join("other"));
    let other_uid = other.metadata.uid.clone().unwrap();
    api.upsert_pod(other);

    let opts = KubeletOptions::new(tmp.path().join("kubelet"), tmp.path().join("work"), &node);
    let kubelet = SimKubelet::start_with(Box::new(api.clone()), opts).unwrap();
    let h = kubelet
        .wait_for_pod(&uid, Duration::from_secs(20))
        .expect("pod never ran");
    assert!(kubelet.pod_handles(&other_uid).is_none());

    // status as the kubelet reports it
    let status = eventually_blocking("Running status", Duration::from_secs(5), || {
        api.pod("default", "web")
            .and_then(|p| p.status.filter(|s| s.phase.as_deref() == Some("Running")))
    });
    assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));
    let cs = &status.container_statuses.as_ref().unwrap()[0];
    assert_eq!(
        cs.container_id.as_deref(),
        Some(format!("containerd://{}", h.container("app").unwrap().id).as_str())
    );
    assert!(cs.ready && cs.state.as_ref().unwrap().running.is_some());
    let init: Vec<(&str, bool)> = status
        .init_container_statuses
        .as_ref()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.state.as_ref().unwrap().terminated.is_some(),
            )
        })
        .collect();
    assert_eq!(init, vec![("setup", true), ("sidecar", false)]);
    assert!(
        h.container("sidecar").is_some(),
        "the sidecar init container keeps running"
    );
    assert_eq!(
        condition(&api.pod("default", "web").unwrap(), "Ready").as_deref(),
        Some("True")
    );

    // the root-CA publisher did its job and the service-account volume is mounted
    assert!(api.configmap("default", "kube-root-ca.crt").is_some());
    let sa = Path::new(nodesim::projection::SERVICE_ACCOUNT_MOUNT_PATH);
    assert_eq!(read_in(&h, "app", &sa.join("namespace")), "default");
    let token = read_in(&h, "app", &sa.join("token"));

    // a ConfigMap update reaches the full mount, never the subPath mount
    assert_eq!(read_in(&h, "app", &mnt.join("full/app.conf")), "v1");
    assert_eq!(read_in(&h, "app", &mnt.join("sub.conf")), "v1");
    api.put_configmap(configmap(&cm, "v2"));
    eventually_blocking(
        "the update in the full mount",
        Duration::from_secs(5),
        || (read_in(&h, "app", &mnt.join("full/app.conf")) == "v2").then_some(()),
    );
    assert_eq!(
        read_in(&h, "app", &mnt.join("sub.conf")),
        "v1",
        "subPath mounts never see updates"
    );

    // the periodic resync changes nothing; a token rotation changes the token
    let volumes = tmp.path().join("kubelet/pods").join(&uid).join("volumes");
    let data_of = |plugin: &str, name: &str| {
        std::fs::read_link(volumes.join(plugin).join(name).join("..data")).unwrap()
    };
    let config_data = data_of("kubernetes.io~configmap", "config");
    kubelet.resync_all();
    assert_eq!(data_of("kubernetes.io~configmap", "config"), config_data);
    kubelet.rotate_tokens();
    assert_ne!(read_in(&h, "app", &sa.join("token")), token);
    assert_eq!(data_of("kubernetes.io~configmap", "config"), config_data);

    // termination: processes stopped, volumes and cgroups gone, then finalized
    let mut terminating = api.pod("default", "web").unwrap();
    terminating.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    api.upsert_pod(terminating);
    eventually_blocking("finalize_pod", Duration::from_secs(10), || {
        api.finalized("default", "web").then_some(())
    });
    for c in std::iter::once(&h.sandbox).chain(&h.containers) {
        assert!(
            !Path::new(&format!("/proc/{}", c.main_pid)).exists() || is_zombie(c.main_pid),
            "{} alive",
            c.name
        );
        assert!(
            c.cgroup_paths.iter().all(|p| !p.exists()),
            "{} cgroup left",
            c.name
        );
    }
    assert!(
        !tmp.path().join("kubelet/pods").join(&uid).exists(),
        "pod dir left"
    );
    assert!(!mnt.exists(), "mount targets left");
    assert!(kubelet.pod_handles(&uid).is_none());
    kubelet.shutdown();
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
}

#[test]
fn ready_delay_and_tmpfs_delay() {
    let tmp = tempfile::tempdir().unwrap();
    let api = FakeApi::new();
    let node = format!("node-{}", unique());
    let cm = format!("cfg-{}", unique());
    api.put_configmap(configmap(&cm, "v1"));
    let mut pod = web_pod("slow", &node, &cm, &tmp.path().join("mnt"));
    pod.metadata.annotations = Some(BTreeMap::from([(
        READY_DELAY_ANNOTATION.to_owned(),
        "400".to_owned(),
    )]));
    let uid = pod.metadata.uid.clone().unwrap();
    let sa_volume = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap()[1]
        .name
        .clone();
    api.upsert_pod(pod);

    let mut opts = KubeletOptions::new(tmp.path().join("kubelet"), tmp.path().join("work"), &node);
    opts.tmpfs_mount_delay = Some(Duration::from_millis(400));
    let kubelet = SimKubelet::start_with(Box::new(api.clone()), opts).unwrap();

    // the projected volume dir exists, empty and unmounted, before its tmpfs appears
    let dir = tmp
        .path()
        .join("kubelet/pods")
        .join(&uid)
        .join("volumes/kubernetes.io~projected")
        .join(&sa_volume);
    eventually_blocking("the volume dir", Duration::from_secs(5), || {
        dir.is_dir().then_some(())
    });
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    assert!(
        kubelet.pod_handles(&uid).is_none(),
        "containers wait for their volumes"
    );
    eventually_blocking("..data on the tmpfs", Duration::from_secs(5), || {
        dir.join("..data").exists().then_some(())
    });

    kubelet
        .wait_for_pod(&uid, Duration::from_secs(20))
        .expect("pod never ran");
    let first = eventually_blocking("a status", Duration::from_secs(5), || {
        api.pod("default", "slow").filter(|p| p.status.is_some())
    });
    assert_eq!(
        condition(&first, "Ready").as_deref(),
        Some("False"),
        "not ready before the delay"
    );
    eventually_blocking("Ready=True", Duration::from_secs(5), || {
        (condition(&api.pod("default", "slow").unwrap(), "Ready").as_deref() == Some("True"))
            .then_some(())
    });
    kubelet.shutdown();
    assert!(
        !tmp.path().join("kubelet/pods").join(&uid).exists(),
        "shutdown removes the pod's volumes"
    );
}
