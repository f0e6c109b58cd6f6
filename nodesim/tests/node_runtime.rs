//! The simulated runtime on the real kernel (root): cgroup placement as each runtime and
//! driver names it, the shim outside the container cgroup, PID namespaces, bind mounts, and
//! nothing left behind after stop.

use nodesim::cgroups::{self, cgroup_of};
use nodesim::flavor::{CgroupDriver, CgroupVersion, QosClass, Runtime};
use nodesim::runtime::{
    parent_of, BindMount, ContainerSpec, RuntimeConfig, SandboxSpec, SimRuntime,
};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn uid() -> String {
    let hex = nodesim::runtime::random_container_id();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

fn nspids(pid: i32) -> Vec<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    line["NSpid:".len()..]
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

fn alive(pid: i32) -> bool {
    // a zombie still has /proc/<pid>; treat state Z as gone
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat[stat.rfind(')').unwrap() + 2..].starts_with('Z'),
        Err(_) => false,
    }
}

fn mounts_mentioning(path: &Path) -> usize {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    text.lines()
        .filter(|l| l.contains(path.to_str().unwrap()))
        .count()
}

/// A runtime of the given flavour logging under `dir/logs`.
fn runtime_in(
    dir: &Path,
    runtime: Runtime,
    driver: CgroupDriver,
    version: CgroupVersion,
) -> SimRuntime {
    SimRuntime::new(RuntimeConfig {
        runtime,
        driver,
        cgroup_version: version,
        log_dir: dir.join("logs"),
    })
    .unwrap()
}

/// Starts a BestEffort sandbox with its own PID namespace; returns the pod UID.
fn plain_sandbox(rt: &mut SimRuntime) -> String {
    let pod_uid = uid();
    rt.start_sandbox(&SandboxSpec {
        pod_uid: pod_uid.clone(),
        qos: BestEffort,
        share_process_namespace: false,
        host_pid: false,
        user_namespace: None,
    })
    .unwrap();
    pod_uid
}

fn check(runtime: Runtime, driver: CgroupDriver, version: CgroupVersion, qos: QosClass) {
    let tmp = tempfile::tempdir().unwrap();
    let volume = tmp.path().join("volume");
    std::fs::create_dir(&volume).unwrap();
    std::fs::write(volume.join("app.conf"), "hello").unwrap();
    let mount_path = tmp.path().join("rootfs-like/etc/app");

    let mut rt = runtime_in(tmp.path(), runtime, driver, version);
    let pod_uid = uid();
    let sandbox = rt
        .start_sandbox(&SandboxSpec {
            pod_uid: pod_uid.clone(),
            qos,
            share_process_namespace: false,
            host_pid: false,
            user_namespace: None,
        })
        .unwrap();
    let spec = ContainerSpec {
        name: "app".into(),
        argv: vec!["sleep".into(), "3600".into()],
        mounts: vec![BindMount {
            source: volume.clone(),
            target: mount_path.clone(),
            read_only: true,
        }],
        ..Default::default()
    };
    let c = rt.start_container(&pod_uid, &spec).unwrap();

    let want = cgroups::container_cgroup(runtime, driver, qos, &pod_uid, &c.id);
    assert_eq!(c.cgroup, want);
    assert_eq!(
        cgroup_of(c.main_pid, version).as_deref(),
        Some(want.as_str()),
        "main process cgroup"
    );
    let sandbox_want = cgroups::container_cgroup(runtime, driver, qos, &pod_uid, &sandbox.id);
    assert_eq!(
        cgroup_of(sandbox.main_pid, version).as_deref(),
        Some(sandbox_want.as_str()),
        "pause cgroup"
    );

    let parent = parent_of(c.main_pid).unwrap();
    assert_eq!(parent, c.shim_pid);
    assert_ne!(
        cgroup_of(parent, version).as_deref(),
        Some(want.as_str()),
        "shim must be outside the container cgroup"
    );
    match runtime {
        Runtime::CriO => {
            assert_eq!(c.conmon_pid, Some(parent));
            let conmon = format!(
                "{}/{}",
                cgroups::pod_cgroup(driver, qos, &pod_uid),
                cgroups::crio_conmon_leaf(driver, &c.id)
            );
            assert_eq!(
                cgroup_of(parent, version).as_deref(),
                Some(conmon.as_str()),
                "conmon cgroup"
            );
        }
        _ => assert_eq!(c.conmon_pid, None),
    }

    let ns = nspids(c.main_pid);
    assert_eq!(ns.len(), 2, "one nested PID namespace: {ns:?}");
    assert_eq!(ns, vec![c.main_pid, 1]);
    assert_eq!(
        std::fs::read(format!("/proc/{}/cmdline", c.main_pid)).unwrap(),
        b"sleep\x003600\x00"
    );

    let through_root = PathBuf::from(format!("/proc/{}/root", c.main_pid))
        .join(mount_path.strip_prefix("/").unwrap());
    assert_eq!(
        std::fs::read_to_string(through_root.join("app.conf")).unwrap(),
        "hello"
    );
    assert!(
        std::fs::write(through_root.join("new"), "x").is_err(),
        "read-only mount"
    );
    assert_eq!(
        mounts_mentioning(tmp.path()),
        0,
        "the bind mount lives in the container's namespace only"
    );

    let paths = c.cgroup_paths.clone();
    assert!(paths.iter().all(|p| p.is_dir()));
    rt.stop_sandbox(&pod_uid, Duration::from_millis(200))
        .unwrap();

    for pid in [c.main_pid, c.shim_pid, sandbox.main_pid, sandbox.shim_pid] {
        assert!(!alive(pid), "pid {pid} still alive");
    }
    for p in paths.iter().chain(&sandbox.cgroup_paths) {
        assert!(!p.exists(), "{} left behind", p.display());
        assert!(
            !p.parent().unwrap().exists(),
            "pod cgroup {} left behind",
            p.parent().unwrap().display()
        );
    }
    assert!(
        !tmp.path().join("rootfs-like").exists(),
        "created mount target left behind"
    );
    assert!(rt.handles(&pod_uid).is_none());
}

