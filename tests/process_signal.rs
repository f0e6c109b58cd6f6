//! `ProcFs` on the real `/proc` with real processes in real cgroups, named the way the
//! kubelet and the runtimes name them. Needs root; skips (with a message) when not root
//! or when a needed cgroup hierarchy is not mounted.
//!
//! Every process here blocks SIGUSR1 (the mask is inherited across fork and exec), so a
//! signal sent to it stays pending and shows in `/proc/<pid>/status` (`ShdPnd`): who got
//! the signal is read back exactly, with no timing involved.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, sigprocmask, SigSet, SigmaskHow, Signal};
use nix::unistd::Pid;
use reloadlet::core::model::{ContainerId, ContainerRuntime, ReloadSignal};
use reloadlet::host::process::ProcFs;
use reloadlet::ports::{ContainerProcesses, ProcessError};
use test_support::wait::*;

/// How long a process takes to show where it must.
const WAIT: Duration = Duration::from_secs(10);
const USR1_BIT: u64 = 1 << (10 - 1);

// ---------------------------------------------------------------- environment

/// Mount points of cgroup hierarchies, from /proc/self/mountinfo.
struct Mounts {
    v2: Option<PathBuf>,
    v1_pids: Option<PathBuf>,
    v1_systemd: Option<PathBuf>,
}

fn mounts() -> Mounts {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found = Mounts {
        v2: None,
        v1_pids: None,
        v1_systemd: None,
    };
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount_point = left.split(' ').nth(4).map(PathBuf::from);
        let mut right = right.split(' ');
        let (fstype, super_opts) = (right.next(), right.nth(1).unwrap_or_default());
        let opts: Vec<&str> = super_opts.split(',').collect();
        match fstype {
            Some("cgroup2") if found.v2.is_none() => found.v2 = mount_point,
            Some("cgroup") if opts.contains(&"pids") => found.v1_pids = mount_point,
            Some("cgroup") if opts.contains(&"name=systemd") => found.v1_systemd = mount_point,
            _ => {}
        }
    }
    found
}

fn random_hex(len: usize) -> String {
    let mut bytes = vec![0u8; len.div_ceil(2)];
    getrandom::fill(&mut bytes).unwrap();
    let mut hex = hex::encode(bytes);
    hex.truncate(len);
    hex
}

