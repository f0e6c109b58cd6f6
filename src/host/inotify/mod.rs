//! The inotify volume watcher: notices the kubelet's atomic `..data` swap in every
//! configMap, secret and projected volume of the node.
//!
//! Watches `<root>/pods`, each pod directory, each `volumes/` directory, the plugin
//! directories `kubernetes.io~{configmap,secret,projected}` and every volume directory in
//! them. New directories are watched first and listed second, so nothing written in
//! between is missed. Secret and projected volumes get a tmpfs mounted on them after the
//! directory exists: a mount table change re-arms every volume whose directory became a
//! new inode (see node-facts §1).

mod book;
mod error;
mod mounts;
mod node;
mod react;
mod tree;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use inotify::Inotify;
use tokio::io::unix::AsyncFd;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tracing::warn;

pub use error::WatchError;
pub(crate) use node::volume_path;
pub use tree::MAX_VOLUMES_PER_POD;

use crate::core::model::VolumeKey;
use mounts::{mount_change, MountTable, MOUNTINFO};
use node::Node;
use tree::Tree;

/// Why the agent should look at a volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LookCause {
    /// The volume was seen for the first time (at start or when it appeared).
    Discovered,
    /// The kubelet swapped `..data` (`IN_MOVED_TO ..data`).
    Swap,
    /// The volume directory became another inode (a tmpfs was mounted or unmounted on it,
    /// or it was recreated); the watch now follows the new one.
    Remounted,
    /// After a queue overflow, or periodically for volumes that could not be watched.
    Rescan,
    /// A file of a CSI volume was written in place: looked at once the writes have settled
    /// (`--csi-settle`).
    Written,
}

/// What the watcher reports.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WatchEvent {
    /// Look at this volume's `..data` now (the agent hashes it and compares with what it saw).
    Look { key: VolumeKey, cause: LookCause },
    /// The volume directory is gone.
    VolumeGone(VolumeKey),
    /// The pod directory is gone. Each of its volumes still known got a `VolumeGone` first.
    PodGone { pod_uid: Arc<str> },
    /// The kernel queue overflowed; a full rescan follows as `Look { cause: Rescan }` events.
    Overflow,
    /// The pod has more than `max` volumes ([`MAX_VOLUMES_PER_POD`]): `key`, the first one
    /// past it, and every later one are not watched. Once per pod.
    TooManyVolumes { key: VolumeKey, max: usize },
}

/// Counters for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchStats {
    /// inotify watches held (the pods directory included).
    pub watches: usize,
    /// Pods known.
    pub pods: usize,
    /// Volumes known (watched or not).
    pub volumes: usize,
    /// Volumes that could not be watched; they get `Look { Rescan }` periodically.
    pub unwatched_volumes: usize,
    /// Kernel queue overflows so far.
    pub overflows: u64,
    /// `inotify_add_watch` calls refused by the watch limit (`ENOSPC`) so far.
    pub watch_limit_errors: u64,
}

/// Tuning of the watcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatcherOptions {
    /// How often volumes that could not be watched (`ENOSPC`) are looked at again (and
    /// their watches retried). Also the mount check period if the mount table cannot be
    /// watched. Must not be zero.
    pub rescan_interval: Duration,
    /// The CSI drivers whose inline volumes are watched (`--csi-drivers`); a volume of any
    /// other driver is never watched.
    pub csi_drivers: Vec<String>,
}

/// The CSI drivers watched unless `--csi-drivers` says otherwise: the Secrets Store CSI
/// driver and cert-manager's csi-driver and csi-driver-spiffe (docs/csi.md).
pub const DEFAULT_CSI_DRIVERS: [&str; 3] = [
    "secrets-store.csi.k8s.io",
    "csi.cert-manager.io",
    "spiffe.csi.cert-manager.io",
];

impl Default for WatcherOptions {
    fn default() -> Self {
        Self {
            rescan_interval: Duration::from_secs(30),
            csi_drivers: DEFAULT_CSI_DRIVERS.map(str::to_owned).to_vec(),
        }
    }
}

/// Largest number of `read`s of the inotify fd per batch, so a flood cannot starve callers.
const MAX_READS_PER_BATCH: usize = 16;

