//! A content hash of a kubelet volume as the container sees it: the tree behind `..data`.
//!
//! The kubelet swaps `..data` on every change of the payload, but also re-creates a
//! volume whose content is unchanged (after a restart, or when a source is rewritten
//! with the same data). Comparing hashes tells a real change from a no-op.
//!
//! Safety rules: `..data` must be a symlink to a `..<timestamp>` directory directly inside
//! the volume dir; no other symlink is ever followed (a symlink is hashed as its target
//! string); at most `max_bytes` are read; anything that cannot be hashed is an error,
//! never skipped. Contents are never logged.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The name of the kubelet's atomic-swap symlink.
pub const DATA_LINK: &str = "..data";

/// A SHA-256 over a volume's files: relative paths, types, modes and contents.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct VolumeHash(pub [u8; 32]);

impl VolumeHash {
    /// All 64 hex digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The first 16 hex digits: enough to tell versions apart in logs and Events.
impl fmt::Display for VolumeHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0[..8].iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for VolumeHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VolumeHash({})", self.to_hex())
    }
}

/// Why a volume could not be hashed.
#[derive(Debug, thiserror::Error)]
pub enum HashError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is not a symlink")]
    DataNotSymlink { path: PathBuf },
    #[error("{path} points to {target:?}, not to a `..<timestamp>` directory inside the volume")]
    DataTarget { path: PathBuf, target: PathBuf },
    #[error("volume content exceeds the {limit}-byte limit")]
    TooLarge { limit: u64 },
    #[error("{path} is neither a regular file, a directory nor a symlink")]
    Unsupported { path: PathBuf },
}

/// Hashes the tree `volume_dir/..data` points to. `Ok(None)` when `..data` does not
/// exist yet (the kubelet has not written the volume).
///
/// Paths, file types, permission bits (including a mode change) and contents all count;
/// the name of the timestamped dir does not, so the same content rewritten into a new
/// `..<timestamp>` dir hashes the same. At most `max_bytes` of contents, names and
/// symlink targets are read, else [`HashError::TooLarge`]. A walk that races the
/// kubelet removing the old timestamped dir fails with [`HashError::Io`]; hash again.
pub fn hash_volume(volume_dir: &Path, max_bytes: u64) -> Result<Option<VolumeHash>, HashError> {
    let link = volume_dir.join(DATA_LINK);
    let meta = match fs::symlink_metadata(&link) {
        Ok(meta) => meta,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(HashError::Io { path: link, source }),
    };
    if !meta.file_type().is_symlink() {
        return Err(HashError::DataNotSymlink { path: link });
    }
    let target = fs::read_link(&link).map_err(|source| HashError::Io {
        path: link.clone(),
        source,
    })?;
    if !is_timestamp_dir_name(&target) {
        return Err(HashError::DataTarget { path: link, target });
    }
    let root = volume_dir.join(&target);
    match fs::symlink_metadata(&root) {
        Ok(meta) if meta.is_dir() => {}
        // The kubelet removed the old dir between our readlink and now: a newer
        // `..data` exists, and its own event will follow.
        Ok(_) => return Err(HashError::DataTarget { path: link, target }),
        Err(source) => return Err(HashError::Io { path: root, source }),
    }
    let mut walker = Walker {
        budget: max_bytes,
        limit: max_bytes,
        hasher: Sha256::new(),
    };
    walker.walk(&root)?;
    Ok(Some(VolumeHash(walker.hasher.finalize().into())))
}

/// A single path component `..<something>` other than `..` itself, e.g.
/// `..2026_11_22_06_00_00.3209346735`.
fn is_timestamp_dir_name(target: &Path) -> bool {
    let name = target.as_os_str().as_bytes();
    name.len() > 2
        && name.starts_with(b"..")
        && !name.contains(&b'/')
        && name != DATA_LINK.as_bytes()
}

struct Walker {
    budget: u64,
    limit: u64,
    hasher: Sha256,
}

/// Type tags in the hashed stream.
const FILE: u8 = b'f';
const DIR: u8 = b'd';
const SYMLINK: u8 = b'l';

impl Walker {
    /// Hashes every entry below `root`, in byte order of their relative paths.
    fn walk(&mut self, root: &Path) -> Result<(), HashError> {
        // Depth-first with an explicit stack; children are pushed in reverse order so
        // they pop in sorted order, giving a pre-order sorted walk.
        let mut stack: Vec<PathBuf> = self.children(root, Path::new(""))?;
        while let Some(rel) = stack.pop() {
            let path = root.join(&rel);
            let meta = fs::symlink_metadata(&path).map_err(|source| HashError::Io {
                path: path.clone(),
                source,
            })?;
            let kind = meta.file_type();
            let mode = meta.permissions().mode() & 0o7777;
            let rel_bytes = rel.as_os_str().as_bytes();
            self.spend(rel_bytes.len() as u64)?;
            if kind.is_dir() {
                self.entry(DIR, rel_bytes, mode, &[]);
                stack.extend(self.children(&path, &rel)?);
            } else if kind.is_symlink() {
                let target = fs::read_link(&path).map_err(|source| HashError::Io {
                    path: path.clone(),
                    source,
                })?;
                let target = target.as_os_str().as_bytes();
                self.spend(target.len() as u64)?;
                self.entry(SYMLINK, rel_bytes, mode, target);
            } else if kind.is_file() {
                let digest = self.file_digest(&path)?;
                self.entry(FILE, rel_bytes, mode, &digest);
            } else {
                // FIFOs, sockets, devices: never opened (a FIFO would block).
                return Err(HashError::Unsupported { path });
            }
        }
        Ok(())
    }

