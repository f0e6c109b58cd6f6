//! `ProcFs` against fake proc trees: every cgroup layout with its decoys, and the cache
//! paths with a recording pinner instead of real pidfds.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::sync::{Arc, Mutex};

use super::pidfd::{Pinned, Pinner};
use super::ProcFs;
use crate::core::model::{ContainerId, ContainerRuntime, ReloadSignal};
use crate::ports::{ContainerProcesses, MainProcess, ProcessError};

const POD: &str = "0c5e6a8e-3b1f-4d7a-9e2c-8f4b1a6d3e57";
const OTHER_POD: &str = "0c5e6a8e-3b1f-4d7a-9e2c-8f4b1a6d3e58";
/// HUP INT QUIT USR1 USR2 TERM WINCH.
const ALL_RELOAD_SIGNALS: u64 =
    (1 << 0) | (1 << 1) | (1 << 2) | (1 << 9) | (1 << 11) | (1 << 14) | (1 << 27);
const HUP: u64 = 1;

/// A proc tree in a temp dir: `<pid>/stat`, `<pid>/cgroup`, `<pid>/status`.
struct FakeProc {
    dir: tempfile::TempDir,
}

/// `<pid>/stat` and the main thread's `<pid>/task/<pid>/stat`: the kernel prints the same
/// signal masks in both.
fn write_stat(dir: &std::path::Path, pid: i32, text: &str) {
    let task = dir.join("task").join(pid.to_string());
    fs::create_dir_all(&task).expect("task dir");
    fs::write(dir.join("stat"), text).expect("stat");
    fs::write(task.join("stat"), text).expect("task stat");
}

impl FakeProc {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn process(&self, pid: i32, ppid: i32, start_time: u64, state: char, cgroup: &str) {
        let dir = self.dir.path().join(pid.to_string());
        fs::create_dir_all(&dir).expect("pid dir");
        let mut fields: Vec<String> = vec![
            pid.to_string(),
            "(my (odd) comm)".to_owned(),
            state.to_string(),
            ppid.to_string(),
        ];
        // Fields 5..=52, with field 22 (starttime) set.
        for field in 5..=52 {
            fields.push(if field == 22 {
                start_time.to_string()
            } else {
                "0".to_owned()
            });
        }
        write_stat(&dir, pid, &(fields.join(" ") + "\n"));
        fs::write(dir.join("cgroup"), cgroup).expect("cgroup");
        // A process with a handler for every signal reloadlet sends.
        self.status(pid, "my (odd) comm", 0, 0, ALL_RELOAD_SIGNALS, 1);
    }

    /// Rewrites `<pid>/status` (name, SigBlk, SigIgn, SigCgt, the PID in its namespace) and
    /// the same in `<pid>/stat` (comm, fields 32–34 in decimal), as the kernel shows them.
    fn status(&self, pid: i32, name: &str, blk: u64, ign: u64, cgt: u64, ns_pid: i32) {
        let status = format!(
            "Name:\t{name}\nState:\tS (sleeping)\nPid:\t{pid}\nNSpid:\t{pid}\t{ns_pid}\n\
             SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n\
             SigBlk:\t{blk:016x}\nSigIgn:\t{ign:016x}\nSigCgt:\t{cgt:016x}\n"
        );
        let dir = self.dir.path().join(pid.to_string());
        fs::write(dir.join("status"), status).expect("status");
        let stat = fs::read_to_string(dir.join("stat")).expect("stat");
        let after = stat.rfind(')').expect("comm") + 1;
        let mut fields: Vec<String> = stat[after..]
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let low = 0x7fff_ffff;
        fields[29] = (blk & low).to_string();
        fields[30] = (ign & low).to_string();
        fields[31] = (cgt & low).to_string();
        let pid_field = stat.split(' ').next().expect("pid");
        let stat = format!("{pid_field} ({name}) {}\n", fields.join(" "));
        write_stat(&dir, pid, &stat);
    }

