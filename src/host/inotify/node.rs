//! The directories of the kubelet tree the watcher cares about, and how they nest.
//!
//! `<root>/pods` → `<uid>` → `volumes` → `kubernetes.io~<plugin>` → `<volume>`; a CSI
//! volume's files are one level deeper, `kubernetes.io~csi/<volume>/mount` (kubernetes
//! `pkg/volume/csi/csi_mounter.go`: `GetPath` is `<pod volume dir>/mount`, and `vol_data.json`
//! sits beside it, written by `csi_plugin.go` `NewMounter`). Pure: no I/O, table-tested.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::core::model::{VolumeKey, VolumePlugin};

/// The name the kubelet's AtomicWriter gives the symlink it swaps atomically.
pub(crate) const DATA_LINK: &str = "..data";
/// The CSI target directory inside a CSI volume's directory (`csi_mounter.go`, `GetPath`).
pub(crate) const CSI_MOUNT: &str = "mount";
/// The kubelet's record of a CSI volume, beside [`CSI_MOUNT`] (`csi_plugin.go`,
/// `volDataFileName`).
pub(crate) const CSI_VOL_DATA: &str = "vol_data.json";

/// One watched directory of the kubelet tree.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Node {
    /// `<kubelet-root>/pods`.
    Pods,
    /// `pods/<uid>` (the UID shared by every node below it).
    Pod(Arc<str>),
    /// `pods/<uid>/volumes`.
    Volumes(Arc<str>),
    /// `pods/<uid>/volumes/kubernetes.io~<plugin>`.
    Plugin(Arc<str>, VolumePlugin),
    /// `pods/<uid>/volumes/kubernetes.io~csi/<volume>`: holds `vol_data.json` and, once the
    /// driver published it, `mount/` (the [`Node::Volume`]).
    CsiDir(VolumeKey),
    /// `pods/<uid>/volumes/kubernetes.io~<plugin>/<volume>` (a CSI volume: `…/<volume>/mount`).
    Volume(VolumeKey),
}

impl Node {
    /// The directory this node stands for, under `pods_dir` (`<kubelet-root>/pods`).
    pub(crate) fn path(&self, pods_dir: &Path) -> PathBuf {
        match self {
            Node::Pods => pods_dir.to_path_buf(),
            Node::Pod(uid) => pods_dir.join(&**uid),
            Node::Volumes(uid) => pods_dir.join(&**uid).join("volumes"),
            Node::Plugin(uid, plugin) => pods_dir
                .join(&**uid)
                .join("volumes")
                .join(plugin.dir_name()),
            Node::CsiDir(key) => csi_dir_path(pods_dir, key),
            Node::Volume(key) => volume_path(pods_dir, key),
        }
    }

    /// The node for the directory `name` inside this one, if the watcher follows it.
    pub(crate) fn child(&self, name: &str) -> Option<Node> {
        if name.is_empty() || name.starts_with('.') || name.contains('/') {
            return None;
        }
        match self {
            Node::Pods => Some(Node::Pod(name.into())),
            Node::Pod(uid) => (name == "volumes").then(|| Node::Volumes(uid.clone())),
            Node::Volumes(uid) => {
                VolumePlugin::from_dir_name(name).map(|p| Node::Plugin(uid.clone(), p))
            }
            Node::Plugin(uid, plugin) => {
                let key = VolumeKey {
                    pod_uid: uid.clone(),
                    plugin: *plugin,
                    volume: name.into(),
                };
                Some(if *plugin == VolumePlugin::Csi {
                    Node::CsiDir(key)
                } else {
                    Node::Volume(key)
                })
            }
            Node::CsiDir(key) => (name == CSI_MOUNT).then(|| Node::Volume(key.clone())),
            Node::Volume(_) => None,
        }
    }

    /// The pod this node belongs to (`None` for the pods directory itself).
    pub(crate) fn pod_uid(&self) -> Option<&Arc<str>> {
        match self {
            Node::Pods => None,
            Node::Pod(uid) | Node::Volumes(uid) | Node::Plugin(uid, _) => Some(uid),
            Node::CsiDir(key) | Node::Volume(key) => Some(&key.pod_uid),
        }
    }