macro_rules! matrix {
    ($($name:ident: $rt:expr, $driver:expr, $version:expr, $qos:expr;)*) => {
        $(#[test]
        fn $name() {
            check($rt, $driver, $version, $qos);
        })*
    };
}

use test_support::wait::within_blocking;
use CgroupDriver::{Cgroupfs, Systemd};
use CgroupVersion::{V1, V2};
use QosClass::{BestEffort, Burstable, Guaranteed};
use Runtime::{Containerd, CriO, Docker};

matrix! {
    containerd_systemd_v1: Containerd, Systemd, V1, Burstable;
    containerd_systemd_v2: Containerd, Systemd, V2, BestEffort;
    containerd_cgroupfs_v1: Containerd, Cgroupfs, V1, Guaranteed;
    containerd_cgroupfs_v2: Containerd, Cgroupfs, V2, Burstable;
    crio_systemd_v1: CriO, Systemd, V1, BestEffort;
    crio_systemd_v2: CriO, Systemd, V2, Guaranteed;
    crio_cgroupfs_v1: CriO, Cgroupfs, V1, Burstable;
    crio_cgroupfs_v2: CriO, Cgroupfs, V2, BestEffort;
    docker_systemd_v1: Docker, Systemd, V1, Guaranteed;
    docker_systemd_v2: Docker, Systemd, V2, Burstable;
    docker_cgroupfs_v1: Docker, Cgroupfs, V1, BestEffort;
    docker_cgroupfs_v2: Docker, Cgroupfs, V2, Guaranteed;
}

#[test]
fn shared_process_namespace_makes_pause_pid_1() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rt = runtime_in(tmp.path(), Containerd, Systemd, V2);
    let pod_uid = uid();
    let sandbox = rt
        .start_sandbox(&SandboxSpec {
            pod_uid: pod_uid.clone(),
            qos: Burstable,
            share_process_namespace: true,
            host_pid: false,
            user_namespace: None,
        })
        .unwrap();
    let spec = ContainerSpec {
        name: "app".into(),
        argv: vec!["sleep".into(), "3601".into()],
        ..Default::default()
    };
    let c = rt.start_container(&pod_uid, &spec).unwrap();
    assert_eq!(nspids(sandbox.main_pid).last(), Some(&1));
    let ns = nspids(c.main_pid);
    assert_eq!(ns.len(), 2);
    assert_ne!(
        ns[1], 1,
        "the container's command is not PID 1 when the namespace is shared"
    );
    let parent = parent_of(c.main_pid).unwrap();
    assert_ne!(cgroup_of(parent, V2), cgroup_of(c.main_pid, V2));
    rt.stop_sandbox(&pod_uid, Duration::ZERO).unwrap();
    assert!(!alive(c.main_pid) && !alive(sandbox.main_pid));
}

