//! Workloads in real containers: a private containerd (its own root, state, sockets and
//! config, started and stopped by the test) running containers through `ctr` with runc, in
//! the kubelet's cgroupfs layout, with the kubelet's volume directories bind-mounted at the
//! pod spec's mount paths. The test plays the kubelet's part: it writes the volumes (nodesim's
//! AtomicWriter, as the kubelet writes them) and reports the container IDs in the pod's
//! status, as the kubelet does from CRI.
//!
//! Dropped even after a failed assertion: tasks killed and deleted, containers deleted,
//! containerd stopped, any shim of this containerd killed (found by this test's unique socket
//! address in its command line, never by name), the cgroups removed. Nothing already running
//! on the machine is touched.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const NAMESPACE: &str = "reloadlet-test";

pub fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(tool))
            .find(|p| p.is_file())
    })
}

/// Why containerd tests cannot run here, in one line; `RELOADLET_REQUIRE_IMAGE=1`
/// (hack/test.sh) turns a missing runtime into a failure.
pub fn missing(tools: &[&str]) -> Option<String> {
    let gone: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| which(t).is_none())
        .collect();
    if gone.is_empty() {
        return None;
    }
    let line = format!(
        "{} not installed (hack/install-test-deps.sh)",
        gone.join(", ")
    );
    if std::env::var("RELOADLET_REQUIRE_IMAGE").as_deref() == Ok("1") {
        panic!("RELOADLET_REQUIRE_IMAGE=1 but {line}");
    }
    Some(line)
}

fn check(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    out
}

/// Blocks (polling every 20 ms) until `f` holds or `timeout` passes.
fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// A containerd of the test's own.
pub struct Containerd {
    pub dir: PathBuf,
    pub socket: PathBuf,
    daemon: Option<Child>,
    containers: Vec<String>,
    /// Cgroups the containers were given (relative to each hierarchy's root).
    cgroups: Vec<String>,
}