/// `struct inotify_event` without its name (16 bytes).
const INOTIFY_EVENT_BYTES: usize = std::mem::size_of::<libc::inotify_event>();
/// The largest inotify record: the header and a name of `NAME_MAX` (255) bytes with its NUL,
/// padded.
const MAX_EVENT_BYTES: usize =
    INOTIFY_EVENT_BYTES + (255 + 1usize).next_multiple_of(INOTIFY_EVENT_BYTES);

/// The bytes one event took in the read buffer. `inotify_read` copies events while the next
/// one fits (kernel `fs/notify/inotify/inotify_user.c`: `copy_event_to_user` writes the
/// 16-byte header and the name padded to `round_event_name_len`, i.e. `roundup(len + 1,
/// sizeof(struct inotify_event))`): a read that left room for the largest record emptied
/// the queue, and a further read would fail with EAGAIN. Tokio's own sockets clear their
/// readiness after a short read the same way (`PollEvented::poll_read`).
fn event_bytes(name: Option<&std::ffi::OsStr>) -> usize {
    INOTIFY_EVENT_BYTES + name.map_or(0, |n| (n.len() + 1).next_multiple_of(INOTIFY_EVENT_BYTES))
}

/// Read buffer: room for several hundred events.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Watches the projected volumes of every pod under `<kubelet-root>/pods`.
pub struct VolumeWatcher {
    inotify: AsyncFd<Inotify>,
    tree: Tree<inotify::Watches>,
    mounts: Option<MountTable>,
    rescan: Interval,
    buffer: Vec<u8>,
}

impl std::fmt::Debug for VolumeWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeWatcher")
            .field("pods_dir", &self.tree.pods_dir())
            .field("stats", &self.stats())
            .finish()
    }
}

impl VolumeWatcher {
    /// Errors clearly if `<kubelet_root>/pods` is missing or unreadable. Arms every watch for
    /// what already exists and queues `Look { Discovered }` for every existing volume.
    ///
    /// Must be called inside a Tokio runtime with I/O and time enabled.
    pub fn new(kubelet_root: &Path, opts: WatcherOptions) -> Result<Self, WatchError> {
        if opts.rescan_interval.is_zero() {
            return Err(WatchError::ZeroRescanInterval);
        }
        tokio::runtime::Handle::try_current().map_err(|_| WatchError::NoRuntime)?;
        let pods_dir = kubelet_root.join("pods");
        let meta = std::fs::metadata(&pods_dir).map_err(|source| WatchError::PodsDir {
            path: pods_dir.clone(),
            source,
        })?;
        if !meta.is_dir() {
            let source = std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory");
            return Err(WatchError::PodsDir {
                path: pods_dir,
                source,
            });
        }
        std::fs::read_dir(&pods_dir).map_err(|source| WatchError::PodsDir {
            path: pods_dir.clone(),
            source,
        })?;

        let inotify = Inotify::init().map_err(WatchError::Init)?;
        let watches = inotify.watches();
        // SAFETY: the `Inotify` (owned by the `AsyncFd`) and the `Watches` handle share one
        // reference-counted fd guard; the fd is closed only when both are dropped, and
        // `as_raw_fd` always returns that same descriptor.
        let inotify =
            unsafe { AsyncFd::register(inotify) }.map_err(|e| WatchError::Register(e.into()))?;
        let mut tree = Tree::new(pods_dir.clone(), watches);
        tree.follow_csi_drivers(opts.csi_drivers.clone());
        tree.arm_root().map_err(|source| WatchError::WatchRoot {
            path: pods_dir,
            source,
        })?;
        tree.discover_all();

        let mounts = match MountTable::open(Path::new(MOUNTINFO)) {
            Ok(table) => Some(table),
            Err(e) => {
                warn!(error = %e, "cannot watch the mount table; tmpfs mounts on volumes are checked every rescan interval");
                None
            }
        };
        let mut rescan =
            tokio::time::interval_at(Instant::now() + opts.rescan_interval, opts.rescan_interval);
        rescan.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Ok(Self {
            inotify,
            tree,
            mounts,
            rescan,
            buffer: vec![0; READ_BUFFER_BYTES],
        })
    }