fn random_pod_uid() -> String {
    let h = random_hex(32);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

fn procs_of(leaf: &Path) -> Vec<i32> {
    fs::read_to_string(leaf.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Signals process-wide pending for `pid` (`ShdPnd | SigPnd`), `None` once it is gone.
fn pending(pid: i32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
    };
    Some(field("ShdPnd:")? | field("SigPnd:")?)
}

fn got_usr1(pid: i32) -> bool {
    pending(pid).is_some_and(|p| p & USR1_BIT != 0)
}

// ---------------------------------------------------------------- guards

/// Cgroup directories this test made; on drop, kills what is left in them and removes
/// them, deepest first.
struct CgroupDirs {
    /// Parent-first.
    dirs: Vec<PathBuf>,
}

impl CgroupDirs {
    /// Creates `root/rel` and every dir between, all of which must be new below `root`.
    fn create(&mut self, root: &Path, rel: &str) -> PathBuf {
        let mut path = root.to_path_buf();
        for segment in rel.split('/').filter(|s| !s.is_empty()) {
            path.push(segment);
            if !path.exists() {
                fs::create_dir(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
                self.dirs.push(path.clone());
            }
        }
        path
    }
}

impl Drop for CgroupDirs {
    fn drop(&mut self) {
        for dir in self.dirs.iter().rev() {
            for pid in procs_of(dir) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            within_blocking(Duration::from_secs(5), || procs_of(dir).is_empty());
            if let Err(e) = fs::remove_dir(dir) {
                eprintln!("cannot remove {}: {e}", dir.display());
            }
        }
    }
}

/// Processes this test started. On drop: the grandchildren first (so that no orphan is
/// left to a PID 1 that may not reap), then the children, each reaped.
#[derive(Default)]
struct Processes {
    children: Vec<Child>,
    grandchildren: Vec<i32>,
}

impl Processes {
    /// Starts `sh -c script` with SIGUSR1 blocked and every other disposition at its default,
    /// whatever the test process inherited (`nohup` ignores SIGHUP, `setsid` and shells
    /// may leave others ignored or blocked): the shell is the workload a pod would run.
    fn spawn(&mut self, script: &str) -> i32 {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        nodesim::runtime::default_signals(&mut cmd);
        // SAFETY: only sigprocmask (async-signal-safe) runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let mut set = SigSet::empty();
                set.add(Signal::SIGUSR1);
                sigprocmask(SigmaskHow::SIG_SETMASK, Some(&set), None).map_err(std::io::Error::from)
            });
        }
        let child = cmd.spawn().expect("spawn sh");
        let pid = child.id() as i32;
        self.children.push(child);
        pid
    }

    /// Kills and reaps the child `pid` (its own children must be gone already).
    fn kill_child(&mut self, pid: i32) {
        if let Some(i) = self.children.iter().position(|c| c.id() as i32 == pid) {
            let mut child = self.children.remove(i);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills a grandchild and waits until its parent (a shell in `wait`) reaped it.
    fn kill_grandchild(&mut self, pid: i32) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        eventually_blocking("grandchild reaped", WAIT, || {
            fs::metadata(format!("/proc/{pid}")).is_err().then_some(())
        });
        self.grandchildren.retain(|p| *p != pid);
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for pid in std::mem::take(&mut self.grandchildren) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            within_blocking(Duration::from_secs(5), || {
                fs::metadata(format!("/proc/{pid}")).is_err()
            });
        }
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

// ---------------------------------------------------------------- scenario

/// Writes `$$` to each `cgroup.procs`, then runs `rest`.
fn join_then(leaves: &[&Path], rest: &str) -> String {
    let mut script = String::new();
    for leaf in leaves {
        script += &format!("echo $$ > '{}/cgroup.procs' || exit 1; ", leaf.display());
    }
    script + rest
}

/// A main process (parent outside: the test) in `leaves`, with a child (`sleep`) inside.
/// Returns (main, child).
fn start_main(procs: &mut Processes, leaves: &[&Path], scratch: &Path) -> (i32, i32) {
    let child_file = scratch.join(format!("child-{}", random_hex(8)));
    let script = join_then(
        leaves,
        &format!("sleep 600 & echo $! > '{}'; wait", child_file.display()),
    );
    let main = procs.spawn(&script);
    let child = eventually_blocking("the main process's child", WAIT, || {
        fs::read_to_string(&child_file)
            .ok()?
            .trim()
            .parse::<i32>()
            .ok()
    });
    procs.grandchildren.push(child);
    eventually_blocking("main and child in the cgroup", WAIT, || {
        let inside = procs_of(leaves[0]);
        (inside.contains(&main) && inside.contains(&child)).then_some(())
    });
    (main, child)
}

/// A `kubectl exec`-like process: joins the container later, parent outside.
fn start_exec(procs: &mut Processes, leaves: &[&Path]) -> i32 {
    let pid = procs.spawn(&join_then(leaves, "exec sleep 600"));
    eventually_blocking("exec process in the cgroup", WAIT, || {
        procs_of(leaves[0]).contains(&pid).then_some(())
    });
    pid
}

fn containerd(id: &str) -> ContainerId {
    ContainerId {
        runtime: ContainerRuntime::Containerd,
        id: id.to_owned(),
    }
}

#[test]
fn v2_systemd_layout_signals_the_main_process_only() {
    if !root_or_skip() {
        return;
    }
    let Some(v2) = mounts().v2 else {
        skipped("no cgroup2 mount");
        return;
    };
    let uid = random_pod_uid();
    let id = random_hex(64);
    let sandbox = random_hex(64);
    let scratch = tempfile::tempdir().unwrap();
    let pod = format!(
        "reloadlet-test-{}/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
        random_hex(12),
        uid.replace('-', "_")
    );
    let mut dirs = CgroupDirs { dirs: Vec::new() };
    let leaf = dirs.create(&v2, &format!("{pod}/cri-containerd-{id}.scope"));
    let pause_leaf = dirs.create(&v2, &format!("{pod}/cri-containerd-{sandbox}.scope"));
    let mut procs = Processes::default();

    // The pause process is older than everything in the container.
    let pause = procs.spawn(&join_then(&[&pause_leaf], "exec sleep 600"));
    eventually_blocking("pause in its cgroup", WAIT, || {
        procs_of(&pause_leaf).contains(&pause).then_some(())
    });
    let (main, child) = start_main(&mut procs, &[&leaf], scratch.path());
    let exec = start_exec(&mut procs, &[&leaf]);

    let proc_fs = ProcFs::new("/proc");
    let found = proc_fs.find_main_process(&uid, &containerd(&id)).unwrap();
    assert_eq!(found.pid, main);

    let signalled = proc_fs
        .signal_container(&uid, &containerd(&id), ReloadSignal::Usr1)
        .unwrap();
    assert_eq!(signalled, main);
    assert!(got_usr1(main), "the main process has SIGUSR1 pending");
    for (decoy, name) in [(child, "child"), (exec, "exec"), (pause, "pause")] {
        assert!(pending(decoy).is_some(), "{name} still runs");
        assert!(!got_usr1(decoy), "{name} must not get the signal");
    }

    // The fast path: once found, signalling reads two files and scans nothing.
    let scans = proc_fs.scan_count();
    let mut took = Vec::new();
    for _ in 0..200 {
        let start = Instant::now();
        proc_fs
            .signal_container(&uid, &containerd(&id), ReloadSignal::Usr1)
            .unwrap();
        took.push(start.elapsed());
    }
    assert_eq!(
        proc_fs.scan_count(),
        scans,
        "cached signals must not scan /proc"
    );
    took.sort();
    eprintln!("fast-path signal: p50 {:?}, p99 {:?}", took[100], took[197]);

    // The sandbox ID is not the container.
    let err = proc_fs.signal_container(&uid, &containerd(&random_hex(64)), ReloadSignal::Usr1);
    assert!(
        matches!(err, Err(ProcessError::NoProcess { .. })),
        "{err:?}"
    );
    drop(procs);
}

#[test]
fn v2_pid_reuse_never_signals_a_process_outside_the_container() {
    if !root_or_skip() {
        return;
    }
    let Some(v2) = mounts().v2 else {
        skipped("no cgroup2 mount");
        return;
    };
    let uid = random_pod_uid();
    let id = random_hex(64);
    let container = containerd(&id);
    let scratch = tempfile::tempdir().unwrap();
    let mut dirs = CgroupDirs { dirs: Vec::new() };
    let leaf = dirs.create(
        &v2,
        &format!(
            "reloadlet-test-{}/kubepods.slice/kubepods-pod{}.slice/cri-containerd-{id}.scope",
            random_hex(12),
            uid.replace('-', "_")
        ),
    );
    let mut procs = Processes::default();
    let (old_main, child) = start_main(&mut procs, &[&leaf], scratch.path());

    let proc_fs = ProcFs::new("/proc");
    assert_eq!(
        proc_fs
            .signal_container(&uid, &container, ReloadSignal::Usr1)
            .unwrap(),
        old_main
    );
    assert_eq!(proc_fs.scan_count(), 1);

    // The container's processes exit; an unrelated process outside the container gets
    // the old main PID if we can make the kernel hand it out again (ns_last_pid).
    procs.kill_grandchild(child);
    procs.kill_child(old_main);
    let outsider = reuse_pid(&mut procs, old_main);
    if outsider != old_main {
        eprintln!("note: could not reuse PID {old_main}; outsider is {outsider}");
    }
    let err = proc_fs.signal_container(&uid, &container, ReloadSignal::Usr1);
    assert!(
        matches!(err, Err(ProcessError::NoProcess { .. })),
        "{err:?}"
    );
    assert!(
        !got_usr1(outsider),
        "a process outside the container got the signal"
    );
    assert_eq!(
        proc_fs.scan_count(),
        2,
        "a stale cache entry costs one rescan"
    );

    // A new main process starts in the container: it gets the next signal.
    let (new_main, _) = start_main(&mut procs, &[&leaf], scratch.path());
    assert_eq!(
        proc_fs
            .signal_container(&uid, &container, ReloadSignal::Usr1)
            .unwrap(),
        new_main
    );
    assert!(got_usr1(new_main));
    assert!(!got_usr1(outsider));
    drop(procs);
}

/// Starts `sleep` outside any test cgroup, trying to get PID `want`.
fn reuse_pid(procs: &mut Processes, want: i32) -> i32 {
    for _ in 0..200 {
        if fs::write("/proc/sys/kernel/ns_last_pid", (want - 1).to_string()).is_err() {
            break;
        }
        let pid = procs.spawn("exec sleep 600");
        if pid == want {
            return pid;
        }
        procs.kill_child(pid);
    }
    procs.spawn("exec sleep 600")
}

#[test]
fn v1_cgroupfs_layout_on_pids_and_systemd_hierarchies() {
    if !root_or_skip() {
        return;
    }
    let m = mounts();
    let (Some(pids), Some(systemd)) = (m.v1_pids, m.v1_systemd) else {
        skipped("no v1 pids + name=systemd hierarchies");
        return;
    };
    let uid = random_pod_uid();
    let id = random_hex(64);
    let sibling = random_hex(64);
    let scratch = tempfile::tempdir().unwrap();
    let pod = format!(
        "reloadlet-test-{}/kubepods/besteffort/pod{uid}",
        random_hex(12)
    );
    let mut dirs = CgroupDirs { dirs: Vec::new() };
    let leaf_pids = dirs.create(&pids, &format!("{pod}/{id}"));
    let leaf_systemd = dirs.create(&systemd, &format!("{pod}/{id}"));
    let sibling_leaf = dirs.create(&pids, &format!("{pod}/{sibling}"));
    let mut procs = Processes::default();

    // A sibling container of the same pod, started first.
    let other = procs.spawn(&join_then(&[&sibling_leaf], "exec sleep 600"));
    eventually_blocking("sibling in its cgroup", WAIT, || {
        procs_of(&sibling_leaf).contains(&other).then_some(())
    });
    let (main, child) = start_main(&mut procs, &[&leaf_pids, &leaf_systemd], scratch.path());

    let proc_fs = ProcFs::new("/proc");
    let signalled = proc_fs
        .signal_container(&uid, &containerd(&id), ReloadSignal::Usr1)
        .unwrap();
    assert_eq!(signalled, main);
    assert!(got_usr1(main));
    assert!(!got_usr1(child), "child must not get the signal");
    assert!(
        !got_usr1(other),
        "sibling container must not get the signal"
    );
    drop(procs);
}
