//! A pod's volumes on disk, where and how the kubelet puts them:
//! `<root>/pods/<uid>/volumes/<plugin>/<name>` (mode 0777), a tmpfs on each secret,
//! projected and downward-API volume, content written through the [`atomic_writer`].
//!
//! [`atomic_writer`]: crate::volumes::atomic_writer

pub mod atomic_writer;
pub mod csi;
pub mod projection;

use crate::volumes::atomic_writer::WriteOutcome;
use crate::volumes::projection::{
    Payload, PodCertificates, ProjectionError, SourceLookup, TokenCache,
};
use k8s_openapi::api::core::v1::{Pod, ProjectedVolumeSource, Volume, VolumeProjection};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The kind of a pod volume, as far as the simulator handles it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeKind {
    ConfigMap,
    Secret,
    Projected,
    DownwardApi,
    /// `medium: Memory` gets a tmpfs.
    EmptyDir {
        memory: bool,
    },
    /// Bound from the host as is.
    HostPath(PathBuf),
    /// Anything else (PVCs, CSI …): not simulated, not mounted.
    Unsupported,
}

impl VolumeKind {
    /// The kind of `volume` in a pod spec.
    pub fn of(volume: &Volume) -> Self {
        if volume.config_map.is_some() {
            Self::ConfigMap
        } else if volume.secret.is_some() {
            Self::Secret
        } else if volume.projected.is_some() {
            Self::Projected
        } else if volume.downward_api.is_some() {
            Self::DownwardApi
        } else if let Some(e) = &volume.empty_dir {
            Self::EmptyDir {
                memory: e.medium.as_deref() == Some("Memory"),
            }
        } else if let Some(h) = &volume.host_path {
            Self::HostPath(PathBuf::from(&h.path))
        } else {
            Self::Unsupported
        }
    }

    /// The plugin directory under `pods/<uid>/volumes/`, for kinds that have one.
    pub fn plugin_dir(&self) -> Option<&'static str> {
        match self {
            Self::ConfigMap => Some("kubernetes.io~configmap"),
            Self::Secret => Some("kubernetes.io~secret"),
            Self::Projected => Some("kubernetes.io~projected"),
            Self::DownwardApi => Some("kubernetes.io~downward-api"),
            Self::EmptyDir { .. } => Some("kubernetes.io~empty-dir"),
            Self::HostPath(_) | Self::Unsupported => None,
        }
    }

    /// Backed by a tmpfs the kubelet mounts on the volume dir.
    pub fn is_tmpfs(&self) -> bool {
        matches!(
            self,
            Self::Secret | Self::Projected | Self::DownwardApi | Self::EmptyDir { memory: true }
        )
    }

    /// Written by the AtomicWriter (and re-written on every sync).
    pub fn is_projected(&self) -> bool {
        matches!(
            self,
            Self::ConfigMap | Self::Secret | Self::Projected | Self::DownwardApi
        )
    }
}

/// A ConfigMap or a Secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKind {
    ConfigMap,
    Secret,
}

/// Whether `volume` takes content from the ConfigMap/Secret `name` (directly or as a
/// projected source).
pub fn volume_references(volume: &Volume, kind: SourceKind, name: &str) -> bool {
    match kind {
        SourceKind::ConfigMap => {
            volume.config_map.as_ref().is_some_and(|c| c.name == name)
                || projected_sources(volume)
                    .any(|p| p.config_map.as_ref().is_some_and(|c| c.name == name))
        }
        SourceKind::Secret => {
            volume
                .secret
                .as_ref()
                .is_some_and(|s| s.secret_name.as_deref() == Some(name))
                || projected_sources(volume)
                    .any(|p| p.secret.as_ref().is_some_and(|s| s.name == name))
        }
    }
}

fn projected_sources(volume: &Volume) -> impl Iterator<Item = &VolumeProjection> {
    volume
        .projected
        .iter()
        .flat_map(|p| p.sources.iter().flatten())
}

/// A projected volume with a `serviceAccountToken` source (rotated every ~48 minutes).
pub fn has_token_source(volume: &Volume) -> bool {
    projected_sources(volume).any(|p| p.service_account_token.is_some())
}

/// What the kubelet renews on its own schedule, re-writing the volumes that project it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rotation {
    /// Service-account tokens (`serviceAccountToken` sources; every ~48 minutes for
    /// `kube-api-access-*`).
    Tokens,
    /// Pod certificates (`podCertificate` sources; from `beginRefreshAt`, about daily with
    /// the `kubernetes.io` signers).
    PodCertificates,
}

impl Rotation {
    fn projects(self, volume: &Volume) -> bool {
        match self {
            Self::Tokens => has_token_source(volume),
            Self::PodCertificates => projected_sources(volume).any(|p| p.pod_certificate.is_some()),
        }
    }
}

