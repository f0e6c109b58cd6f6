//! CRI-O's shape without CRI-O: conmon and runc (see the parent module).

use super::{check, hierarchies, remove_cgroup, running, which};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use test_support::wait::within_blocking;

/// CRI-O's shape without CRI-O: per container, `conmon` (in its own `crio-conmon-<id>`
/// cgroup beside the container's, as CRI-O places it) creates the container with runc from
/// an OCI bundle whose `cgroupsPath` is `<pod cgroup>/crio-<id>`, then `runc start` starts
/// it; conmon stays its parent (a subreaper). runc's state is under the test's directory.
pub struct Conmon {
    pub dir: PathBuf,
    runc_root: PathBuf,
    containers: Vec<(String, i32, String)>,
}

impl Conmon {
    pub fn new(dir: &Path) -> Conmon {
        let runc_root = dir.join("runc");
        std::fs::create_dir_all(&runc_root).unwrap();
        Conmon {
            dir: dir.to_path_buf(),
            runc_root,
            containers: Vec::new(),
        }
    }

    fn runc(&self) -> Command {
        let mut cmd = Command::new("runc");
        cmd.arg("--root").arg(&self.runc_root);
        cmd
    }

    /// Runs `argv` as container `id` under `pod_cgroup`, on the host's network, with these
    /// bind mounts. Returns (conmon's PID, the container's PID 1).
    pub fn run(
        &mut self,
        id: &str,
        rootfs: &Path,
        pod_cgroup: &str,
        mounts: &[(&Path, &str, bool)],
        argv: &[&str],
    ) -> (i32, i32) {
        let bundle = self.dir.join(id);
        std::fs::create_dir_all(&bundle).unwrap();
        check(
            Command::new("runc")
                .arg("spec")
                .arg("--bundle")
                .arg(&bundle),
        );
        let path = bundle.join("config.json");
        let mut spec: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        spec["root"] = serde_json::json!({"path": rootfs, "readonly": false});
        spec["process"]["terminal"] = false.into();
        spec["process"]["args"] = argv.into();
        // The default capabilities a CRI runtime grants (containerd's and CRI-O's default
        // set); `runc spec`'s minimal set lacks SETUID/SETGID, which nginx's master needs.
        let caps: Vec<String> = [
            "CHOWN",
            "DAC_OVERRIDE",
            "FSETID",
            "FOWNER",
            "MKNOD",
            "NET_RAW",
            "SETGID",
            "SETUID",
            "SETFCAP",
            "SETPCAP",
            "NET_BIND_SERVICE",
            "SYS_CHROOT",
            "KILL",
            "AUDIT_WRITE",
        ]
        .iter()
        .map(|c| format!("CAP_{c}"))
        .collect();
        for set in ["bounding", "effective", "permitted"] {
            spec["process"]["capabilities"][set] = caps.clone().into();
        }
        let namespaces: Vec<serde_json::Value> = spec["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["type"] != "network")
            .cloned()
            .collect();
        spec["linux"]["namespaces"] = namespaces.into();
        spec["linux"]["cgroupsPath"] = format!("{pod_cgroup}/crio-{id}").into();
        for (src, dst, ro) in mounts {
            spec["mounts"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({
                    "destination": dst, "type": "bind", "source": src,
                    "options": ["rbind", if *ro { "ro" } else { "rw" }]
                }));
        }
        std::fs::write(&path, serde_json::to_vec(&spec).unwrap()).unwrap();

        let (pidfile, conmon_pidfile) = (bundle.join("pidfile"), bundle.join("conmon.pid"));
        for d in ["exits", "sockets"] {
            std::fs::create_dir_all(self.dir.join(d)).unwrap();
        }
        self.containers
            .push((id.to_string(), 0, format!("{pod_cgroup}/crio-{id}")));
        check(
            nodesim::runtime::default_signals(&mut Command::new("conmon"))
                .args(["--cid", id, "--cuuid", id, "--name", id, "--runtime"])
                .arg(which("runc").expect("runc"))
                .arg(format!("--runtime-arg=--root={}", self.runc_root.display()))
                .arg("--bundle")
                .arg(&bundle)
                .arg("--container-pidfile")
                .arg(&pidfile)
                .arg("--conmon-pidfile")
                .arg(&conmon_pidfile)
                .arg("--log-path")
                .arg(bundle.join("container.log"))
                .arg("--exit-dir")
                .arg(self.dir.join("exits"))
                .arg("--socket-dir-path")
                .arg(self.dir.join("sockets"))
                .args(["--log-level", "info"])
                .stdout(Stdio::null()),
        );
        let read_pid = |p: &Path| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
        };
        let created = within_blocking(Duration::from_secs(10), || {
            read_pid(&pidfile).is_some() && read_pid(&conmon_pidfile).is_some()
        });
        assert!(created, "conmon did not create container {id}");
        let conmon = read_pid(&conmon_pidfile).unwrap();
        self.containers.last_mut().unwrap().1 = conmon;
        // CRI-O puts conmon in a sibling cgroup of the container's (cgroupfs: crio-conmon-<id>).
        let conmon_cgroup = format!("{pod_cgroup}/crio-conmon-{id}");
        for h in hierarchies() {
            let dir = h.join(conmon_cgroup.trim_start_matches('/'));
            if std::fs::create_dir_all(&dir).is_ok() {
                // cpuset needs cpus/mems before it takes a task: leave conmon where it is there.
                let _ = std::fs::write(dir.join("cgroup.procs"), conmon.to_string());
            }
        }
        self.containers
            .push((format!("conmon:{id}"), 0, conmon_cgroup));
        check(self.runc().args(["start", id]));
        (conmon, read_pid(&pidfile).unwrap())
    }
}

impl Conmon {
    /// Stops container `id` (SIGKILL), waits for its conmon to leave and deletes it, as
    /// CRI-O does for a deleted pod; removes its cgroups.
    pub fn stop(&mut self, id: &str) {
        let conmon_key = format!("conmon:{id}");
        let mine: Vec<(String, i32, String)> = self
            .containers
            .iter()
            .filter(|c| c.0 == id || c.0 == conmon_key)
            .cloned()
            .collect();
        self.containers.retain(|c| c.0 != id && c.0 != conmon_key);
        let quiet = |mut cmd: Command| {
            let _ = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status();
        };
        let mut kill = self.runc();
        kill.args(["kill", id, "KILL"]);
        quiet(kill);
        for (_, conmon, _) in &mine {
            if *conmon > 0 {
                within_blocking(Duration::from_secs(10), || !running(*conmon));
            }
        }
        let mut delete = self.runc();
        delete.args(["delete", "--force", id]);
        quiet(delete);
        for (_, _, cgroup) in &mine {
            remove_cgroup(cgroup);
        }
    }
}

impl Drop for Conmon {
    fn drop(&mut self) {
        let quiet = |mut cmd: Command| {
            let _ = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status();
        };
        let all = std::mem::take(&mut self.containers);
        for (id, conmon, _) in all.iter().filter(|c| !c.0.starts_with("conmon:")) {
            let mut kill = self.runc();
            kill.args(["kill", id, "KILL"]);
            quiet(kill);
            // conmon writes the exit file and exits when its container has exited.
            if *conmon > 0 && !within_blocking(Duration::from_secs(10), || !running(*conmon)) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*conmon),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let mut delete = self.runc();
            delete.args(["delete", "--force", id]);
            quiet(delete);
        }
        for (_, _, cgroup) in &all {
            remove_cgroup(cgroup);
        }
    }
}
