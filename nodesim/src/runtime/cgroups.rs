//! Cgroups named exactly as the kubelet and the container runtimes name them
//! (`shared/reference/node-facts.md` §4), and the OS part: create them in cgroup v1 or v2,
//! move processes in, kill everything inside and remove what was created.

use crate::flavor::{CgroupDriver, CgroupVersion, QosClass, Runtime};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// cgroup v1 hierarchies the simulator puts containers in (those present on the node).
/// `cpuset` is left out: it needs `cpuset.cpus`/`cpuset.mems` before a task may join.
pub const V1_HIERARCHIES: [&str; 4] = ["name=systemd", "pids", "memory", "cpu"];

/// How long [`Cgroup::kill_all`] waits for a cgroup to empty.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// The pod's cgroup, relative to the hierarchy root, as the kubelet names it.
///
/// The systemd driver escapes `-` in the UID to `_`; Guaranteed pods sit directly under
/// `kubepods`.
pub fn pod_cgroup(driver: CgroupDriver, qos: QosClass, pod_uid: &str) -> String {
    match driver {
        CgroupDriver::Systemd => {
            let uid = pod_uid.replace('-', "_");
            match qos {
                QosClass::Guaranteed => format!("/kubepods.slice/kubepods-pod{uid}.slice"),
                QosClass::Burstable => {
                    format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice")
                }
                QosClass::BestEffort => {
                    format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid}.slice")
                }
            }
        }
        CgroupDriver::Cgroupfs => match qos {
            QosClass::Guaranteed => format!("/kubepods/pod{pod_uid}"),
            QosClass::Burstable => format!("/kubepods/burstable/pod{pod_uid}"),
            QosClass::BestEffort => format!("/kubepods/besteffort/pod{pod_uid}"),
        },
    }
}

/// The leaf of a container (or of the pod sandbox, with the sandbox ID) under the pod cgroup.
pub fn container_leaf(runtime: Runtime, driver: CgroupDriver, id: &str) -> String {
    match (runtime, driver) {
        (Runtime::Containerd, CgroupDriver::Systemd) => format!("cri-containerd-{id}.scope"),
        (Runtime::CriO, CgroupDriver::Systemd) => format!("crio-{id}.scope"),
        (Runtime::Docker, CgroupDriver::Systemd) => format!("docker-{id}.scope"),
        (Runtime::CriO, CgroupDriver::Cgroupfs) => format!("crio-{id}"),
        (Runtime::Containerd | Runtime::Docker, CgroupDriver::Cgroupfs) => id.to_owned(),
    }
}

/// CRI-O's sibling leaf for the container's `conmon` (not the container itself).
pub fn crio_conmon_leaf(driver: CgroupDriver, id: &str) -> String {
    match driver {
        CgroupDriver::Systemd => format!("crio-conmon-{id}.scope"),
        CgroupDriver::Cgroupfs => format!("crio-conmon-{id}"),
    }
}

/// Pod cgroup plus container leaf.
pub fn container_cgroup(
    runtime: Runtime,
    driver: CgroupDriver,
    qos: QosClass,
    pod_uid: &str,
    id: &str,
) -> String {
    format!(
        "{}/{}",
        pod_cgroup(driver, qos, pod_uid),
        container_leaf(runtime, driver, id)
    )
}

/// Errors of the cgroup OS part.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("reading /proc/self/mountinfo: {0}")]
    MountInfo(#[source] io::Error),
    #[error("no cgroup2 mount found in /proc/self/mountinfo")]
    NoV2,
    #[error("no cgroup v1 hierarchy ({}) found in /proc/self/mountinfo", V1_HIERARCHIES.join(", "))]
    NoV1,
    #[error("invalid cgroup path {0:?}: must be absolute, without '..'")]
    BadPath(String),
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cgroup {path} still has processes {pids:?} after SIGKILL")]
    NotEmpty { path: PathBuf, pids: Vec<i32> },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CgroupError + 'a {
    move |source| CgroupError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// Where the cgroup hierarchies are mounted on this host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupMounts {
    /// The cgroup2 mount (`/sys/fs/cgroup` or `/sys/fs/cgroup/unified` on hybrid hosts).
    pub v2: Option<PathBuf>,
    /// `(hierarchy, mount point)` for each of [`V1_HIERARCHIES`] present.
    pub v1: Vec<(String, PathBuf)>,
}