/// Errors setting up or tearing down volumes.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{op} {path}: {source}")]
    Mount {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("volume {volume:?}: {source}")]
    Projection {
        volume: String,
        #[source]
        source: ProjectionError,
    },
    #[error("volume {0:?}: not in the pod spec")]
    Unknown(String),
    #[error("pod has no metadata.uid")]
    NoUid,
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> VolumeError + 'a {
    move |source| VolumeError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// One volume of the pod.
#[derive(Debug)]
pub struct PodVolume {
    pub name: String,
    pub kind: VolumeKind,
    /// The volume dir, or the host path for hostPath volumes; `None` if unsupported.
    pub dir: Option<PathBuf>,
    /// A tmpfs is mounted on `dir` (by us).
    pub mounted: bool,
    spec: Volume,
}

/// Every volume of one pod, on disk. Dropping it unmounts and removes everything.
#[derive(Debug)]
pub struct PodVolumes {
    pod_dir: PathBuf,
    volumes: Vec<PodVolume>,
    tokens: TokenCache,
    certificates: PodCertificates,
    torn_down: bool,
}

impl PodVolumes {
    /// Creates `<root>/pods/<uid>/volumes/<plugin>/<name>` (0777) for each volume of `pod`.
    /// Mounts nothing and writes nothing yet.
    pub fn create(root: &Path, pod: &Pod) -> Result<Self, VolumeError> {
        let uid = pod
            .metadata
            .uid
            .as_deref()
            .filter(|u| !u.is_empty() && !u.contains('/'))
            .ok_or(VolumeError::NoUid)?;
        fs::create_dir_all(root).map_err(io_err("mkdir", root))?;
        let root = fs::canonicalize(root).map_err(io_err("realpath", root))?;
        let pod_dir = root.join("pods").join(uid);
        let mut this = PodVolumes {
            pod_dir: pod_dir.clone(),
            volumes: Vec::new(),
            tokens: TokenCache::default(),
            certificates: PodCertificates::default(),
            torn_down: false,
        };
        let volumes_dir = pod_dir.join("volumes");
        fs::create_dir_all(&volumes_dir).map_err(io_err("mkdir", &volumes_dir))?;
        for spec in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            let kind = VolumeKind::of(spec);
            let dir = match (&kind, kind.plugin_dir()) {
                (VolumeKind::HostPath(p), _) => Some(p.clone()),
                (_, Some(plugin)) => {
                    let dir = volumes_dir.join(plugin).join(&spec.name);
                    fs::create_dir_all(&dir).map_err(io_err("mkdir", &dir))?;
                    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777))
                        .map_err(io_err("chmod", &dir))?;
                    Some(dir)
                }
                _ => None,
            };
            this.volumes.push(PodVolume {
                name: spec.name.clone(),
                kind,
                dir,
                mounted: false,
                spec: spec.clone(),
            });
        }
        Ok(this)
    }

    /// `<root>/pods/<uid>`.
    pub fn pod_dir(&self) -> &Path {
        &self.pod_dir
    }

    pub fn volumes(&self) -> &[PodVolume] {
        &self.volumes
    }

    pub fn get(&self, name: &str) -> Option<&PodVolume> {
        self.volumes.iter().find(|v| v.name == name)
    }

    /// Mounts a tmpfs on every secret/projected/downward-API (and memory emptyDir) volume
    /// dir not mounted yet, as the kubelet does before the first write.
    pub fn mount_tmpfs(&mut self) -> Result<(), VolumeError> {
        for v in &mut self.volumes {
            let Some(dir) = &v.dir else { continue };
            if !v.kind.is_tmpfs() || v.mounted {
                continue;
            }
            mount(
                Some("tmpfs"),
                dir,
                Some("tmpfs"),
                MsFlags::empty(),
                None::<&str>,
            )
            .map_err(|source| VolumeError::Mount {
                op: "mount tmpfs on",
                path: dir.clone(),
                source,
            })?;
            v.mounted = true;
        }
        Ok(())
    }

    /// The payload of volume `name` now.
    pub fn payload(
        &mut self,
        name: &str,
        pod: &Pod,
        lookup: &dyn SourceLookup,
    ) -> Result<Option<Payload>, VolumeError> {
        let v = self
            .volumes
            .iter()
            .find(|v| v.name == name)
            .ok_or_else(|| VolumeError::Unknown(name.into()))?;
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let spec = &v.spec;
        let wrap = |source| VolumeError::Projection {
            volume: name.to_owned(),
            source,
        };
        let payload = if let Some(src) = &spec.config_map {
            projection::configmap_volume(src, ns, lookup).map_err(wrap)?
        } else if let Some(src) = &spec.secret {
            projection::secret_volume(src, ns, lookup).map_err(wrap)?
        } else if let Some(src) = &spec.projected {
            projection::projected_volume(src, pod, lookup, &mut self.tokens, &mut self.certificates)
                .map_err(wrap)?
        } else if let Some(src) = &spec.downward_api {
            let as_projected = ProjectedVolumeSource {
                default_mode: src.default_mode,
                sources: Some(vec![VolumeProjection {
                    downward_api: Some(k8s_openapi::api::core::v1::DownwardAPIProjection {
                        items: src.items.clone(),
                    }),
                    ..Default::default()
                }]),
            };
            projection::projected_volume(
                &as_projected,
                pod,
                lookup,
                &mut self.tokens,
                &mut self.certificates,
            )
            .map_err(wrap)?
        } else {
            return Ok(None);
        };
        Ok(Some(payload))
    }

    /// Writes volume `name` through the AtomicWriter (a no-op when nothing changed).
    /// Returns `None` for volumes that are not written (emptyDir, hostPath …).
    pub fn project_volume(
        &mut self,
        name: &str,
        pod: &Pod,
        lookup: &dyn SourceLookup,
    ) -> Result<Option<WriteOutcome>, VolumeError> {
        let Some(payload) = self.payload(name, pod, lookup)? else {
            return Ok(None);
        };
        let v = self
            .get(name)
            .ok_or_else(|| VolumeError::Unknown(name.into()))?;
        let Some(dir) = v.dir.clone() else {
            return Ok(None);
        };
        let outcome = atomic_writer::write(&dir, &payload).map_err(io_err("write volume", &dir))?;
        Ok(Some(outcome))
    }

    /// Writes every configmap/secret/projected/downward-API volume (the kubelet's sync), one
    /// after the other. Each outcome comes with [`crate::clock::monotonic_ns`] read
    /// right after its write (for a swap: just after `..data` was renamed).
    pub fn project_all(
        &mut self,
        pod: &Pod,
        lookup: &dyn SourceLookup,
    ) -> Result<Vec<(String, WriteOutcome, i128)>, VolumeError> {
        let names: Vec<String> = self
            .volumes
            .iter()
            .filter(|v| v.kind.is_projected())
            .map(|v| v.name.clone())
            .collect();
        let mut outcomes = Vec::new();
        for name in names {
            if let Some(outcome) = self.project_volume(&name, pod, lookup)? {
                outcomes.push((name, outcome, crate::clock::monotonic_ns()));
            }
        }
        Ok(outcomes)
    }

    /// Names of the volumes fed by the ConfigMap/Secret `name`.
    pub fn volumes_referencing(&self, kind: SourceKind, name: &str) -> Vec<String> {
        self.volumes
            .iter()
            .filter(|v| volume_references(&v.spec, kind, name))
            .map(|v| v.name.clone())
            .collect()
    }

    /// A refresh: new service-account tokens or pod certificates, re-written into every volume
    /// that projects them (`kube-api-access-*` for tokens), which swaps its `..data`.
    pub fn rotate(
        &mut self,
        what: Rotation,
        pod: &Pod,
        lookup: &dyn SourceLookup,
    ) -> Result<Vec<(String, WriteOutcome)>, VolumeError> {
        match what {
            Rotation::Tokens => self.tokens.rotate(),
            Rotation::PodCertificates => self.certificates.rotate(),
        }
        let names: Vec<String> = self
            .volumes
            .iter()
            .filter(|v| what.projects(&v.spec))
            .map(|v| v.name.clone())
            .collect();
        let mut outcomes = Vec::new();
        for name in names {
            if let Some(outcome) = self.project_volume(&name, pod, lookup)? {
                outcomes.push((name, outcome));
            }
        }
        Ok(outcomes)
    }

    /// Unmounts everything under the pod dir and removes it.
    pub fn teardown(mut self) -> Result<(), VolumeError> {
        self.teardown_inner()
    }

    fn teardown_inner(&mut self) -> Result<(), VolumeError> {
        if self.torn_down {
            return Ok(());
        }
        for mount_point in mounts_under(&self.pod_dir) {
            if let Err(e) = umount2(&mount_point, MntFlags::empty()) {
                umount2(&mount_point, MntFlags::MNT_DETACH).map_err(|_| VolumeError::Mount {
                    op: "umount",
                    path: mount_point.clone(),
                    source: e,
                })?;
            }
        }
        for v in &mut self.volumes {
            v.mounted = false;
        }
        match fs::remove_dir_all(&self.pod_dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("rm -rf", &self.pod_dir)(e)),
        }
        self.torn_down = true;
        Ok(())
    }
}

impl Drop for PodVolumes {
    fn drop(&mut self) {
        if let Err(e) = self.teardown_inner() {
            tracing::warn!(pod_dir = %self.pod_dir.display(), error = %e, "volume teardown failed");
        }
    }
}

/// Mount points at or below `dir` in this mount namespace, deepest first.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(text) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| {
            PathBuf::from(
                p.replace("\\040", " ")
                    .replace("\\011", "\t")
                    .replace("\\012", "\n")
                    .replace("\\134", "\\"),
            )
        })
        .filter(|p| p.starts_with(dir))
        .collect();
    // stacked mounts appear once each, in mount order: unmount the last first
    found.reverse();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found
}
