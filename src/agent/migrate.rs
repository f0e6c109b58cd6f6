//! Volumes saved by reloadlet 0.1: its state file (version 1) held an unkeyed SHA-256 of
//! each whole volume, compared once, at the volume's first look.

use super::read_index;
use crate::core::detect::ChangeDetector;
use crate::core::model::{VolumeKey, VolumePlugin};
use crate::core::pod_index::PodIndex;
use crate::core::volume_digest::VolumeDigest;
use crate::host::volume_read::legacy_sha256;
use std::path::Path;
use std::sync::RwLock;

/// First look at a volume saved by reloadlet 0.1 (an unkeyed SHA-256 of the whole tree). The
/// same whole-tree hash now means nothing changed while reloadlet was down: the look is a
/// baseline. Another one in a volume whose every file comes from ConfigMaps/Secrets is a
/// real change: acted on like any (all its sources named). In a projected volume with
/// downwardAPI/token files it cannot be told from a label edit or token refresh: a
/// baseline, logged (the one window in which a change is not acted on).
pub fn migrate(
    detector: &mut ChangeDetector<VolumeDigest>,
    index: &RwLock<PodIndex>,
    key: &VolumeKey,
    dir: &Path,
    old: [u8; 32],
    max_bytes: u64,
) {
    let whole = match legacy_sha256(dir, max_bytes) {
        Ok(Some(h)) => h,
        Ok(None) | Err(_) => return,
    };
    if whole == old {
        return;
    }
    let only_sources = key.plugin != VolumePlugin::Projected
        || read_index(index)
            .get(&key.pod_uid)
            .and_then(|p| p.volume(&key.volume))
            .is_some_and(|v| v.other_paths.is_empty());
    if only_sources {
        tracing::info!(volume = %key, "volume changed while reloadlet was down (migrated state)");
        detector.seed(key, VolumeDigest::default());
    } else {
        tracing::info!(volume = %key, "migrated state: cannot tell a ConfigMap/Secret change made while reloadlet was down from a downwardAPI/token update in this projected volume; taken as the new baseline");
    }
}
