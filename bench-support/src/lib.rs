//! For reloadlet's benchmarks (a dev-dependency; not part of the simulated node): the kubelet's
//! `..data` swap with the clock read just before the rename, so a watcher's latency is
//! measured from the swap itself.
//!
//! [`timed_update`] performs steps 4–9 of [`nodesim::volumes::atomic_writer::write`] (the kubelet's
//! `AtomicWriter.Write` in `pkg/volume/util/atomic_writer.go`) for a one-key payload whose
//! key already exists: the same syscalls in the same order, so a watch on the volume dir sees
//! the same events (a test below compares them with the real writer). Step 3 (compare with the
//! old content) is reduced to the same reads without the comparison: the caller always
//! changes the bytes.

pub use nodesim::clock::monotonic_ns;
use nodesim::volumes::atomic_writer::{DATA_DIR_NAME, NEW_DATA_DIR_NAME};
use std::fs;
use std::io;
use std::os::unix::fs::{symlink, DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Swaps `volume_dir`'s `..data` to a new data dir holding `key` = `data`, as the kubelet's
/// AtomicWriter does on an update; returns [`monotonic_ns`] read just before the
/// `rename(..data_tmp, ..data)`.
pub fn timed_update(volume_dir: &Path, key: &str, data: &[u8]) -> io::Result<i128> {
    nodesim::volumes::atomic_writer::validate_path(key)?;
    // (2) the old timestamped dir
    let old = volume_dir.join(fs::read_link(volume_dir.join(DATA_DIR_NAME))?);
    // (3) list the old data dir (a watch on the volume dir with a broad mask sees it opened
    // and read), read the old file
    for entry in fs::read_dir(&old)? {
        entry?;
    }
    let _ = fs::read(old.join(key))?;
    // (4) mkdtemp with the kubelet's UTC prefix, 0700, then chmod 0755
    let prefix = nodesim::clock::now()
        .strftime("..%Y_%m_%d_%H_%M_%S.")
        .to_string();
    let (name, dir) = loop {
        let name = format!("{prefix}{}", rand::random::<u32>());
        let dir = volume_dir.join(&name);
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => break (name, dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    };
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
    // (5) the file, mode 0644
    let file = dir.join(key);
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&file)
        .and_then(|mut f| io::Write::write_all(&mut f, data))?;
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644))?;
    // (6) `..data_tmp -> <new dir>`, (7) the swap
    let tmp = volume_dir.join(NEW_DATA_DIR_NAME);
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    symlink(&name, &tmp)?;
    let t0 = monotonic_ns();
    fs::rename(&tmp, volume_dir.join(DATA_DIR_NAME))?;
    // (8) the visible symlink exists already: only checked; (9) the old dir goes
    if fs::read_link(volume_dir.join(key)).is_err() {
        symlink(Path::new(DATA_DIR_NAME).join(key), volume_dir.join(key))?;
    }
    fs::remove_dir_all(old)?;
    Ok(t0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use inotify::{Inotify, WatchMask};
    use nodesim::volumes::atomic_writer::{write, FileProjection};
    use std::collections::BTreeMap;

    fn payload(v: &str) -> BTreeMap<String, FileProjection> {
        BTreeMap::from([("k".to_string(), FileProjection::new(v.as_bytes()))])
    }

    /// The events a watch with every mask bit saw, timestamped dir names made generic.
    fn events(ino: &mut Inotify) -> Vec<String> {
        let mut buf = [0u8; 65536];
        let mut out = Vec::new();
        loop {
            match ino.read_events(&mut buf) {
                Ok(evs) => {
                    let before = out.len();
                    for e in evs {
                        let name = e.name.map(|n| n.to_string_lossy().into_owned());
                        let name = match name {
                            Some(n) if n.starts_with("..2") => "..<ts>".to_string(),
                            Some(n) => n,
                            None => String::new(),
                        };
                        out.push(format!("{:?} {name}", e.mask));
                    }
                    if out.len() == before {
                        return out;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return out,
                Err(e) => panic!("reading inotify: {e}"),
            }
        }
    }

    #[test]
    fn timed_update_makes_the_events_the_atomic_writer_makes() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        for d in [&a, &b] {
            fs::create_dir(d).unwrap();
            write(d, &payload("v0")).unwrap();
        }
        let mut ino = Inotify::init().unwrap();
        ino.watches().add(&a, WatchMask::ALL_EVENTS).unwrap();
        write(&a, &payload("v1")).unwrap();
        let by_writer = events(&mut ino);
        let mut ino = Inotify::init().unwrap();
        ino.watches().add(&b, WatchMask::ALL_EVENTS).unwrap();
        let before = monotonic_ns();
        let t0 = timed_update(&b, "k", b"v1").unwrap();
        let by_bench = events(&mut ino);
        assert!(by_writer
            .iter()
            .any(|e| e.contains("MOVED_TO") && e.ends_with(" ..data")));
        assert_eq!(by_bench, by_writer);
        assert!(before <= t0 && t0 <= monotonic_ns());
        assert_eq!(fs::read_to_string(b.join("k")).unwrap(), "v1");
        let entries = |d: &Path| fs::read_dir(d).unwrap().count();
        assert_eq!(entries(&b), entries(&a), "the old data dir is gone");
    }
}
