//! Reading processes out of a proc root, and choosing a container's main process.

use std::io::Read;
use std::path::Path;

use procfs::process::Process;
use procfs::{FromRead, ProcError, ProcResult};

use crate::core::model::ContainerId;
use crate::host::process::cgroup;
use crate::ports::MainProcess;

/// The raw text of `/proc/<pid>/cgroup`, read through the process's pinned directory.
struct CgroupText(String);

impl FromRead for CgroupText {
    fn from_read<R: Read>(mut r: R) -> ProcResult<Self> {
        let mut text = String::new();
        r.read_to_string(&mut text)?;
        Ok(CgroupText(text))
    }
}

/// The raw text of `/proc/<pid>/status`.
struct StatusText(String);

impl FromRead for StatusText {
    fn from_read<R: Read>(mut r: R) -> ProcResult<Self> {
        let mut text = String::new();
        r.read_to_string(&mut text)?;
        Ok(StatusText(text))
    }
}

/// The text of `<proc_root>/<pid>/status`.
pub(crate) fn status_text(proc_root: &Path, pid: i32) -> ProcResult<String> {
    let process = Process::new_with_root(proc_root.join(pid.to_string()))?;
    let StatusText(text) = process.read("status")?;
    Ok(text)
}

/// What a scan keeps of one process of the container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Member {
    pub pid: i32,
    pub ppid: i32,
    pub start_time: u64,
    /// A zombie (`Z`) or dead (`X`) process: in the cgroup, but not signallable.
    pub dead: bool,
}

/// The facts about one process that decide whether it is a container's main process.
pub(crate) struct Observed {
    pub start_time: u64,
    pub dead: bool,
    pub in_container: bool,
}

/// Opens `<proc_root>/<pid>` and reads what verification needs: `stat` and `cgroup`
/// (two small reads).
pub(crate) fn observe(
    proc_root: &Path,
    pid: i32,
    pod_uid: &str,
    container: &ContainerId,
) -> ProcResult<Observed> {
    let process = Process::new_with_root(proc_root.join(pid.to_string()))?;
    let stat = process.stat()?;
    let in_container = in_container(&process, pod_uid, container)?;
    Ok(Observed {
        start_time: stat.starttime,
        dead: matches!(stat.state, 'Z' | 'X'),
        in_container,
    })
}

/// Any cgroup line of `process` names this pod's container (not its conmon).
fn in_container(process: &Process, pod_uid: &str, container: &ContainerId) -> ProcResult<bool> {
    let CgroupText(text) = process.read("cgroup")?;
    Ok(cgroup::parse_proc_cgroup(&text)
        .iter()
        .any(|line| cgroup::matches(&line.path, pod_uid, container)))
}

/// Every process under `proc_root` in the container's cgroup. Processes that vanish or
/// cannot be read mid-scan are skipped (normal on a busy node).
pub(crate) fn members(
    proc_root: &Path,
    pod_uid: &str,
    container: &ContainerId,
) -> ProcResult<Vec<Member>> {
    let mut found = Vec::new();
    for process in procfs::process::all_processes_with_root(proc_root)? {
        let Ok(process) = process else { continue };
        match member(&process, pod_uid, container) {
            Ok(Some(m)) => found.push(m),
            Ok(None) => {}
            Err(ProcError::NotFound(_)) => {}
            Err(err) => tracing::debug!(pid = process.pid, %err, "skipping unreadable process"),
        }
    }
    Ok(found)
}

/// One pass over the proc root for many containers at once: `(pod uid, container id)` →
/// its processes. `wanted` holds normalised pod UIDs and bare container IDs.
pub(crate) fn members_of_many(
    proc_root: &Path,
    wanted: &std::collections::HashSet<(String, String)>,
) -> ProcResult<std::collections::HashMap<(String, String), Vec<Member>>> {
    let mut found: std::collections::HashMap<(String, String), Vec<Member>> = Default::default();
    for process in procfs::process::all_processes_with_root(proc_root)? {
        let Ok(process) = process else { continue };
        let Ok(CgroupText(text)) = process.read::<_, CgroupText>("cgroup") else {
            continue;
        };
        let key = cgroup::parse_proc_cgroup(&text).iter().find_map(|line| {
            let c = cgroup::container_of(&line.path)?;
            let key = (c.pod_uid, c.container_id);
            (!c.conmon && wanted.contains(&key)).then_some(key)
        });
        let Some(key) = key else { continue };
        let Ok(stat) = process.stat() else { continue };
        found.entry(key).or_default().push(Member {
            pid: process.pid,
            ppid: stat.ppid,
            start_time: stat.starttime,
            dead: matches!(stat.state, 'Z' | 'X'),
        });
    }
    Ok(found)
}

fn member(process: &Process, pod_uid: &str, container: &ContainerId) -> ProcResult<Option<Member>> {
    // The cgroup first: most processes are not in the container and need no stat read.
    if !in_container(process, pod_uid, container)? {
        return Ok(None);
    }
    let stat = process.stat()?;
    Ok(Some(Member {
        pid: process.pid,
        ppid: stat.ppid,
        start_time: stat.starttime,
        dead: matches!(stat.state, 'Z' | 'X'),
    }))
}

/// The main process among a container's processes: a live one whose parent is not in
/// the container (the runtime shim or conmon is), the oldest if several are (a
/// `kubectl exec` session also has the shim as parent).
pub(crate) fn choose_main(members: &[Member]) -> Option<MainProcess> {
    members
        .iter()
        .filter(|m| !m.dead && !members.iter().any(|p| p.pid == m.ppid))
        .min_by_key(|m| (m.start_time, m.pid))
        .map(|m| MainProcess {
            pid: m.pid,
            start_time: m.start_time,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pid: i32, ppid: i32, start_time: u64) -> Member {
        Member {
            pid,
            ppid,
            start_time,
            dead: false,
        }
    }

    #[test]
    fn the_oldest_process_with_a_parent_outside_wins() {
        let members = [
            m(20, 10, 500), // a child of the main process
            m(10, 1, 100),  // main: parent (the shim) outside
            m(30, 1, 900),  // kubectl exec: parent outside, younger
        ];
        assert_eq!(
            choose_main(&members),
            Some(MainProcess {
                pid: 10,
                start_time: 100
            })
        );
    }

    #[test]
    fn zombies_and_children_are_never_main() {
        let zombie = Member {
            dead: true,
            ..m(10, 1, 100)
        };
        // The zombie still parents its child: the child is not main either.
        assert_eq!(choose_main(&[zombie, m(20, 10, 200)]), None);
        assert_eq!(choose_main(&[]), None);
    }
}
