//! The kubelet's AtomicWriter (`pkg/volume/util/atomic_writer.go`, `Write`), step for step.
//!
//! A volume directory holds a timestamped data dir `..YYYY_MM_DD_HH_MM_SS.<digits>`, the
//! symlink `..data -> <that dir>`, and one visible symlink per top-level payload name
//! (`key -> ..data/key`). An update writes a fresh timestamped dir and swaps `..data` with a
//! rename, so readers see either the old or the new content, never a mix.
//!
//! The order of syscalls is the kubelet's, so an inotify watch on the volume dir sees the
//! same events as on a real node (see `shared/reference/node-facts.md` §2).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::unix::fs::{symlink, DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path};

/// The symlink to the current timestamped data dir.
pub const DATA_DIR_NAME: &str = "..data";
/// The temporary symlink renamed over [`DATA_DIR_NAME`].
pub const NEW_DATA_DIR_NAME: &str = "..data_tmp";
/// The longest path the kubelet accepts, and the longest path element.
const MAX_PATH_LEN: usize = 4096;
const MAX_FILE_NAME_LEN: usize = 255;

/// One file of a volume payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    /// Permission bits, e.g. `0o644`.
    pub mode: u32,
}

impl FileProjection {
    /// A file with the kubelet's default mode `0644`.
    pub fn new(data: impl Into<Vec<u8>>) -> Self {
        Self {
            data: data.into(),
            mode: 0o644,
        }
    }
}

/// What [`write`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The payload equals the current content: nothing was written, renamed or deleted
    /// (missing top-level symlinks were re-created, as the kubelet does).
    Unchanged,
    /// A new timestamped dir was written and `..data` swapped to it.
    Written {
        /// Name of the new timestamped dir, e.g. `..2026_11_22_06_00_00.3209346735`.
        data_dir: String,
        /// The replaced timestamped dir (now removed), if there was one.
        previous: Option<String>,
    },
}

/// Writes `payload` into `volume_dir` the way the kubelet does.
///
/// Paths must be relative, without a `..` element and not starting with `..`; nested paths
/// (`conf.d/default.conf`) are allowed. `volume_dir` must exist.
pub fn write(
    volume_dir: &Path,
    payload: &BTreeMap<String, FileProjection>,
) -> io::Result<WriteOutcome> {
    // (1) validate the payload
    for path in payload.keys() {
        validate_path(path)?;
    }

    // (2) the old timestamped dir, "" when this is the first write
    let old_ts_dir = match fs::read_link(volume_dir.join(DATA_DIR_NAME)) {
        Ok(target) => {
            let name = target.to_string_lossy().into_owned();
            // a dangling `..data` is treated as a first write, like the kubelet does
            if volume_dir.join(&name).is_dir() {
                Some(name)
            } else {
                None
            }
        }
        Err(e)
            if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc_einval()) =>
        {
            None
        }
        Err(e) => return Err(e),
    };

    // (3) compare with the old content, list the names that disappeared
    let paths_to_remove = match &old_ts_dir {
        Some(dir) => paths_to_remove(&volume_dir.join(dir), payload)?,
        None => BTreeSet::new(),
    };
    let should_write = match &old_ts_dir {
        Some(dir) => payload_differs(&volume_dir.join(dir), payload)?,
        None => true,
    };
    if !should_write && paths_to_remove.is_empty() {
        create_user_visible_files(volume_dir, payload)?;
        return Ok(WriteOutcome::Unchanged);
    }

    // (4) a new timestamped dir, 0700 from mkdtemp, then chmod 0755
    let (ts_dir_name, ts_dir) = make_timestamped_dir(volume_dir)?;
    fs::set_permissions(&ts_dir, fs::Permissions::from_mode(0o755))?;

    // (5) the files
    for (path, file) in payload {
        let full = ts_dir.join(path);
        if let Some(parent) = full.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o777)
                .create(parent)?;
        }
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(file.mode)
            .open(&full)
            .and_then(|mut f| io::Write::write_all(&mut f, &file.data))?;
        fs::set_permissions(&full, fs::Permissions::from_mode(file.mode))?;
    }

    // (6) `..data_tmp -> <new dir>` (relative), (7) the atomic swap
    let tmp_link = volume_dir.join(NEW_DATA_DIR_NAME);
    match fs::remove_file(&tmp_link) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    symlink(&ts_dir_name, &tmp_link)?;
    fs::rename(&tmp_link, volume_dir.join(DATA_DIR_NAME))?;

    // (8) visible symlinks for new top-level names
    create_user_visible_files(volume_dir, payload)?;

    // (9) dropped top-level names, then the old dir
    for path in &paths_to_remove {
        if path.contains('/') {
            continue;
        }
        match fs::remove_file(volume_dir.join(path)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    if let Some(old) = &old_ts_dir {
        fs::remove_dir_all(volume_dir.join(old))?;
    }

    Ok(WriteOutcome::Written {
        data_dir: ts_dir_name,
        previous: old_ts_dir,
    })
}

/// `EINVAL`: `readlink` on something that is not a symlink.
fn libc_einval() -> i32 {
    nix::errno::Errno::EINVAL as i32
}

/// The kubelet's `validatePath`.
pub fn validate_path(path: &str) -> io::Result<()> {
    let invalid = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid payload path {path:?}: {why}"),
        )
    };
    if path.is_empty() {
        return Err(invalid("empty"));
    }
    if path.len() > MAX_PATH_LEN {
        return Err(invalid("longer than 4096 bytes"));
    }
    if Path::new(path).is_absolute() {
        return Err(invalid("must be relative"));
    }
    if path.starts_with("..") {
        return Err(invalid("must not start with '..'"));
    }
    for element in path.split('/') {
        if element == ".." {
            return Err(invalid("must not contain '..'"));
        }
        if element.len() > MAX_FILE_NAME_LEN {
            return Err(invalid("a path element is longer than 255 bytes"));
        }
    }
    if Path::new(path)
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(invalid("must not contain '..'"));
    }
    Ok(())
}

