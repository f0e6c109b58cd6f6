//! Every cgroup layout of node-facts §4: containerd / CRI-O / cri-dockerd × systemd / cgroupfs
//! × cgroup v1 / v2, across QoS classes — with decoys that must receive nothing: the pause
//! process, CRI-O's conmon, a sibling container that does not mount the volume, and a child
//! process of the target.

mod common;

use common::fixtures::{configmap, pod};
use common::*;
use std::time::Duration;

#[derive(Clone, Copy)]
enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

async fn scenario(runtime: Runtime, driver: CgroupDriver, cgroup_version: CgroupVersion, qos: Qos) {
    let mut node = Node::start(NodeOptions {
        runtime,
        driver,
        cgroup_version,
        ..Default::default()
    })
    .await;
    node.start_agent(&[]).await;
    let ns = "layouts";
    node.api
        .apply_configmap(configmap(ns, "conf", &[("k", "v1")]));
    let (app, child, sibling) = (
        node.path("app.sig"),
        node.path("child.sig"),
        node.path("sibling.sig"),
    );
    let builder = pod(ns, "p")
        .signal()
        .configmap_volume("conf", "conf")
        .recorder_with_child("app", &app, &child, &[("conf", "/conf")])
        .recorder("sibling", &sibling, &[]);
    let builder = match qos {
        Qos::Guaranteed => builder.guaranteed(),
        Qos::Burstable => builder.burstable(),
        Qos::BestEffort => builder,
    };
    node.api.create_pod(builder.build());
    let handles = node.wait_running(ns, "p").await;
    eventually("recorders ready", Duration::from_secs(10), || {
        (recorder_ready(&app) && recorder_ready(&child) && recorder_ready(&sibling)).then_some(())
    })
    .await;
    node.wait_tracked(2).await;

    node.api
        .apply_configmap(configmap(ns, "conf", &[("k", "v2")]));

    eventually(
        "SIGHUP reaches the main process",
        Duration::from_secs(15),
        || (signals_in(&app) == ["SIGHUP"]).then_some(()),
    )
    .await;
    let ev = node.wait_event(ns, "p", "Signaled").await;
    let main_pid = handles.container("app").unwrap().main_pid;
    assert!(
        ev.note.contains(&format!("(pid {main_pid})")),
        "{}",
        ev.note
    );
    never("a decoy got a signal", AGENT_QUIET, || {
        !signals_in(&child).is_empty() || !signals_in(&sibling).is_empty()
    })
    .await;
    assert!(
        alive(handles.sandbox.main_pid),
        "pause process must be untouched"
    );
    assert_eq!(
        stand_in_signals(&handles.sandbox),
        Vec::<String>::new(),
        "the pause process got a signal"
    );
    for pid in handles.conmon_pids() {
        assert!(alive(pid), "conmon {pid} must be untouched");
    }
    assert_eq!(signals_in(&app), ["SIGHUP"]);
}

macro_rules! layout {
    ($name:ident, $rt:ident, $drv:ident, $ver:ident, $qos:ident) => {
        #[tokio::test(flavor = "multi_thread")]
        async fn $name() {
            scenario(
                Runtime::$rt,
                CgroupDriver::$drv,
                CgroupVersion::$ver,
                Qos::$qos,
            )
            .await;
        }
    };
}

layout!(
    containerd_systemd_v2_burstable,
    Containerd,
    Systemd,
    V2,
    Burstable
);
layout!(
    containerd_systemd_v1_guaranteed,
    Containerd,
    Systemd,
    V1,
    Guaranteed
);
layout!(
    containerd_cgroupfs_v2_besteffort,
    Containerd,
    Cgroupfs,
    V2,
    BestEffort
);
layout!(
    containerd_cgroupfs_v1_burstable,
    Containerd,
    Cgroupfs,
    V1,
    Burstable
);
layout!(crio_systemd_v2_guaranteed, CriO, Systemd, V2, Guaranteed);
layout!(crio_systemd_v1_besteffort, CriO, Systemd, V1, BestEffort);
layout!(crio_cgroupfs_v2_burstable, CriO, Cgroupfs, V2, Burstable);
layout!(crio_cgroupfs_v1_guaranteed, CriO, Cgroupfs, V1, Guaranteed);
layout!(
    docker_systemd_v2_besteffort,
    Docker,
    Systemd,
    V2,
    BestEffort
);
layout!(docker_systemd_v1_burstable, Docker, Systemd, V1, Burstable);
layout!(
    docker_cgroupfs_v2_guaranteed,
    Docker,
    Cgroupfs,
    V2,
    Guaranteed
);
layout!(
    docker_cgroupfs_v1_besteffort,
    Docker,
    Cgroupfs,
    V1,
    BestEffort
);
