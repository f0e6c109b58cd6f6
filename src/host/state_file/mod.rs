//! State kept across restarts in `--state-dir`: the last content digest acted on per volume and
//! the evictions still pending. Written atomically (write + fsync + rename + fsync dir); a torn
//! or corrupt file is set aside with a warning and reloadlet starts clean — it never crashes.
//!
//! The digests are keyed (HMAC-SHA256, see [`crate::core::volume_digest`]) with a random per-node key
//! kept next to the state in `hash.key`: the state file alone reveals nothing about a Secret.
//! The directory is `0700`, the key and the state file `0600` (existing ones are tightened at
//! start), like the kubelet's own root-only volume directories.
//!
//! Since pacing (docs/pacing.md) the file also holds, per pod UID, the pacer of each pod with
//! something pending or recent (`pacers`: times and ConfigMap/Secret names only, never
//! content), an additive field of version 2: a file without it reads as no pacers, and an
//! older agent ignores it.
//!
//! Version 1 (reloadlet 0.1) held an unkeyed SHA-256 of each whole volume. It is read once
//! for migration ([`SavedState::legacy_hashes`]) and never written again.

use crate::core::model::{VolumeKey, VolumePlugin};
use crate::core::pacing::Pacer;
use crate::core::volume_digest::{HashKey, VolumeDigest};
use serde::{Deserialize, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

const FILE: &str = "state.json";
/// The per-node HMAC key (32 bytes, `0600`). Deleting it makes every volume a new baseline.
pub const KEY_FILE: &str = "hash.key";
const VERSION: u32 = 2;
const LEGACY_VERSION: u32 = 1;
const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;

/// An eviction that was still waiting (for a PDB) when reloadlet stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingEviction {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub cause: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct SavedState {
    pub version: u32,
    /// [`HashKey::id`] of the key the digests were made with.
    #[serde(default)]
    pub key_id: String,
    /// `<pod uid>/<plugin>/<volume>` → part → hex HMAC-SHA256 of the content last acted on.
    pub volumes: BTreeMap<String, BTreeMap<String, String>>,
    #[serde(default)]
    pub pending_evictions: Vec<PendingEviction>,
    /// Pod UID → its pacer (what was deferred, the flap breaker's history).
    #[serde(default)]
    pub pacers: BTreeMap<String, Pacer>,
    /// From a version-1 file: `<pod uid>/<plugin>/<volume>` → hex unkeyed SHA-256 of the whole
    /// volume. Used once for migration, never written.
    #[serde(skip)]
    pub legacy: BTreeMap<String, String>,
}

/// The layout of a version-1 file.
#[derive(Deserialize)]
struct SavedStateV1 {
    volumes: BTreeMap<String, String>,
    #[serde(default)]
    pending_evictions: Vec<PendingEviction>,
}

impl SavedState {
    pub fn volume_digests(&self) -> Vec<(VolumeKey, VolumeDigest)> {
        self.volumes
            .iter()
            .filter_map(|(k, parts)| {
                let parts = parts
                    .iter()
                    .map(|(part, h)| Some((part.clone(), from_hex(h)?)))
                    .collect::<Option<Vec<_>>>()?;
                Some((parse_key(k)?, VolumeDigest::from_parts(parts)))
            })
            .collect()
    }

    /// The unkeyed hashes of a migrated version-1 file.
    pub fn legacy_hashes(&self) -> Vec<(VolumeKey, [u8; 32])> {
        self.legacy
            .iter()
            .filter_map(|(k, v)| Some((parse_key(k)?, from_hex(v)?)))
            .collect()
    }
}

/// The pacers saved in `dir`'s state file, read only (for `explain` in the agent's pod: it
/// neither creates nor tightens anything). `None`: no file, or one that cannot be read.
pub fn read_pacers(dir: &Path) -> Option<BTreeMap<String, Pacer>> {
    let bytes = fs::read(dir.join(FILE)).ok()?;
    #[derive(Deserialize)]
    struct PacersOnly {
        version: u32,
        #[serde(default)]
        pacers: BTreeMap<String, Pacer>,
    }
    let saved: PacersOnly = serde_json::from_slice(&bytes).ok()?;
    (saved.version == VERSION).then_some(saved.pacers)
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state dir {dir}: {source}")]
    Io { dir: PathBuf, source: io::Error },
}

