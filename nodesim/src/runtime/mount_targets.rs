//! Bind-mount targets on the host, shared by every simulated runtime in the process.
//!
//! A simulated container's root is the host's, so a `mountPath` such as `/etc/app` is a
//! host path that the container init bind-mounts onto inside its private mount namespace.
//! Two nodes in one test binary (tests run in parallel) may start pods mounting the same
//! path at the same moment: each checking "missing?" and then `mkdir`-ing it raced (one got
//! `EEXIST` and its pod never started), and the first pod to stop removed a target another
//! container was about to mount onto. The host's file system is shared process-wide state,
//! so its bookkeeping is too: one lock, a count of the containers using each target, and
//! the paths the simulator created; the last user out removes what was created for it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[derive(Default)]
struct Registry {
    /// Containers (of any simulated runtime in this process) using each target.
    users: BTreeMap<PathBuf, usize>,
    /// Paths the simulator created (targets and their missing parents).
    created: BTreeSet<PathBuf>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    users: BTreeMap::new(),
    created: BTreeSet::new(),
});

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A failure to create a target: what was done to which path.
#[derive(Debug)]
pub struct TargetError {
    pub op: &'static str,
    pub path: PathBuf,
    pub source: io::Error,
}

/// Makes sure `target` exists (a directory, or an empty file when `source` is a file) and
/// counts one more user of it. Pair with [`release`].
pub fn acquire(source: &Path, target: &Path) -> Result<(), TargetError> {
    let mut reg = registry();
    if fs::symlink_metadata(target).is_err() {
        let is_dir = fs::metadata(source)
            .map_err(|source_err| TargetError {
                op: "stat",
                path: source.to_owned(),
                source: source_err,
            })?
            .is_dir();
        let mut missing = Vec::new();
        let mut p = target.parent().unwrap_or(Path::new("/"));
        while fs::symlink_metadata(p).is_err() {
            missing.push(p.to_owned());
            match p.parent() {
                Some(up) => p = up,
                None => break,
            }
        }
        for dir in missing.into_iter().rev() {
            create(&mut reg, &dir, true)?;
        }
        create(&mut reg, target, is_dir)?;
    }
    *reg.users.entry(target.to_owned()).or_default() += 1;
    Ok(())
}

/// Creates `path`; one made meanwhile by another process is left as it is, not ours.
fn create(reg: &mut Registry, path: &Path, dir: bool) -> Result<(), TargetError> {
    let made = if dir {
        fs::create_dir(path)
    } else {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map(drop)
    };
    match made {
        Ok(()) => {
            reg.created.insert(path.to_owned());
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(TargetError {
            op: if dir { "mkdir" } else { "create" },
            path: path.to_owned(),
            source: e,
        }),
    }
}

/// One user less of `target`. The last one out removes what the simulator created for it —
/// the target and then its created parents, deepest first — unless another target in use
/// lies below, or something is mounted there in any mount namespace on the host (a process
/// outside this one).
pub fn release(target: &Path) {
    let mut reg = registry();
    match reg.users.get_mut(target) {
        Some(n) if *n > 1 => {
            *n -= 1;
            return;
        }
        Some(_) => {
            reg.users.remove(target);
        }
        None => return,
    }
    for path in target.ancestors() {
        if !reg.created.contains(path) {
            break;
        }
        if reg.users.keys().any(|t| t.starts_with(path)) || mounted_in_any_namespace(path) {
            break;
        }
        let removed = match fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => fs::remove_dir(path),
            Ok(_) => fs::remove_file(path),
            Err(e) => Err(e),
        };
        if removed.is_err() {
            break;
        }
        reg.created.remove(path);
    }
}

/// Whether `path` or something below it is a mount point in any process's mount namespace.
fn mounted_in_any_namespace(path: &Path) -> bool {
    let Ok(procs) = fs::read_dir("/proc") else {
        return false;
    };
    let mut seen = std::collections::HashSet::new();
    for entry in procs.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(ns) = fs::read_link(entry.path().join("ns/mnt")) else {
            continue;
        };
        if !seen.insert(ns) {
            continue;
        }
        let Ok(text) = fs::read_to_string(entry.path().join("mountinfo")) else {
            continue;
        };
        if text
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .any(|mp| Path::new(mp).starts_with(path))
        {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_users_share_a_target_and_the_last_one_out_removes_it() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("volume");
        fs::create_dir(&source).unwrap();
        let target = dir.path().join("etc/app");
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (source, target) = (source.clone(), target.clone());
                std::thread::spawn(move || acquire(&source, &target))
            })
            .collect();
        for t in threads {
            t.join().unwrap().expect("every user gets the target");
        }
        assert!(target.is_dir());
        for _ in 0..7 {
            release(&target);
            assert!(target.is_dir(), "removed while still in use");
        }
        release(&target);
        assert!(!target.exists(), "the last user out removes the target");
        assert!(!dir.path().join("etc").exists(), "and the parent it made");
        assert!(source.is_dir(), "the source is never touched");
    }

    #[test]
    fn a_path_that_was_there_before_is_never_removed() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("cfg");
        fs::write(&source, "x").unwrap();
        let target = dir.path().join("app.conf");
        fs::write(&target, "keep").unwrap();
        acquire(&source, &target).unwrap();
        release(&target);
        assert_eq!(fs::read_to_string(&target).unwrap(), "keep");
    }
}