    fn remove(&self, pid: i32) {
        fs::remove_dir_all(self.dir.path().join(pid.to_string())).expect("remove pid dir");
    }

    fn procfs(&self, pinner: &FakePinner) -> ProcFs {
        ProcFs::with_pinner(self.dir.path(), Box::new(pinner.clone()))
    }
}

/// Records signals instead of sending them. PIDs in `gone` cannot be pinned.
#[derive(Clone, Default)]
struct FakePinner {
    sent: Arc<Mutex<Vec<(i32, ReloadSignal)>>>,
    gone: Arc<Mutex<HashSet<i32>>>,
    /// Pinned processes that exited since: a signal through their pin is `ESRCH`.
    exited: Arc<Mutex<HashSet<i32>>>,
}

impl FakePinner {
    fn sent(&self) -> Vec<(i32, ReloadSignal)> {
        self.sent.lock().unwrap().clone()
    }
}

struct FakePinned {
    pid: i32,
    pinner: FakePinner,
}

impl Pinner for FakePinner {
    fn pin(&self, pid: i32) -> io::Result<Box<dyn Pinned>> {
        if self.gone.lock().unwrap().contains(&pid) {
            return Err(io::ErrorKind::NotFound.into());
        }
        Ok(Box::new(FakePinned {
            pid,
            pinner: self.clone(),
        }))
    }
}

impl Pinned for FakePinned {
    fn signal(&self, signal: ReloadSignal) -> io::Result<()> {
        if self.pinner.exited.lock().unwrap().contains(&self.pid) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                io::Error::from_raw_os_error(libc::ESRCH),
            ));
        }
        self.pinner.sent.lock().unwrap().push((self.pid, signal));
        Ok(())
    }
}

#[derive(Clone, Copy, Debug)]
enum Driver {
    Systemd,
    Cgroupfs,
}

#[derive(Clone, Copy, Debug)]
enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

#[derive(Clone, Copy, Debug)]
enum Hierarchy {
    V1,
    V2,
    /// v2, seen from inside another container's cgroup namespace.
    V2Namespaced,
}

fn hex(prefix: &str, fill: char) -> String {
    let mut id = prefix.to_owned();
    while id.len() < 64 {
        id.push(fill);
    }
    id
}

/// The pod cgroup, as the kubelet names it.
fn pod_cgroup(driver: Driver, qos: Qos, uid: &str) -> String {
    let uid_ = uid.replace('-', "_");
    match (driver, qos) {
        (Driver::Systemd, Qos::Guaranteed) => format!("/kubepods.slice/kubepods-pod{uid_}.slice"),
        (Driver::Systemd, Qos::Burstable) => {
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice")
        }
        (Driver::Systemd, Qos::BestEffort) => {
            format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice")
        }
        (Driver::Cgroupfs, Qos::Guaranteed) => format!("/kubepods/pod{uid}"),
        (Driver::Cgroupfs, Qos::Burstable) => format!("/kubepods/burstable/pod{uid}"),
        (Driver::Cgroupfs, Qos::BestEffort) => format!("/kubepods/besteffort/pod{uid}"),
    }
}

/// The container leaf, as the runtime names it; `conmon` for CRI-O's monitor.
fn leaf(runtime: ContainerRuntime, driver: Driver, id: &str, conmon: bool) -> String {
    let kind = if conmon { "crio-conmon" } else { "crio" };
    match (runtime, driver) {
        (ContainerRuntime::Containerd, Driver::Systemd) => format!("cri-containerd-{id}.scope"),
        (ContainerRuntime::Docker, Driver::Systemd) => format!("docker-{id}.scope"),
        (ContainerRuntime::CriO, Driver::Systemd) => format!("{kind}-{id}.scope"),
        (ContainerRuntime::CriO, Driver::Cgroupfs) => format!("{kind}-{id}"),
        (_, Driver::Cgroupfs) => id.to_owned(),
    }
}