impl CgroupMounts {
    /// Reads `/proc/self/mountinfo`.
    pub fn detect() -> Result<Self, CgroupError> {
        let text = fs::read_to_string("/proc/self/mountinfo").map_err(CgroupError::MountInfo)?;
        Ok(Self::from_mountinfo(&text))
    }

    /// Parses mountinfo text; only mounts of a hierarchy's root count.
    pub fn from_mountinfo(text: &str) -> Self {
        let mut mounts = Self::default();
        for line in text.lines() {
            let Some((pre, post)) = line.split_once(" - ") else {
                continue;
            };
            let pre: Vec<&str> = pre.split(' ').collect();
            let post: Vec<&str> = post.split(' ').collect();
            let (Some(root), Some(mount_point), Some(fstype)) =
                (pre.get(3), pre.get(4), post.first())
            else {
                continue;
            };
            if *root != "/" {
                continue;
            }
            let mount_point = PathBuf::from(unescape_mountinfo(mount_point));
            match *fstype {
                "cgroup2" if mounts.v2.is_none() => mounts.v2 = Some(mount_point),
                "cgroup" => {
                    let options = post.get(2).copied().unwrap_or("");
                    for name in V1_HIERARCHIES {
                        let present = options.split(',').any(|o| o == name);
                        if present && !mounts.v1.iter().any(|(n, _)| n == name) {
                            mounts.v1.push((name.to_owned(), mount_point.clone()));
                        }
                    }
                }
                _ => {}
            }
        }
        mounts
    }

    /// The hierarchy roots a cgroup of `version` lives in.
    pub fn roots(&self, version: CgroupVersion) -> Result<Vec<PathBuf>, CgroupError> {
        match version {
            CgroupVersion::V2 => self.v2.clone().map(|p| vec![p]).ok_or(CgroupError::NoV2),
            CgroupVersion::V1 => {
                let mut roots: Vec<PathBuf> = Vec::new();
                for (_, p) in &self.v1 {
                    if !roots.contains(p) {
                        roots.push(p.clone());
                    }
                }
                if roots.is_empty() {
                    Err(CgroupError::NoV1)
                } else {
                    Ok(roots)
                }
            }
        }
    }
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let v = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One cgroup (the same relative path in each hierarchy of its version).
///
/// Dropping it kills what is inside and removes the directories it created.
#[derive(Debug)]
pub struct Cgroup {
    rel: String,
    dirs: Vec<PathBuf>,
    /// Directories this value created, parents before children.
    created: Vec<PathBuf>,
    removed: bool,
}

impl Cgroup {
    /// Creates `rel` (e.g. `/kubepods.slice/...`) with its missing parents in every
    /// hierarchy of `version`.
    pub fn create(
        mounts: &CgroupMounts,
        version: CgroupVersion,
        rel: &str,
    ) -> Result<Self, CgroupError> {
        let trimmed = rel.trim_start_matches('/');
        if !rel.starts_with('/')
            || trimmed.is_empty()
            || trimmed.split('/').any(|e| e.is_empty() || e == "..")
        {
            return Err(CgroupError::BadPath(rel.to_owned()));
        }
        let mut cgroup = Cgroup {
            rel: rel.to_owned(),
            dirs: Vec::new(),
            created: Vec::new(),
            removed: false,
        };
        for root in mounts.roots(version)? {
            let mut dir = root.clone();
            for element in trimmed.split('/') {
                dir.push(element);
                match fs::create_dir(&dir) {
                    Ok(()) => cgroup.created.push(dir.clone()),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(io_err("mkdir", &dir)(e)),
                }
            }
            cgroup.dirs.push(dir);
        }
        Ok(cgroup)
    }

    /// The path relative to the hierarchy root, as in `/proc/<pid>/cgroup`.
    pub fn rel_path(&self) -> &str {
        &self.rel
    }

