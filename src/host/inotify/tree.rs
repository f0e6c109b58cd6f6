//! Arming watches on the kubelet tree, walking it, and turning inotify events into
//! [`WatchEvent`]s. Synchronous; the kernel side sits behind [`WatchApi`].

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fmt::Debug;
use std::hash::Hash;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use inotify::{EventMask, WatchMask};
use tracing::{debug, error, warn};

use super::book::{Recorded, WatchBook};
use super::node::{Node, CSI_VOL_DATA};
use super::react::{mask_for, react, Reaction};
use super::{LookCause, WatchEvent};
use crate::core::model::{VolumeKey, VolumePlugin};

/// The sysctl that bounds inotify watches per user.
pub(crate) const WATCH_LIMIT_SYSCTL: &str = "fs.inotify.max_user_watches";

/// Adding and removing kernel watches.
pub(crate) trait WatchApi {
    type Wd: Clone + Eq + Hash + Debug;
    fn add(&mut self, path: &Path, mask: WatchMask) -> io::Result<Self::Wd>;
    /// Errors are ignored by callers: the kernel may have dropped the watch already.
    fn remove(&mut self, wd: Self::Wd) -> io::Result<()>;
}

impl WatchApi for inotify::Watches {
    type Wd = inotify::WatchDescriptor;
    fn add(&mut self, path: &Path, mask: WatchMask) -> io::Result<Self::Wd> {
        inotify::Watches::add(self, path, mask)
    }
    fn remove(&mut self, wd: Self::Wd) -> io::Result<()> {
        inotify::Watches::remove(self, wd)
    }
}

/// How a walk reports what it finds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// Normal operation: new volumes are `Discovered`, re-armed ones `Remounted`.
    Live,
    /// A full rescan: found volumes are reported by the caller as `Rescan`.
    Quiet,
}

/// What arming one node ended with.
#[derive(PartialEq, Eq)]
enum Armed {
    Watched,
    Unwatched,
    Missing,
    /// A CSI volume of a driver not followed: never watched.
    Ignored,
}

/// The watched tree: the books plus the kernel watches and the events they produce.
pub(crate) struct Tree<A: WatchApi> {
    pods_dir: PathBuf,
    api: A,
    book: WatchBook<A::Wd>,
    out: Vec<WatchEvent>,
    overflows: u64,
    watch_limit_errors: u64,
    limit_logged: bool,
    root_gone: bool,
    /// The CSI drivers whose volumes are followed (`--csi-drivers`).
    csi_drivers: Vec<String>,
    /// Pods that have more volumes than [`MAX_VOLUMES_PER_POD`] (reported once each).
    crowded_pods: BTreeSet<Arc<str>>,
}

/// The most volumes of one pod that are watched (each is one inotify watch and one volume
/// state). A pod spec may list thousands (only the object's size, ~1.5 MiB, bounds it); the
/// watches of the node's user are shared by every pod (`fs.inotify.max_user_watches`), so one
/// pod must not take them all. The volumes past it are not followed; the pod is told once.
pub const MAX_VOLUMES_PER_POD: usize = 256;

impl<A: WatchApi> Tree<A> {
    pub(crate) fn new(pods_dir: PathBuf, api: A) -> Self {
        Self {
            pods_dir,
            api,
            book: WatchBook::default(),
            out: Vec::new(),
            overflows: 0,
            watch_limit_errors: 0,
            limit_logged: false,
            root_gone: false,
            csi_drivers: Vec::new(),
            crowded_pods: BTreeSet::new(),
        }
    }

    /// Follows the CSI volumes of these drivers (none by default).
    pub(crate) fn follow_csi_drivers(&mut self, drivers: Vec<String>) {
        self.csi_drivers = drivers;
    }