/// `/proc/<pid>/cgroup` for a process in `path`.
fn cgroup_file(hierarchy: Hierarchy, path: &str) -> String {
    match hierarchy {
        Hierarchy::V2 => format!("0::{path}\n"),
        Hierarchy::V2Namespaced => {
            let tail = path.splitn(3, '/').nth(2).unwrap_or_default();
            format!("0::/../../{tail}\n")
        }
        Hierarchy::V1 => {
            let mut text = String::new();
            for (n, ctrl) in ["cpu,cpuacct", "memory", "pids", "blkio", "devices"]
                .iter()
                .enumerate()
            {
                text += &format!("{}:{ctrl}:{path}\n", 12 - n);
            }
            text + &format!("1:name=systemd:{path}\n0::/\n")
        }
    }
}

/// A node with one target container and every decoy; returns the target and its main PID.
fn populate(
    fake: &FakeProc,
    runtime: ContainerRuntime,
    driver: Driver,
    qos: Qos,
    hierarchy: Hierarchy,
) -> (ContainerId, i32) {
    let target = hex("5a1b", 'a');
    let sibling = hex("5a1b", 'b');
    let sandbox = hex("5a1b", 'c');
    let lookalike = hex(&target[..63], '9');
    let pod = pod_cgroup(driver, qos, POD);
    let other_pod = pod_cgroup(driver, qos, OTHER_POD);
    let in_pod = |id: &str, conmon: bool| {
        cgroup_file(
            hierarchy,
            &format!("{pod}/{}", leaf(runtime, driver, id, conmon)),
        )
    };
    let host = |path: &str| cgroup_file(hierarchy, path);

    fake.process(1, 0, 1, 'S', &host("/init.scope"));
    // The runtime's shim (containerd, cri-dockerd) or CRI-O's conmon is every container's parent.
    let shim = 50;
    match runtime {
        ContainerRuntime::CriO => fake.process(shim, 1, 100, 'S', &in_pod(&target, true)),
        _ => fake.process(shim, 1, 100, 'S', &host("/system.slice/containerd.service")),
    }
    // Sandbox (pause), oldest in the pod.
    fake.process(60, shim, 200, 'S', &in_pod(&sandbox, false));
    // A sibling container of the same pod, older than the target.
    fake.process(61, shim, 250, 'S', &in_pod(&sibling, false));
    // Another pod, a container whose ID shares all but the last character: oldest of all.
    let other = cgroup_file(
        hierarchy,
        &format!("{other_pod}/{}", leaf(runtime, driver, &lookalike, false)),
    );
    fake.process(62, shim, 150, 'S', &other);
    // The main process.
    let main = 300;
    fake.process(main, shim, 400, 'S', &in_pod(&target, false));
    // Its child (same tick, lower PID after a wrap), and a zombie child.
    fake.process(70, main, 400, 'S', &in_pod(&target, false));
    fake.process(71, main, 390, 'Z', &in_pod(&target, false));
    // A `kubectl exec` session: parent outside too, but younger.
    fake.process(80, shim, 900, 'S', &in_pod(&target, false));
    // Noise: a non-PID entry, a process without a cgroup file, an unparsable stat.
    fs::create_dir_all(fake.dir.path().join("sys")).unwrap();
    fs::create_dir_all(fake.dir.path().join("90")).unwrap();
    fake.process(91, shim, 1, 'S', &in_pod(&target, false));
    fs::write(fake.dir.path().join("91/stat"), "garbage").unwrap();

    (
        ContainerId {
            runtime,
            id: target,
        },
        main,
    )
}