    /// The directory in each hierarchy.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// `cgroup.procs` in each hierarchy (writing `0` there moves the writer itself).
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Moves process `pid` into this cgroup in every hierarchy.
    pub fn add_process(&self, pid: i32) -> Result<(), CgroupError> {
        for file in self.procs_files() {
            fs::write(&file, pid.to_string()).map_err(io_err("write", &file))?;
        }
        Ok(())
    }

    /// Processes in this cgroup (in any of its hierarchies), without duplicates.
    pub fn pids(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        for file in self.procs_files() {
            let Ok(text) = fs::read_to_string(&file) else {
                continue;
            };
            for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                if !pids.contains(&pid) {
                    pids.push(pid);
                }
            }
        }
        pids
    }

    /// SIGKILLs every process inside until the cgroup is empty.
    pub fn kill_all(&self) -> Result<(), CgroupError> {
        let deadline = Instant::now() + KILL_TIMEOUT;
        loop {
            let pids = self.pids();
            if pids.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(CgroupError::NotEmpty {
                    path: self.dirs[0].clone(),
                    pids,
                });
            }
            for pid in pids {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills what is inside, then removes the directories this value created, leaf first.
    /// A parent still in use (a shared `kubepods.slice`) is left in place.
    pub fn remove(mut self) -> Result<(), CgroupError> {
        self.remove_inner()
    }

    fn remove_inner(&mut self) -> Result<(), CgroupError> {
        if self.removed {
            return Ok(());
        }
        self.kill_all()?;
        let deadline = Instant::now() + KILL_TIMEOUT;
        for dir in self.created.iter().rev() {
            let is_leaf = self.dirs.contains(dir);
            loop {
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) if is_busy(&e) && !is_leaf => break,
                    Err(e) if is_busy(&e) && Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(io_err("rmdir", dir)(e)),
                }
            }
        }
        self.removed = true;
        Ok(())
    }
}

fn is_busy(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(code) if code == nix::errno::Errno::EBUSY as i32 || code == nix::errno::Errno::ENOTEMPTY as i32)
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if let Err(e) = self.remove_inner() {
            tracing::warn!(cgroup = %self.rel, error = %e, "cgroup cleanup failed");
        }
    }
}

/// The cgroup path of `pid` in `/proc/<pid>/cgroup` for `version` (`0::/x` on v2; on v1 the
/// line of the first hierarchy of [`V1_HIERARCHIES`] present, e.g. `name=systemd`).
pub fn cgroup_of(pid: i32, version: CgroupVersion) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    parse_proc_cgroup(&text, version)
}