#[derive(Clone)]
pub struct StateStore {
    dir: PathBuf,
    key: HashKey,
}

impl StateStore {
    /// Creates the directory (`0700`) if needed, tightens an existing one and its files, checks
    /// it is writable and loads (or creates) the node's hash key.
    pub fn open(dir: &Path) -> Result<Self, StateError> {
        let io_err = |source| StateError::Io {
            dir: dir.to_owned(),
            source,
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)
            .map_err(io_err)?;
        // An existing directory (e.g. 0755 from reloadlet 0.1) is tightened.
        fs::set_permissions(dir, Permissions::from_mode(DIR_MODE)).map_err(io_err)?;
        for name in [FILE, &format!("{FILE}.corrupt"), &format!(".{FILE}.tmp")] {
            match fs::set_permissions(dir.join(name), Permissions::from_mode(FILE_MODE)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err(e)),
                _ => {}
            }
        }
        let probe = dir.join(".write-test");
        fs::write(&probe, b"").map_err(io_err)?;
        let _ = fs::remove_file(probe);
        let key = load_or_create_key(dir).map_err(io_err)?;
        Ok(Self {
            dir: dir.to_owned(),
            key,
        })
    }

    /// The node's key for content digests.
    pub fn key(&self) -> &HashKey {
        &self.key
    }

    /// Loads the saved state. Missing → empty. Unreadable or corrupt → empty, with a warning,
    /// and the bad file kept as `state.json.corrupt` for inspection. Digests made with another
    /// key (the key file was lost) are dropped: every volume is a new baseline.
    pub fn load(&self) -> SavedState {
        let path = self.dir.join(FILE);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return SavedState::default(),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read saved state; starting clean");
                return SavedState::default();
            }
        };
        let corrupt = |e: &dyn std::fmt::Display| {
            let aside = self.dir.join(format!("{FILE}.corrupt"));
            let _ = fs::rename(&path, &aside);
            tracing::warn!(path = %path.display(), error = %e, kept = %aside.display(), "saved state is corrupt; starting clean (every volume is a new baseline)");
            SavedState::default()
        };
        #[derive(Deserialize)]
        struct Version {
            version: u32,
        }
        let version = match serde_json::from_slice::<Version>(&bytes) {
            Ok(v) => v.version,
            Err(e) => return corrupt(&e),
        };
        match version {
            VERSION => match serde_json::from_slice::<SavedState>(&bytes) {
                Ok(s) if s.key_id == self.key.id() => s,
                Ok(s) => {
                    tracing::warn!(path = %path.display(), "saved state was made with another hash key (was {KEY_FILE} replaced?); every volume is a new baseline");
                    SavedState {
                        volumes: BTreeMap::new(),
                        ..s
                    }
                }
                Err(e) => corrupt(&e),
            },
            LEGACY_VERSION => match serde_json::from_slice::<SavedStateV1>(&bytes) {
                Ok(v1) => {
                    tracing::info!(path = %path.display(), volumes = v1.volumes.len(), "migrating saved state from version 1 (unkeyed hashes); the next write replaces it");
                    SavedState {
                        version: VERSION,
                        key_id: self.key.id(),
                        volumes: BTreeMap::new(),
                        pending_evictions: v1.pending_evictions,
                        pacers: BTreeMap::new(),
                        legacy: v1.volumes,
                    }
                }
                Err(e) => corrupt(&e),
            },
            other => {
                tracing::warn!(path = %path.display(), version = other, "saved state has an unknown version; starting clean");
                SavedState::default()
            }
        }
    }

    /// Writes the state file: the evictions still pending and each volume's digest. Encoded
    /// straight from the caller's data (at 1,000 volumes a copy of the digests, then one of
    /// their hex form, was the agent's largest transient allocation).
    pub fn save(
        &self,
        pending_evictions: &[PendingEviction],
        volumes: &[(VolumeKey, VolumeDigest)],
        pacers: &BTreeMap<String, Pacer>,
    ) -> io::Result<()> {
        let file = StateFile {
            version: VERSION,
            key_id: self.key.id(),
            volumes: Volumes(volumes),
            pending_evictions,
            pacers,
        };
        let tmp = self.dir.join(format!(".{FILE}.tmp"));
        let bytes = serde_json::to_vec(&file).map_err(io::Error::other)?;
        {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(FILE_MODE)
                .open(&tmp)?;
            // `mode` applies only to a new file: a stale one keeps its own.
            f.set_permissions(Permissions::from_mode(FILE_MODE))?;
            f.write_all(&bytes)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, self.dir.join(FILE))?;
        File::open(&self.dir)?.sync_all()
    }
}

