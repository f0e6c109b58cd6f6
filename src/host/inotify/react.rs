//! What one inotify event means for the watched tree. Pure, table-tested.

use std::ffi::OsStr;

use inotify::{EventMask, WatchMask};

use super::node::{Node, DATA_LINK};
use crate::core::model::{VolumeKey, VolumePlugin};

/// The watch mask for a node: only the events the watcher acts on.
///
/// Directories above volumes: children appearing or going away. Volume directories: the
/// `..data` swap (`IN_MOVED_TO`); a CSI volume also its files written in place
/// (`IN_CLOSE_WRITE`, or a file renamed in), as older Secrets Store providers write them
/// (kubernetes-sigs/secrets-store-csi-driver#551) — configMap/secret/projected volumes never
/// pay for those events. Every node: itself going away. `IN_IGNORED` and `IN_UNMOUNT` are
/// always delivered.
pub(crate) fn mask_for(node: &Node) -> WatchMask {
    let always =
        WatchMask::DELETE_SELF | WatchMask::MOVE_SELF | WatchMask::ONLYDIR | WatchMask::EXCL_UNLINK;
    match node {
        Node::Volume(key) if key.plugin == VolumePlugin::Csi => {
            always | WatchMask::MOVED_TO | WatchMask::CLOSE_WRITE
        }
        Node::Volume(_) => always | WatchMask::MOVED_TO,
        _ => {
            always
                | WatchMask::CREATE
                | WatchMask::MOVED_TO
                | WatchMask::DELETE
                | WatchMask::MOVED_FROM
        }
    }
}

/// What the watcher does about one event.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reaction {
    /// The kernel queue overflowed.
    Overflow,
    /// `..data` was swapped in this volume.
    Swap(VolumeKey),
    /// A file of this CSI volume was written in place (or renamed in).
    Written(VolumeKey),
    /// The kernel dropped the watch of this node (`IN_IGNORED`).
    Dropped(Node),
    /// The node's directory went away, moved, or a mount on it came or went: look again.
    Recheck(Node),
    /// A followed child directory was created or moved in.
    ChildAppeared(Node),
    /// A followed child directory was deleted or moved out.
    ChildGone(Node),
    /// Nothing the watcher follows.
    Nothing,
}

