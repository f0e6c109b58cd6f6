//! A keyed content hash of a kubelet volume as the container sees it: the tree behind `..data`.
//!
//! The kubelet swaps `..data` on every change of the payload, but also re-creates a
//! volume whose content is unchanged (after a restart, or when a source is rewritten
//! with the same data), and re-projects a `projected` volume on every pod sync (a label
//! change rewrites its downwardAPI files, a token refresh its serviceAccountToken file).
//! Comparing hashes of the files that ConfigMaps and Secrets write tells a real change from
//! a no-op.
//!
//! A [`VolumeDigest`] holds one HMAC-SHA256 per *part* of the volume: a projected source whose
//! files the pod spec names (`items`) is a part of its own, every other ConfigMap/Secret file
//! belongs to the [`REST`] part, and files of other sources (see [`Layout`]) are not hashed.
//! The HMAC key is a random per-node [`HashKey`], so a saved digest says nothing about the
//! content to whoever reads the state file without the key (no offline dictionary attack on a
//! short Secret). Digests have no `Display`; their `Debug` shows no bytes: a content hash never
//! reaches a log, an Event or a metric.
//!
//! Safety rules: `..data` must be a symlink to a `..<timestamp>` directory directly inside
//! the volume dir; no other symlink is ever followed (a symlink is hashed as its target
//! string); at most `max_bytes` are read; anything that cannot be hashed is an error,
//! never skipped. Contents are never logged.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{self as fs_sys, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::core::model::{SourceRef, VolumeSpec};

/// The name of the kubelet's atomic-swap symlink.
pub const DATA_LINK: &str = "..data";

/// The part holding every ConfigMap/Secret file the pod spec does not attribute to one source.
pub const REST: &str = "";

/// The per-node secret key of the content hashes (32 random bytes).
#[derive(Clone, PartialEq, Eq)]
pub struct HashKey([u8; 32]);

impl HashKey {
    pub const LEN: usize = 32;

    /// A fresh key from the kernel's CSPRNG (`getrandom(2)`).
    pub fn generate() -> io::Result<Self> {
        let mut bytes = [0u8; Self::LEN];
        getrandom::fill(&mut bytes).map_err(io::Error::other)?;
        Ok(Self(bytes))
    }

    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    fn mac(&self) -> Hmac<Sha256> {
        Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes a key of any length")
    }

    /// A short public name of the key (an HMAC of a fixed label, not of any content): tells
    /// whether saved digests were made with this key.
    pub fn id(&self) -> String {
        let mut mac = self.mac();
        mac.update(b"reloadlet state key id");
        hex::encode(&mac.finalize().into_bytes()[..8])
    }
}

/// Never shows the key.
impl fmt::Debug for HashKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HashKey(..)")
    }
}

/// The keyed hashes of a volume's parts (part name → HMAC-SHA256), sorted by part name. A
/// part with no file is absent, so a volume without ConfigMap/Secret files has an empty
/// digest. Shared, not copied: the state file's snapshot of 1,000 digests is 1,000 reference
/// counts, and one part costs 48 bytes plus its name (a `BTreeMap` node was ~600).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct VolumeDigest(Arc<[(Box<str>, [u8; 32])]>);

impl VolumeDigest {
    /// From part → hash pairs in any order; a part named twice keeps its last hash. Pairs
    /// already in order (a `BTreeMap`'s) cost one pass: the sort is stable and finds the run.
    pub fn from_parts(parts: impl IntoIterator<Item = (String, [u8; 32])>) -> Self {
        let mut parts: Vec<(Box<str>, [u8; 32])> = parts
            .into_iter()
            .map(|(part, hash)| (part.into_boxed_str(), hash))
            .collect();
        parts.sort_by(|a, b| a.0.cmp(&b.0));
        // Of equal names (kept in their order by the stable sort) the last one stays.
        parts.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        Self(parts.into())
    }

    /// The parts and their hashes, by part name.
    pub fn parts(&self) -> impl Iterator<Item = (&str, &[u8; 32])> {
        self.0.iter().map(|(part, hash)| (&**part, hash))
    }

