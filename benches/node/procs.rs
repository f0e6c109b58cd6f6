//! What the benchmark reads about processes from /proc: memory, wakeups, process groups,
//! inotify instances; and the temporary raise of `fs.inotify.max_user_instances`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A field of `/proc/<pid>/status` (or `smaps_rollup`) in kB, e.g. `VmRSS:`.
fn kib(file: &str, field: &str) -> Option<u64> {
    std::fs::read_to_string(file).ok()?.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
    })
}

/// Memory of a set of processes: the sum of their RSS (shared pages counted in each
/// process, what `ps` and `kubectl top` add up) and of their PSS (shared pages divided among
/// the processes sharing them).
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory {
    pub rss_kib: u64,
    pub pss_kib: u64,
    pub procs: usize,
}

impl Memory {
    pub fn of(pids: &[i32]) -> Memory {
        let mut m = Memory::default();
        for pid in pids {
            if let Some(rss) = kib(&format!("/proc/{pid}/status"), "VmRSS:") {
                m.rss_kib += rss;
                m.pss_kib += kib(&format!("/proc/{pid}/smaps_rollup"), "Pss:").unwrap_or(0);
                m.procs += 1;
            }
        }
        m
    }

    pub fn max(self, other: Memory) -> Memory {
        if other.rss_kib > self.rss_kib {
            other
        } else {
            self
        }
    }

    pub fn rss_mib(&self) -> f64 {
        self.rss_kib as f64 / 1024.0
    }

    pub fn pss_mib(&self) -> f64 {
        self.pss_kib as f64 / 1024.0
    }
}

/// With `BENCH_SMAPS_DIR` set, a copy of `/proc/<pid>/smaps` there as `<name>.smaps`: where
/// the memory is, mapping by mapping (docs/architecture.md).
pub fn keep_smaps(pid: i32, name: &str) {
    if let Some(dir) = std::env::var_os("BENCH_SMAPS_DIR") {
        let to = PathBuf::from(dir).join(format!("{name}.smaps"));
        let _ = std::fs::copy(format!("/proc/{pid}/smaps"), to);
    }
}

/// CPU time (user + system, every thread) of the processes `pids`, in ms: fields 14 and 15
/// of `/proc/<pid>/stat`, in USER_HZ (100) ticks (proc(5)).
pub fn cpu_ms(pids: &[i32]) -> u64 {
    pids.iter()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // Fields 14 and 15: the 12th and 13th after the command.
            let ticks: u64 = nodesim::proc_stat::fields_after_comm(&stat)?
                .skip(11)
                .take(2)
                .filter_map(|v| v.parse::<u64>().ok())
                .sum();
            Some(ticks * 10)
        })
        .sum()
}

/// Peak RSS (`VmHWM`) of one process, in MiB.
pub fn peak_rss_mib(pid: i32) -> f64 {
    kib(&format!("/proc/{pid}/status"), "VmHWM:").unwrap_or(0) as f64 / 1024.0
}

/// Per thread of `pid`, the times it went to sleep and was woken: the sum of
/// `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` in `/proc/<pid>/task/<tid>`.
pub fn wakeups(pid: i32) -> std::collections::HashMap<String, u64> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Default::default();
    };
    tasks
        .flatten()
        .map(|t| {
            let status = t.path().join("status");
            let status = status.to_string_lossy();
            let n = kib(&status, "voluntary_ctxt_switches:").unwrap_or(0)
                + kib(&status, "nonvoluntary_ctxt_switches:").unwrap_or(0);
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            let tid = t.file_name().to_string_lossy().into_owned();
            (format!("{tid} {}", comm.trim_end()), n)
        })
        .collect()
}

/// Waits until no thread of `pid` has woken for `quiet` (its start-up work — hashing every
/// volume, the first state write, the pass over /proc — done), polling `/proc` only, for at
/// most `limit`. How long it took, or `None` at the limit. A thread's switches count its
/// wake-ups: it is switched out each time it sleeps (`nvcsw`) or is preempted (`nivcsw`),
/// printed by the kernel's `fs/proc/array.c` (`task_context_switch_counts`).
pub fn settle(pid: i32, quiet: Duration, limit: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    let mut last = wakeups(pid);
    loop {
        std::thread::sleep(quiet); // one window of the stillness asked for
        let now = wakeups(pid);
        if wakeups_between(&last, &now).0 == 0 {
            return Some(t0.elapsed());
        }
        if t0.elapsed() >= limit {
            return None;
        }
        last = now;
    }
}

/// Wakeups between two [`wakeups`] samples: the growth of each thread seen in both, all of
/// a thread that started in between. A thread that ended in between is not counted (its
/// last wakeups are lost), but reported in the second value. The third names the threads
/// that woke (`<tid> <name>: <wakeups>`) and those that ended.
pub fn wakeups_between(
    before: &std::collections::HashMap<String, u64>,
    after: &std::collections::HashMap<String, u64>,
) -> (u64, usize, String) {
    let mut who = Vec::new();
    let mut woke = 0;
    for (tid, n) in after {
        let grew = n.saturating_sub(before.get(tid).copied().unwrap_or(0));
        if grew > 0 {
            who.push(format!("{tid}: {grew}"));
        }
        woke += grew;
    }
    let ended: Vec<&String> = before.keys().filter(|t| !after.contains_key(*t)).collect();
    who.extend(ended.iter().map(|t| format!("{t}: ended")));
    who.sort();
    (woke, ended.len(), who.join(", "))
}

/// Every process whose process group is one of `pgids`.
pub fn in_process_groups(pgids: &[i32]) -> Vec<i32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let pgids: std::collections::HashSet<i32> = pgids.iter().copied().collect();
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            // field 5 of /proc/<pid>/stat, after the parenthesised comm
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    nodesim::proc_stat::fields_after_comm(&s)?
                        .nth(2)?
                        .parse::<i32>()
                        .ok()
                })
                .is_some_and(|g| pgids.contains(&g))
        })
        .collect()
}

/// inotify fds held by root's processes (an upper bound on root's inotify instances: an fd
/// shared by two processes is counted twice).
pub fn root_inotify_fds() -> usize {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0;
    };
    procs
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter(|e| {
            use std::os::unix::fs::MetadataExt;
            e.metadata().is_ok_and(|m| m.uid() == 0)
        })
        .map(|e| {
            std::fs::read_dir(e.path().join("fd"))
                .map(|fds| {
                    fds.flatten()
                        .filter(|fd| {
                            std::fs::read_link(fd.path())
                                .is_ok_and(|t| t.as_os_str() == "anon_inode:inotify")
                        })
                        .count()
                })
                .unwrap_or(0)
        })
        .sum()
}

pub const MAX_USER_INSTANCES: &str = "/proc/sys/fs/inotify/max_user_instances";

pub fn max_user_instances() -> usize {
    std::fs::read_to_string(MAX_USER_INSTANCES)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(128)
}

/// A sysctl raised for the life of this value, restored on drop (also on a panic).
pub struct Raised {
    path: PathBuf,
    original: String,
}

impl Raised {
    pub fn to(path: &str, value: usize) -> std::io::Result<Raised> {
        let original = std::fs::read_to_string(path)?.trim().to_owned();
        std::fs::write(path, value.to_string())?;
        Ok(Raised {
            path: path.into(),
            original,
        })
    }

    pub fn original(&self) -> &str {
        &self.original
    }
}

impl Drop for Raised {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(&self.path, &self.original) {
            eprintln!(
                "could not restore {} to {}: {e}",
                self.path.display(),
                self.original
            );
        }
    }
}
