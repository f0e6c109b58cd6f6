//! Inline CSI volumes (`spec.volumes[].csi`) as a node shows them: the kubelet's
//! `<root>/pods/<uid>/volumes/kubernetes.io~csi/<volume>/` with its `vol_data.json`, and the
//! driver's target `mount/` with a tmpfs on it, published after the pod started and written
//! the way each driver writes:
//!
//! - [`WriteStyle::Atomic`]: the Kubernetes AtomicWriter ([`crate::volumes::atomic_writer`]), as the
//!   Secrets Store CSI driver does when its provider returns the contents
//!   (kubernetes-sigs/secrets-store-csi-driver PR #520) and cert-manager's csi-lib does into
//!   its own tmpfs (bind-mounted at the target; one mount here, the same files).
//! - [`WriteStyle::InPlace`]: each file rewritten in place, one after another with a pause
//!   between them, as older Secrets Store providers write them themselves (#551).
//!
//! The kubelet side follows kubernetes `pkg/volume/csi/`: `csi_plugin.go` `NewMounter` creates
//! the volume directory (0750) and writes `vol_data.json` (`specVolID`, `volumeHandle`,
//! `driverName`, `nodeName`, `attachmentID`, `volumeLifecycleMode`) before `SetUpAt` calls
//! `NodePublishVolume` with the target `<volume>/mount`, which the driver creates and mounts.
//! At pod teardown the mount is unmounted and the directory removed with the pod's
//! ([`crate::volumes::PodVolumes::teardown`] unmounts everything under the pod directory).

use crate::volumes::atomic_writer::{self, FileProjection};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use std::collections::BTreeMap;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The kubelet's plugin directory for CSI volumes (`kubernetes.io/csi`, escaped).
pub const CSI_PLUGIN_DIR: &str = "kubernetes.io~csi";

/// How the driver writes the volume's files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteStyle {
    /// `..<timestamp>` + the `..data` swap.
    Atomic,
    /// Files rewritten in place, `pause` between two of them.
    InPlace { pause: Duration },
}

/// One published inline CSI volume of a pod.
#[derive(Debug)]
pub struct CsiVolume {
    /// `<root>/pods/<uid>/volumes/kubernetes.io~csi/<volume>`.
    dir: PathBuf,
    style: WriteStyle,
}

