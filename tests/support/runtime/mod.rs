//! Workloads in real containers: a private containerd (its own root, state, sockets and
//! config, started and stopped by the test) running containers through `ctr` with runc, or
//! conmon + runc in CRI-O's shape, in
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

mod conmon;
mod containerd;
mod scenes;
#[allow(unused_imports)] // each test binary uses one runtime
pub use conmon::Conmon;
#[allow(unused_imports)]
pub use containerd::{Containerd, NAMESPACE};
pub use scenes::{evict_scene, running_status, spawn_agent, tracked, NginxPod, PodRuntime, Stage};
use test_support::wait::within_blocking;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

/// Loads the chart's RBAC into `api` and writes a kubeconfig of the agent's service
/// account to `path`: the agent runs with exactly what the chart grants it.
pub fn agent_kubeconfig(api: &nodesim::apiserver::ApiServer, path: &Path) {
    use nodesim::apiserver::{rbac, rbac_chart};
    api.set_rbac(rbac_chart::policy(&[]).expect("the chart's default RBAC"));
    let (ns, name) = rbac_chart::AGENT;
    let token = api.mint_token(rbac::User::service_account(ns, name));
    api.write_kubeconfig_with_token(path, Some(&token))
        .expect("write the agent's kubeconfig");
}

/// No request of the test was refused by RBAC.
pub fn assert_no_forbidden(api: &nodesim::apiserver::ApiServer) {
    let refused: Vec<String> = api
        .forbidden()
        .iter()
        .map(|f| format!("{} {} by {}", f.method, f.path, f.user))
        .collect();
    assert!(
        refused.is_empty(),
        "403s under the chart's RBAC: {refused:#?}"
    );
}

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
        within_blocking(Duration::from_secs(2), || {
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
        if within_blocking(Duration::from_secs(15), || {
            self.child.try_wait().ok().flatten().is_some()
        }) {
            return;
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