    /// Whether a CSI volume not known yet is of a followed driver, from the `driverName` of
    /// the kubelet's `vol_data.json` beside `mount/` (kubernetes `pkg/volume/csi/csi_plugin.go`,
    /// `NewMounter`: written before `NodePublishVolume` creates the target). Unreadable: not
    /// followed (the file always precedes the mount).
    fn csi_followed(&self, key: &VolumeKey) -> bool {
        let path = Node::CsiDir(key.clone())
            .path(&self.pods_dir)
            .join(CSI_VOL_DATA);
        let driver = std::fs::read(&path).ok().and_then(|bytes| {
            let data: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
            data.get("driverName")?.as_str().map(str::to_owned)
        });
        let followed = driver
            .as_ref()
            .is_some_and(|d| self.csi_drivers.iter().any(|f| f == d));
        if !followed {
            debug!(volume = %key, driver = ?driver, "CSI volume of a driver not followed (--csi-drivers); not watched");
        }
        followed
    }

    pub(crate) fn pods_dir(&self) -> &Path {
        &self.pods_dir
    }

    pub(crate) fn book(&self) -> &WatchBook<A::Wd> {
        &self.book
    }

    pub(crate) fn overflows(&self) -> u64 {
        self.overflows
    }

    pub(crate) fn watch_limit_errors(&self) -> u64 {
        self.watch_limit_errors
    }

    /// True once `<root>/pods` itself is gone or could not be watched again.
    pub(crate) fn root_gone(&self) -> bool {
        self.root_gone
    }

    /// Takes the events produced so far.
    pub(crate) fn take_events(&mut self) -> Vec<WatchEvent> {
        std::mem::take(&mut self.out)
    }

    pub(crate) fn has_events(&self) -> bool {
        !self.out.is_empty()
    }

    /// Arms the root watch. Fails if the pods directory cannot be watched at all.
    pub(crate) fn arm_root(&mut self) -> io::Result<()> {
        let wd = self.api.add(&self.pods_dir, mask_for(&Node::Pods))?;
        self.book.record_armed(Node::Pods, wd);
        Ok(())
    }

    /// Walks everything below the (armed) root, emitting `Discovered` for every volume.
    pub(crate) fn discover_all(&mut self) {
        let mut seen = BTreeSet::new();
        self.scan_children(&Node::Pods, Walk::Live, &mut seen);
    }

    /// Handles one inotify event.
    pub(crate) fn on_event(&mut self, wd: &A::Wd, mask: EventMask, name: Option<&OsStr>) {
        match react(self.book.node_of(wd), mask, name) {
            Reaction::Nothing => {}
            Reaction::Swap(key) => self.out.push(WatchEvent::Look {
                key,
                cause: LookCause::Swap,
            }),
            Reaction::Written(key) => self.out.push(WatchEvent::Look {
                key,
                cause: LookCause::Written,
            }),
            Reaction::Overflow => self.overflow(),
            Reaction::Dropped(node) => {
                self.book.remove_wd(wd);
                self.recheck(node);
            }
            Reaction::Recheck(node) => self.recheck(node),
            Reaction::ChildAppeared(child) => {
                self.arm(child, Walk::Live, &mut BTreeSet::new());
            }
            Reaction::ChildGone(child) => {
                if self.book.is_known(&child) {
                    self.forget(&child);
                }
            }
        }
    }

    /// Looks again at a node whose watch may be stale (mount, deletion, move).
    fn recheck(&mut self, node: Node) {
        if node == Node::Pods {
            if self.arm(Node::Pods, Walk::Live, &mut BTreeSet::new()) != Armed::Watched {
                error!(path = %self.pods_dir.display(), "the kubelet pods directory can no longer be watched");
                self.root_gone = true;
            }
            return;
        }
        if self.book.is_known(&node) {
            self.arm(node, Walk::Live, &mut BTreeSet::new());
        }
    }

    /// The mount table changed: re-arms every volume whose directory is a new inode.
    pub(crate) fn check_remounts(&mut self) {
        for key in self.book.watched_volumes() {
            self.arm(Node::Volume(key), Walk::Live, &mut BTreeSet::new());
        }
    }