/// The kernel facts reloadlet's signal check relies on, on the simulated runtime: a `sleep`
/// (no handler) that is PID 1 of its container survives SIGHUP (the kernel drops it:
/// `sig_task_ignored`, `SIGNAL_UNKILLABLE`); the same `sleep` under a shared PID namespace
/// dies of it. Both report no handler and no mask in `/proc/<pid>/status`.
#[test]
fn an_unhandled_sighup_is_dropped_for_pid_1_and_kills_a_process_that_is_not() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rt = runtime_in(tmp.path(), Containerd, Systemd, V2);
    let sleep = ContainerSpec {
        name: "app".into(),
        argv: vec!["sleep".into(), "3602".into()],
        ..Default::default()
    };
    let mut mains = Vec::new();
    for shared in [false, true] {
        let pod_uid = uid();
        rt.start_sandbox(&SandboxSpec {
            pod_uid: pod_uid.clone(),
            qos: BestEffort,
            share_process_namespace: shared,
            host_pid: false,
            user_namespace: None,
        })
        .unwrap();
        let c = rt.start_container(&pod_uid, &sleep).unwrap();
        let status = std::fs::read_to_string(format!("/proc/{}/status", c.main_pid)).unwrap();
        for mask in ["SigBlk", "SigCgt"] {
            let line = status.lines().find(|l| l.starts_with(mask)).unwrap();
            assert!(line.ends_with("0000000000000000"), "{line}");
        }
        assert_eq!(nspids(c.main_pid).last() == Some(&1), !shared);
        mains.push((pod_uid, c.main_pid));
    }
    for (_, pid) in &mains {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGHUP,
        )
        .unwrap();
    }
    let (pid1, not_pid1) = (mains[0].1, mains[1].1);
    within_blocking(Duration::from_secs(5), || !alive(not_pid1));
    assert!(
        !alive(not_pid1),
        "SIGHUP's default action kills a process that is not PID 1"
    );
    assert!(
        alive(pid1),
        "the kernel drops an unhandled SIGHUP sent to PID 1"
    );
    for (pod_uid, _) in mains {
        rt.stop_sandbox(&pod_uid, Duration::ZERO).unwrap();
    }
}

#[test]
fn init_container_runs_to_completion_and_reports_exit_code() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rt = runtime_in(tmp.path(), CriO, Cgroupfs, V1);
    let pod_uid = plain_sandbox(&mut rt);
    let ok = ContainerSpec {
        name: "init".into(),
        argv: vec!["sh".into(), "-c".into(), "echo done".into()],
        ..Default::default()
    };
    assert_eq!(
        rt.run_to_completion(&pod_uid, &ok, Duration::from_secs(10))
            .unwrap()
            .exit_code,
        0
    );
    let fail = ContainerSpec {
        name: "init2".into(),
        argv: vec!["sh".into(), "-c".into(), "exit 3".into()],
        ..Default::default()
    };
    assert_eq!(
        rt.run_to_completion(&pod_uid, &fail, Duration::from_secs(10))
            .unwrap()
            .exit_code,
        3
    );
    let logs: Vec<_> = std::fs::read_dir(tmp.path().join("logs").join(&pod_uid))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let init_log = logs
        .iter()
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("init-")
        })
        .unwrap();
    assert_eq!(std::fs::read_to_string(init_log).unwrap(), "done\n");
    assert_eq!(
        rt.handles(&pod_uid).unwrap().1.len(),
        0,
        "completed init containers are not running"
    );
    rt.stop_sandbox(&pod_uid, Duration::ZERO).unwrap();
}