#[test]
fn main_process_wins_over_every_decoy_in_every_layout() {
    let runtimes = [
        ContainerRuntime::Containerd,
        ContainerRuntime::CriO,
        ContainerRuntime::Docker,
    ];
    let mut layouts = 0;
    for runtime in runtimes {
        for driver in [Driver::Systemd, Driver::Cgroupfs] {
            for qos in [Qos::Guaranteed, Qos::Burstable, Qos::BestEffort] {
                for hierarchy in [Hierarchy::V1, Hierarchy::V2, Hierarchy::V2Namespaced] {
                    let fake = FakeProc::new();
                    let (container, main) = populate(&fake, runtime, driver, qos, hierarchy);
                    let procs = fake.procfs(&FakePinner::default());
                    let found = procs.find_main_process(POD, &container);
                    let want = MainProcess {
                        pid: main,
                        start_time: 400,
                    };
                    let layout = format!("{runtime:?} {driver:?} {qos:?} {hierarchy:?}");
                    assert_eq!(found.ok(), Some(want), "{layout}");
                    // The systemd spelling of the UID names the same pod.
                    let found = procs.find_main_process(&POD.replace('-', "_"), &container);
                    assert_eq!(found.ok(), Some(want), "{layout}");
                    layouts += 1;
                }
            }
        }
    }
    assert_eq!(layouts, 54);
}

#[test]
fn a_container_without_processes_is_an_error_not_a_decoy() {
    let fake = FakeProc::new();
    let (container, main) = populate(
        &fake,
        ContainerRuntime::CriO,
        Driver::Systemd,
        Qos::Burstable,
        Hierarchy::V2,
    );
    let procs = fake.procfs(&FakePinner::default());
    let unknown = ContainerId {
        runtime: ContainerRuntime::CriO,
        id: hex("", 'd'),
    };
    assert!(matches!(
        procs.find_main_process(POD, &unknown),
        Err(ProcessError::NoProcess { .. })
    ));
    // The target's processes all exit but the zombie: still nothing to signal.
    for pid in [main, 70, 80, 91] {
        fake.remove(pid);
    }
    let err = procs.find_main_process(POD, &container).unwrap_err();
    assert!(matches!(err, ProcessError::NoProcess { .. }), "{err}");
    assert!(err.to_string().contains(&container.id), "{err}");
}

#[test]
fn bad_inputs_are_errors() {
    let fake = FakeProc::new();
    let (container, _) = populate(
        &fake,
        ContainerRuntime::Containerd,
        Driver::Cgroupfs,
        Qos::Guaranteed,
        Hierarchy::V2,
    );
    let procs = fake.procfs(&FakePinner::default());
    assert!(matches!(
        procs.find_main_process("../../etc", &container),
        Err(ProcessError::InvalidPodUid { .. })
    ));
    let missing = ProcFs::new(fake.dir.path().join("nope"));
    assert!(matches!(
        missing.find_main_process(POD, &container),
        Err(ProcessError::Io { .. })
    ));
}

#[test]
fn a_cached_main_process_is_signalled_without_a_scan() {
    let fake = FakeProc::new();
    let (container, main) = populate(
        &fake,
        ContainerRuntime::Containerd,
        Driver::Systemd,
        Qos::Burstable,
        Hierarchy::V2,
    );
    let pinner = FakePinner::default();
    let procs = fake.procfs(&pinner);
    for signal in [ReloadSignal::Hup, ReloadSignal::Usr1, ReloadSignal::Hup] {
        assert_eq!(
            procs.signal_container(POD, &container, signal).ok(),
            Some(main)
        );
    }
    assert_eq!(procs.scan_count(), 1);
    assert_eq!(
        pinner.sent(),
        vec![
            (main, ReloadSignal::Hup),
            (main, ReloadSignal::Usr1),
            (main, ReloadSignal::Hup)
        ]
    );
    // Forgetting the pod forces a new scan.
    procs.forget_pod(POD);
    procs
        .signal_container(POD, &container, ReloadSignal::Hup)
        .unwrap();
    assert_eq!(procs.scan_count(), 2);
}

