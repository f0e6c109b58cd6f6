//! Pods with `hostUsers: false` (user namespaces, on by default since Kubernetes 1.33): the
//! runtime maps the pod's IDs to a host range of their own, and nothing else of the layout
//! changes (host PIDs, cgroups, the PID namespace). reloadlet signals their main process like
//! any other's: through its pidfd from the host, where a process of the pod's user namespace
//! is an unprivileged host UID that root may signal.

mod common;

use common::fixtures::{configmap, pod};
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

const NS: &str = "userns";
const WAIT: Duration = Duration::from_secs(15);

/// The first line of `/proc/<pid>/uid_map`: (inside, outside, length).
fn uid_map(pid: i32) -> (u64, u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
    let f: Vec<u64> = text
        .split_whitespace()
        .take(3)
        .map(|n| n.parse().unwrap())
        .collect();
    (f[0], f[1], f[2])
}

#[tokio::test(flavor = "multi_thread")]
async fn the_main_process_of_a_host_users_false_pod_is_signalled_and_nothing_else() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    // The recorders run as the pod's root, an unprivileged host UID: they need a way into
    // the node's dir and a dir they may write.
    let base = node.path("");
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o711)).unwrap();
    let out_dir = node.path("out");
    std::fs::create_dir(&out_dir).unwrap();
    std::fs::set_permissions(&out_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (app, child, sibling) = (
        out_dir.join("app.sig"),
        out_dir.join("child.sig"),
        out_dir.join("sibling.sig"),
    );
    let plain_out = out_dir.join("plain.sig");

    node.api
        .apply_configmap(configmap(NS, "conf", &[("k", "v1")]));
    let mut userns_pod = pod(NS, "isolated")
        .signal()
        .configmap_volume("conf", "conf")
        .recorder_with_child("app", &app, &child, &[("conf", "/conf")])
        .recorder("sibling", &sibling, &[])
        .build();
    userns_pod.spec.as_mut().unwrap().host_users = Some(false);
    node.api.create_pod(userns_pod);
    // The control: a host-users pod reading the same ConfigMap.
    node.api.create_pod(
        pod(NS, "plain")
            .signal()
            .configmap_volume("conf", "conf")
            .recorder("app", &plain_out, &[("conf", "/conf")])
            .build(),
    );
    let handles = node.wait_running(NS, "isolated").await;
    let plain = node.wait_running(NS, "plain").await;
    eventually("recorders ready", WAIT, || {
        [&app, &child, &sibling, &plain_out]
            .iter()
            .all(|p| recorder_ready(p))
            .then_some(())
    })
    .await;
    node.wait_tracked(2).await;

    // The layout a user-namespaced pod has on a real node.
    let main_pid = handles.container("app").unwrap().main_pid;
    let (inside, outside, length) = uid_map(main_pid);
    assert_eq!((inside, length), (0, 65536), "root inside, 65536 IDs");
    assert!(outside >= 65536, "mapped to a host range, not to host root");
    assert_eq!(
        uid_map(handles.sandbox.main_pid),
        (inside, outside, length),
        "the pause process holds the same mapping"
    );
    assert_eq!(
        uid_map(plain.container("app").unwrap().main_pid),
        (0, 0, u64::from(u32::MAX)),
        "the control pod runs in the host's user namespace"
    );

    node.api
        .apply_configmap(configmap(NS, "conf", &[("k", "v2")]));

    eventually("SIGHUP reaches the main process", WAIT, || {
        (signals_in(&app) == ["SIGHUP"]).then_some(())
    })
    .await;
    eventually("SIGHUP reaches the control pod", WAIT, || {
        (signals_in(&plain_out) == ["SIGHUP"]).then_some(())
    })
    .await;
    let ev = node.wait_event(NS, "isolated", "Signaled").await;
    assert!(
        ev.note.contains(&format!("(pid {main_pid})")),
        "{}",
        ev.note
    );
    never("a decoy got a signal", Duration::from_millis(800), || {
        !signals_in(&child).is_empty() || !signals_in(&sibling).is_empty()
    })
    .await;
    assert!(alive(handles.sandbox.main_pid), "pause must be untouched");
    assert_eq!(
        stand_in_signals(&handles.sandbox),
        Vec::<String>::new(),
        "the pause process got a signal"
    );
    assert_eq!(signals_in(&app), ["SIGHUP"]);
}
