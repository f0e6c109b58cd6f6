//! Test helpers for the volume watcher: a tiny kubelet volume writer (the AtomicWriter
//! sequence of node-facts §2), event collection with deadlines, and root-only guards.
#![allow(dead_code)]

#[allow(unused_imports)] // not every test binary waits
pub use test_support::wait::*;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reloadlet::core::model::{VolumeKey, VolumePlugin};
use reloadlet::host::inotify::{LookCause, VolumeWatcher, WatchEvent};

/// A fake kubelet root in a temp dir.
pub struct Kubelet {
    dir: tempfile::TempDir,
}

impl Kubelet {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir(dir.path().join("pods")).expect("mkdir pods");
        Self { dir }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.root().join("pods").join(uid)
    }

    pub fn volume_dir(&self, key: &VolumeKey) -> PathBuf {
        self.pod_dir(&key.pod_uid)
            .join("volumes")
            .join(key.plugin.dir_name())
            .join(&*key.volume)
    }

    /// Creates the volume dir (mode 0777 like the kubelet) with its parents.
    pub fn mkdir_volume(&self, key: &VolumeKey) -> PathBuf {
        let dir = self.volume_dir(key);
        fs::create_dir_all(&dir).expect("mkdir volume");
        dir
    }

    /// Creates the volume dir and writes `files` into it.
    pub fn add_volume(&self, key: &VolumeKey, files: &[(&str, &str)]) -> PathBuf {
        let dir = self.mkdir_volume(key);
        atomic_write(&dir, files);
        dir
    }
}

/// The kubelet AtomicWriter: mkdtemp `..<ts>`, write files, symlink `..data_tmp`, rename it
/// to `..data`, link missing top-level names, remove the old timestamped dir.
pub fn atomic_write(dir: &Path, files: &[(&str, &str)]) {
    let old = fs::read_link(dir.join("..data")).ok();
    let ts_name = loop {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!("..2026_11_22_06_00_00.{}", nanos % 10_000_000_000);
        match fs::create_dir(dir.join(&name)) {
            Ok(()) => break name,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("mkdtemp in {}: {e}", dir.display()),
        }
    };
    for (name, content) in files {
        let path = dir.join(&ts_name).join(name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("mkdir payload dir");
        }
        fs::write(&path, content).expect("write payload");
    }
    symlink(&ts_name, dir.join("..data_tmp")).expect("symlink ..data_tmp");
    fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("rename ..data");
    for (name, _) in files {
        let first = name.split('/').next().unwrap_or(name);
        let link = dir.join(first);
        if fs::symlink_metadata(&link).is_err() {
            symlink(Path::new("..data").join(first), &link).expect("symlink key");
        }
    }
    if let Some(old) = old {
        let _ = fs::remove_dir_all(dir.join(old));
    }
}

pub fn key(uid: &str, plugin: VolumePlugin, volume: &str) -> VolumeKey {
    VolumeKey {
        pod_uid: uid.into(),
        plugin,
        volume: volume.into(),
    }
}

pub fn look(key: &VolumeKey, cause: LookCause) -> WatchEvent {
    WatchEvent::Look {
        key: key.clone(),
        cause,
    }
}

/// Reads batches until `done(all events so far)` or the deadline (then panics with them).
pub async fn collect_until(
    watcher: &mut VolumeWatcher,
    within: Duration,
    mut done: impl FnMut(&[WatchEvent]) -> bool,
) -> Vec<WatchEvent> {
    let deadline = tokio::time::Instant::now() + within;
    let mut all = Vec::new();
    while !done(&all) {
        match tokio::time::timeout_at(deadline, watcher.next_batch()).await {
            Ok(Ok(batch)) => {
                assert!(!batch.is_empty(), "next_batch returned an empty batch");
                all.extend(batch);
            }
            Ok(Err(e)) => panic!("watcher failed: {e}; events so far: {all:#?}"),
            Err(_) => panic!("deadline passed; events so far: {all:#?}"),
        }
    }
    all
}

/// Reads until `event` has been seen; returns everything read (including it).
pub async fn collect_through(watcher: &mut VolumeWatcher, event: &WatchEvent) -> Vec<WatchEvent> {
    collect_until(watcher, Duration::from_secs(10), |all| all.contains(event)).await
}

pub fn count(events: &[WatchEvent], event: &WatchEvent) -> usize {
    events.iter().filter(|e| *e == event).count()
}

/// A tmpfs mounted on a directory; unmounted (lazily) on drop.
pub struct TmpfsMount {
    path: PathBuf,
    mounted: bool,
}

impl TmpfsMount {
    pub fn mount(path: &Path) -> Self {
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m,mode=0777", "tmpfs"])
            .arg(path)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mount tmpfs on {} (needs root)",
            path.display()
        );
        Self {
            path: path.to_path_buf(),
            mounted: true,
        }
    }

    pub fn unmount(&mut self) {
        if self.mounted {
            let status = Command::new("umount")
                .arg(&self.path)
                .status()
                .expect("run umount");
            assert!(status.success(), "umount {}", self.path.display());
            self.mounted = false;
        }
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
    }
}

/// Sets a sysctl file and restores its old value on drop.
pub struct SysctlGuard {
    path: PathBuf,
    old: String,
}

impl SysctlGuard {
    pub fn set(path: &str, value: &str) -> Self {
        let old = fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
        fs::write(path, value).unwrap_or_else(|e| panic!("write {path}: {e}"));
        Self {
            path: path.into(),
            old: old.trim().to_owned(),
        }
    }
}

impl Drop for SysctlGuard {
    fn drop(&mut self) {
        if let Err(e) = fs::write(&self.path, &self.old) {
            eprintln!("failed to restore {}: {e}", self.path.display());
        }
    }
}