fn nix_io(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// A stand-in for the kubelet's `csi-<sha256>` names (`makeVolumeHandle`,
/// `getAttachmentName`): stable, 64 hex digits.
fn handle(parts: &[&str]) -> String {
    let mut out = String::from("csi-");
    for salt in 0..4u8 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (salt, parts).hash(&mut h);
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

impl CsiVolume {
    /// Publishes the volume `volume` of pod `pod_uid` under `kubelet_root` for `driver`:
    /// `vol_data.json`, then `mount/` with a tmpfs on it, then the first write of `files`.
    pub fn publish(
        kubelet_root: &Path,
        pod_uid: &str,
        volume: &str,
        driver: &str,
        style: WriteStyle,
        files: &[(&str, &str)],
    ) -> io::Result<Self> {
        let dir = kubelet_root
            .join("pods")
            .join(pod_uid)
            .join("volumes")
            .join(CSI_PLUGIN_DIR)
            .join(volume);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(&dir)?;
        let node = "nodesim";
        let volume_handle = handle(&[pod_uid, volume]);
        let data = serde_json::json!({
            "specVolID": volume,
            "volumeHandle": volume_handle,
            "driverName": driver,
            "nodeName": node,
            "attachmentID": handle(&[&volume_handle, driver, node]),
            "volumeLifecycleMode": "Ephemeral",
        });
        fs::write(dir.join("vol_data.json"), data.to_string())?;
        let this = Self { dir, style };
        let target = this.mount_dir();
        fs::create_dir(&target)?;
        mount(
            Some("tmpfs"),
            &target,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0755"),
        )
        .map_err(nix_io)?;
        this.rotate(files)?;
        Ok(this)
    }

    /// A volume of a driver that is not a secrets driver (block or file storage): the
    /// kubelet's `vol_data.json` and a plain `mount/` with one file, never mounted on.
    pub fn publish_storage(
        kubelet_root: &Path,
        pod_uid: &str,
        volume: &str,
        driver: &str,
    ) -> io::Result<Self> {
        let dir = kubelet_root
            .join("pods")
            .join(pod_uid)
            .join("volumes")
            .join(CSI_PLUGIN_DIR)
            .join(volume);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(&dir)?;
        let data = serde_json::json!({
            "specVolID": volume,
            "volumeHandle": handle(&[pod_uid, volume]),
            "driverName": driver,
            "nodeName": "nodesim",
            "volumeLifecycleMode": "Persistent",
        });
        fs::write(dir.join("vol_data.json"), data.to_string())?;
        fs::create_dir(dir.join("mount"))?;
        fs::set_permissions(dir.join("mount"), fs::Permissions::from_mode(0o777))?;
        Ok(Self {
            dir,
            style: WriteStyle::InPlace {
                pause: Duration::ZERO,
            },
        })
    }

    /// The driver's target: what the container sees.
    pub fn mount_dir(&self) -> PathBuf {
        self.dir.join("mount")
    }

    /// Writes `files` as the driver does (see [`WriteStyle`]). Identical bytes through the
    /// AtomicWriter write nothing; in place, every file is rewritten anyway.
    pub fn rotate(&self, files: &[(&str, &str)]) -> io::Result<()> {
        let target = self.mount_dir();
        match self.style {
            WriteStyle::Atomic => {
                let payload: BTreeMap<String, FileProjection> = files
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), FileProjection::new(v.as_bytes())))
                    .collect();
                atomic_writer::write(&target, &payload)?;
            }
            WriteStyle::InPlace { pause } => {
                for (i, (name, content)) in files.iter().enumerate() {
                    if i > 0 && !pause.is_zero() {
                        std::thread::sleep(pause);
                    }
                    fs::write(target.join(name), content)?;
                }
            }
        }
        Ok(())
    }

    /// NodeUnpublishVolume, then the kubelet's cleanup (`removeMountDir`): the tmpfs
    /// unmounted, `mount/`, `vol_data.json` and the volume directory removed.
    pub fn unpublish(&self) -> io::Result<()> {
        let target = self.mount_dir();
        if let Err(e) = umount2(&target, MntFlags::empty()) {
            if e != nix::errno::Errno::EINVAL && e != nix::errno::Errno::ENOENT {
                umount2(&target, MntFlags::MNT_DETACH).map_err(nix_io)?;
            }
        }
        let _ = fs::remove_dir_all(&target);
        let _ = fs::remove_file(self.dir.join("vol_data.json"));
        match fs::remove_dir(&self.dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

impl Drop for CsiVolume {
    fn drop(&mut self) {
        if let Err(e) = self.unpublish() {
            tracing::warn!(dir = %self.dir.display(), error = %e, "CSI volume cleanup failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishes_like_the_kubelet_and_the_driver_and_cleans_up() {
        let root = tempfile::tempdir().unwrap();
        let vol = CsiVolume::publish(
            root.path(),
            "uid-1",
            "certs",
            "csi.cert-manager.io",
            WriteStyle::Atomic,
            &[("tls.crt", "1")],
        )
        .unwrap();
        let dir = root
            .path()
            .join("pods/uid-1/volumes/kubernetes.io~csi/certs");
        let data: serde_json::Value =
            serde_json::from_slice(&fs::read(dir.join("vol_data.json")).unwrap()).unwrap();
        assert_eq!(data["driverName"], "csi.cert-manager.io");
        assert_eq!(data["specVolID"], "certs");
        assert_eq!(data["volumeLifecycleMode"], "Ephemeral");
        assert_eq!(vol.mount_dir(), dir.join("mount"));
        let first = fs::read_link(dir.join("mount/..data")).unwrap();
        vol.rotate(&[("tls.crt", "1")]).unwrap();
        assert_eq!(fs::read_link(dir.join("mount/..data")).unwrap(), first);
        vol.rotate(&[("tls.crt", "2")]).unwrap();
        assert_ne!(fs::read_link(dir.join("mount/..data")).unwrap(), first);
        assert_eq!(fs::read_to_string(dir.join("mount/tls.crt")).unwrap(), "2");
        drop(vol);
        assert!(!dir.exists());
    }
}