    /// The hash of `part`, if the volume has it.
    pub fn get(&self, part: &str) -> Option<&[u8; 32]> {
        self.0
            .binary_search_by(|(p, _)| (**p).cmp(part))
            .ok()
            .map(|i| &self.0[i].1)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The parts whose content differs between `before` and `self` (added or gone included).
    pub fn changed_parts(&self, before: &VolumeDigest) -> BTreeSet<String> {
        let names: BTreeSet<&str> = self.parts().chain(before.parts()).map(|(p, _)| p).collect();
        names
            .into_iter()
            .filter(|n| self.get(n) != before.get(n))
            .map(str::to_owned)
            .collect()
    }
}

/// Shows the part names, never the hashes.
impl fmt::Debug for VolumeDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.parts().map(|(p, _)| p)).finish()
    }
}

/// The part of a ConfigMap/Secret source whose files the spec names.
pub fn part_name(source: &SourceRef) -> String {
    format!("{}/{}", source.kind.as_str(), source.name)
}

/// Which file of a volume goes into which part, from the pod spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Written by downwardAPI, serviceAccountToken or clusterTrustBundle sources: not hashed.
    excluded: HashSet<String>,
    /// Written by a ConfigMap/Secret source with `items`: path → part.
    claimed: HashMap<String, String>,
}

impl Layout {
    /// Every file in [`REST`]: a configMap or secret volume (one source), or a projected
    /// volume whose spec names no path.
    pub fn whole() -> Self {
        Self::default()
    }

    /// The layout of a projected volume (`spec` from the pod's spec).
    pub fn of(spec: &VolumeSpec) -> Self {
        let mut layout = Self::default();
        for (source, paths) in &spec.source_paths {
            for path in paths {
                layout
                    .claimed
                    .insert(normalize(path).to_owned(), part_name(source));
            }
        }
        for path in &spec.other_paths {
            layout.excluded.insert(normalize(path).to_owned());
        }
        layout
    }

    /// The part of the file at `rel` (relative to `..data`), `None` when it is not hashed.
    fn part_of(&self, rel: &str) -> Option<&str> {
        if self.excluded.contains(rel) {
            return None;
        }
        Some(self.claimed.get(rel).map_or(REST, String::as_str))
    }

    /// The sources a changed part stands for.
    pub fn sources_of(spec: &VolumeSpec, part: &str) -> Vec<SourceRef> {
        if part == REST {
            spec.sources
                .iter()
                .filter(|s| !spec.source_paths.iter().any(|(c, _)| c == *s))
                .cloned()
                .collect()
        } else {
            spec.sources
                .iter()
                .filter(|s| part_name(s) == part)
                .cloned()
                .collect()
        }
    }
}

