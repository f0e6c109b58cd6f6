//! The controller's side of `reloadlet status` (issue #46, docs/status.md): the value of
//! `reloadlet.io/data-version` for an object whose data it read, and whether it must be written
//! at all (pure; the write is not wired yet).

use crate::core::model::SourceRef;
use crate::core::status::data_version::Published;
use crate::core::volume_digest::HashKey;
use crate::ports::ObjectData;
use jiff::Timestamp;

/// The object's `(key, bytes)` pairs as the kubelet projects them: a ConfigMap's `data` (UTF-8
/// bytes) and `binaryData`, a Secret's `data`.
pub fn pairs(data: &ObjectData) -> Vec<(&str, &[u8])> {
    data.text
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_bytes()))
        .chain(data.binary.iter().map(|(k, v)| (k.as_str(), v.as_slice())))
        .collect()
}

/// The annotation to write for `object` (of `namespace`) holding `data`, or `None` when the one
/// it carries (`current`, as read from its metadata) already says the same: a label edit, an
/// annotation edit or a resync writes nothing, and `since` keeps the time the data was first
/// seen.
pub fn to_publish(
    key: &HashKey,
    namespace: &str,
    object: &SourceRef,
    data: &ObjectData,
    current: Option<&str>,
    now: Timestamp,
) -> Option<String> {
    let fresh = Published::of(key, namespace, object, pairs(data), now);
    let same = current
        .and_then(|v| Published::parse(v).ok())
        .is_some_and(|old| old.keys == fresh.keys);
    (!same).then(|| fresh.render())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::SourceKind;
    use crate::core::status::consumers::KeysRead;
    use crate::core::status::data_version::version_of_files;

    #[test]
    fn published_once_per_data_and_agreeing_with_the_files() {
        let key = HashKey::from_bytes([5; 32]);
        let app = SourceRef {
            kind: SourceKind::ConfigMap,
            name: "app".into(),
        };
        let t0: Timestamp = "2026-11-29T09:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-11-29T09:05:00Z".parse().unwrap();
        let data = ObjectData::of(&[("app.conf", "x=1")], &[("logo.png", &[0x89, 0x50])]);
        let first = to_publish(&key, "web", &app, &data, None, t0).expect("nothing published yet");
        assert!(
            first.starts_with("v1 since=2026-11-29T09:00:00Z app.conf="),
            "{first}"
        );
        // The same data later (a label edit, a resync): no write, `since` stays.
        assert_eq!(to_publish(&key, "web", &app, &data, Some(&first), t1), None);
        // A malformed value in its place is replaced.
        assert!(to_publish(&key, "web", &app, &data, Some("v1 junk"), t1).is_some());
        // New data: a new value from now.
        let changed = ObjectData::of(&[("app.conf", "x=2")], &[("logo.png", &[0x89, 0x50])]);
        let second = to_publish(&key, "web", &app, &changed, Some(&first), t1).unwrap();
        assert!(
            second.starts_with("v1 since=2026-11-29T09:05:00Z"),
            "{second}"
        );
        // What the agent computes from the projected files is the version of what was published.
        let files: [(&str, &[u8]); 2] = [("app.conf", b"x=2"), ("logo.png", &[0x89, 0x50])];
        assert_eq!(
            Published::parse(&second)
                .unwrap()
                .version_for(&KeysRead::All),
            Some(version_of_files(&key, "web", &app, files))
        );
    }
}