#[test]
fn a_command_that_cannot_start_is_an_error_with_its_log() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rt = runtime_in(tmp.path(), Docker, Systemd, V2);
    let pod_uid = plain_sandbox(&mut rt);
    let spec = ContainerSpec {
        name: "bad".into(),
        argv: vec!["/nonexistent/binary".into()],
        ..Default::default()
    };
    let err = rt.start_container(&pod_uid, &spec).unwrap_err().to_string();
    assert!(
        err.contains("did not start") && err.contains("nonexistent"),
        "{err}"
    );
    rt.stop_sandbox(&pod_uid, Duration::ZERO).unwrap();
}

fn ns_link(pid: i32, ns: &str) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/{ns}"))
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// `hostUsers: false`: the sandbox gets a user namespace mapping 0..65536 to the pod's host
/// range, every container joins it; host PIDs, the cgroups and the PID namespace are those of
/// any pod (a host-users pod beside it is the control).
#[test]
fn a_user_namespace_pod_maps_its_ids_and_keeps_its_cgroups_and_pid_namespace() {
    let tmp = tempfile::tempdir().unwrap();
    let (runtime, driver, version, qos) = (Containerd, Systemd, V2, BestEffort);
    let mut rt = runtime_in(tmp.path(), runtime, driver, version);
    let host_id = 65536 * 7;
    let pod_uid = uid();
    let sandbox = rt
        .start_sandbox(&SandboxSpec {
            pod_uid: pod_uid.clone(),
            qos,
            share_process_namespace: false,
            host_pid: false,
            user_namespace: Some((host_id, 65536)),
        })
        .unwrap();
    let spec = ContainerSpec {
        name: "app".into(),
        argv: vec!["sleep".into(), "3600".into()],
        ..Default::default()
    };
    let c = rt.start_container(&pod_uid, &spec).unwrap();
    let plain = plain_sandbox(&mut rt);
    let control = rt.start_container(&plain, &spec).unwrap();

    let map = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/uid_map"))
            .unwrap()
            .split_whitespace()
            .map(|f| f.parse::<u64>().unwrap())
            .collect::<Vec<_>>()
    };
    let gid_map = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/gid_map"))
            .unwrap()
            .split_whitespace()
            .map(|f| f.parse::<u64>().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(map(c.main_pid), [0, u64::from(host_id), 65536]);
    assert_eq!(gid_map(c.main_pid), [0, u64::from(host_id), 65536]);
    assert_eq!(map(sandbox.main_pid), [0, u64::from(host_id), 65536]);
    assert_eq!(map(control.main_pid), [0, 0, u64::from(u32::MAX)]);
    assert_eq!(
        ns_link(c.main_pid, "user"),
        ns_link(sandbox.main_pid, "user"),
        "the container joins the sandbox's user namespace"
    );
    assert_ne!(
        ns_link(c.main_pid, "user"),
        ns_link(control.main_pid, "user")
    );
    // Root inside is the pod's first host ID outside.
    let status = std::fs::read_to_string(format!("/proc/{}/status", c.main_pid)).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uid_line
            .split_whitespace()
            .skip(1)
            .all(|u| u == host_id.to_string()),
        "{uid_line}"
    );
    // The rest of the layout is any pod's.
    let want = cgroups::container_cgroup(runtime, driver, qos, &pod_uid, &c.id);
    assert_eq!(
        cgroup_of(c.main_pid, version).as_deref(),
        Some(want.as_str())
    );
    assert_eq!(parent_of(c.main_pid), Some(c.shim_pid));
    assert_eq!(nspids(c.main_pid), vec![c.main_pid, 1]);
    assert_eq!(
        std::fs::read(format!("/proc/{}/cmdline", c.main_pid)).unwrap(),
        b"sleep\x003600\x00"
    );

    let paths = c.cgroup_paths.clone();
    for uid in [&pod_uid, &plain] {
        rt.stop_sandbox(uid, Duration::from_millis(200)).unwrap();
    }
    for pid in [c.main_pid, c.shim_pid, sandbox.main_pid, control.main_pid] {
        assert!(!alive(pid), "pid {pid} still alive");
    }
    assert!(paths.iter().all(|p| !p.exists()), "cgroups left behind");
}