/// Parses `/proc/<pid>/cgroup` text, see [`cgroup_of`].
pub fn parse_proc_cgroup(text: &str, version: CgroupVersion) -> Option<String> {
    let lines: Vec<(&str, &str, &str)> = text
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            Some((it.next()?, it.next()?, it.next()?))
        })
        .collect();
    match version {
        CgroupVersion::V2 => lines
            .iter()
            .find(|(id, c, _)| *id == "0" && c.is_empty())
            .map(|l| l.2.to_owned()),
        CgroupVersion::V1 => V1_HIERARCHIES.iter().find_map(|name| {
            lines
                .iter()
                .find(|(_, c, _)| c.split(',').any(|x| x == *name))
                .map(|l| l.2.to_owned())
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0b4c5f2e-1a2b-4c3d-8e9f-a0b1c2d3e4f5";

    #[test]
    fn pod_cgroups_follow_the_kubelet() {
        let u = "0b4c5f2e_1a2b_4c3d_8e9f_a0b1c2d3e4f5";
        let table = [
            (
                CgroupDriver::Systemd,
                QosClass::Guaranteed,
                format!("/kubepods.slice/kubepods-pod{u}.slice"),
            ),
            (
                CgroupDriver::Systemd,
                QosClass::Burstable,
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice"),
            ),
            (
                CgroupDriver::Systemd,
                QosClass::BestEffort,
                format!(
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice"
                ),
            ),
            (
                CgroupDriver::Cgroupfs,
                QosClass::Guaranteed,
                format!("/kubepods/pod{UID}"),
            ),
            (
                CgroupDriver::Cgroupfs,
                QosClass::Burstable,
                format!("/kubepods/burstable/pod{UID}"),
            ),
            (
                CgroupDriver::Cgroupfs,
                QosClass::BestEffort,
                format!("/kubepods/besteffort/pod{UID}"),
            ),
        ];
        for (driver, qos, want) in table {
            assert_eq!(pod_cgroup(driver, qos, UID), want, "{driver:?} {qos:?}");
        }
    }

    #[test]
    fn container_leaves_follow_each_runtime() {
        let id = "ab".repeat(32);
        let table = [
            (
                Runtime::Containerd,
                CgroupDriver::Systemd,
                format!("cri-containerd-{id}.scope"),
            ),
            (Runtime::Containerd, CgroupDriver::Cgroupfs, id.clone()),
            (
                Runtime::CriO,
                CgroupDriver::Systemd,
                format!("crio-{id}.scope"),
            ),
            (Runtime::CriO, CgroupDriver::Cgroupfs, format!("crio-{id}")),
            (
                Runtime::Docker,
                CgroupDriver::Systemd,
                format!("docker-{id}.scope"),
            ),
            (Runtime::Docker, CgroupDriver::Cgroupfs, id.clone()),
        ];
        for (runtime, driver, want) in table {
            assert_eq!(
                container_leaf(runtime, driver, &id),
                want,
                "{runtime:?} {driver:?}"
            );
        }
        assert_eq!(
            crio_conmon_leaf(CgroupDriver::Systemd, &id),
            format!("crio-conmon-{id}.scope")
        );
        assert_eq!(
            crio_conmon_leaf(CgroupDriver::Cgroupfs, &id),
            format!("crio-conmon-{id}")
        );
        assert_eq!(
            container_cgroup(Runtime::Containerd, CgroupDriver::Systemd, QosClass::BestEffort, UID, &id),
            format!(
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/cri-containerd-{id}.scope",
                UID.replace('-', "_")
            )
        );
        assert_eq!(
            container_cgroup(
                Runtime::CriO,
                CgroupDriver::Cgroupfs,
                QosClass::Guaranteed,
                UID,
                &id
            ),
            format!("/kubepods/pod{UID}/crio-{id}")
        );
    }

    #[test]
    fn mountinfo_finds_v1_and_v2_hierarchies() {
        let text = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 31 0:38 /sub /mnt/bound rw,relatime - cgroup2 cgroup2 rw";
        let m = CgroupMounts::from_mountinfo(text);
        assert_eq!(m.v2.as_deref(), Some(Path::new("/sys/fs/cgroup/unified")));
        let names: Vec<&str> = m.v1.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["cpu", "memory", "pids", "name=systemd"]);
        assert_eq!(m.roots(CgroupVersion::V1).unwrap().len(), 4);

        let pure_v2 = "25 1 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate";
        let m = CgroupMounts::from_mountinfo(pure_v2);
        assert_eq!(m.v2.as_deref(), Some(Path::new("/sys/fs/cgroup")));
        assert!(matches!(m.roots(CgroupVersion::V1), Err(CgroupError::NoV1)));
    }

    #[test]
    fn proc_cgroup_lines_parse_per_version() {
        let text = "12:pids:/kubepods/x\n3:cpu,cpuacct:/kubepods/x\n1:name=systemd:/kubepods/x\n0::/user.slice\n";
        assert_eq!(
            parse_proc_cgroup(text, CgroupVersion::V1).as_deref(),
            Some("/kubepods/x")
        );
        assert_eq!(
            parse_proc_cgroup(text, CgroupVersion::V2).as_deref(),
            Some("/user.slice")
        );
        assert_eq!(
            parse_proc_cgroup("0::/a:b\n", CgroupVersion::V2).as_deref(),
            Some("/a:b")
        );
        assert_eq!(parse_proc_cgroup("garbage", CgroupVersion::V2), None);
    }

    #[test]
    fn rejects_relative_and_dotdot_paths() {
        let m = CgroupMounts {
            v2: Some(PathBuf::from("/nonexistent")),
            v1: vec![],
        };
        for bad in ["kubepods", "/", "/a/../b", "/a//b"] {
            assert!(
                matches!(
                    Cgroup::create(&m, CgroupVersion::V2, bad),
                    Err(CgroupError::BadPath(_))
                ),
                "{bad}"
            );
        }
    }
}
