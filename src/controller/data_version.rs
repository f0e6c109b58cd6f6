//! The controller's side of `reloadlet status` (issue #46, docs/status.md): the value of
//! `reloadlet.io/data-version` for an object whose data it read, and whether it must be written
//! at all (pure; `super::publish` writes it).

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
/// annotation edit or a resync writes nothing, and `since` stays.
///
/// `since` is the best upper bound of the data's last write ([`since`]).
pub fn to_publish(
    key: &HashKey,
    namespace: &str,
    object: &SourceRef,
    data: &ObjectData,
    current: Option<&str>,
    now: Timestamp,
) -> Option<String> {
    let mut fresh = Published::of(key, namespace, object, pairs(data), now);
    let old = current.and_then(|v| Published::parse(v).ok());
    if old.as_ref().is_some_and(|old| old.keys == fresh.keys) {
        return None;
    }
    fresh.since = since(data.data_written, old.as_ref(), &fresh, now);
    Some(fresh.render())
}

/// When the data `fresh` was last written at the latest: its managedFields' bound `written`
/// (`crate::core::status::data_written`) when they give one, never after `now` (a clock
/// ahead of ours); `now` otherwise. `old` is the publication it replaces: a key of it gone
/// means a removal, which moves no managedFields time when done by an update or patch
/// (structured-merge-diff `merge/update.go` `Updater.Update`), so then `now` too (as when `old`
/// has no key digests to compare).
fn since(
    written: Option<Timestamp>,
    old: Option<&Published>,
    fresh: &Published,
    now: Timestamp,
) -> Timestamp {
    let removed = match old.map(|o| (&o.keys, &fresh.keys)) {
        None => false,
        Some((Some(old), Some(fresh))) => old.keys().any(|k| !fresh.contains_key(k)),
        Some(_) => true,
    };
    match written {
        Some(written) if !removed => written.min(now),
        _ => now,
    }
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

    #[test]
    fn since_is_the_managed_fields_bound_unless_later_than_now_or_a_key_went() {
        let key = HashKey::from_bytes([5; 32]);
        let app = SourceRef {
            kind: SourceKind::ConfigMap,
            name: "app".into(),
        };
        let t = |s: &str| -> Timestamp { s.parse().unwrap() };
        let now = t("2026-11-29T10:00:00Z");
        let since = |data: &ObjectData, current: Option<&str>| {
            to_publish(&key, "web", &app, data, current, now)
                .map(|v| Published::parse(&v).unwrap().since)
        };
        let with = |pairs: &[(&str, &str)], written: Option<&str>| ObjectData {
            data_written: written.map(t),
            ..ObjectData::of(pairs, &[])
        };
        let one = [("a", "1")];
        let two = [("a", "1"), ("b", "2")];
        let prior = |pairs: &[(&str, &str)]| {
            Published::of(
                &key,
                "web",
                &app,
                pairs.iter().map(|(k, v)| (*k, v.as_bytes())),
                t("2026-11-29T08:00:00Z"),
            )
            .render()
        };
        let cases: Vec<(&str, ObjectData, Option<String>, Option<&str>)> = vec![
            (
                "first publication, written before: that bound",
                with(&one, Some("2026-11-29T09:00:01Z")),
                None,
                Some("2026-11-29T09:00:01Z"),
            ),
            (
                "first publication, managedFields do not tell: now",
                with(&one, None),
                None,
                Some("2026-11-29T10:00:00Z"),
            ),
            (
                "a bound after now (the API server's clock ahead): now",
                with(&one, Some("2026-11-29T10:05:00Z")),
                None,
                Some("2026-11-29T10:00:00Z"),
            ),
            (
                "a change (a key added) after a publication: the bound",
                with(&two, Some("2026-11-29T09:30:01Z")),
                Some(prior(&one)),
                Some("2026-11-29T09:30:01Z"),
            ),
            (
                "a key removed since the publication (moves no time): now",
                with(&one, Some("2026-11-29T09:00:01Z")),
                Some(prior(&two)),
                Some("2026-11-29T10:00:00Z"),
            ),
            (
                "a publication over the key limit cannot tell what went: now",
                with(&one, Some("2026-11-29T09:00:01Z")),
                Some("v1 since=2026-11-29T08:00:00Z keys=over-limit".into()),
                Some("2026-11-29T10:00:00Z"),
            ),
            (
                "a malformed value in its place: as a first publication",
                with(&one, Some("2026-11-29T09:00:01Z")),
                Some("v1 junk".into()),
                Some("2026-11-29T09:00:01Z"),
            ),
            (
                "the same data: nothing written, the published since stays",
                with(&one, Some("2026-11-29T09:00:01Z")),
                Some(prior(&one)),
                None,
            ),
        ];
        for (what, data, current, want) in cases {
            assert_eq!(since(&data, current.as_deref()), want.map(t), "{what}");
        }
    }
}