    /// Periodic retry of nodes that could not be watched: arm them again (scanning their
    /// children) and send `Look { Rescan }` for each such volume.
    pub(crate) fn rescan_unwatched(&mut self) {
        let nodes = self.book.unwatched();
        let mut seen = BTreeSet::new();
        for node in &nodes {
            // A parent retried earlier in this pass already retried its children.
            if self.book.is_known(node) && !seen.contains(node) {
                self.arm(node.clone(), Walk::Live, &mut seen);
            }
        }
        for node in nodes {
            if let Node::Volume(key) = node {
                if self.book.is_known(&Node::Volume(key.clone())) {
                    self.out.push(WatchEvent::Look {
                        key,
                        cause: LookCause::Rescan,
                    });
                }
            }
        }
    }

    /// `IN_Q_OVERFLOW`: events were lost. Re-walks the whole tree (arming what is missing,
    /// forgetting what is gone) and sends `Look { Rescan }` for every volume.
    fn overflow(&mut self) {
        self.overflows += 1;
        warn!(
            overflows = self.overflows,
            "inotify queue overflowed; rescanning every volume"
        );
        self.out.push(WatchEvent::Overflow);
        let mut seen = BTreeSet::new();
        if self.arm(Node::Pods, Walk::Quiet, &mut seen) != Armed::Watched {
            self.root_gone = true;
            return;
        }
        let stale: Vec<Node> = self
            .book
            .known_nodes()
            .into_iter()
            .filter(|n| !seen.contains(n))
            .collect();
        for node in stale {
            if self.book.is_known(&node) {
                self.forget(&node);
            }
        }
        let looks: Vec<WatchEvent> = self
            .book
            .volumes()
            .map(|key| WatchEvent::Look {
                key: key.clone(),
                cause: LookCause::Rescan,
            })
            .collect();
        self.out.extend(looks);
    }

    /// Watches `node` (watch first, then read its children, so nothing created in between
    /// is missed) and everything below it.
    fn arm(&mut self, node: Node, walk: Walk, seen: &mut BTreeSet<Node>) -> Armed {
        if let Node::Volume(key) = &node {
            if key.plugin == VolumePlugin::Csi
                && !self.book.is_known(&node)
                && !self.csi_followed(key)
            {
                return Armed::Ignored;
            }
        }
        if let Node::Volume(key) = &node {
            if !self.book.is_known(&node)
                && self.book.pod_volume_count(&key.pod_uid) >= MAX_VOLUMES_PER_POD
            {
                if self.crowded_pods.insert(key.pod_uid.clone()) {
                    warn!(volume = %key, max = MAX_VOLUMES_PER_POD, "pod has more volumes than are followed per pod; the rest are not watched");
                    self.out.push(WatchEvent::TooManyVolumes {
                        key: key.clone(),
                        max: MAX_VOLUMES_PER_POD,
                    });
                }
                return Armed::Ignored;
            }
        }
        let path = node.path(&self.pods_dir);
        let armed = match self.api.add(&path, mask_for(&node)) {
            Ok(wd) => self.record(node.clone(), wd, walk),
            Err(e) if is_missing(&e) => {
                if self.book.is_known(&node) {
                    self.forget(&node);
                }
                return Armed::Missing;
            }
            Err(e) => {
                self.add_failed(&node, &path, &e);
                self.mark_unwatched(node.clone(), walk);
                Armed::Unwatched
            }
        };
        seen.insert(node.clone());
        if node.has_children() && !self.scan_children(&node, walk, seen) {
            return Armed::Missing;
        }
        armed
    }

    fn record(&mut self, node: Node, wd: A::Wd, walk: Walk) -> Armed {
        let (outcome, first) = self.book.record_armed(node.clone(), wd);
        match outcome {
            Recorded::Fresh | Recorded::Unchanged => {
                if first {
                    self.discovered(&node, walk);
                }
            }
            Recorded::Replaced(old) => {
                let _ = self.api.remove(old);
                if let (Node::Volume(key), Walk::Live) = (&node, walk) {
                    debug!(volume = %key, "volume directory is a new inode; watch re-armed");
                    self.out.push(WatchEvent::Look {
                        key: key.clone(),
                        cause: LookCause::Remounted,
                    });
                }
            }
            Recorded::Conflict(other) => {
                warn!(node = ?node, other = ?other, "two watched paths share one inode; polling this one instead");
                self.mark_unwatched(node, walk);
                return Armed::Unwatched;
            }
        }
        Armed::Watched
    }