impl Containerd {
    /// Starts `containerd --config DIR/config.toml` (root, state, sockets and the `opt`
    /// plugin's path under `dir`; no CRI plugin) and waits until `ctr version` answers.
    pub fn start(dir: &Path) -> Containerd {
        std::fs::create_dir_all(dir).unwrap();
        let socket = dir.join("containerd.sock");
        let d = dir.display();
        let config = format!(
            "version = 2\nroot = \"{d}/root\"\nstate = \"{d}/state\"\n\
             disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
             [grpc]\n  address = \"{d}/containerd.sock\"\n\
             [ttrpc]\n  address = \"{d}/containerd.sock.ttrpc\"\n\
             [debug]\n  address = \"{d}/debug.sock\"\n\
             [metrics]\n  address = \"\"\n\
             [plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"{d}/opt\"\n"
        );
        std::fs::write(dir.join("config.toml"), config).unwrap();
        let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
        let daemon = Command::new("containerd")
            .arg("--config")
            .arg(dir.join("config.toml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start containerd");
        let c = Containerd {
            dir: dir.to_path_buf(),
            socket,
            daemon: Some(daemon),
            containers: Vec::new(),
            cgroups: Vec::new(),
        };
        let up = wait_until(Duration::from_secs(20), || {
            c.ctr()
                .arg("version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        assert!(up, "containerd did not start:\n{}", c.log());
        c
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }

    pub fn ctr(&self) -> Command {
        let mut cmd = Command::new("ctr");
        cmd.arg("--address")
            .arg(&self.socket)
            .arg("--namespace")
            .arg(NAMESPACE);
        cmd
    }

    /// `ctr run --detach --rootfs` of `argv` as container `id` in cgroup `cgroup`, with the
    /// host's network and these bind mounts (`src`, `dst`, `ro`). Returns its PID (the
    /// container's PID 1, as the host sees it).
    pub fn run(
        &mut self,
        id: &str,
        rootfs: &Path,
        cgroup: &str,
        mounts: &[(&Path, &str, bool)],
        argv: &[&str],
    ) -> i32 {
        let mut cmd = self.ctr();
        cmd.args(["run", "--detach", "--rootfs", "--net-host"])
            .arg(format!("--cgroup={cgroup}"));
        for (src, dst, ro) in mounts {
            cmd.arg("--mount").arg(format!(
                "type=bind,src={},dst={dst},options=rbind:{}",
                src.display(),
                if *ro { "ro" } else { "rw" }
            ));
        }
        self.containers.push(id.to_string());
        self.cgroups.push(cgroup.to_string());
        check(cmd.arg(rootfs).arg(id).args(argv));
        self.pid(id)
            .unwrap_or_else(|| panic!("container {id} has no running task"))
    }

    /// The PID of container `id`'s task when it runs.
    pub fn pid(&self, id: &str) -> Option<i32> {
        let out = self.ctr().args(["task", "ls"]).output().ok()?;
        String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3 && f[0] == id && f[2] == "RUNNING").then(|| f[1].parse().ok())?
        })
    }

    /// The containerd-shim of this containerd: processes whose command line names its socket.
    pub fn shims(&self) -> Vec<i32> {
        let sock = self.socket.display().to_string();
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        procs
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                    let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
                    args.windows(2)
                        .any(|w| w[0] == b"-address" && w[1] == sock.as_bytes())
                })
            })
            .collect()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let quiet = |cmd: &mut Command| {
            let _ = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status();
        };
        for id in std::mem::take(&mut self.containers) {
            quiet(
                self.ctr()
                    .args(["task", "kill", "--signal", "SIGKILL", &id]),
            );
            wait_until(Duration::from_secs(10), || self.pid(&id).is_none());
            quiet(self.ctr().args(["task", "delete", "--force", &id]));
            quiet(self.ctr().args(["container", "delete", &id]));
        }
        if let Some(mut daemon) = self.daemon.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(daemon.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            if !wait_until(Duration::from_secs(10), || {
                daemon.try_wait().ok().flatten().is_some()
            }) {
                let _ = daemon.kill();
            }
            let _ = daemon.wait();
        }
        // A shim outlives its containerd: end those of this one (by its unique socket).
        for pid in self.shims() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        // The containers' cgroups and their (then empty) parents; a parent still in use by
        // someone else (another pod, another test) is not empty and stays.
        let hierarchies: Vec<PathBuf> = std::fs::read_dir("/sys/fs/cgroup")
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        for cg in std::mem::take(&mut self.cgroups) {
            for h in &hierarchies {
                let leaf = h.join(cg.trim_start_matches('/'));
                // runc removes the container's cgroup on delete; wait for that, then try
                // the parents once each, innermost first.
                wait_until(Duration::from_secs(2), || {
                    std::fs::remove_dir(&leaf).is_ok() || !leaf.exists()
                });
                let mut dir = leaf.parent().map(Path::to_path_buf);
                while let Some(d) = dir.filter(|d| d != h) {
                    if d.exists() && std::fs::remove_dir(&d).is_err() {
                        break;
                    }
                    dir = d.parent().map(Path::to_path_buf);
                }
            }
        }
        // The daemon's state: mounts under it (none expected for --rootfs) would be reported.
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let ours = self.dir.display().to_string();
        for line in mountinfo.lines() {
            if let Some(point) = line.split(' ').nth(4) {
                if point.starts_with(&ours) {
                    let _ = Command::new("umount").arg("-l").arg(point).status();
                }
            }
        }
    }
}

/// A root filesystem with no image: empty directories for the mount points, `/usr` (and the
/// usrmerge links to it) and `/etc` from the host bind-mounted read-only by [`host_mounts`].
pub fn rootfs(dir: &Path) -> PathBuf {
    let root = dir.join("rootfs");
    for d in ["usr", "etc", "proc", "dev", "sys", "tmp", "run", "var"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    for (link, to) in [
        ("bin", "usr/bin"),
        ("sbin", "usr/sbin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        let _ = std::os::unix::fs::symlink(to, root.join(link));
    }
    root
}

/// The host's `/usr` and `/etc`, read-only: nginx and its libraries without an image.
pub fn host_mounts() -> Vec<(&'static Path, &'static str, bool)> {
    vec![
        (Path::new("/usr"), "/usr", true),
        (Path::new("/etc"), "/etc", true),
    ]
}
