//! Each approach's own copy of the node's pod volumes, so that every approach runs for the
//! whole of a size and the swaps can alternate between them in short blocks.
//!
//! reloadlet watches a whole kubelet root (`--kubelet-root`): two agents on the node's own
//! root would both act on every swap, and an agent running while the floor takes its swaps
//! would be woken by them. With a copy each — `<copy>/pods/<uid>/volumes/<plugin>/<name>`,
//! the same pod UIDs and volume names, the `..data` and file symlinks kept as symlinks — an
//! approach is woken only by the swaps made in its own copy, and all of them signal the same
//! pods' processes, found through the API and the cgroups as before. The swaps are the same
//! AtomicWriter updates (`bench_support::timed_update`) in whichever copy.
//!
//! The copy is a plain directory on the node's file system: a volume the simulated kubelet
//! backs with a tmpfs (the pods' token volumes, never swapped here) is copied as files.

use crate::approaches::Target;
use std::path::{Path, PathBuf};

/// A copy of `<kubelet_root>/pods/*/volumes`, removed on drop.
pub struct Copy {
    root: PathBuf,
}

impl Copy {
    /// Copies the volumes of every pod under `kubelet_root` to `dest` (which must not exist).
    pub fn of(kubelet_root: &Path, dest: &Path) -> std::io::Result<Copy> {
        let copy = Copy {
            root: dest.to_owned(),
        };
        for pod in std::fs::read_dir(kubelet_root.join("pods"))? {
            let pod = pod?;
            let volumes = pod.path().join("volumes");
            if volumes.is_dir() {
                copy_tree(
                    &volumes,
                    &dest.join("pods").join(pod.file_name()).join("volumes"),
                )?;
            }
        }
        Ok(copy)
    }

    /// The copy, to pass as `--kubelet-root`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `targets` with their volume dirs moved from `kubelet_root` into this copy.
    pub fn retarget(&self, kubelet_root: &Path, targets: &[Target]) -> Vec<Target> {
        targets
            .iter()
            .map(|t| Target {
                dir: self.root.join(
                    t.dir
                        .strip_prefix(kubelet_root)
                        .expect("a target is under the kubelet root"),
                ),
                ..t.clone()
            })
            .collect()
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Copies `from` to `to` (created, with its parents): directories, regular files, and symlinks
/// as symlinks with the same target (AtomicWriter's are relative: `..data -> ..<timestamp>`,
/// `key -> ..data/key`).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_file() {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}