    /// Whether `other` is this node or lies below it.
    pub(crate) fn contains(&self, other: &Node) -> bool {
        match (self, other) {
            (Node::Pods, _) => true,
            (Node::Pod(uid), o) => o.pod_uid() == Some(uid),
            (Node::Volumes(uid), Node::Volumes(u) | Node::Plugin(u, _)) => u == uid,
            (Node::Volumes(uid), Node::Volume(k) | Node::CsiDir(k)) => &k.pod_uid == uid,
            (Node::Plugin(uid, p), Node::Plugin(u, q)) => u == uid && p == q,
            (Node::Plugin(uid, p), Node::Volume(k) | Node::CsiDir(k)) => {
                &k.pod_uid == uid && k.plugin == *p
            }
            (Node::CsiDir(a), Node::CsiDir(b) | Node::Volume(b)) => a == b,
            (Node::Volume(a), Node::Volume(b)) => a == b,
            _ => false,
        }
    }

    /// Whether the node has children the watcher follows (every node but a volume).
    pub(crate) fn has_children(&self) -> bool {
        !matches!(self, Node::Volume(_))
    }
}

/// `<pods_dir>/<uid>/volumes/<plugin dir>/<volume>` (for a CSI volume, its `mount/`).
pub(crate) fn volume_path(pods_dir: &Path, key: &VolumeKey) -> PathBuf {
    let mount = (key.plugin == VolumePlugin::Csi).then_some(CSI_MOUNT);
    plugin_dir_path(pods_dir, key, mount)
}

/// `<pods_dir>/<uid>/volumes/<plugin dir>/<volume>`.
fn csi_dir_path(pods_dir: &Path, key: &VolumeKey) -> PathBuf {
    plugin_dir_path(pods_dir, key, None)
}

