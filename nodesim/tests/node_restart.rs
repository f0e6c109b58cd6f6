//! A container whose main process exits is started again in the same pod, as the kubelet
//! does it (root): same UID and IP, `restartCount` + 1, its env resolved again from the
//! API's current ConfigMap, its subPath mount prepared again; the first restart at once, the
//! next after the crash-loop back-off (`CrashLoopBackOff` meanwhile); `restartPolicy:
//! Never` leaves it terminated.

use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapKeySelector, ConfigMapVolumeSource, Container, ContainerStatus, EnvVar,
    EnvVarSource, Pod, PodSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use nodesim::kubelet::READY_DELAY_ANNOTATION;
use nodesim::node::SimNode;
use std::collections::BTreeMap;
use std::time::Duration;
use test_support::wait::eventually;

const NS: &str = "default";
const NODE: &str = "node-r";

/// SIGTERM to the container's shell once it has installed its `trap` (`SigCgt` in
/// `/proc/<pid>/status` has SIGTERM): as PID 1 of its namespace it drops a SIGTERM that comes
/// before, and the container would never exit (a loaded machine showed that race).
async fn terminate(pid: i32) {
    let term = 1u64 << (Signal::SIGTERM as u64 - 1);
    eventually("the shell's TERM trap", Duration::from_secs(10), || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let caught = status.lines().find_map(|l| l.strip_prefix("SigCgt:"))?;
        let mask = u64::from_str_radix(caught.trim(), 16).ok()?;
        (mask & term != 0).then_some(())
    })
    .await;
    kill(Pid::from_raw(pid), Signal::SIGTERM).unwrap();
}

fn configmap(greeting: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some("app-config".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("greeting".into(), greeting.into()),
            ("app.conf".into(), format!("greeting={greeting}\n")),
        ])),
        ..Default::default()
    }
}

/// One container that reads `GREETING` from the ConfigMap and mounts `app.conf` by subPath.
fn pod(name: &str, restart_policy: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            annotations: Some(BTreeMap::from([(
                READY_DELAY_ANNOTATION.to_string(),
                "200".to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(NODE.into()),
            restart_policy: restart_policy.map(String::from),
            termination_grace_period_seconds: Some(1),
            containers: vec![Container {
                name: "app".into(),
                // PID 1 of its namespace: a SIGTERM reaches it only through a handler
                command: Some(vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done".into(),
                ]),
                env: Some(vec![EnvVar {
                    name: "GREETING".into(),
                    value_from: Some(EnvVarSource {
                        config_map_key_ref: Some(ConfigMapKeySelector {
                            name: "app-config".into(),
                            key: "greeting".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                volume_mounts: Some(vec![VolumeMount {
                    name: "config".into(),
                    mount_path: format!("/tmp/nodesim-restart-{name}.conf"),
                    sub_path: Some("app.conf".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }],
            volumes: Some(vec![Volume {
                name: "config".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: "app-config".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn status(pod: &Pod) -> Option<ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == "app")
        .cloned()
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn environ_of(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', "\n"))
        .unwrap_or_default()
}

fn file_in(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/root/tmp/nodesim-restart-app.conf"))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exited_container_starts_again_in_the_same_pod_with_current_env_then_backs_off() {
    let node = SimNode::start(NODE, "nodesim-restart-", |_| {})
        .await
        .unwrap();
    let api = node.api.clone();
    api.apply_configmap(configmap("one"));
    let created = api.create_pod(pod("app", None));
    let uid = created.metadata.uid.clone().unwrap();
    let first = eventually("the pod Ready", Duration::from_secs(20), || {
        let p = api.get_pod(NS, "app")?;
        ready(&p).then_some(p)
    })
    .await;
    let ip = first.status.as_ref().unwrap().pod_ip.clone().unwrap();
    let h = node
        .kubelet
        .wait_for_pod(&uid, Duration::from_secs(10))
        .unwrap();
    let pid1 = h.container("app").unwrap().main_pid;
    assert!(environ_of(pid1).contains("GREETING=one"));
    assert_eq!(file_in(pid1), "greeting=one\n");

    // the config changes; the running process keeps what it started with
    api.apply_configmap(configmap("two"));
    terminate(pid1).await;

    // started again at once: same pod, same IP, restartCount 1, the new env and subPath file
    let pid2 = eventually(
        "the container started again",
        Duration::from_secs(10),
        || {
            let h = node.kubelet.pod_handles(&uid)?;
            let pid = h.container("app")?.main_pid;
            (pid != pid1).then_some(pid)
        },
    )
    .await;
    let again = eventually(
        "restartCount 1 and Ready again",
        Duration::from_secs(10),
        || {
            let p = api.get_pod(NS, "app")?;
            (status(&p)?.restart_count == 1 && ready(&p)).then_some(p)
        },
    )
    .await;
    assert_eq!(again.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(again.status.as_ref().unwrap().pod_ip.as_deref(), Some(&*ip));
    let st = status(&again).unwrap();
    let last = st.last_state.and_then(|s| s.terminated).unwrap();
    assert_eq!(
        last.exit_code, 0,
        "its SIGTERM handler exits 0: restarted all the same"
    );
    assert!(environ_of(pid2).contains("GREETING=two"), "env re-resolved");
    assert_eq!(file_in(pid2), "greeting=two\n", "subPath prepared again");

    // a second exit within the window: CrashLoopBackOff, then started after it
    kill(Pid::from_raw(pid2), Signal::SIGKILL).unwrap();
    eventually(
        "waiting in CrashLoopBackOff, not Ready",
        Duration::from_secs(10),
        || {
            let p = api.get_pod(NS, "app")?;
            let waiting = status(&p)?.state?.waiting?;
            (waiting.reason.as_deref() == Some("CrashLoopBackOff") && !ready(&p)).then_some(())
        },
    )
    .await;
    let p = eventually(
        "restartCount 2 after the back-off",
        Duration::from_secs(30),
        || {
            let p = api.get_pod(NS, "app")?;
            (status(&p)?.restart_count == 2 && ready(&p)).then_some(p)
        },
    )
    .await;
    let last = status(&p).unwrap().last_state.unwrap().terminated.unwrap();
    // the shim's status: util-linux `unshare` reports a SIGKILLed child as a failure
    assert_ne!(last.exit_code, 0, "{last:?}");
    assert_eq!(last.reason.as_deref(), Some("Error"));
    assert_eq!(p.metadata.uid.as_deref(), Some(uid.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_policy_never_leaves_the_container_terminated() {
    let node = SimNode::start(NODE, "nodesim-restart-never-", |_| {})
        .await
        .unwrap();
    let api = node.api.clone();
    api.apply_configmap(configmap("one"));
    let uid = api
        .create_pod(pod("once", Some("Never")))
        .metadata
        .uid
        .unwrap();
    let h = node
        .kubelet
        .wait_for_pod(&uid, Duration::from_secs(20))
        .unwrap();
    let pid = h.container("app").unwrap().main_pid;
    terminate(pid).await;
    let st = eventually("terminated, Completed", Duration::from_secs(10), || {
        let st = status(&api.get_pod(NS, "once")?)?;
        st.state.clone()?.terminated.filter(|t| t.exit_code == 0)?;
        Some(st)
    })
    .await;
    assert_eq!(st.restart_count, 0);
    assert!(node
        .kubelet
        .pod_handles(&uid)
        .is_some_and(|h| h.container("app").is_none()));
}
