//! State kept across restarts in `--state-dir`: the last content hash acted on per volume and
//! the evictions still pending. Written atomically (write + fsync + rename + fsync dir); a torn
//! or corrupt file is set aside with a warning and reloadlet starts clean — it never crashes.

use crate::model::{VolumeKey, VolumePlugin};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

const FILE: &str = "state.json";
const VERSION: u32 = 1;

/// An eviction that was still waiting (for a PDB) when reloadlet stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingEviction {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub cause: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedState {
    pub version: u32,
    /// `<pod uid>/<plugin>/<volume>` → hex SHA-256 of the content last acted on.
    pub volumes: BTreeMap<String, String>,
    #[serde(default)]
    pub pending_evictions: Vec<PendingEviction>,
}

impl SavedState {
    pub fn volume_hashes(&self) -> Vec<(VolumeKey, [u8; 32])> {
        self.volumes
            .iter()
            .filter_map(|(k, v)| Some((parse_key(k)?, from_hex(v)?)))
            .collect()
    }

    pub fn set_volumes(&mut self, hashes: impl IntoIterator<Item = (VolumeKey, [u8; 32])>) {
        self.volumes = hashes
            .into_iter()
            .map(|(k, h)| (format_key(&k), to_hex(&h)))
            .collect();
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state dir {dir}: {source}")]
    Io { dir: PathBuf, source: io::Error },
}

pub struct StateStore {
    dir: PathBuf,
}

impl StateStore {
    /// Creates the directory if needed and checks it is writable.
    pub fn open(dir: &Path) -> Result<Self, StateError> {
        let io_err = |source| StateError::Io {
            dir: dir.to_owned(),
            source,
        };
        fs::create_dir_all(dir).map_err(io_err)?;
        let probe = dir.join(".write-test");
        fs::write(&probe, b"").map_err(io_err)?;
        let _ = fs::remove_file(probe);
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    /// Loads the saved state. Missing → empty. Unreadable or corrupt → empty, with a warning,
    /// and the bad file kept as `state.json.corrupt` for inspection.
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
        match serde_json::from_slice::<SavedState>(&bytes) {
            Ok(s) if s.version == VERSION => s,
            Ok(s) => {
                tracing::warn!(path = %path.display(), version = s.version, "saved state has an unknown version; starting clean");
                SavedState::default()
            }
            Err(e) => {
                let aside = self.dir.join(format!("{FILE}.corrupt"));
                let _ = fs::rename(&path, &aside);
                tracing::warn!(path = %path.display(), error = %e, kept = %aside.display(), "saved state is corrupt; starting clean (every volume is a new baseline)");
                SavedState::default()
            }
        }
    }

    pub fn save(&self, state: &SavedState) -> io::Result<()> {
        let mut state = state.clone();
        state.version = VERSION;
        let tmp = self.dir.join(format!(".{FILE}.tmp"));
        let bytes = serde_json::to_vec(&state).map_err(io::Error::other)?;
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, self.dir.join(FILE))?;
        File::open(&self.dir)?.sync_all()
    }
}

fn format_key(k: &VolumeKey) -> String {
    format!("{}/{}/{}", k.pod_uid, k.plugin.as_str(), k.volume)
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

fn to_hex(bytes: &[u8; 32]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(uid: &str, vol: &str) -> VolumeKey {
        VolumeKey {
            pod_uid: uid.into(),
            plugin: VolumePlugin::Secret,
            volume: vol.into(),
        }
    }

    #[test]
    fn round_trips_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        assert_eq!(store.load(), SavedState::default());
        let mut s = SavedState::default();
        s.set_volumes([
            (key("u1", "tls"), [7u8; 32]),
            (key("u2", "a/b"), [255u8; 32]),
        ]);
        s.pending_evictions.push(PendingEviction {
            uid: "u1".into(),
            namespace: "ns".into(),
            name: "web-0".into(),
            cause: "configmap a changed".into(),
        });
        store.save(&s).unwrap();
        let loaded = store.load();
        assert_eq!(loaded.pending_evictions, s.pending_evictions);
        let mut hashes = loaded.volume_hashes();
        hashes.sort();
        assert_eq!(
            hashes,
            vec![
                (key("u1", "tls"), [7u8; 32]),
                (key("u2", "a/b"), [255u8; 32])
            ]
        );
    }

    #[test]
    fn a_torn_or_corrupt_file_means_a_clean_start_not_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        for garbage in [
            &b"{\"version\":1,\"volumes\":{\"u1/sec"[..],
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
                r#"{{"version":1,"volumes":{{"u1/secret/a":"{}","u1/bogus/a":"00","x":"zz"}}}}"#,
                "ab".repeat(32)
            ),
        )
        .unwrap();
        assert_eq!(
            store.load().volume_hashes(),
            vec![(key("u1", "a"), [0xab; 32])]
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