/// The kubelet cleans item paths (`filepath.Clean` in `AtomicWriter.validatePayload`); the spec
/// may say `./a` or `a/`.
fn normalize(path: &str) -> &str {
    let path = path.trim_end_matches('/');
    path.strip_prefix("./").unwrap_or(path)
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

/// Hashes the tree `volume_dir/..data` points to, part by part (see [`Layout`]). `Ok(None)`
/// when `..data` does not exist yet (the kubelet has not written the volume).
///
/// Paths, file types, permission bits (including a mode change) and contents all count;
/// the name of the timestamped dir does not, so the same content rewritten into a new
/// `..<timestamp>` dir hashes the same. Excluded files are not read. At most `max_bytes` of
/// contents, names and symlink targets are read, else [`HashError::TooLarge`]. A walk that
/// races the kubelet removing the old timestamped dir fails with [`HashError::Io`]; hash again.
pub fn hash_volume(
    volume_dir: &Path,
    max_bytes: u64,
    key: &HashKey,
    layout: &Layout,
) -> Result<Option<VolumeDigest>, HashError> {
    Ok(hash_volume_counted(volume_dir, max_bytes, key, layout)?.map(|h| h.digest))
}

/// The `..<timestamp>` dir name `..data` pointed to: which write of the kubelet a hash
/// covers. The AtomicWriter writes every payload into a new timestamped dir and never touches
/// one after `..data` points to it (kubernetes `pkg/volume/util/atomic_writer.go`, `Write`:
/// `newTimestampDir`, then `createUserVisibleFiles`/the `..data` rename, then the old dir is
/// removed), so one name is one content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataTarget(Vec<u8>);

/// Where `..data` points now (one `readlink(2)`); `None` before the first write or when it
/// cannot be read.
pub fn data_target(volume_dir: &Path) -> Option<DataTarget> {
    fs_sys::readlink(volume_dir.join(DATA_LINK), Vec::new())
        .ok()
        .map(|target| DataTarget(target.into_bytes()))
}

/// A volume's hash: its digest, how many bytes it read (contents, names, symlink targets:
/// what the next hash of the volume will likely cost), and the write it covers.
#[derive(Clone, Debug)]
pub struct CountedHash {
    pub digest: VolumeDigest,
    pub read: u64,
    pub target: DataTarget,
}

/// What [`hash_volume_counted`] answers.
pub type CountedResult = Result<Option<CountedHash>, HashError>;

/// [`hash_volume`], with what it read and which write of the kubelet it covers: the walk is
/// relative to the timestamped dir opened once, so the digest is that dir's content.
pub fn hash_volume_counted(
    volume_dir: &Path,
    max_bytes: u64,
    key: &HashKey,
    layout: &Layout,
) -> CountedResult {
    let Some(root) = data_dir(volume_dir)? else {
        return Ok(None);
    };
    let target = DataTarget(root.target.as_os_str().as_bytes().to_vec());
    let mut walker = Walker::new(max_bytes);
    walker.walk(root, |rel| {
        layout.part_of(&String::from_utf8_lossy(rel)).is_some()
    })?;
    let mut macs: BTreeMap<String, Hmac<Sha256>> = BTreeMap::new();
    for e in &walker.entries {
        if e.kind == DIR {
            // Directories come from the files below them (the writer creates them 0755).
            continue;
        }
        let rel = String::from_utf8_lossy(&e.rel);
        let Some(part) = layout.part_of(&rel) else {
            continue;
        };
        let mac = match macs.get_mut(part) {
            Some(mac) => mac,
            None => macs.entry(part.to_owned()).or_insert_with(|| key.mac()),
        };
        e.feed(|bytes| mac.update(bytes));
    }
    let read = walker.limit - walker.budget;
    Ok(Some(CountedHash {
        digest: VolumeDigest::from_parts(
            macs.into_iter()
                .map(|(part, mac)| (part, mac.finalize().into_bytes().into())),
        ),
        read,
        target,
    }))
}

/// The sum of the sizes of the regular files below the directory `..data` points to, from
/// their metadata only (nothing is read): whether a volume not hashed yet is small enough to
/// hash in place. `0` before the first write; `u64::MAX` when it cannot be told.
pub fn content_bytes(volume_dir: &Path) -> u64 {
    let root = match data_dir(volume_dir) {
        Ok(Some(root)) => root.path,
        Ok(None) => return 0,
        Err(_) => return u64::MAX,
    };
    let mut total = 0u64;
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            return u64::MAX;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total = total.saturating_add(meta.len());
            }
        }
    }
    total
}

/// The unkeyed SHA-256 of the whole tree that reloadlet 0.1 saved (state file version 1), for
/// the one comparison a migration makes. Same stream as 0.1: every entry, directories included.
pub fn legacy_sha256(volume_dir: &Path, max_bytes: u64) -> Result<Option<[u8; 32]>, HashError> {
    let Some(root) = data_dir(volume_dir)? else {
        return Ok(None);
    };
    let mut walker = Walker::new(max_bytes);
    walker.walk(root, |_| true)?;
    let mut hasher = Sha256::new();
    for e in &walker.entries {
        e.feed(|bytes| hasher.update(bytes));
    }
    Ok(Some(hasher.finalize().into()))
}

/// The opened `..<timestamp>` dir `..data` points to.
struct Root {
    path: PathBuf,
    /// The timestamped dir's name, as `..data` gave it.
    target: PathBuf,
    fd: OwnedFd,
}

fn io_error(path: PathBuf, errno: Errno) -> HashError {
    HashError::Io {
        path,
        source: errno.into(),
    }
}