    /// Next batch of events (never empty). Cancel-safe: it only awaits readiness; events
    /// read from the kernel are processed and queued before the next await.
    pub async fn next_batch(&mut self) -> Result<Vec<WatchEvent>, WatchError> {
        loop {
            if self.tree.has_events() {
                return Ok(self.tree.take_events());
            }
            if self.tree.root_gone() {
                return Err(WatchError::RootGone {
                    path: self.tree.pods_dir().to_path_buf(),
                });
            }
            let periodic = self.tree.book().has_unwatched() || self.mounts.is_none();
            // Unbiased: a flood of inotify events must not starve mount notifications.
            tokio::select! {
                ready = self.inotify.readable_mut() => {
                    let mut guard = ready.map_err(WatchError::Read)?;
                    for _ in 0..MAX_READS_PER_BATCH {
                        let buffer = &mut self.buffer;
                        let tree = &mut self.tree;
                        match guard.try_io(|fd| {
                            let events = fd.get_mut().read_events(buffer)?;
                            let mut bytes = 0;
                            for event in events {
                                bytes += event_bytes(event.name);
                                tree.on_event(&event.wd, event.mask, event.name);
                            }
                            Ok(bytes)
                        }) {
                            Ok(Ok(bytes)) if bytes + MAX_EVENT_BYTES <= READ_BUFFER_BYTES => {
                                // A short read: the queue was empty (below). Readiness is
                                // cleared without a read that would only say EAGAIN.
                                guard.clear_ready();
                                break;
                            }
                            Ok(Ok(_)) => {}
                            Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            Ok(Err(e)) => return Err(WatchError::Read(e)),
                            Err(_would_block) => break,
                        }
                    }
                }
                changed = mount_change(self.mounts.as_ref()) => {
                    match changed {
                        Ok(()) => self.tree.check_remounts(),
                        Err(e) => {
                            warn!(error = %e, "mount table notifications failed; falling back to periodic checks");
                            self.mounts = None;
                        }
                    }
                }
                _ = self.rescan.tick(), if periodic => {
                    if self.mounts.is_none() {
                        self.tree.check_remounts();
                    }
                    self.tree.rescan_unwatched();
                }
            }
        }
    }

    /// Current counters.
    pub fn stats(&self) -> WatchStats {
        let book = self.tree.book();
        WatchStats {
            watches: book.watch_count(),
            pods: book.pod_count(),
            volumes: book.volume_count(),
            unwatched_volumes: book.unwatched_volume_count(),
            overflows: self.tree.overflows(),
            watch_limit_errors: self.tree.watch_limit_errors(),
        }
    }

    /// The directory of a volume: `<kubelet-root>/pods/<uid>/volumes/<plugin dir>/<volume>`.
    pub fn volume_dir(&self, key: &VolumeKey) -> PathBuf {
        volume_path(self.tree.pods_dir(), key)
    }

    /// Every volume known (watched or not), in order.
    pub fn volumes(&self) -> Vec<VolumeKey> {
        self.tree.book().volumes().cloned().collect()
    }

    /// Whether a volume currently has an inotify watch (false for unknown volumes and for
    /// volumes polled because the watch limit was reached).
    pub fn is_watched(&self, key: &VolumeKey) -> bool {
        self.tree.book().wd_of(&Node::Volume(key.clone())).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// The kernel's own record sizes, read raw from a real inotify fd: a name of 1, 6, 15,
    /// 16 and 255 bytes (the pad boundaries and `NAME_MAX`).
    #[test]
    fn event_bytes_matches_what_the_kernel_copies() {
        let dir = tempfile::tempdir().unwrap();
        let inotify = inotify::Inotify::init().unwrap();
        inotify
            .watches()
            .add(dir.path(), inotify::WatchMask::CREATE)
            .unwrap();
        let names = [
            "a".to_string(),
            "..data".to_string(),
            "x".repeat(15),
            "y".repeat(16),
            "z".repeat(255),
        ];
        for name in &names {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let mut buf = vec![0u8; READ_BUFFER_BYTES];
        // SAFETY: a plain read(2) into a buffer of the length given.
        let n = unsafe { libc::read(inotify.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        let expected: usize = names
            .iter()
            .map(|n| event_bytes(Some(std::ffi::OsStr::new(n))))
            .sum();
        assert_eq!(n, expected as isize);
        assert_eq!(event_bytes(None), INOTIFY_EVENT_BYTES);
        assert_eq!(
            MAX_EVENT_BYTES,
            event_bytes(Some(std::ffi::OsStr::new(&names[4])))
        );
    }
}