    /// Relative paths of `dir`'s children, reverse-sorted (for the stack).
    fn children(&mut self, dir: &Path, rel: &Path) -> Result<Vec<PathBuf>, HashError> {
        let io_err = |source| HashError::Io {
            path: dir.to_path_buf(),
            source,
        };
        let mut names = Vec::new();
        for entry in fs::read_dir(dir).map_err(io_err)? {
            let entry = entry.map_err(|source| HashError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
            names.push(entry.file_name());
        }
        names.sort_by(|a, b| b.as_bytes().cmp(a.as_bytes()));
        Ok(names.into_iter().map(|n| rel.join(n)).collect())
    }

    /// SHA-256 of a regular file's content, read without following a symlink.
    fn file_digest(&mut self, path: &Path) -> Result<[u8; 32], HashError> {
        let io_err = |source| HashError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(io_err)?;
        // It was a regular file when listed; make sure the opened one still is.
        let meta = file.metadata().map_err(io_err)?;
        if !meta.is_file() {
            return Err(HashError::Unsupported {
                path: path.to_path_buf(),
            });
        }
        // Over budget by its size: refuse without reading it. (Reading stops one byte
        // past the budget should the file grow meanwhile.)
        if meta.len() > self.budget {
            return Err(HashError::TooLarge { limit: self.limit });
        }
        let mut limited = file.take(self.budget.saturating_add(1));
        let mut hasher = Sha256::new();
        let mut buf = [0u8; 8192];
        let mut read: u64 = 0;
        loop {
            let n = match limited.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(io_err(source)),
            };
            hasher.update(&buf[..n]);
            read += n as u64;
        }
        self.spend(read)?;
        Ok(hasher.finalize().into())
    }

    fn spend(&mut self, bytes: u64) -> Result<(), HashError> {
        self.budget = self
            .budget
            .checked_sub(bytes)
            .ok_or(HashError::TooLarge { limit: self.limit })?;
        Ok(())
    }

