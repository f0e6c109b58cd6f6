//! STUB (replaced by the watch branch).
use crate::model::VolumeKey;
use std::path::{Path, PathBuf};
use std::time::Duration;
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookCause {
    Discovered,
    Swap,
    Remounted,
    Rescan,
}
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    Look { key: VolumeKey, cause: LookCause },
    VolumeGone(VolumeKey),
    PodGone { pod_uid: String },
    Overflow,
}
#[derive(Clone, Debug, Default)]
pub struct WatchStats {
    pub watches: usize,
    pub pods: usize,
    pub volumes: usize,
    pub unwatched_volumes: usize,
    pub overflows: u64,
    pub watch_limit_errors: u64,
}
pub struct WatcherOptions {
    pub rescan_interval: Duration,
}
#[derive(Debug, thiserror::Error)]
#[error("stub")]
pub struct WatchError;
pub struct VolumeWatcher;
impl VolumeWatcher {
    pub fn new(_kubelet_root: &Path, _opts: WatcherOptions) -> Result<Self, WatchError> {
        unimplemented!()
    }
    pub async fn next_batch(&mut self) -> Result<Vec<WatchEvent>, WatchError> {
        unimplemented!()
    }
    pub fn stats(&self) -> WatchStats {
        unimplemented!()
    }
    pub fn volume_dir(&self, _key: &VolumeKey) -> PathBuf {
        unimplemented!()
    }
    pub fn volumes(&self) -> Vec<VolumeKey> {
        unimplemented!()
    }
}
