//! Tests of [`super`]: hashing real trees on a temp dir.

use super::*;
use std::collections::BTreeSet;
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
        source_keys: Vec::new(),
        source_items: Vec::new(),
        other_paths: vec!["labels".into(), "token".into(), "meta/annotations".into()],
        csi: None,
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
        csi: None,
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
        csi: None,
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

#[test]
fn csi_volumes_written_in_place_hash_their_directory() {
    let dir = tempfile::tempdir().unwrap();
    let key = HashKey::from_bytes([7; 32]);
    let hash = |layout: &Layout| hash_volume(dir.path(), 1 << 20, &key, layout).unwrap();
    // Empty (published, nothing written; or the bare directory after an unmount).
    assert_eq!(hash(&Layout::csi()), None);
    std::fs::write(dir.path().join("db-password"), "s3cret").unwrap();
    std::fs::write(dir.path().join("db-user"), "app").unwrap();
    let first = hash(&Layout::csi()).expect("written in place");
    // A Secret volume's layout never reads a volume without `..data`.
    assert_eq!(hash(&Layout::whole()), None);
    // The same bytes rewritten: the same hash; other bytes: another.
    std::fs::write(dir.path().join("db-user"), "app").unwrap();
    assert_eq!(hash(&Layout::csi()), Some(first.clone()));
    std::fs::write(dir.path().join("db-user"), "app2").unwrap();
    let second = hash(&Layout::csi()).unwrap();
    assert_ne!(second, first);
    // An AtomicWriter's first write under way (`..<timestamp>`, `..data_tmp`) is left out.
    std::fs::create_dir(dir.path().join("..2026_11_26_13_00_00.1")).unwrap();
    std::fs::write(dir.path().join("..2026_11_26_13_00_00.1/x"), "y").unwrap();
    assert_eq!(hash(&Layout::csi()), Some(second));
}

#[test]
fn data_target_reads_the_link_whatever_its_length() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(data_target(tmp.path()), None);
    let ts = "..2026_11_27_01_02_03.123456789";
    write_volume(tmp.path(), ts, &[("a", "1", 0o644)]);
    assert_eq!(data_target(tmp.path()), Some(DataTarget(ts.into())));
    // Longer than the stack buffer (readlink(2) would truncate it to the buffer silently).
    for len in [255, 256, 257, 600] {
        let long = "x".repeat(len);
        let link = tmp.path().join(DATA_LINK);
        fs::remove_file(&link).unwrap();
        symlink(&long, &link).unwrap();
        assert_eq!(
            data_target(tmp.path()),
            Some(DataTarget(long.into())),
            "{len}"
        );
    }
}

/// A tenant's `items[].path` of `a/a/a/…` (the API accepts 4,096 characters: about two
/// thousand levels). The walk is iterative: on a thread with a 128 KiB stack (a recursive walk
/// with its 4 KiB listing buffer per level needed several MiB here) a tree far deeper than the
/// limit is refused with the limit named, and the same tree at the limit is hashed.
#[test]
fn a_tenant_deep_tree_is_refused_at_the_depth_limit_without_deep_stack() {
    let dir = tempfile::tempdir().unwrap();
    let deep = vec!["a"; 1_500].join("/") + "/key";
    write_volume(dir.path(), TS1, &[(&deep, "v", 0o644)]);
    let at_limit = tempfile::tempdir().unwrap();
    let ok = vec!["a"; MAX_DEPTH - 1].join("/") + "/key";
    write_volume(at_limit.path(), TS1, &[(&ok, "v", 0o644)]);
    let (deep_path, ok_path) = (dir.path().to_owned(), at_limit.path().to_owned());
    let (deep_result, ok_result) = std::thread::Builder::new()
        .stack_size(128 << 10)
        .spawn(move || (hv(&deep_path, 1 << 30), hv(&ok_path, 1 << 30)))
        .unwrap()
        .join()
        .expect("the walk must not overflow a small stack");
    let err = deep_result.unwrap_err();
    assert!(
        matches!(err, HashError::TooDeep { limit } if limit == MAX_DEPTH),
        "{err}"
    );
    assert!(err.to_string().contains(&MAX_DEPTH.to_string()), "{err}");
    // Positive control: the same shape at the limit is hashed.
    assert!(ok_result.unwrap().is_some());
    // content_bytes (the size estimate) walks the deep tree without trouble.
    let _ = content_bytes(dir.path());
}

/// A volume of more entries than [`MAX_ENTRIES`] (each a one-byte name, well inside the byte
/// budget) is refused whole while it is listed, naming the limit; one under it is hashed.
#[test]
fn a_tenant_volume_of_too_many_entries_is_refused_naming_the_limit() {
    let names: Vec<String> = (0..=MAX_ENTRIES).map(|i| format!("{i:x}")).collect();
    let over: Vec<(&str, &str, u32)> = names.iter().map(|n| (n.as_str(), "", 0o644)).collect();
    let dir = tempfile::tempdir().unwrap();
    write_volume(dir.path(), TS1, &over);
    let err = hv(dir.path(), 1 << 30).unwrap_err();
    assert!(
        matches!(err, HashError::TooManyEntries { limit } if limit == MAX_ENTRIES),
        "{err}"
    );
    assert_eq!(content_bytes(dir.path()), u64::MAX);
    let under = tempfile::tempdir().unwrap();
    write_volume(under.path(), TS1, &over[..MAX_ENTRIES - 1]);
    assert!(hv(under.path(), 1 << 30).unwrap().is_some());
}

#[test]
fn a_write_is_read_back_as_its_files_until_the_kubelet_removes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let ts = "..2026_11_29_09_00_00.1";
    write_volume(
        tmp.path(),
        ts,
        &[("a.conf", "x=1", 0o644), ("conf/b.ini", "y=2", 0o600)],
    );
    let target = data_target(tmp.path()).unwrap();
    let files = read_write(tmp.path(), &target, 1 << 20).unwrap().unwrap();
    let want: std::collections::BTreeMap<String, Vec<u8>> = [
        ("a.conf".to_string(), b"x=1".to_vec()),
        ("conf/b.ini".to_string(), b"y=2".to_vec()),
    ]
    .into();
    assert_eq!(files, want);
    assert!(matches!(
        read_write(tmp.path(), &target, 4),
        Err(HashError::TooLarge { .. })
    ));
    // The kubelet wrote again and removed the old write: gone, not an error.
    fs::remove_dir_all(tmp.path().join(ts)).unwrap();
    assert_eq!(read_write(tmp.path(), &target, 1 << 20).unwrap(), None);
    // Never anything but a `..<timestamp>` name.
    assert!(read_write(tmp.path(), &DataTarget(b"../etc".to_vec()), 1 << 20).is_err());
}