/// The `..<timestamp>` dir `..data` points to, opened; `None` before the first write.
///
/// Two system calls: `readlink(2)` (`EINVAL`: not a symlink) and an `open(2)` of the target
/// with `O_DIRECTORY | O_NOFOLLOW` (`ENOTDIR`/`ELOOP`: not a directory, or a symlink). The walk
/// below works relative to that descriptor, so the volume's long path is resolved once.
fn data_dir(volume_dir: &Path) -> Result<Option<Root>, HashError> {
    let link = volume_dir.join(DATA_LINK);
    let target = match fs_sys::readlink(&link, Vec::new()) {
        Ok(target) => PathBuf::from(std::ffi::OsString::from_vec(target.into_bytes())),
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::INVAL) => return Err(HashError::DataNotSymlink { path: link }),
        Err(errno) => return Err(io_error(link, errno)),
    };
    if !is_timestamp_dir_name(&target) {
        return Err(HashError::DataTarget { path: link, target });
    }
    let path = volume_dir.join(&target);
    match fs_sys::open(&path, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => Ok(Some(Root { path, target, fd })),
        Err(Errno::NOTDIR | Errno::LOOP) => Err(HashError::DataTarget { path: link, target }),
        // The kubelet removed the old dir between our readlink and now: a newer
        // `..data` exists, and its own event will follow.
        Err(errno) => Err(io_error(path, errno)),
    }
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// A single path component `..<something>` other than `..` itself, e.g.
/// `..2026_11_22_06_00_00.3209346735`.
fn is_timestamp_dir_name(target: &Path) -> bool {
    let name = target.as_os_str().as_bytes();
    name.len() > 2
        && name.starts_with(b"..")
        && !name.contains(&b'/')
        && name != DATA_LINK.as_bytes()
}

/// One entry of the tree: its type, path, mode and content (a file's SHA-256, a symlink's
/// target string, nothing for a directory).
struct Entry {
    kind: u8,
    rel: Vec<u8>,
    mode: u32,
    content: Vec<u8>,
}

impl Entry {
    /// Length-prefixed, so no two trees share a stream.
    fn feed(&self, mut update: impl FnMut(&[u8])) {
        update(&[self.kind]);
        update(&(self.rel.len() as u64).to_le_bytes());
        update(&self.rel);
        update(&self.mode.to_le_bytes());
        update(&(self.content.len() as u64).to_le_bytes());
        update(&self.content);
    }
}

struct Walker {
    budget: u64,
    limit: u64,
    entries: Vec<Entry>,
}

/// Type tags in the hashed stream.
const FILE: u8 = b'f';
const DIR: u8 = b'd';
const SYMLINK: u8 = b'l';

impl Walker {
    fn new(max_bytes: u64) -> Self {
        Self {
            budget: max_bytes,
            limit: max_bytes,
            entries: Vec::new(),
        }
    }

    /// Lists every entry below `root` for which `wanted` holds (directories always), in
    /// pre-order with siblings in byte order of their names (the stream's order); only wanted
    /// files are read.
    ///
    /// Every call is relative to the directory's descriptor (`openat`, `readlinkat`), the
    /// file type comes from `getdents64`'s `d_type` (tmpfs fills it in; `DT_UNKNOWN` falls
    /// back to `fstatat`), and a file is read up to the size `fstat` gave it: a small volume
    /// costs `readlink`, `open`, `getdents64` ×2, `close`, then `openat`, `fstat`, `read`,
    /// `close` per file.
    fn walk(&mut self, root: Root, wanted: impl Fn(&[u8]) -> bool) -> Result<(), HashError> {
        self.walk_dir(&root.path, root.fd, &[], &wanted)
    }

