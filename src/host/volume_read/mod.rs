//! Reads a kubelet volume as the container sees it — the tree behind `..data` — into its
//! keyed content hash ([`crate::core::volume_digest`]).
//!
//! The kubelet swaps `..data` on every change of the payload, but also re-creates a
//! volume whose content is unchanged (after a restart, or when a source is rewritten
//! with the same data), and re-projects a `projected` volume on every pod sync (a label
//! change rewrites its downwardAPI files, a token refresh its serviceAccountToken file).
//! Comparing hashes of the files that ConfigMaps and Secrets write tells a real change from
//! a no-op. Which file goes into which part of the digest is the volume's [`Layout`].
//!
//! Safety rules: `..data` must be a symlink to a `..<timestamp>` directory directly inside
//! the volume dir; no other symlink is ever followed (a symlink is hashed as its target
//! string); at most `max_bytes` are read; anything that cannot be hashed is an error,
//! never skipped. Contents are never logged.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use rustix::fs::{self as fs_sys, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use sha2::{Digest, Sha256};

use crate::core::model::{SourceRef, VolumeSpec};
use crate::core::volume_digest::{
    keyed_digest, legacy_digest, part_name, Entry, HashKey, VolumeDigest, DIR, FILE, REST, SYMLINK,
};

/// The name of the kubelet's atomic-swap symlink.
pub const DATA_LINK: &str = "..data";

/// Which file of a volume goes into which part, from the pod spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Written by downwardAPI, serviceAccountToken or clusterTrustBundle sources: not hashed.
    excluded: HashSet<String>,
    /// Written by a ConfigMap/Secret source with `items`: path → part.
    claimed: HashMap<String, String>,
    /// A CSI volume: without `..data` its driver writes the files in place, and the volume
    /// directory itself is hashed ([`Layout::csi`]).
    in_place: bool,
}

impl Layout {
    /// Every file in [`REST`]: a configMap or secret volume (one source), or a projected
    /// volume whose spec names no path.
    pub fn whole() -> Self {
        Self::default()
    }