#[test]
fn a_reused_pid_is_never_signalled() {
    let fake = FakeProc::new();
    let (container, main) = populate(
        &fake,
        ContainerRuntime::Containerd,
        Driver::Cgroupfs,
        Qos::BestEffort,
        Hierarchy::V1,
    );
    let pinner = FakePinner::default();
    let procs = fake.procfs(&pinner);
    assert_eq!(
        procs
            .signal_container(POD, &container, ReloadSignal::Hup)
            .ok(),
        Some(main)
    );

    // The container restarts: its new main process is 310; an unrelated process outside
    // the container takes PID 300.
    fake.remove(main);
    fake.process(
        main,
        1,
        5000,
        'S',
        &cgroup_file(Hierarchy::V1, "/system.slice/cron.service"),
    );
    for pid in [70, 71, 80, 91] {
        fake.remove(pid);
    }
    let new_main = 310;
    let pod = pod_cgroup(Driver::Cgroupfs, Qos::BestEffort, POD);
    fake.process(
        new_main,
        50,
        6000,
        'S',
        &cgroup_file(Hierarchy::V1, &format!("{pod}/{}", container.id)),
    );
    assert_eq!(
        procs
            .signal_container(POD, &container, ReloadSignal::Usr2)
            .ok(),
        Some(new_main)
    );
    assert_eq!(
        pinner.sent(),
        vec![(main, ReloadSignal::Hup), (new_main, ReloadSignal::Usr2)]
    );
    assert_eq!(procs.scan_count(), 2);

    // Same PID, same cgroup, other start time (the container's process was replaced by
    // another one that got the same PID): a rescan, which finds it as the new main.
    fake.process(
        new_main,
        50,
        7000,
        'S',
        &cgroup_file(Hierarchy::V1, &format!("{pod}/{}", container.id)),
    );
    assert_eq!(
        procs
            .signal_container(POD, &container, ReloadSignal::Hup)
            .ok(),
        Some(new_main)
    );
    assert_eq!(procs.scan_count(), 3);
}

#[test]
fn a_main_process_that_keeps_vanishing_fails_cleanly() {
    let fake = FakeProc::new();
    let (container, main) = populate(
        &fake,
        ContainerRuntime::Docker,
        Driver::Systemd,
        Qos::Guaranteed,
        Hierarchy::V2,
    );
    let pinner = FakePinner::default();
    pinner.gone.lock().unwrap().insert(main);
    let procs = fake.procfs(&pinner);
    let err = procs
        .signal_container(POD, &container, ReloadSignal::Hup)
        .unwrap_err();
    assert!(
        matches!(err, ProcessError::Vanished { pid, .. } if pid == main),
        "{err}"
    );
    assert!(pinner.sent().is_empty());
    // The cached entry is dropped: the next attempt scans again.
    pinner.gone.lock().unwrap().clear();
    assert_eq!(
        procs
            .signal_container(POD, &container, ReloadSignal::Hup)
            .ok(),
        Some(main)
    );
    assert_eq!(procs.scan_count(), 2);
}

// ------------------------------------------------------------ disposition and fallback

use super::pidfd::fake::FakeCalls;
use super::pidfd::Pidfds;
use crate::core::disposition::{SignalCheck, Verdict, Withheld};

