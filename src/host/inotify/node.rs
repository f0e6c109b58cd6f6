//! The directories of the kubelet tree the watcher cares about, and how they nest.
//!
//! `<root>/pods` → `<uid>` → `volumes` → `kubernetes.io~<plugin>` → `<volume>`.
//! Pure: no I/O, table-tested.

use std::path::{Path, PathBuf};

use crate::core::model::{VolumeKey, VolumePlugin};

/// The name the kubelet's AtomicWriter gives the symlink it swaps atomically.
pub(crate) const DATA_LINK: &str = "..data";

/// One watched directory of the kubelet tree.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Node {
    /// `<kubelet-root>/pods`.
    Pods,
    /// `pods/<uid>`.
    Pod(String),
    /// `pods/<uid>/volumes`.
    Volumes(String),
    /// `pods/<uid>/volumes/kubernetes.io~<plugin>`.
    Plugin(String, VolumePlugin),
    /// `pods/<uid>/volumes/kubernetes.io~<plugin>/<volume>`.
    Volume(VolumeKey),
}

impl Node {
    /// The directory this node stands for, under `pods_dir` (`<kubelet-root>/pods`).
    pub(crate) fn path(&self, pods_dir: &Path) -> PathBuf {
        match self {
            Node::Pods => pods_dir.to_path_buf(),
            Node::Pod(uid) => pods_dir.join(uid),
            Node::Volumes(uid) => pods_dir.join(uid).join("volumes"),
            Node::Plugin(uid, plugin) => pods_dir.join(uid).join("volumes").join(plugin.dir_name()),
            Node::Volume(key) => volume_path(pods_dir, key),
        }
    }

    /// The node for the directory `name` inside this one, if the watcher follows it.
    pub(crate) fn child(&self, name: &str) -> Option<Node> {
        if name.is_empty() || name.starts_with('.') || name.contains('/') {
            return None;
        }
        match self {
            Node::Pods => Some(Node::Pod(name.to_owned())),
            Node::Pod(uid) => (name == "volumes").then(|| Node::Volumes(uid.clone())),
            Node::Volumes(uid) => {
                VolumePlugin::from_dir_name(name).map(|p| Node::Plugin(uid.clone(), p))
            }
            Node::Plugin(uid, plugin) => Some(Node::Volume(VolumeKey {
                pod_uid: uid.clone(),
                plugin: *plugin,
                volume: name.to_owned(),
            })),
            Node::Volume(_) => None,
        }
    }

    /// The pod this node belongs to (`None` for the pods directory itself).
    pub(crate) fn pod_uid(&self) -> Option<&str> {
        match self {
            Node::Pods => None,
            Node::Pod(uid) | Node::Volumes(uid) | Node::Plugin(uid, _) => Some(uid),
            Node::Volume(key) => Some(&key.pod_uid),
        }
    }

    /// Whether `other` is this node or lies below it.
    pub(crate) fn contains(&self, other: &Node) -> bool {
        match (self, other) {
            (Node::Pods, _) => true,
            (Node::Pod(uid), o) => o.pod_uid() == Some(uid.as_str()),
            (Node::Volumes(uid), Node::Volumes(u) | Node::Plugin(u, _)) => u == uid,
            (Node::Volumes(uid), Node::Volume(k)) => &k.pod_uid == uid,
            (Node::Plugin(uid, p), Node::Plugin(u, q)) => u == uid && p == q,
            (Node::Plugin(uid, p), Node::Volume(k)) => &k.pod_uid == uid && k.plugin == *p,
            (Node::Volume(a), Node::Volume(b)) => a == b,
            _ => false,
        }
    }

    /// Whether the node has children the watcher follows (every node but a volume).
    pub(crate) fn has_children(&self) -> bool {
        !matches!(self, Node::Volume(_))
    }
}

/// `<pods_dir>/<uid>/volumes/<plugin dir>/<volume>`.
pub(crate) fn volume_path(pods_dir: &Path, key: &VolumeKey) -> PathBuf {
    pods_dir
        .join(&key.pod_uid)
        .join("volumes")
        .join(key.plugin.dir_name())
        .join(&key.volume)
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
        ];
        for (parent, name, want) in cases {
            assert_eq!(parent.child(name), want, "{parent:?} / {name:?}");
        }
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
