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
    assert_eq!(read_pacers(dir.path()), Some(pacers.clone()));
    assert_eq!(read_pacers(&dir.path().join("nowhere")), None);
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
    std::os::unix::fs::symlink("..2026_01_01_00_00_00.1", content.path().join("..data")).unwrap();
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