#[test]
fn a_process_that_would_not_handle_the_signal_is_never_sent_it() {
    let fake = FakeProc::new();
    let (container, main) = populate(
        &fake,
        ContainerRuntime::Containerd,
        Driver::Systemd,
        Qos::Burstable,
        Hierarchy::V2,
    );
    let pinner = FakePinner::default();
    let procs = fake.procfs(&pinner);
    let deliver = |check| {
        procs
            .deliver(POD, &container, ReloadSignal::Hup, check)
            .unwrap()
    };

    // Not PID 1 of its namespace, no handler, not blocked: SIGHUP would kill it.
    fake.status(main, "sleep", 0, 0, 0, 7);
    let d = deliver(SignalCheck::On);
    assert_eq!(d.verdict, Verdict::Withhold(Withheld::WouldTerminate));
    assert_eq!(
        (d.pid, d.status.name.as_str(), d.sent()),
        (main, "sleep", false)
    );
    // Ignored.
    fake.status(main, "app", 0, HUP, 0, 1);
    assert_eq!(
        deliver(SignalCheck::On).verdict,
        Verdict::Withhold(Withheld::Ignored)
    );
    assert!(pinner.sent().is_empty(), "{:?}", pinner.sent());
    assert!(matches!(
        procs.signal_container(POD, &container, ReloadSignal::Hup),
        Err(ProcessError::Withheld { .. })
    ));
    assert!(pinner.sent().is_empty());

    // signal-check off sends regardless; PID 1 without a handler is sent (harmless).
    assert!(deliver(SignalCheck::Off).sent());
    fake.status(main, "sleep", 0, 0, 0, 1);
    assert!(deliver(SignalCheck::On).sent());
    // A process whose status cannot be parsed is not signalled.
    fs::write(
        fake.dir.path().join(main.to_string()).join("status"),
        "Name:\tx\n",
    )
    .unwrap();
    assert!(matches!(
        procs.deliver(POD, &container, ReloadSignal::Hup, SignalCheck::On),
        Err(ProcessError::Status { .. })
    ));
    assert_eq!(
        pinner.sent(),
        vec![(main, ReloadSignal::Hup), (main, ReloadSignal::Hup)]
    );
}

fn procfs_with_calls(fake: &FakeProc, calls: &FakeCalls) -> ProcFs {
    ProcFs::with_pinner(fake.dir.path(), Box::new(Pidfds::with_calls(calls.clone())))
}

#[test]
fn refused_pidfds_fall_back_to_kill_after_the_same_re_check() {
    for (open_errno, send_errno) in [
        (libc::ENOSYS, 0),
        (libc::EPERM, 0),
        (0, libc::EPERM),
        (0, libc::ENOSYS),
    ] {
        let fake = FakeProc::new();
        let (container, main) = populate(
            &fake,
            ContainerRuntime::CriO,
            Driver::Cgroupfs,
            Qos::Guaranteed,
            Hierarchy::V2,
        );
        let calls = FakeCalls {
            open_errno,
            send_errno,
            ..Default::default()
        };
        let procs = procfs_with_calls(&fake, &calls);
        let d = procs
            .deliver(POD, &container, ReloadSignal::Usr1, SignalCheck::On)
            .unwrap();
        assert!(d.sent() && d.by_kill, "{open_errno} {send_errno}: {d:?}");
        assert_eq!(
            calls.log().last().map(String::as_str),
            Some(format!("kill {main} SIGUSR1").as_str())
        );
        // Later signals go straight to kill, without trying pidfds again.
        let before = calls.log().len();
        procs
            .deliver(POD, &container, ReloadSignal::Hup, SignalCheck::On)
            .unwrap();
        assert_eq!(calls.log()[before..], [format!("kill {main} SIGHUP")]);

        // The PID is reused by a process outside the container: never killed.
        fake.remove(main);
        fake.process(
            main,
            1,
            9999,
            'S',
            &cgroup_file(Hierarchy::V2, "/system.slice/cron.service"),
        );
        let before = calls.log().len();
        let _ = procs.deliver(POD, &container, ReloadSignal::Hup, SignalCheck::On);
        assert!(
            calls.log()[before..]
                .iter()
                .all(|c| c != &format!("kill {main} SIGHUP")),
            "{:?}",
            calls.log()
        );
    }
}

#[test]
fn other_pidfd_errors_do_not_fall_back() {
    let fake = FakeProc::new();
    let (container, _) = populate(
        &fake,
        ContainerRuntime::Containerd,
        Driver::Systemd,
        Qos::Guaranteed,
        Hierarchy::V2,
    );
    let calls = FakeCalls {
        send_errno: libc::EINVAL,
        ..Default::default()
    };
    let procs = procfs_with_calls(&fake, &calls);
    assert!(matches!(
        procs.deliver(POD, &container, ReloadSignal::Hup, SignalCheck::On),
        Err(ProcessError::Signal { .. })
    ));
    assert!(
        calls.log().iter().all(|c| !c.starts_with("kill")),
        "{:?}",
        calls.log()
    );
}