/// The volume's directory, and `last` below it: one allocation (this runs for every swap,
/// before its signal; `Path::join` would copy the path once per component).
fn plugin_dir_path(pods_dir: &Path, key: &VolumeKey, last: Option<&str>) -> PathBuf {
    // The fixed parts (`volumes`, the plugin dir, `mount`, separators) fit in 64 bytes.
    let len = pods_dir.as_os_str().len() + key.pod_uid.len() + key.volume.len() + 64;
    let mut path = PathBuf::with_capacity(len);
    path.push(pods_dir);
    path.push(&*key.pod_uid);
    path.push("volumes");
    path.push(key.plugin.dir_name());
    path.push(&*key.volume);
    if let Some(last) = last {
        path.push(last);
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vol(uid: &str, plugin: VolumePlugin, name: &str) -> Node {
        Node::Volume(VolumeKey {
            pod_uid: uid.into(),
            plugin,
            volume: name.into(),
        })
    }

    #[test]
    fn children_follow_the_kubelet_layout_only() {
        let pod = Node::Pod("u1".into());
        let cases: Vec<(Node, &str, Option<Node>)> = vec![
            (Node::Pods, "u1", Some(pod.clone())),
            (Node::Pods, "..2026_11_22", None),
            (Node::Pods, "", None),
            (pod.clone(), "volumes", Some(Node::Volumes("u1".into()))),
            (pod.clone(), "containers", None),
            (pod.clone(), "etc-hosts", None),
            (
                Node::Volumes("u1".into()),
                "kubernetes.io~secret",
                Some(Node::Plugin("u1".into(), VolumePlugin::Secret)),
            ),
            (Node::Volumes("u1".into()), "kubernetes.io~empty-dir", None),
            (
                Node::Volumes("u1".into()),
                "kubernetes.io~downward-api",
                None,
            ),
            (
                Node::Plugin("u1".into(), VolumePlugin::Projected),
                "kube-api-access-x",
                Some(vol("u1", VolumePlugin::Projected, "kube-api-access-x")),
            ),
            (
                Node::Plugin("u1".into(), VolumePlugin::ConfigMap),
                "..data",
                None,
            ),
            (vol("u1", VolumePlugin::ConfigMap, "cfg"), "..data", None),
            (vol("u1", VolumePlugin::ConfigMap, "cfg"), "app.conf", None),
            (
                Node::Volumes("u1".into()),
                "kubernetes.io~csi",
                Some(Node::Plugin("u1".into(), VolumePlugin::Csi)),
            ),
            (
                Node::Plugin("u1".into(), VolumePlugin::Csi),
                "certs",
                Some(Node::CsiDir(csi("certs"))),
            ),
            (
                Node::CsiDir(csi("certs")),
                "mount",
                Some(vol("u1", VolumePlugin::Csi, "certs")),
            ),
            (Node::CsiDir(csi("certs")), "vol_data.json", None),
            (Node::CsiDir(csi("certs")), "other", None),
            (vol("u1", VolumePlugin::Csi, "certs"), "tls.crt", None),
        ];
        for (parent, name, want) in cases {
            assert_eq!(parent.child(name), want, "{parent:?} / {name:?}");
        }
    }

    /// Every node below a pod holds the pod's one UID, and a volume key's clone shares its
    /// names: the watch books keep a key per volume several times over, and the swap's records
    /// clone it before the signal.
    #[test]
    fn a_pods_nodes_and_keys_share_its_uid() {
        let Node::Pod(uid) = Node::Pods.child("u1").unwrap() else {
            panic!("not a pod node")
        };
        let volumes = Node::Pod(uid.clone()).child("volumes").unwrap();
        let plugin = volumes.child("kubernetes.io~csi").unwrap();
        let csi_dir = plugin.child("certs").unwrap();
        let volume = csi_dir.child("mount").unwrap();
        for node in [&volumes, &plugin, &csi_dir, &volume] {
            assert!(Arc::ptr_eq(node.pod_uid().unwrap(), &uid), "{node:?}");
        }
        let Node::Volume(key) = volume else {
            panic!("not a volume node")
        };
        let copy = key.clone();
        assert!(Arc::ptr_eq(&copy.pod_uid, &uid));
        assert!(Arc::ptr_eq(&copy.volume, &key.volume));
    }

    fn csi(name: &str) -> VolumeKey {
        VolumeKey {
            pod_uid: "u1".into(),
            plugin: VolumePlugin::Csi,
            volume: name.into(),
        }
    }

    #[test]
    fn csi_paths_and_subtrees() {
        let root = Path::new("/var/lib/kubelet/pods");
        assert_eq!(
            vol("u1", VolumePlugin::Csi, "certs").path(root),
            Path::new("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/certs/mount")
        );
        assert_eq!(
            Node::CsiDir(csi("certs")).path(root),
            Path::new("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/certs")
        );
        let v = vol("u1", VolumePlugin::Csi, "certs");
        assert!(Node::CsiDir(csi("certs")).contains(&v));
        assert!(!Node::CsiDir(csi("db")).contains(&v));
        assert!(Node::Plugin("u1".into(), VolumePlugin::Csi).contains(&Node::CsiDir(csi("db"))));
        assert!(Node::Pod("u1".into()).contains(&Node::CsiDir(csi("db"))));
        assert!(Node::Volumes("u1".into()).contains(&Node::CsiDir(csi("db"))));
        assert!(!v.contains(&Node::CsiDir(csi("certs"))));
    }

    #[test]
    fn paths_match_the_kubelet_layout() {
        let root = Path::new("/var/lib/kubelet/pods");
        let v = vol("u1", VolumePlugin::ConfigMap, "cfg");
        assert_eq!(
            v.path(root),
            Path::new("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~configmap/cfg")
        );
        assert_eq!(
            Node::Plugin("u1".into(), VolumePlugin::Secret).path(root),
            Path::new("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~secret")
        );
        assert_eq!(Node::Pods.path(root), root);
    }

    #[test]
    fn subtrees_are_bounded_by_pod_and_plugin() {
        let a = vol("u1", VolumePlugin::Secret, "s");
        let b = vol("u2", VolumePlugin::Secret, "s");
        let cases = [
            (Node::Pods, a.clone(), true),
            (Node::Pod("u1".into()), a.clone(), true),
            (Node::Pod("u1".into()), b.clone(), false),
            (Node::Pod("u1".into()), Node::Pod("u1".into()), true),
            (Node::Pod("u1".into()), Node::Pods, false),
            (Node::Volumes("u1".into()), Node::Pod("u1".into()), false),
            (Node::Volumes("u1".into()), a.clone(), true),
            (
                Node::Plugin("u1".into(), VolumePlugin::Secret),
                a.clone(),
                true,
            ),
            (
                Node::Plugin("u1".into(), VolumePlugin::ConfigMap),
                a.clone(),
                false,
            ),
            (a.clone(), a.clone(), true),
            (a.clone(), b.clone(), false),
        ];
        for (outer, inner, want) in cases {
            assert_eq!(outer.contains(&inner), want, "{outer:?} ⊇ {inner:?}");
        }
    }
}