    fn mark_unwatched(&mut self, node: Node, walk: Walk) {
        let (old, first) = self.book.record_unwatched(node.clone());
        if let Some(old) = old {
            let _ = self.api.remove(old);
        }
        if first {
            self.discovered(&node, walk);
        }
    }

    fn discovered(&mut self, node: &Node, walk: Walk) {
        if let (Node::Volume(key), Walk::Live) = (node, walk) {
            self.out.push(WatchEvent::Look {
                key: key.clone(),
                cause: LookCause::Discovered,
            });
        }
    }

    fn add_failed(&mut self, node: &Node, path: &Path, e: &io::Error) {
        if e.raw_os_error() == Some(libc::ENOSPC) {
            self.watch_limit_errors += 1;
            if !self.limit_logged {
                self.limit_logged = true;
                error!(
                    path = %path.display(),
                    sysctl = WATCH_LIMIT_SYSCTL,
                    "inotify watch limit reached: raise {WATCH_LIMIT_SYSCTL}; volumes that cannot be watched are rescanned periodically"
                );
            }
        } else {
            warn!(path = %path.display(), node = ?node, error = %e, "cannot watch directory; it will be rescanned periodically");
        }
    }

    /// Arms the followed children of `node`. False when `node` itself vanished.
    fn scan_children(&mut self, node: &Node, walk: Walk, seen: &mut BTreeSet<Node>) -> bool {
        let path = node.path(&self.pods_dir);
        let entries = match std::fs::read_dir(&path) {
            Ok(entries) => entries,
            Err(e) if is_missing(&e) => {
                if *node == Node::Pods {
                    self.root_gone = true;
                } else if self.book.is_known(node) {
                    self.forget(node);
                }
                return false;
            }
            Err(e) => {
                warn!(path = %path.display(), error = %e, "cannot list directory");
                return true;
            }
        };
        for entry in entries.flatten() {
            let Some(child) = entry.file_name().to_str().and_then(|name| node.child(name)) else {
                continue;
            };
            let is_dir = match entry.file_type() {
                Ok(t) => t.is_dir(),
                Err(_) => continue,
            };
            if is_dir {
                self.arm(child, walk, seen);
            }
        }
        true
    }

    /// Forgets a subtree: removes its watches and reports its volumes and pod as gone.
    fn forget(&mut self, node: &Node) {
        if *node == Node::Pods {
            self.root_gone = true;
        }
        let gone = self.book.forget_subtree(node);
        for uid in &gone.pods {
            self.crowded_pods.remove(uid);
        }
        for wd in gone.wds {
            let _ = self.api.remove(wd);
        }
        self.out
            .extend(gone.volumes.into_iter().map(WatchEvent::VolumeGone));
        self.out.extend(
            gone.pods
                .into_iter()
                .map(|pod_uid| WatchEvent::PodGone { pod_uid }),
        );
    }
}