#[test]
fn a_kept_process_that_exited_is_replaced_by_the_one_found_anew() {
    use crate::core::disposition::SignalCheck;
    let fake = FakeProc::new();
    let (container, main) = populate(
        &fake,
        ContainerRuntime::Containerd,
        Driver::Systemd,
        Qos::Burstable,
        Hierarchy::V2,
    );
    let pinner = FakePinner::default();
    let procs = fake.procfs(&pinner);
    assert_eq!(procs.warm(&[(POD.into(), container.clone())]), 1);
    assert_eq!(
        procs.kept_count(),
        1,
        "warm keeps a pidfd and the status file"
    );
    let hot = |procs: &ProcFs| {
        procs
            .deliver_kept(POD, &container, ReloadSignal::Hup, SignalCheck::On)
            .map(|d| d.expect("delivered").pid)
    };
    assert_eq!(hot(&procs), Some(main));
    let scans = procs.scan_count();

    // The main process exits (its children with it) and another takes its place in the
    // same container: the kept pidfd answers ESRCH, nothing is sent through it.
    let dir = fake.dir.path().join(main.to_string());
    let cgroup = fs::read_to_string(dir.join("cgroup")).unwrap();
    let stat = fs::read_to_string(dir.join("stat")).unwrap();
    let after_comm = stat.rsplit_once(") ").unwrap().1;
    let shim: i32 = after_comm.split(' ').nth(1).unwrap().parse().unwrap();
    pinner.exited.lock().unwrap().insert(main);
    for pid in [main, 70, 71] {
        fake.remove(pid);
    }
    let replacement = 90;
    fake.process(replacement, shim, 500, 'S', &cgroup);
    assert_eq!(hot(&procs), None, "gone: looked up again");
    assert_eq!(procs.kept_count(), 0);

    // The lookup finds the new process, signals it, and keeps it for the next change.
    let delivery = procs
        .deliver(POD, &container, ReloadSignal::Hup, SignalCheck::On)
        .unwrap();
    assert_eq!(delivery.pid, replacement);
    assert!(procs.scan_count() > scans);
    assert_eq!(hot(&procs), Some(replacement));
    assert_eq!(
        pinner.sent(),
        vec![
            (main, ReloadSignal::Hup),
            (replacement, ReloadSignal::Hup),
            (replacement, ReloadSignal::Hup)
        ]
    );
}

#[test]
fn the_kept_path_reads_the_disposition_afresh_and_withholds_like_the_checked_one() {
    use crate::core::disposition::SignalCheck;
    let fake = FakeProc::new();
    let (container, main) = populate(
        &fake,
        ContainerRuntime::Containerd,
        Driver::Systemd,
        Qos::Burstable,
        Hierarchy::V2,
    );
    let pinner = FakePinner::default();
    let procs = fake.procfs(&pinner);
    // Not PID 1 of its namespace (that never changes for a process).
    fake.status(main, "app", 0, 0, ALL_RELOAD_SIGNALS, 7);
    procs.warm(&[(POD.into(), container.clone())]);
    // After warming, the process drops its SIGHUP handler: SIGHUP would kill it. The kept
    // stat file shows it; nothing is sent.
    fake.status(main, "app", 0, 0, 0, 7);
    let delivery = procs
        .deliver_kept(POD, &container, ReloadSignal::Hup, SignalCheck::On)
        .expect("kept")
        .unwrap();
    assert!(!delivery.sent());
    assert!(pinner.sent().is_empty());
    // With the check off it is sent, as on the checked path.
    let delivery = procs
        .deliver_kept(POD, &container, ReloadSignal::Hup, SignalCheck::Off)
        .expect("kept")
        .unwrap();
    assert!(delivery.sent());
    assert_eq!(pinner.sent(), vec![(main, ReloadSignal::Hup)]);
}