/// The file as [`StateStore::save`] writes it; [`SavedState`] is the same layout as read.
#[derive(Serialize)]
struct StateFile<'a> {
    version: u32,
    key_id: String,
    volumes: Volumes<'a>,
    pending_evictions: &'a [PendingEviction],
    pacers: &'a BTreeMap<String, Pacer>,
}

/// `<pod uid>/<plugin>/<volume>` → part → hex digest.
struct Volumes<'a>(&'a [(VolumeKey, VolumeDigest)]);

impl Serialize for Volumes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(
            self.0
                .iter()
                .map(|(key, digest)| (VolumeName(key), Parts(digest))),
        )
    }
}

/// The key of a volume in the file; [`parse_key`] reads it back.
struct VolumeName<'a>(&'a VolumeKey);

impl Serialize for VolumeName<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let k = self.0;
        s.collect_str(&format_args!(
            "{}/{}/{}",
            k.pod_uid,
            k.plugin.as_str(),
            k.volume
        ))
    }
}

struct Parts<'a>(&'a VolumeDigest);

impl Serialize for Parts<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.parts().map(|(part, hash)| (part, Hex(hash))))
    }
}

/// A digest as lower-case hex, encoded on the stack.
struct Hex<'a>(&'a [u8; 32]);

impl Serialize for Hex<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut text = [0u8; 64];
        hex::encode_to_slice(self.0, &mut text).expect("32 bytes are 64 hex digits");
        s.serialize_str(std::str::from_utf8(&text).expect("hex digits are ASCII"))
    }
}

/// Reads the key file, or creates it atomically: the key is written to a private temporary
/// file (`O_EXCL`, `0600`), synced, then hard-linked into place, which fails if another
/// process won the race (its key is then used). A key file of the wrong size is replaced.
fn load_or_create_key(dir: &Path) -> io::Result<HashKey> {
    let path = dir.join(KEY_FILE);
    let replace = match fs::read(&path) {
        Ok(bytes) => match <[u8; HashKey::LEN]>::try_from(bytes.as_slice()) {
            Ok(bytes) => {
                fs::set_permissions(&path, Permissions::from_mode(FILE_MODE))?;
                return Ok(HashKey::from_bytes(bytes));
            }
            Err(_) => {
                tracing::warn!(path = %path.display(), "hash key file has the wrong size; replacing it (every volume becomes a new baseline)");
                true
            }
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    let key = HashKey::generate()?;
    let tmp = dir.join(format!(".{KEY_FILE}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&tmp)?;
        f.write_all(key.as_bytes())?;
        f.sync_all()?;
    }
    let placed = if replace {
        fs::rename(&tmp, &path)
    } else {
        let linked = fs::hard_link(&tmp, &path);
        let _ = fs::remove_file(&tmp);
        linked
    };
    match placed {
        Ok(()) => {
            File::open(dir)?.sync_all()?;
            tracing::debug!(path = %path.display(), "created the node's hash key for saved state");
            Ok(key)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => load_or_create_key(dir),
        Err(e) => Err(e),
    }
}

fn parse_key(s: &str) -> Option<VolumeKey> {
    let mut parts = s.splitn(3, '/');
    let (uid, plugin, volume) = (parts.next()?, parts.next()?, parts.next()?);
    let plugin = VolumePlugin::ALL
        .into_iter()
        .find(|p| p.as_str() == plugin)?;
    (!uid.is_empty() && !volume.is_empty()).then(|| VolumeKey {
        pod_uid: uid.into(),
        plugin,
        volume: volume.into(),
    })
}

fn from_hex(s: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests;