/// Every file and dir of the old data dir (relative paths) not needed by the payload.
fn paths_to_remove(
    old_dir: &Path,
    payload: &BTreeMap<String, FileProjection>,
) -> io::Result<BTreeSet<String>> {
    let mut existing = BTreeSet::new();
    walk(old_dir, "", &mut existing)?;
    for path in payload.keys() {
        let mut current = path.trim_matches('/');
        loop {
            existing.remove(current);
            match current.rsplit_once('/') {
                Some((parent, _)) => current = parent,
                None => break,
            }
        }
    }
    Ok(existing)
}

fn walk(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if entry.file_type()?.is_dir() {
            walk(&entry.path(), &rel, out)?;
        }
        out.insert(rel);
    }
    Ok(())
}

/// The kubelet's `shouldWritePayload`: any file missing or with other bytes.
fn payload_differs(old_dir: &Path, payload: &BTreeMap<String, FileProjection>) -> io::Result<bool> {
    for (path, file) in payload {
        match fs::read(old_dir.join(path)) {
            Ok(bytes) if bytes == file.data => {}
            Ok(_) => return Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// `mkdtemp` in `volume_dir` with the kubelet's UTC timestamp prefix and Go's random
/// decimal suffix (a `u32`, 1 to 10 digits).
fn make_timestamped_dir(volume_dir: &Path) -> io::Result<(String, std::path::PathBuf)> {
    let prefix = crate::clock::now()
        .strftime("..%Y_%m_%d_%H_%M_%S.")
        .to_string();
    for _ in 0..10_000 {
        let name = format!("{prefix}{}", rand::random::<u32>());
        let path = volume_dir.join(&name);
        match fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok((name, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "mkdtemp: no free timestamped dir name",
    ))
}

/// For each payload path, a symlink of its first element into `..data` when missing.
fn create_user_visible_files(
    volume_dir: &Path,
    payload: &BTreeMap<String, FileProjection>,
) -> io::Result<()> {
    let top_level: BTreeSet<&str> = payload
        .keys()
        .map(|p| p.split('/').next().unwrap_or(p))
        .collect();
    for name in top_level {
        let visible = volume_dir.join(name);
        match fs::read_link(&visible) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                symlink(Path::new(DATA_DIR_NAME).join(name), &visible)?;
            }
            // something that is not a symlink: the kubelet leaves it alone too
            Err(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(entries: &[(&str, &str)]) -> BTreeMap<String, FileProjection> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), FileProjection::new(v.as_bytes())))
            .collect()
    }

    #[test]
    fn rejects_paths_the_kubelet_rejects() {
        for bad in [
            "",
            "/abs",
            "..",
            "..data",
            "..x/y",
            "a/../b",
            "a/..",
            &"x".repeat(256),
        ] {
            assert!(validate_path(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["a", "a/b/c", "a..b", "conf.d/default.conf", ".hidden"] {
            assert!(validate_path(good).is_ok(), "{good:?} rejected");
        }
        let dir = tempfile::tempdir().unwrap();
        assert!(write(dir.path(), &payload(&[("../escape", "x")])).is_err());
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            0,
            "nothing written for a bad payload"
        );
    }

    #[test]
    fn writes_layout_and_swaps_on_change() {
        let dir = tempfile::tempdir().unwrap();
        let v = dir.path();
        let mut first = payload(&[("a", "1"), ("conf.d/x.conf", "x")]);
        first.get_mut("a").unwrap().mode = 0o600;
        let WriteOutcome::Written { data_dir, previous } = write(v, &first).unwrap() else {
            panic!("first write wrote nothing")
        };
        assert_eq!(previous, None);
        assert!(data_dir.starts_with(".."), "{data_dir}");
        let suffix = data_dir.rsplit_once('.').unwrap().1;
        assert!((1..=10).contains(&suffix.len()) && suffix.bytes().all(|b| b.is_ascii_digit()));
        assert_eq!(
            data_dir.len(),
            "..2026_11_22_06_00_00.".len() + suffix.len()
        );
        assert_eq!(
            fs::read_link(v.join("..data")).unwrap(),
            Path::new(&data_dir)
        );
        assert_eq!(
            fs::read_link(v.join("conf.d")).unwrap(),
            Path::new("..data/conf.d")
        );
        assert_eq!(fs::read_to_string(v.join("conf.d/x.conf")).unwrap(), "x");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&v.join("a")), 0o600);
        assert_eq!(mode(&v.join(&data_dir)), 0o755);

        assert_eq!(write(v, &first).unwrap(), WriteOutcome::Unchanged);
        // a removed visible link comes back without a swap
        fs::remove_file(v.join("a")).unwrap();
        assert_eq!(write(v, &first).unwrap(), WriteOutcome::Unchanged);
        assert_eq!(fs::read_link(v.join("a")).unwrap(), Path::new("..data/a"));

        let second = payload(&[("a", "2"), ("b", "new")]);
        let WriteOutcome::Written {
            data_dir: d2,
            previous,
        } = write(v, &second).unwrap()
        else {
            panic!("update wrote nothing")
        };
        assert_eq!(previous.as_deref(), Some(data_dir.as_str()));
        assert!(!v.join(&data_dir).exists(), "old dir removed");
        assert!(
            fs::symlink_metadata(v.join("conf.d")).is_err(),
            "dropped name removed"
        );
        assert_eq!(fs::read_to_string(v.join("a")).unwrap(), "2");
        let mut names: Vec<String> = fs::read_dir(v)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![d2, "..data".to_string(), "a".into(), "b".into()]
        );
    }

    #[test]
    fn dropping_a_nested_file_alone_still_swaps() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &payload(&[("d/x", "1"), ("d/y", "2")])).unwrap();
        let out = write(dir.path(), &payload(&[("d/x", "1")])).unwrap();
        assert!(matches!(out, WriteOutcome::Written { .. }));
        assert!(!dir.path().join("d/y").exists());
        assert!(dir.path().join("d/x").exists());
    }
}