    fn walk_dir(
        &mut self,
        root: &Path,
        dir: OwnedFd,
        rel: &[u8],
        wanted: &impl Fn(&[u8]) -> bool,
    ) -> Result<(), HashError> {
        let dir_path = || root.join(std::ffi::OsStr::from_bytes(rel));
        let mut children = Vec::new();
        // A stack buffer: listing a volume allocates nothing but the names kept.
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        let mut listing = fs_sys::RawDir::new(&dir, &mut buf);
        while let Some(entry) = listing.next() {
            let entry = entry.map_err(|e| io_error(dir_path(), e))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            children.push((name.to_vec(), entry.file_type()));
        }
        children.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, listed) in children {
            let mut child = Vec::with_capacity(rel.len() + 1 + name.len());
            if !rel.is_empty() {
                child.extend_from_slice(rel);
                child.push(b'/');
            }
            child.extend_from_slice(&name);
            let path = || root.join(std::ffi::OsStr::from_bytes(&child));
            let kind = match listed {
                FileType::Unknown => {
                    let stat = fs_sys::statat(&dir, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW)
                        .map_err(|e| io_error(path(), e))?;
                    FileType::from_raw_mode(stat.st_mode as _)
                }
                known => known,
            };
            if kind != FileType::Directory && !wanted(&child) {
                continue;
            }
            self.spend(child.len() as u64)?;
            match kind {
                FileType::Directory => {
                    let fd = fs_sys::openat(&dir, name.as_slice(), DIR_FLAGS, Mode::empty())
                        .map_err(|e| io_error(path(), e))?;
                    let mode = fs_sys::fstat(&fd).map_err(|e| io_error(path(), e))?.st_mode;
                    self.entries.push(Entry {
                        kind: DIR,
                        rel: child.clone(),
                        mode: mode as u32 & 0o7777,
                        content: Vec::new(),
                    });
                    self.walk_dir(root, fd, &child, wanted)?;
                }
                FileType::Symlink => {
                    let stat = fs_sys::statat(&dir, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW)
                        .map_err(|e| io_error(path(), e))?;
                    let target = fs_sys::readlinkat(&dir, name.as_slice(), Vec::new())
                        .map_err(|e| io_error(path(), e))?
                        .into_bytes();
                    self.spend(target.len() as u64)?;
                    self.entries.push(Entry {
                        kind: SYMLINK,
                        rel: child,
                        mode: stat.st_mode as u32 & 0o7777,
                        content: target,
                    });
                }
                FileType::RegularFile => {
                    let (mode, digest) = self.file_digest(dir.as_fd(), &name, &path)?;
                    self.entries.push(Entry {
                        kind: FILE,
                        rel: child,
                        mode,
                        content: digest.to_vec(),
                    });
                }
                // FIFOs, sockets, devices: never opened (a FIFO would block).
                _ => return Err(HashError::Unsupported { path: path() }),
            }
        }
        Ok(())
    }

    /// The mode and SHA-256 of a regular file's content, opened without following a symlink.
    fn file_digest(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        path: &impl Fn() -> PathBuf,
    ) -> Result<(u32, [u8; 32]), HashError> {
        let file = fs_sys::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_error(path(), e))?;
        // It was a regular file when listed; make sure the opened one still is.
        let stat = fs_sys::fstat(&file).map_err(|e| io_error(path(), e))?;
        if FileType::from_raw_mode(stat.st_mode as _) != FileType::RegularFile {
            return Err(HashError::Unsupported { path: path() });
        }
        let size = stat.st_size.max(0) as u64;
        // Over budget by its size: refuse without reading it. (Reading stops one byte
        // past the budget should the file grow meanwhile.)
        if size > self.budget {
            return Err(HashError::TooLarge { limit: self.limit });
        }
        let cap = self.budget.saturating_add(1);
        let mut hasher = Sha256::new();
        let mut buf = [0u8; 8192];
        let mut read: u64 = 0;
        while read < cap {
            let want = buf.len().min((cap - read).try_into().unwrap_or(usize::MAX));
            let n = match rustix::io::read(&file, &mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(Errno::INTR) => continue,
                Err(errno) => return Err(io_error(path(), errno)),
            };
            hasher.update(&buf[..n]);
            read += n as u64;
            // A regular file returns less than asked only at its end: past the size `fstat`
            // gave, that short read was the end (no further read(2) to see 0).
            if n < want && read >= size {
                break;
            }
        }
        self.spend(read)?;
        Ok((stat.st_mode as u32 & 0o7777, hasher.finalize().into()))
    }

    fn spend(&mut self, bytes: u64) -> Result<(), HashError> {
        self.budget = self
            .budget
            .checked_sub(bytes)
            .ok_or(HashError::TooLarge { limit: self.limit })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::os::unix::fs::PermissionsExt;

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

    fn key() -> HashKey {
        HashKey::from_bytes([42; 32])
    }

    /// The whole volume as one part, with a fixed key.
    fn hv(dir: &Path, max: u64) -> Result<Option<VolumeDigest>, HashError> {
        hash_volume(dir, max, &key(), &Layout::whole())
    }

    fn hash(dir: &Path) -> VolumeDigest {
        hv(dir, 1 << 20).unwrap().expect("..data exists")
    }

    const TS1: &str = "..2026_11_22_06_00_00.3209346735";
    const TS2: &str = "..2026_11_22_06_01_30.17";

    #[test]
    fn no_data_link_yet_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(hv(dir.path(), 1024).unwrap().is_none());
        // A half-written volume: the timestamped dir exists, `..data` not yet.
        fs::create_dir(dir.path().join(TS1)).unwrap();
        assert!(hv(dir.path(), 1024).unwrap().is_none());
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
        let mut seen = vec![before.clone()];
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
        assert!(hv(dir.path(), 17).unwrap().is_some());
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
            let err = hv(dir.path(), 1024).unwrap_err();
            assert!(
                matches!(err, HashError::DataTarget { .. }),
                "{target}: {err}"
            );
        }
        // `..data` as a plain directory.
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join(DATA_LINK)).unwrap();
        assert!(matches!(
            hv(dir.path(), 1024),
            Err(HashError::DataNotSymlink { .. })
        ));
        // `..data` pointing at a symlink rather than the dir itself.
        let dir = tempfile::tempdir().unwrap();
        symlink(outside.path(), dir.path().join(TS1)).unwrap();
        symlink(TS1, dir.path().join(DATA_LINK)).unwrap();
        assert!(matches!(
            hv(dir.path(), 1024),
            Err(HashError::DataTarget { .. })
        ));
    }

    #[test]
    fn never_reads_more_than_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let big = "x".repeat(10_000);
        write_volume(dir.path(), TS1, &[("a", &big, 0o644), ("b", &big, 0o644)]);
        let names = 2;
        assert!(hv(dir.path(), 20_000 + names).unwrap().is_some());
        let err = hv(dir.path(), 20_000 + names - 1).unwrap_err();
        assert!(
            matches!(err, HashError::TooLarge { limit } if limit == 20_001),
            "{err}"
        );
        assert!(matches!(hv(dir.path(), 0), Err(HashError::TooLarge { .. })));
    }

    #[test]
    fn special_files_are_errors_not_skipped() {
        let dir = tempfile::tempdir().unwrap();
        write_volume(dir.path(), TS1, &[("a", "1", 0o644)]);
        let fifo = dir.path().join(TS1).join("pipe");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        assert!(matches!(
            hv(dir.path(), 1024),
            Err(HashError::Unsupported { .. })
        ));
    }

    /// `[configMap app (items a.conf, conf.d/b.conf), secret s (all keys), downwardAPI labels,
    /// serviceAccountToken token]`, as the kubelet writes it.
    fn mixed_spec() -> VolumeSpec {
        let app = SourceRef {
            kind: crate::core::model::SourceKind::ConfigMap,
            name: "app".into(),
        };
        let s = SourceRef {
            kind: crate::core::model::SourceKind::Secret,
            name: "s".into(),
        };
        VolumeSpec {
            name: "mixed".into(),
            sources: vec![app.clone(), s],
            service_account_token: true,
            source_paths: vec![(app, vec!["a.conf".into(), "./conf.d/b.conf".into()])],
            other_paths: vec!["labels".into(), "token".into(), "meta/annotations".into()],
        }
    }

    fn mixed_files<'a>(
        app: &'a str,
        secret: &'a str,
        labels: &'a str,
        token: &'a str,
    ) -> [(&'a str, &'a str, u32); 6] {
        [
            ("a.conf", app, 0o644),
            ("conf.d/b.conf", "b", 0o644),
            ("password", secret, 0o644),
            ("labels", labels, 0o644),
            ("token", token, 0o644),
            ("meta/annotations", labels, 0o644),
        ]
    }

    fn mixed_hash(files: &[(&str, &str, u32)]) -> VolumeDigest {
        let dir = tempfile::tempdir().unwrap();
        write_volume(dir.path(), TS1, files);
        hash_volume(dir.path(), 1 << 20, &key(), &Layout::of(&mixed_spec()))
            .unwrap()
            .unwrap()
    }

    #[test]
    fn a_digest_is_sorted_by_part_and_a_repeated_part_keeps_its_last_hash() {
        let d = VolumeDigest::from_parts([
            ("secret/b".to_string(), [1; 32]),
            ("configmap/a".to_string(), [2; 32]),
            ("secret/b".to_string(), [3; 32]),
        ]);
        assert_eq!(
            d.parts().collect::<Vec<_>>(),
            [("configmap/a", &[2; 32]), ("secret/b", &[3; 32])]
        );
        assert_eq!(d.get("secret/b"), Some(&[3; 32]));
        assert_eq!(d.get("secret/c"), None);
    }

    #[test]
    fn downward_api_and_token_files_are_not_hashed_configmap_and_secret_parts_are() {
        let base = mixed_hash(&mixed_files("x=1", "pw", "app=\"web\"", "jwt1"));
        assert_eq!(
            base.parts().map(|(p, _)| p).collect::<Vec<_>>(),
            [REST, "configmap/app"]
        );
        // A label edit (downwardAPI files) and a token refresh: nothing hashed changes.
        let relabelled = mixed_hash(&mixed_files("x=1", "pw", "app=\"web\"\ntier=\"1\"", "jwt2"));
        assert_eq!(relabelled, base);
        // The ConfigMap with items: only its part.
        let app = mixed_hash(&mixed_files("x=2", "pw", "app=\"web\"", "jwt1"));
        assert_eq!(
            app.changed_parts(&base),
            BTreeSet::from(["configmap/app".to_owned()])
        );
        // The Secret without items: the rest.
        let secret = mixed_hash(&mixed_files("x=1", "pw2", "app=\"web\"", "jwt1"));
        assert_eq!(
            secret.changed_parts(&base),
            BTreeSet::from([REST.to_owned()])
        );
        let spec = mixed_spec();
        assert_eq!(
            Layout::sources_of(&spec, REST)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["secret s"]
        );
        assert_eq!(
            Layout::sources_of(&spec, "configmap/app")
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["configmap app"]
        );
    }

    #[test]
    fn a_volume_of_only_token_and_downward_api_files_has_an_empty_digest() {
        let spec = VolumeSpec {
            other_paths: vec!["token".into(), "labels".into()],
            service_account_token: true,
            ..VolumeSpec::default()
        };
        let dir = tempfile::tempdir().unwrap();
        write_volume(
            dir.path(),
            TS1,
            &[("token", "t", 0o644), ("labels", "l", 0o644)],
        );
        let digest = hash_volume(dir.path(), 1 << 20, &key(), &Layout::of(&spec))
            .unwrap()
            .unwrap();
        assert!(digest.is_empty());
        // Excluded files are not even read: a budget too small for them is enough.
        assert!(hash_volume(dir.path(), 0, &key(), &Layout::of(&spec)).is_ok());
    }

    #[test]
    fn the_same_content_under_two_keys_hashes_apart_and_debug_shows_no_bytes() {
        let dir = tempfile::tempdir().unwrap();
        write_volume(dir.path(), TS1, &[("password", "hunter2", 0o644)]);
        let k1 = HashKey::generate().unwrap();
        let k2 = HashKey::generate().unwrap();
        assert_ne!(k1, k2);
        assert_ne!(k1.id(), k2.id());
        let a = hash_volume(dir.path(), 1024, &k1, &Layout::whole())
            .unwrap()
            .unwrap();
        let b = hash_volume(dir.path(), 1024, &k2, &Layout::whole())
            .unwrap()
            .unwrap();
        assert_ne!(a, b);
        // Neither is the plain SHA-256 a dictionary attack would compute.
        let legacy = legacy_sha256(dir.path(), 1024).unwrap().unwrap();
        assert_ne!(a.get(REST).unwrap(), &legacy);
        for shown in [format!("{a:?}"), format!("{k1:?}")] {
            assert!(
                !shown.contains(&hex::encode(&a.get(REST).unwrap()[..4])),
                "{shown}"
            );
            assert!(
                !shown.contains(&hex::encode(&k1.as_bytes()[..4])),
                "{shown}"
            );
        }
    }

    /// The tree of [`legacy_hash_is_what_version_0_1_saved`], plus a second file at the top.
    fn golden_tree(dir: &Path) {
        let ts = dir.join("..2026_11_22_06_00_00.1");
        fs::create_dir_all(ts.join("conf.d/x")).unwrap();
        fs::write(ts.join("a.conf"), "x=1").unwrap();
        fs::write(ts.join("conf.d/x/b"), "nested").unwrap();
        fs::write(ts.join("z"), "z".repeat(20_000)).unwrap();
        for f in ["a.conf", "conf.d/x/b", "z"] {
            fs::set_permissions(ts.join(f), fs::Permissions::from_mode(0o644)).unwrap();
        }
        for d in ["conf.d", "conf.d/x"] {
            fs::set_permissions(ts.join(d), fs::Permissions::from_mode(0o755)).unwrap();
        }
        symlink("/etc/passwd", ts.join("l")).unwrap();
        symlink("..2026_11_22_06_00_00.1", dir.join(DATA_LINK)).unwrap();
    }

    #[test]
    fn keyed_digests_are_what_the_saved_state_holds() {
        // Digests saved in state files must keep matching: a new walk that fed the stream
        // differently would make every volume look changed after an upgrade (one reload of
        // every opted-in pod on every node).
        let dir = tempfile::tempdir().unwrap();
        golden_tree(dir.path());
        let parts = |d: VolumeDigest| -> Vec<(String, String)> {
            d.parts()
                .map(|(p, h)| (p.to_owned(), hex::encode(h)))
                .collect()
        };
        let whole = hv(dir.path(), 1 << 20).unwrap().unwrap();
        let spec = VolumeSpec {
            sources: vec![SourceRef {
                kind: crate::core::model::SourceKind::ConfigMap,
                name: "app".into(),
            }],
            source_paths: vec![(
                SourceRef {
                    kind: crate::core::model::SourceKind::ConfigMap,
                    name: "app".into(),
                },
                vec!["a.conf".into()],
            )],
            other_paths: vec!["z".into()],
            ..VolumeSpec::default()
        };
        let split = hash_volume(dir.path(), 1 << 20, &key(), &Layout::of(&spec))
            .unwrap()
            .unwrap();
        // Computed by the walk of the previous release (std::fs, whole paths).
        assert_eq!(
            parts(whole),
            [(
                "".to_owned(),
                "d30bd34328eea60509f48f13c0954de39a8d8e82016dc30d9811017d985aaeb8".to_owned()
            )]
        );
        assert_eq!(
            parts(split),
            [
                (
                    "".to_owned(),
                    "4ef9dc9c68b528d5b390d94cc94441758ae55f3955aa65babd03e73ef10ea80e".to_owned()
                ),
                (
                    "configmap/app".to_owned(),
                    "10c6681ae87334cb835aad2f3dbacde0bdf6fa6bff350a76673a1cbdd2bf6daf".to_owned()
                )
            ]
        );
    }

    #[test]
    fn legacy_hash_is_what_version_0_1_saved() {
        // The value reloadlet 0.1's `hash_volume` gave for this tree (checked against that code).
        let dir = tempfile::tempdir().unwrap();
        let ts = dir.path().join("..2026_11_22_06_00_00.1");
        fs::create_dir_all(ts.join("conf.d/x")).unwrap();
        fs::write(ts.join("a.conf"), "x=1").unwrap();
        fs::write(ts.join("conf.d/x/b"), "nested").unwrap();
        for f in ["a.conf", "conf.d/x/b"] {
            fs::set_permissions(ts.join(f), fs::Permissions::from_mode(0o644)).unwrap();
        }
        for d in ["conf.d", "conf.d/x"] {
            fs::set_permissions(ts.join(d), fs::Permissions::from_mode(0o755)).unwrap();
        }
        symlink("/etc/passwd", ts.join("l")).unwrap();
        symlink("..2026_11_22_06_00_00.1", dir.path().join(DATA_LINK)).unwrap();
        assert_eq!(
            hex::encode(legacy_sha256(dir.path(), 1 << 20).unwrap().unwrap()),
            "3494ce5fe4874eb7802c9b2c9bd2afa9cf434dd068bb7e5056548b61ab3a92d3"
        );
    }
}
