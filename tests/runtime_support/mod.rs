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

    /// Stops container `id` (SIGKILL), deletes its task and the container, as the kubelet
    /// has the runtime do for a deleted pod.
    pub fn stop(&mut self, id: &str) {
        let quiet = |cmd: &mut Command| {
            let _ = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status();
        };
        quiet(self.ctr().args(["task", "kill", "--signal", "SIGKILL", id]));
        wait_until(Duration::from_secs(10), || self.pid(id).is_none());
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
            Command::new("conmon")
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
        let created = wait_until(Duration::from_secs(10), || {
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
                wait_until(Duration::from_secs(10), || !running(*conmon));
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

fn hierarchies() -> Vec<PathBuf> {
    std::fs::read_dir("/sys/fs/cgroup")
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// Whether `pid` runs (a zombie does not).
pub fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// Removes `cgroup` in every hierarchy (waiting briefly for it to empty), then its parents
/// while they are empty.
fn remove_cgroup(cgroup: &str) {
    for h in hierarchies() {
        let leaf = h.join(cgroup.trim_start_matches('/'));
        wait_until(Duration::from_secs(2), || {
            std::fs::remove_dir(&leaf).is_ok() || !leaf.exists()
        });
        let mut dir = leaf.parent().map(Path::to_path_buf);
        while let Some(d) = dir.filter(|d| *d != h) {
            if d.exists() && std::fs::remove_dir(&d).is_err() {
                break;
            }
            dir = d.parent().map(Path::to_path_buf);
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
            if *conmon > 0 && !wait_until(Duration::from_secs(10), || !running(*conmon)) {
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

/// nginx's config: in the foreground, writing under /run/nginx, serving `body` on `port`.
pub fn nginx_conf(port: u16, body: &str) -> String {
    format!(
        r#"daemon off;
master_process on;
worker_processes 1;
pid /run/nginx/nginx.pid;
error_log /run/nginx/error.log notice;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path /run/nginx/body;
    proxy_temp_path /run/nginx/proxy;
    fastcgi_temp_path /run/nginx/fastcgi;
    uwsgi_temp_path /run/nginx/uwsgi;
    scgi_temp_path /run/nginx/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 200 "{body}"; }}
    }}
}}
"#
    )
}

/// The agent binary, stopped (SIGTERM, then SIGKILL) on drop.
pub struct Agent {
    pub child: Child,
    pub log: std::path::PathBuf,
}

impl Agent {
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while std::time::Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The parent PID of `pid`.
pub fn parent(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat.rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap()
}

/// Polls `f` every 20 ms until it holds or `timeout` passes.
pub async fn wait_poll(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