    /// A CSI volume: every file counts. With `..data` (a driver using the AtomicWriter: the
    /// Secrets Store driver since PR #520 when the provider returns contents, cert-manager's
    /// csi-lib) the tree behind it is hashed as for a Secret; without it (files written in
    /// place by older Secrets Store providers, kubernetes-sigs/secrets-store-csi-driver#551)
    /// the volume directory itself, leaving out top-level `..*` entries (an AtomicWriter's
    /// first write under way). An empty directory (not published yet, or unmounted) is not
    /// written.
    pub fn csi() -> Self {
        Self {
            in_place: true,
            ..Self::default()
        }
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
    #[error("the volume nests directories deeper than the {limit}-level limit")]
    TooDeep { limit: usize },
    #[error("the volume has more than the {limit}-entry limit of files and directories")]
    TooManyEntries { limit: usize },
    #[error("{path} is neither a regular file, a directory nor a symlink")]
    Unsupported { path: PathBuf },
}

impl HashError {
    /// Over one of the limits ([`MAX_DEPTH`], [`MAX_ENTRIES`], the byte budget): the volume
    /// is refused as it is, and hashing it again gives the same answer until it changes.
    pub fn over_limit(&self) -> bool {
        matches!(
            self,
            Self::TooDeep { .. } | Self::TooManyEntries { .. } | Self::TooLarge { .. }
        )
    }
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
/// cannot be read. Read into the stack (the kubelet's `..<timestamp>` names are 31 bytes):
/// this runs on every swap before its signal, so it allocates the path and the answer only.
pub fn data_target(volume_dir: &Path) -> Option<DataTarget> {
    let mut link = PathBuf::with_capacity(volume_dir.as_os_str().len() + 1 + DATA_LINK.len());
    link.push(volume_dir);
    link.push(DATA_LINK);
    let mut buffer = [0u8; 256];
    let n = fs_sys::readlinkat_raw(fs_sys::CWD, &link, &mut buffer[..]).ok()?;
    if n < buffer.len() {
        return Some(DataTarget(buffer[..n].to_vec()));
    }
    // readlink(2) truncates silently: a longer target is read whole.
    fs_sys::readlink(&link, Vec::new())
        .ok()
        .map(|target| DataTarget(target.into_bytes()))
}

/// The files of one kubelet write of a volume — the `..<timestamp>` directory `target` names,
/// which the AtomicWriter never changes once `..data` pointed to it — as `path relative to
/// it → bytes` (directories and symlinks left out), at most `max_bytes` read. `Ok(None)`: that
/// write is gone (the kubelet wrote again and removed it). The same safety rules as a hash:
/// the target must be a `..<timestamp>` name, no symlink is followed, the walk's limits hold.
pub fn read_write(
    volume_dir: &Path,
    target: &DataTarget,
    max_bytes: u64,
) -> Result<Option<std::collections::BTreeMap<String, Vec<u8>>>, HashError> {
    let name = PathBuf::from(std::ffi::OsStr::from_bytes(&target.0));
    if !is_timestamp_dir_name(&name) {
        return Err(HashError::DataTarget {
            path: volume_dir.join(DATA_LINK),
            target: name,
        });
    }
    let path = volume_dir.join(&name);
    let fd = match fs_sys::open(&path, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(errno) => return Err(io_error(path, errno)),
    };
    let mut walker = Walker::new(max_bytes);
    walker.keep_bytes = true;
    let root = Root {
        path,
        target: name,
        fd,
    };
    match walker.walk(root, |_| true) {
        Ok(()) => {}
        // Removed while read: that write is gone.
        Err(HashError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    }
    Ok(Some(
        walker
            .entries
            .into_iter()
            .filter(|e| e.kind == FILE)
            .map(|e| (String::from_utf8_lossy(&e.rel).into_owned(), e.content))
            .collect(),
    ))
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
    let root = match data_dir(volume_dir)? {
        Some(root) => root,
        None if layout.in_place => match fs_sys::open(volume_dir, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => Root {
                path: volume_dir.to_path_buf(),
                target: PathBuf::new(),
                fd,
            },
            Err(Errno::NOENT) => return Ok(None),
            Err(errno) => return Err(io_error(volume_dir.to_path_buf(), errno)),
        },
        None => return Ok(None),
    };
    let in_place = root.target.as_os_str().is_empty();
    let target = DataTarget(root.target.as_os_str().as_bytes().to_vec());
    let mut walker = Walker::new(max_bytes);
    walker.skip_top_dotdot = in_place;
    walker.walk(root, |rel| {
        layout.part_of(&String::from_utf8_lossy(rel)).is_some()
    })?;
    if in_place && walker.entries.is_empty() {
        // Nothing published (or unmounted): not written, as a volume without `..data`.
        return Ok(None);
    }
    let digest = keyed_digest(key, &walker.entries, |rel: &str| layout.part_of(rel));
    let read = walker.limit - walker.budget;
    Ok(Some(CountedHash {
        digest,
        read,
        target,
    }))
}

/// The sum of the sizes of the regular files below the directory `..data` points to, from
/// their metadata only (nothing is read): whether a volume not hashed yet is small enough to
/// hash in place. `0` before the first write; `u64::MAX` when it cannot be told (or the tree
/// has more than [`MAX_ENTRIES`] entries).
pub fn content_bytes(volume_dir: &Path) -> u64 {
    let root = match data_dir(volume_dir) {
        Ok(Some(root)) => root.path,
        Ok(None) => return 0,
        Err(_) => return u64::MAX,
    };
    let mut total = 0u64;
    let mut seen = 0usize;
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            return u64::MAX;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                // Over the walk's own limit: the hash will say so.
                return u64::MAX;
            }
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
    Ok(Some(legacy_digest(&walker.entries)))
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

/// The deepest directory nesting a volume may have below `..data`. The API server accepts
/// `items[].path` up to 4,096 characters (kubernetes `pkg/apis/core/validation`,
/// `validateKeyToPath`: `validateLocalDescendingPath` and a 4096-byte cap), so about two
/// thousand levels are possible; no real payload nests a tenth as deep. A deeper volume is
/// refused whole ([`HashError::TooDeep`]), never partly hashed.
pub const MAX_DEPTH: usize = 64;

/// The most entries (files, directories, symlinks) a volume may have. A ConfigMap or Secret
/// holds at most 1 MiB (etcd's request limit) and so at most some tens of thousands of keys;
/// the byte budget alone would let a volume of one-byte names keep millions of entries in
/// memory. A bigger volume is refused whole ([`HashError::TooManyEntries`]).
pub const MAX_ENTRIES: usize = 20_000;

struct Walker {
    budget: u64,
    limit: u64,
    entries: Vec<Entry>,
    /// A CSI volume written in place: its top-level `..*` entries are not its content.
    skip_top_dotdot: bool,
    /// A file's entry keeps its bytes rather than their SHA-256 ([`read_write`]).
    keep_bytes: bool,
}

/// One directory being listed by [`Walker::walk`]: its descriptor, its path relative to the
/// root, and its children not handled yet (in reverse byte order, so `pop` gives the next).
struct Frame {
    dir: OwnedFd,
    rel: Vec<u8>,
    children: Vec<(Vec<u8>, FileType)>,
}

impl Walker {
    fn new(max_bytes: u64) -> Self {
        Self {
            budget: max_bytes,
            limit: max_bytes,
            entries: Vec::new(),
            skip_top_dotdot: false,
            keep_bytes: false,
        }
    }

    /// Lists every entry below `root` for which `wanted` holds (directories always), in
    /// pre-order with siblings in byte order of their names (the stream's order); only wanted
    /// files are read.
    ///
    /// Iterative, with an explicit stack of at most [`MAX_DEPTH`] open directories: a
    /// tenant's volume decides the depth, so it must not decide this thread's stack use. At
    /// most [`MAX_ENTRIES`] entries are kept.
    ///
    /// Every call is relative to the directory's descriptor (`openat`, `readlinkat`), the
    /// file type comes from `getdents64`'s `d_type` (tmpfs fills it in; `DT_UNKNOWN` falls
    /// back to `fstatat`), and a file is read up to the size `fstat` gave it: a small volume
    /// costs `readlink`, `open`, `getdents64` ×2, `close`, then `openat`, `fstat`, `read`,
    /// `close` per file.
    fn walk(&mut self, root: Root, wanted: impl Fn(&[u8]) -> bool) -> Result<(), HashError> {
        let base = root.path;
        let first = self.list(&base, root.fd, Vec::new())?;
        let mut stack = vec![first];
        loop {
            let depth = stack.len();
            let Some(frame) = stack.last_mut() else { break };
            let Some((name, listed)) = frame.children.pop() else {
                stack.pop();
                continue;
            };
            let mut child = Vec::with_capacity(frame.rel.len() + 1 + name.len());
            if !frame.rel.is_empty() {
                child.extend_from_slice(&frame.rel);
                child.push(b'/');
            }
            child.extend_from_slice(&name);
            let path = || base.join(std::ffi::OsStr::from_bytes(&child));
            let dir = frame.dir.as_fd();
            let kind = match listed {
                FileType::Unknown => {
                    let stat = fs_sys::statat(dir, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW)
                        .map_err(|e| io_error(path(), e))?;
                    FileType::from_raw_mode(stat.st_mode as _)
                }
                known => known,
            };
            if kind != FileType::Directory && !wanted(&child) {
                continue;
            }
            self.spend(child.len() as u64)?;
            if self.entries.len() >= MAX_ENTRIES {
                return Err(HashError::TooManyEntries { limit: MAX_ENTRIES });
            }
            match kind {
                FileType::Directory => {
                    if depth >= MAX_DEPTH {
                        return Err(HashError::TooDeep { limit: MAX_DEPTH });
                    }
                    let fd = fs_sys::openat(dir, name.as_slice(), DIR_FLAGS, Mode::empty())
                        .map_err(|e| io_error(path(), e))?;
                    let mode = fs_sys::fstat(&fd).map_err(|e| io_error(path(), e))?.st_mode;
                    self.entries.push(Entry {
                        kind: DIR,
                        rel: child.clone(),
                        mode: mode as u32 & 0o7777,
                        content: Vec::new(),
                    });
                    let next = self.list(&base, fd, child)?;
                    stack.push(next);
                }
                FileType::Symlink => {
                    let stat = fs_sys::statat(dir, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW)
                        .map_err(|e| io_error(path(), e))?;
                    let target = fs_sys::readlinkat(dir, name.as_slice(), Vec::new())
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
                    let (mode, content) = if self.keep_bytes {
                        self.file_bytes(dir, &name, &path)?
                    } else {
                        let (mode, digest) = self.file_digest(dir, &name, &path)?;
                        (mode, digest.to_vec())
                    };
                    self.entries.push(Entry {
                        kind: FILE,
                        rel: child,
                        mode,
                        content,
                    });
                }
                // FIFOs, sockets, devices: never opened (a FIFO would block).
                _ => return Err(HashError::Unsupported { path: path() }),
            }
        }
        Ok(())
    }

    /// The children of the directory `dir` (at `rel` below `base`), sorted for [`Self::walk`].
    /// Each listed name is counted against [`MAX_ENTRIES`] before it is kept, so one huge
    /// directory is refused while it is read (names are paid for from the byte budget when
    /// the walk keeps them: excluded files cost nothing).
    fn list(&mut self, base: &Path, dir: OwnedFd, rel: Vec<u8>) -> Result<Frame, HashError> {
        let mut children = Vec::new();
        {
            // A stack buffer: listing a volume allocates nothing but the names kept.
            let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
            let mut listing = fs_sys::RawDir::new(&dir, &mut buf);
            while let Some(entry) = listing.next() {
                let entry =
                    entry.map_err(|e| io_error(base.join(std::ffi::OsStr::from_bytes(&rel)), e))?;
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                if self.skip_top_dotdot && rel.is_empty() && name.starts_with(b"..") {
                    continue;
                }
                if self.entries.len() + children.len() >= MAX_ENTRIES {
                    return Err(HashError::TooManyEntries { limit: MAX_ENTRIES });
                }
                children.push((name.to_vec(), entry.file_type()));
            }
        }
        // Reverse byte order: the walk pops the smallest name first.
        children.sort_by(|a, b| b.0.cmp(&a.0));
        Ok(Frame { dir, rel, children })
    }

    /// The mode and SHA-256 of a regular file's content, opened without following a symlink.
    fn file_digest(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        path: &impl Fn() -> PathBuf,
    ) -> Result<(u32, [u8; 32]), HashError> {
        let (file, mode, size) = self.open_regular(dir, name, path)?;
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
        Ok((mode, hasher.finalize().into()))
    }

    /// Opens `name` in `dir` without following a symlink, checks that it is still a regular
    /// file (it was one when listed) and that its size fits the budget (refused without
    /// reading it; readers stop one byte past the budget should it grow meanwhile): the file,
    /// its permission bits and its size.
    fn open_regular(
        &self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        path: &impl Fn() -> PathBuf,
    ) -> Result<(rustix::fd::OwnedFd, u32, u64), HashError> {
        let file = fs_sys::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_error(path(), e))?;
        let stat = fs_sys::fstat(&file).map_err(|e| io_error(path(), e))?;
        if FileType::from_raw_mode(stat.st_mode as _) != FileType::RegularFile {
            return Err(HashError::Unsupported { path: path() });
        }
        let size = stat.st_size.max(0) as u64;
        if size > self.budget {
            return Err(HashError::TooLarge { limit: self.limit });
        }
        Ok((file, stat.st_mode as u32 & 0o7777, size))
    }

    /// The mode and bytes of a regular file (within the budget), opened without following a
    /// symlink.
    fn file_bytes(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        path: &impl Fn() -> PathBuf,
    ) -> Result<(u32, Vec<u8>), HashError> {
        let (file, mode, size) = self.open_regular(dir, name, path)?;
        let mut bytes = Vec::with_capacity(size as usize);
        let mut buf = [0u8; 8192];
        loop {
            let n = match rustix::io::read(&file, &mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(Errno::INTR) => continue,
                Err(errno) => return Err(io_error(path(), errno)),
            };
            bytes.extend_from_slice(&buf[..n]);
            if bytes.len() as u64 > self.budget {
                return Err(HashError::TooLarge { limit: self.limit });
            }
        }
        self.spend(bytes.len() as u64)?;
        Ok((mode, bytes))
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
mod tests;