/// Interprets one event of the watch on `node` (`None`: a descriptor not in the books).
pub(crate) fn react(node: Option<&Node>, mask: EventMask, name: Option<&OsStr>) -> Reaction {
    if mask.contains(EventMask::Q_OVERFLOW) {
        return Reaction::Overflow;
    }
    let Some(node) = node else {
        return Reaction::Nothing;
    };
    if mask.contains(EventMask::IGNORED) {
        return Reaction::Dropped(node.clone());
    }
    if mask.intersects(EventMask::UNMOUNT | EventMask::DELETE_SELF | EventMask::MOVE_SELF) {
        return Reaction::Recheck(node.clone());
    }
    let Some(name) = name.and_then(OsStr::to_str) else {
        return Reaction::Nothing;
    };
    if let Node::Volume(key) = node {
        return if mask.contains(EventMask::MOVED_TO) && name == DATA_LINK {
            Reaction::Swap(key.clone())
        } else if key.plugin == VolumePlugin::Csi
            && !name.starts_with("..")
            && mask.intersects(EventMask::CLOSE_WRITE | EventMask::MOVED_TO)
        {
            // Not the AtomicWriter's own `..data_tmp`/`..<timestamp>` entries.
            Reaction::Written(key.clone())
        } else {
            Reaction::Nothing
        };
    }
    if !mask.contains(EventMask::ISDIR) {
        return Reaction::Nothing;
    }
    let Some(child) = node.child(name) else {
        return Reaction::Nothing;
    };
    if mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
        Reaction::ChildAppeared(child)
    } else if mask.intersects(EventMask::DELETE | EventMask::MOVED_FROM) {
        Reaction::ChildGone(child)
    } else {
        Reaction::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::VolumePlugin;

    #[test]
    fn events_map_to_reactions() {
        let key = VolumeKey {
            pod_uid: "u".into(),
            plugin: VolumePlugin::Secret,
            volume: "s".into(),
        };
        let vol = Node::Volume(key.clone());
        let plugin = Node::Plugin("u".into(), VolumePlugin::Secret);
        let pod = Node::Pod("u".into());
        let dir = EventMask::ISDIR;
        let cases: Vec<(Option<&Node>, EventMask, Option<&str>, Reaction)> = vec![
            (None, EventMask::Q_OVERFLOW, None, Reaction::Overflow),
            (None, EventMask::MOVED_TO, Some("..data"), Reaction::Nothing),
            (
                Some(&vol),
                EventMask::MOVED_TO,
                Some("..data"),
                Reaction::Swap(key.clone()),
            ),
            (
                Some(&vol),
                EventMask::MOVED_TO,
                Some("..data_tmp"),
                Reaction::Nothing,
            ),
            (
                Some(&vol),
                EventMask::MOVED_TO,
                Some("app.conf"),
                Reaction::Nothing,
            ),
            (
                Some(&vol),
                EventMask::CREATE,
                Some("..data"),
                Reaction::Nothing,
            ),
            (
                Some(&vol),
                EventMask::CREATE | dir,
                Some("..2026_11_22_06_00_00.1"),
                Reaction::Nothing,
            ),
            (
                Some(&vol),
                EventMask::IGNORED,
                None,
                Reaction::Dropped(vol.clone()),
            ),
            (
                Some(&vol),
                EventMask::UNMOUNT,
                None,
                Reaction::Recheck(vol.clone()),
            ),
            (
                Some(&vol),
                EventMask::DELETE_SELF,
                None,
                Reaction::Recheck(vol.clone()),
            ),
            (
                Some(&vol),
                EventMask::MOVE_SELF,
                None,
                Reaction::Recheck(vol.clone()),
            ),
            (
                Some(&plugin),
                EventMask::CREATE | dir,
                Some("s"),
                Reaction::ChildAppeared(vol.clone()),
            ),
            (
                Some(&plugin),
                EventMask::MOVED_TO | dir,
                Some("s"),
                Reaction::ChildAppeared(vol.clone()),
            ),
            (
                Some(&plugin),
                EventMask::DELETE | dir,
                Some("s"),
                Reaction::ChildGone(vol.clone()),
            ),
            (
                Some(&plugin),
                EventMask::MOVED_FROM | dir,
                Some("s"),
                Reaction::ChildGone(vol.clone()),
            ),
            (
                Some(&plugin),
                EventMask::CREATE,
                Some("s"),
                Reaction::Nothing,
            ),
            (
                Some(&pod),
                EventMask::CREATE | dir,
                Some("volumes"),
                Reaction::ChildAppeared(Node::Volumes("u".into())),
            ),
            (
                Some(&pod),
                EventMask::CREATE | dir,
                Some("containers"),
                Reaction::Nothing,
            ),
            (
                Some(&pod),
                EventMask::CREATE,
                Some("etc-hosts"),
                Reaction::Nothing,
            ),
            (
                Some(&Node::Pods),
                EventMask::DELETE | dir,
                Some("u"),
                Reaction::ChildGone(pod.clone()),
            ),
        ];
        for (node, mask, name, want) in cases {
            assert_eq!(
                react(node, mask, name.map(OsStr::new)),
                want,
                "{node:?} {mask:?} {name:?}"
            );
        }
    }

    #[test]
    fn csi_volumes_report_writes_in_place_and_the_swap() {
        let key = VolumeKey {
            pod_uid: "u".into(),
            plugin: VolumePlugin::Csi,
            volume: "certs".into(),
        };
        let vol = Node::Volume(key.clone());
        let cases = [
            (EventMask::MOVED_TO, "..data", Reaction::Swap(key.clone())),
            (
                EventMask::CLOSE_WRITE,
                "tls.crt",
                Reaction::Written(key.clone()),
            ),
            (
                EventMask::MOVED_TO,
                "tls.key",
                Reaction::Written(key.clone()),
            ),
            (EventMask::MOVED_TO, "..data_tmp", Reaction::Nothing),
            (EventMask::CLOSE_WRITE, "..2026_11_26.1", Reaction::Nothing),
            (EventMask::CREATE, "tls.crt", Reaction::Nothing),
        ];
        for (mask, name, want) in cases {
            assert_eq!(
                react(Some(&vol), mask, Some(OsStr::new(name))),
                want,
                "{name}"
            );
        }
        assert!(mask_for(&vol).contains(WatchMask::CLOSE_WRITE | WatchMask::MOVED_TO));
        // A configMap volume is not told about writes in place.
        let cm = Node::Volume(VolumeKey {
            plugin: VolumePlugin::ConfigMap,
            ..key.clone()
        });
        assert_eq!(
            react(Some(&cm), EventMask::CLOSE_WRITE, Some(OsStr::new("a"))),
            Reaction::Nothing
        );
        assert!(!mask_for(&cm).contains(WatchMask::CLOSE_WRITE));
    }

    #[test]
    fn volume_watches_ask_for_the_swap_but_not_for_reads() {
        let vol = Node::Volume(VolumeKey {
            pod_uid: "u".into(),
            plugin: VolumePlugin::ConfigMap,
            volume: "c".into(),
        });
        let m = mask_for(&vol);
        assert!(m.contains(WatchMask::MOVED_TO | WatchMask::ONLYDIR | WatchMask::EXCL_UNLINK));
        assert!(!m.intersects(
            WatchMask::OPEN
                | WatchMask::ACCESS
                | WatchMask::CLOSE_NOWRITE
                | WatchMask::CREATE
                | WatchMask::MODIFY
        ));
        let dir = mask_for(&Node::Pods);
        assert!(dir.contains(
            WatchMask::CREATE | WatchMask::DELETE | WatchMask::MOVED_FROM | WatchMask::MOVED_TO
        ));
        assert!(!dir.intersects(WatchMask::OPEN | WatchMask::ACCESS | WatchMask::CLOSE_NOWRITE));
    }
}