    /// One entry, length-prefixed so no two trees share a stream.
    fn entry(&mut self, kind: u8, rel: &[u8], mode: u32, content: &[u8]) {
        self.hasher.update([kind]);
        self.hasher.update((rel.len() as u64).to_le_bytes());
        self.hasher.update(rel);
        self.hasher.update(mode.to_le_bytes());
        self.hasher.update((content.len() as u64).to_le_bytes());
        self.hasher.update(content);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A volume dir with the kubelet's layout: `..<ts>/` holding `files`, `..data -> ..<ts>`,
    /// and a top-level link for each first path element.
    fn write_volume(dir: &Path, ts: &str, files: &[(&str, &str, u32)]) {
        let data = dir.join(ts);
        fs::create_dir_all(&data).unwrap();
        for (rel, content, mode) in files {
            let path = data.join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, content).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(*mode)).unwrap();
        }
        let tmp = dir.join("..data_tmp");
        symlink(ts, &tmp).unwrap();
        fs::rename(&tmp, dir.join(DATA_LINK)).unwrap();
        for (rel, _, _) in files {
            let first = rel.split('/').next().unwrap();
            let _ = symlink(format!("..data/{first}"), dir.join(first));
        }
    }

    fn hash(dir: &Path) -> VolumeHash {
        hash_volume(dir, 1 << 20).unwrap().expect("..data exists")
    }

    const TS1: &str = "..2026_11_22_06_00_00.3209346735";
    const TS2: &str = "..2026_11_22_06_01_30.17";

    #[test]
    fn no_data_link_yet_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(hash_volume(dir.path(), 1024).unwrap().is_none());
        // A half-written volume: the timestamped dir exists, `..data` not yet.
        fs::create_dir(dir.path().join(TS1)).unwrap();
        assert!(hash_volume(dir.path(), 1024).unwrap().is_none());
    }

    #[test]
    fn same_content_in_a_new_timestamped_dir_hashes_the_same() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let files = [
            ("app.conf", "x=1\n", 0o644),
            ("conf.d/a/b.conf", "nested", 0o644),
        ];
        write_volume(a.path(), TS1, &files);
        write_volume(b.path(), TS2, &files);
        assert_eq!(hash(a.path()), hash(b.path()));
        // An update in place of the same volume: the kubelet writes TS2, swaps, drops TS1.
        write_volume(a.path(), TS2, &files);
        fs::remove_dir_all(a.path().join(TS1)).unwrap();
        assert_eq!(hash(a.path()), hash(b.path()));
    }

    #[test]
    fn content_names_nesting_and_modes_all_count() {
        let base = [("app.conf", "x=1", 0o644), ("conf.d/a.conf", "a", 0o644)];
        let variants: [&[(&str, &str, u32)]; 5] = [
            &[("app.conf", "x=2", 0o644), ("conf.d/a.conf", "a", 0o644)],
            &[("app.conf", "x=1", 0o600), ("conf.d/a.conf", "a", 0o644)],
            &[("app.conf", "x=1", 0o644), ("conf.d/b.conf", "a", 0o644)],
            &[("app.conf", "x=1", 0o644), ("conf.d/x/a.conf", "a", 0o644)],
            &[("app.conf", "x=1", 0o644)],
        ];
        let dir = tempfile::tempdir().unwrap();
        write_volume(dir.path(), TS1, &base);
        let before = hash(dir.path());
        let mut seen = vec![before];
        for (i, files) in variants.iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            write_volume(dir.path(), TS1, files);
            let h = hash(dir.path());
            assert!(!seen.contains(&h), "variant {i} collides");
            seen.push(h);
        }
        // A mode change alone, in place.
        let file = dir.path().join(TS1).join("app.conf");
        fs::set_permissions(&file, fs::Permissions::from_mode(0o640)).unwrap();
        assert_ne!(hash(dir.path()), before);
    }

    #[test]
    fn symlinks_are_hashed_as_their_target_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        write_volume(dir.path(), TS1, &[("a", "1", 0o644)]);
        symlink("/etc/passwd", dir.path().join(TS1).join("leak")).unwrap();
        let with_passwd = hash(dir.path());
        // Same target string, different target content: the hash cannot tell, because
        // the target was never read.
        let other = tempfile::tempdir().unwrap();
        write_volume(other.path(), TS1, &[("a", "1", 0o644)]);
        symlink("/etc/passwd", other.path().join(TS1).join("leak")).unwrap();
        assert_eq!(hash(other.path()), with_passwd);
        // A 1-byte budget for the whole tree would be blown by /etc/passwd if it were read:
        // `a` (1) + names `a`, `leak` (5) + the target string (11) = 17 bytes.
        assert!(hash_volume(dir.path(), 17).unwrap().is_some());
        // Another target string changes the hash.
        fs::remove_file(dir.path().join(TS1).join("leak")).unwrap();
        symlink("/etc/shadow", dir.path().join(TS1).join("leak")).unwrap();
        assert_ne!(hash(dir.path()), with_passwd);
    }

    #[test]
    fn data_must_point_inside_the_volume() {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), "s").unwrap();
        for target in [
            outside.path().to_str().unwrap().to_owned(),
            "..".to_owned(),
            "../..".to_owned(),
            "..x/../..".to_owned(),
            "plain".to_owned(),
        ] {
            let dir = tempfile::tempdir().unwrap();
            symlink(&target, dir.path().join(DATA_LINK)).unwrap();
            let err = hash_volume(dir.path(), 1024).unwrap_err();
            assert!(
                matches!(err, HashError::DataTarget { .. }),
                "{target}: {err}"
            );
        }
        // `..data` as a plain directory.
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join(DATA_LINK)).unwrap();
        assert!(matches!(
            hash_volume(dir.path(), 1024),
            Err(HashError::DataNotSymlink { .. })
        ));
        // `..data` pointing at a symlink rather than the dir itself.
        let dir = tempfile::tempdir().unwrap();
        symlink(outside.path(), dir.path().join(TS1)).unwrap();
        symlink(TS1, dir.path().join(DATA_LINK)).unwrap();
        assert!(matches!(
            hash_volume(dir.path(), 1024),
            Err(HashError::DataTarget { .. })
        ));
    }

    #[test]
    fn never_reads_more_than_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let big = "x".repeat(10_000);
        write_volume(dir.path(), TS1, &[("a", &big, 0o644), ("b", &big, 0o644)]);
        let names = 2;
        assert!(hash_volume(dir.path(), 20_000 + names).unwrap().is_some());
        let err = hash_volume(dir.path(), 20_000 + names - 1).unwrap_err();
        assert!(
            matches!(err, HashError::TooLarge { limit } if limit == 20_001),
            "{err}"
        );
        assert!(matches!(
            hash_volume(dir.path(), 0),
            Err(HashError::TooLarge { .. })
        ));
    }

    #[test]
    fn special_files_are_errors_not_skipped() {
        let dir = tempfile::tempdir().unwrap();
        write_volume(dir.path(), TS1, &[("a", "1", 0o644)]);
        let fifo = dir.path().join(TS1).join("pipe");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        assert!(matches!(
            hash_volume(dir.path(), 1024),
            Err(HashError::Unsupported { .. })
        ));
    }

    #[test]
    fn display_is_short_hex() {
        let mut bytes = [0u8; 32];
        bytes[0] = 0xab;
        bytes[7] = 0x01;
        bytes[31] = 0xff;
        let h = VolumeHash(bytes);
        assert_eq!(h.to_string(), "ab00000000000001");
        assert_eq!(h.to_hex().len(), 64);
        assert!(h.to_hex().ends_with("ff"));
    }
}