/// The directory (or a parent) no longer exists, or is no longer a directory.
fn is_missing(e: &io::Error) -> bool {
    let code = e.raw_os_error();
    code == Some(libc::ENOENT) || code == Some(libc::ENOTDIR)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::core::model::{VolumeKey, VolumePlugin};

    /// A kernel stand-in: one descriptor per inode (like inotify), an optional watch limit.
    #[derive(Default)]
    struct FakeKernel {
        by_inode: HashMap<(u64, u64), u32>,
        next: u32,
        limit: Option<usize>,
        /// Paths whose inode the fake pretends is another path's (a bind mount).
        alias: HashMap<PathBuf, PathBuf>,
        removed: Vec<u32>,
    }

    impl WatchApi for FakeKernel {
        type Wd = u32;
        fn add(&mut self, path: &Path, _mask: WatchMask) -> io::Result<u32> {
            let path = self
                .alias
                .get(path)
                .cloned()
                .unwrap_or_else(|| path.to_path_buf());
            let meta = std::fs::metadata(&path)?;
            let inode = (meta.dev(), meta.ino());
            if let Some(wd) = self.by_inode.get(&inode) {
                return Ok(*wd);
            }
            if self.limit.is_some_and(|l| self.by_inode.len() >= l) {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            self.next += 1;
            self.by_inode.insert(inode, self.next);
            Ok(self.next)
        }
        fn remove(&mut self, wd: u32) -> io::Result<()> {
            self.removed.push(wd);
            self.by_inode.retain(|_, w| *w != wd);
            Ok(())
        }
    }

    fn key(uid: &str, volume: &str) -> VolumeKey {
        VolumeKey {
            pod_uid: uid.into(),
            plugin: VolumePlugin::ConfigMap,
            volume: volume.into(),
        }
    }

    fn tree_with(
        volumes: &[VolumeKey],
        kernel: FakeKernel,
    ) -> (tempfile::TempDir, Tree<FakeKernel>) {
        let dir = tempfile::tempdir().unwrap();
        let pods = dir.path().join("pods");
        for key in volumes {
            std::fs::create_dir_all(super::super::node::volume_path(&pods, key)).unwrap();
        }
        std::fs::create_dir_all(&pods).unwrap();
        let tree = Tree::new(pods, kernel);
        (dir, tree)
    }

    fn looks(events: &[WatchEvent], cause: LookCause) -> Vec<VolumeKey> {
        let mut keys: Vec<VolumeKey> = events
            .iter()
            .filter_map(|e| match e {
                WatchEvent::Look { key, cause: c } if *c == cause => Some(key.clone()),
                _ => None,
            })
            .collect();
        keys.sort();
        keys
    }

    #[test]
    fn csi_volumes_are_followed_by_driver_from_vol_data_json() {
        let dir = tempfile::tempdir().unwrap();
        let pods = dir.path().join("pods");
        let csi = |volume: &str| VolumeKey {
            pod_uid: "u".into(),
            plugin: VolumePlugin::Csi,
            volume: volume.into(),
        };
        for (volume, driver) in [
            ("certs", Some("csi.cert-manager.io")),
            ("data", Some("ebs.csi.aws.com")),
            ("nodata", None),
        ] {
            let mount = Node::Volume(csi(volume)).path(&pods);
            std::fs::create_dir_all(&mount).unwrap();
            if let Some(driver) = driver {
                let json = format!(r#"{{"driverName":"{driver}","specVolID":"{volume}"}}"#);
                std::fs::write(mount.parent().unwrap().join("vol_data.json"), json).unwrap();
            }
        }
        let mut tree = Tree::new(pods, FakeKernel::default());
        tree.follow_csi_drivers(vec!["csi.cert-manager.io".into()]);
        tree.arm_root().unwrap();
        tree.discover_all();
        assert_eq!(
            looks(&tree.take_events(), LookCause::Discovered),
            vec![csi("certs")]
        );
        assert!(tree.book().wd_of(&Node::Volume(csi("data"))).is_none());
        assert_eq!(tree.book().volume_count(), 1);
    }

    #[test]
    fn two_paths_on_one_inode_leave_the_second_polled_not_deaf() {
        let (a, b) = (key("u", "a"), key("u", "b"));
        let (_dir, mut tree) = tree_with(&[a.clone(), b.clone()], FakeKernel::default());
        let pods = tree.pods_dir().to_path_buf();
        let (pa, pb) = (
            Node::Volume(a.clone()).path(&pods),
            Node::Volume(b.clone()).path(&pods),
        );
        tree.api.alias.insert(pb, pa);
        tree.arm_root().unwrap();
        tree.discover_all();
        let events = tree.take_events();
        assert_eq!(looks(&events, LookCause::Discovered), vec![a, b]);
        assert_eq!(tree.book().unwatched_volume_count(), 1);
        tree.rescan_unwatched();
        assert_eq!(looks(&tree.take_events(), LookCause::Rescan).len(), 1);
    }

    #[test]
    fn a_new_inode_under_a_volume_is_rearmed_once_and_the_old_watch_removed() {
        let a = key("u", "a");
        let (_dir, mut tree) = tree_with(std::slice::from_ref(&a), FakeKernel::default());
        tree.arm_root().unwrap();
        tree.discover_all();
        tree.take_events();
        let watches = tree.book().watch_count();
        let old = *tree.book().wd_of(&Node::Volume(a.clone())).unwrap();

        tree.check_remounts();
        assert!(
            tree.take_events().is_empty(),
            "same inode: nothing to report"
        );

        let path = Node::Volume(a.clone()).path(tree.pods_dir());
        // Move the old dir away (a kernel watch would pin its inode the same way), so the
        // new dir is surely another inode.
        std::fs::rename(&path, tree.pods_dir().join("..parked")).unwrap();
        std::fs::create_dir(&path).unwrap();
        tree.check_remounts();
        let events = tree.take_events();
        assert_eq!(
            events,
            vec![WatchEvent::Look {
                key: a.clone(),
                cause: LookCause::Remounted
            }]
        );
        assert!(tree.api.removed.contains(&old));
        assert_eq!(tree.book().watch_count(), watches);
    }

    #[test]
    fn at_the_limit_volumes_are_discovered_counted_and_retried() {
        let keys = [key("u", "a"), key("u", "b"), key("u", "c")];
        // root, pod, volumes, plugin dir and one volume fit.
        let kernel = FakeKernel {
            limit: Some(5),
            ..Default::default()
        };
        let (_dir, mut tree) = tree_with(&keys, kernel);
        tree.arm_root().unwrap();
        tree.discover_all();
        assert_eq!(
            looks(&tree.take_events(), LookCause::Discovered),
            keys.to_vec()
        );
        assert_eq!(tree.book().unwatched_volume_count(), 2);
        assert_eq!(tree.watch_limit_errors(), 2);

        tree.rescan_unwatched();
        assert_eq!(looks(&tree.take_events(), LookCause::Rescan).len(), 2);
        assert_eq!(
            tree.watch_limit_errors(),
            4,
            "every refused retry is counted"
        );

        tree.api.limit = None;
        tree.rescan_unwatched();
        assert_eq!(
            looks(&tree.take_events(), LookCause::Rescan).len(),
            2,
            "one last look after arming"
        );
        assert_eq!(tree.book().unwatched_volume_count(), 0);
        tree.rescan_unwatched();
        assert!(tree.take_events().is_empty());
    }

    #[test]
    fn a_pod_with_too_many_volumes_is_told_once_and_its_neighbours_are_watched() {
        let mut keys: Vec<VolumeKey> = (0..MAX_VOLUMES_PER_POD + 44)
            .map(|i| key("crowded", &format!("v{i:04}")))
            .collect();
        keys.extend([key("quiet", "a"), key("quiet", "b")]);
        let (_dir, mut tree) = tree_with(&keys, FakeKernel::default());
        tree.arm_root().unwrap();
        tree.discover_all();
        let events = tree.take_events();
        let told: Vec<_> = events
            .iter()
            .filter(|e| matches!(e, WatchEvent::TooManyVolumes { .. }))
            .collect();
        // Which volume comes first past the cap is the directory's listing order.
        let seen = looks(&events, LookCause::Discovered);
        assert!(
            matches!(told[..], [WatchEvent::TooManyVolumes { key, max }]
                if &*key.pod_uid == "crowded" && *max == MAX_VOLUMES_PER_POD && !seen.contains(key)),
            "{told:?}"
        );
        assert_eq!(
            seen.iter().filter(|k| &*k.pod_uid == "crowded").count(),
            MAX_VOLUMES_PER_POD
        );
        // The neighbour is watched as ever (the positive control).
        assert_eq!(
            seen[seen.len() - 2..],
            [key("quiet", "a"), key("quiet", "b")]
        );
        // root + 2 × (pod, volumes, plugin dir) + the watched volumes.
        assert_eq!(tree.book().watch_count(), 1 + 6 + MAX_VOLUMES_PER_POD + 2);
        // A rescan does not say it again.
        tree.overflow();
        assert!(!tree
            .take_events()
            .iter()
            .any(|e| matches!(e, WatchEvent::TooManyVolumes { .. })));
    }
}
