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
//! something pending or recent (`pacers`: times and volume names only, never content), an
//! additive field of version 2: a file without it reads as no pacers, and an older agent
//! ignores it.
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
        pod_uid: uid.to_owned(),
        plugin,
        volume: volume.to_owned(),
    })
}

fn from_hex(s: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::volume_digest::REST;

    fn key(uid: &str, vol: &str) -> VolumeKey {
        VolumeKey {
            pod_uid: uid.into(),
            plugin: VolumePlugin::Secret,
            volume: vol.into(),
        }
    }

    fn digest(parts: &[(&str, u8)]) -> VolumeDigest {
        VolumeDigest::from_parts(parts.iter().map(|(p, b)| (p.to_string(), [*b; 32])))
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn round_trips_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        assert_eq!(store.load(), SavedState::default());
        let volumes = [
            (key("u1", "tls"), digest(&[(REST, 7)])),
            (key("u2", "a/b"), digest(&[(REST, 255), ("configmap/x", 1)])),
            (key("u3", "token-only"), digest(&[])),
        ];
        let pending = [PendingEviction {
            uid: "u1".into(),
            namespace: "ns".into(),
            name: "web-0".into(),
            cause: "configmap a changed".into(),
        }];
        store.save(&pending, &volumes, &Default::default()).unwrap();
        // Lower-case hex, as version 2 files have always been written.
        let text = fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert!(text.contains(&hex::encode([255u8; 32])), "{text}");
        let loaded = store.load();
        assert_eq!(loaded.pending_evictions, pending);
        let mut digests = loaded.volume_digests();
        digests.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            digests,
            vec![
                (key("u1", "tls"), digest(&[(REST, 7)])),
                (key("u2", "a/b"), digest(&[(REST, 255), ("configmap/x", 1)])),
                (key("u3", "token-only"), digest(&[])),
            ]
        );
    }

    #[test]
    fn pacers_round_trip_and_a_file_without_them_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        let now = jiff::Timestamp::from_second(1_795_694_400).unwrap();
        let mut pacer = Pacer::default();
        pacer.changed(now, "config");
        let pacers: BTreeMap<String, Pacer> = [("u1".to_string(), pacer)].into();
        store.save(&[], &[], &pacers).unwrap();
        assert_eq!(store.load().pacers, pacers);
        // Volume names and times only: nothing of the content.
        let text = fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert!(
            text.contains("\"pacers\"") && text.contains("config"),
            "{text}"
        );
        // A version-2 file from before pacing.
        let old = format!(
            r#"{{"version":2,"key_id":"{}","volumes":{{}},"pending_evictions":[]}}"#,
            store.key().id()
        );
        fs::write(dir.path().join(FILE), old).unwrap();
        let loaded = store.load();
        assert!(loaded.pacers.is_empty());
        assert_eq!(loaded.version, VERSION);
    }

    #[test]
    fn dir_key_and_state_are_private_and_existing_ones_are_tightened() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("state");
        // As reloadlet 0.1 left them: 0755 dir, 0644 file.
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, Permissions::from_mode(0o755)).unwrap();
        fs::write(dir.join(FILE), r#"{"version":1,"volumes":{}}"#).unwrap();
        fs::set_permissions(dir.join(FILE), Permissions::from_mode(0o644)).unwrap();
        let store = StateStore::open(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join(FILE)), 0o600);
        assert_eq!(mode(&dir.join(KEY_FILE)), 0o600);
        assert_eq!(fs::read(dir.join(KEY_FILE)).unwrap().len(), 32);
        store.save(&[], &[], &Default::default()).unwrap();
        assert_eq!(mode(&dir.join(FILE)), 0o600);
        // A fresh dir, created by us.
        let fresh = parent.path().join("a/b");
        StateStore::open(&fresh).unwrap();
        assert_eq!(mode(&fresh), 0o700);
        // No temporary key file is left behind.
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");
    }

    #[test]
    fn the_key_survives_restarts_and_a_lost_key_drops_the_digests() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        let first = store.key().clone();
        store
            .save(
                &[],
                &[(key("u1", "tls"), digest(&[(REST, 7)]))],
                &Default::default(),
            )
            .unwrap();
        let again = StateStore::open(dir.path()).unwrap();
        assert_eq!(again.key(), &first);
        assert_eq!(again.load().volume_digests().len(), 1);
        // The key file is lost: a new key, and the old digests mean nothing.
        fs::remove_file(dir.path().join(KEY_FILE)).unwrap();
        let other = StateStore::open(dir.path()).unwrap();
        assert_ne!(other.key(), &first);
        assert!(other.load().volume_digests().is_empty());
        // A truncated key file is replaced, not used.
        fs::write(dir.path().join(KEY_FILE), b"short").unwrap();
        let replaced = StateStore::open(dir.path()).unwrap();
        assert_eq!(fs::read(dir.path().join(KEY_FILE)).unwrap().len(), 32);
        assert_ne!(replaced.key(), other.key());
    }

    #[test]
    fn the_state_file_holds_no_hash_of_the_content_alone() {
        // Two nodes, the same Secret: their state files share no digest, and none is the
        // plain SHA-256 of the content.
        let content = tempfile::tempdir().unwrap();
        let ts = content.path().join("..2026_01_01_00_00_00.1");
        fs::create_dir(&ts).unwrap();
        fs::write(ts.join("password"), "hunter2").unwrap();
        std::os::unix::fs::symlink("..2026_01_01_00_00_00.1", content.path().join("..data"))
            .unwrap();
        let plain = crate::host::volume_read::legacy_sha256(content.path(), 1024)
            .unwrap()
            .unwrap();
        let mut files = Vec::new();
        for _ in 0..2 {
            let dir = tempfile::tempdir().unwrap();
            let store = StateStore::open(dir.path()).unwrap();
            let d = crate::host::volume_read::hash_volume(
                content.path(),
                1024,
                store.key(),
                &crate::host::volume_read::Layout::whole(),
            )
            .unwrap()
            .unwrap();
            store
                .save(&[], &[(key("u1", "pw"), d)], &Default::default())
                .unwrap();
            files.push(fs::read_to_string(dir.path().join(FILE)).unwrap());
        }
        let hex_in = |text: &str| -> Vec<String> {
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            v["volumes"]["u1/secret/pw"]
                .as_object()
                .unwrap()
                .values()
                .map(|h| h.as_str().unwrap().to_owned())
                .collect()
        };
        let (a, b) = (hex_in(&files[0]), hex_in(&files[1]));
        assert_eq!(a.len(), 1);
        assert_ne!(a, b);
        for text in &files {
            assert!(!text.contains(&hex::encode(plain)), "{text}");
        }
    }

    #[test]
    fn a_version_1_file_is_migrated_to_legacy_hashes_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        fs::write(
            dir.path().join(FILE),
            format!(
                r#"{{"version":1,"volumes":{{"u1/secret/a":"{}"}},"pending_evictions":[{{"uid":"u1","namespace":"ns","name":"p","cause":"c"}}]}}"#,
                "ab".repeat(32)
            ),
        )
        .unwrap();
        let loaded = store.load();
        assert!(loaded.volume_digests().is_empty());
        assert_eq!(loaded.legacy_hashes(), vec![(key("u1", "a"), [0xab; 32])]);
        assert_eq!(loaded.pending_evictions.len(), 1);
        // Written back as version 2, without the unkeyed hashes.
        store
            .save(
                &loaded.pending_evictions,
                &loaded.volume_digests(),
                &loaded.pacers,
            )
            .unwrap();
        let text = fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert!(text.contains("\"version\":2"), "{text}");
        assert!(!text.contains(&"ab".repeat(32)), "{text}");
        assert!(store.load().legacy_hashes().is_empty());
    }

    #[test]
    fn a_torn_or_corrupt_file_means_a_clean_start_not_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        for garbage in [
            &b"{\"version\":2,\"volumes\":{\"u1/sec"[..],
            b"\x00\xff",
            b"[]",
            b"{\"version\":99,\"volumes\":{}}",
        ] {
            fs::write(dir.path().join(FILE), garbage).unwrap();
            assert_eq!(store.load(), SavedState::default());
        }
        // Bad entries inside a valid file are skipped one by one.
        fs::write(
            dir.path().join(FILE),
            format!(
                r#"{{"version":2,"key_id":"{}","volumes":{{"u1/secret/a":{{"":"{}"}},"u1/bogus/a":{{"":"00"}},"x":{{}},"u1/secret/b":{{"":"zz"}}}}}}"#,
                store.key().id(),
                "ab".repeat(32)
            ),
        )
        .unwrap();
        assert_eq!(
            store.load().volume_digests(),
            vec![(key("u1", "a"), digest(&[(REST, 0xab)]))]
        );
    }

    #[test]
    fn an_unwritable_dir_is_a_clear_error() {
        let err = StateStore::open(Path::new("/proc/reloadlet-state"))
            .err()
            .unwrap();
        assert!(
            err.to_string()
                .starts_with("state dir /proc/reloadlet-state"),
            "{err}"
        );
    }
}
