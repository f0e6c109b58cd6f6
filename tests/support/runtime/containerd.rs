//! A containerd of the test's own, driven through `ctr` (see the parent module).

use super::{check, remove_cgroup};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use test_support::wait::within_blocking;

pub const NAMESPACE: &str = "reloadlet-test";

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
        // containerd starts its containers' shims with what it inherited.
        let daemon = nodesim::runtime::default_signals(&mut Command::new("containerd"))
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
        let up = within_blocking(Duration::from_secs(20), || {
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

    /// Stops container `id` (SIGKILL), deletes its task and the container, as the kubelet
    /// has the runtime do for a deleted pod.
    pub fn stop(&mut self, id: &str) {
        let quiet = |cmd: &mut Command| {
            let _ = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status();
        };
        quiet(self.ctr().args(["task", "kill", "--signal", "SIGKILL", id]));
        within_blocking(Duration::from_secs(10), || self.pid(id).is_none());
        quiet(self.ctr().args(["task", "delete", "--force", id]));
        quiet(self.ctr().args(["container", "delete", id]));
        self.containers.retain(|c| c != id);
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
            within_blocking(Duration::from_secs(10), || self.pid(&id).is_none());
            quiet(self.ctr().args(["task", "delete", "--force", &id]));
            quiet(self.ctr().args(["container", "delete", &id]));
        }
        if let Some(mut daemon) = self.daemon.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(daemon.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            if !within_blocking(Duration::from_secs(10), || {
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
        for cg in std::mem::take(&mut self.cgroups) {
            remove_cgroup(&cg);
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
