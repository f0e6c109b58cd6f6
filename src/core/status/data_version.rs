//! The data version of a ConfigMap or Secret that the agent (seeing the files the kubelet
//! projected) and the API side (seeing the object) agree on, and that tells nothing about a
//! Secret's content to whoever reads it (docs/status.md, "The data version").
//!
//! The kubelet projects an object as the AtomicWriter payload `key → bytes` (kubernetes
//! `pkg/volume/configmap/configmap.go` and `pkg/volume/secret/secret.go`, `MakePayload`: every
//! key of `data` and `binaryData` — a Secret's `data` — or only `items[].key`, written at
//! `items[].path`), so a file's bytes are exactly the value of its key. Both sides therefore
//! start from the same pairs:
//!
//! 1. a **key digest** per key: HMAC-SHA256 under the controller's key of the object's identity
//!    (namespace, kind, name), the key's name and its bytes, cut to 64 bits. Keyed, so a digest
//!    written where pod readers see it cannot be tested against guesses of a short Secret; the
//!    identity is in it, so two objects holding equal values do not show equal digests;
//! 2. the **version** of what a consumer reads: an unkeyed SHA-256 of the sorted
//!    `(key, key digest)` pairs of the keys it reads (every key, or its `items`/env keys), so
//!    the CLI, which has no key and reads no data, combines the published key digests for
//!    exactly the keys a pod reads.
//!
//! Labels, annotations and the resourceVersion are not in it: only the data moves it.

use crate::core::model::SourceRef;
use crate::core::status::consumers::KeysRead;
use crate::core::volume_digest::HashKey;
use hmac::Mac;
use jiff::Timestamp;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;

/// The annotation on a ConfigMap/Secret with its key digests:
/// `v1 since=<RFC 3339> <key>=<16 hex> …` (sorted by key).
pub const ANNOTATION: &str = "reloadlet.io/data-version";
/// Most keys a published value holds; an object with more is published without key digests
/// (`v1 since=… keys=over-limit`) and its consumers show as not comparable.
pub const MAX_KEYS: usize = 1024;
/// Longest published value read (the API server caps all annotations at 256 KiB together).
pub const MAX_VALUE: usize = 300 * 1024;

/// One key's keyed digest (64 bits). No `Display`: shown only as the hex the annotation holds.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyDigest([u8; 8]);

impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl KeyDigest {
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }

    fn parse(s: &str) -> Option<Self> {
        let mut out = [0u8; 8];
        (s.len() == 16 && hex::decode_to_slice(s, &mut out).is_ok()).then_some(Self(out))
    }
}

/// The digest of the value `bytes` of `key` in `object` (of `namespace`), under the
/// controller's key. Every field is length-prefixed.
pub fn key_digest(
    secret: &HashKey,
    namespace: &str,
    object: &SourceRef,
    key: &str,
    bytes: &[u8],
) -> KeyDigest {
    let mut mac = secret.mac();
    for part in [
        b"reloadlet data-version v1".as_slice(),
        namespace.as_bytes(),
        object.kind.as_str().as_bytes(),
        object.name.as_bytes(),
        key.as_bytes(),
        bytes,
    ] {
        mac.update(&(part.len() as u64).to_le_bytes());
        mac.update(part);
    }
    let mut out = [0u8; 8];
    out.copy_from_slice(&mac.finalize().into_bytes()[..8]);
    KeyDigest(out)
}

/// The version of what a consumer reads: `v1:` and 24 hex digits.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DataVersion(String);

impl DataVersion {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A version read from a record (tenant input): `v1:` and 24 lowercase hex digits, or `None`.
    pub fn parse(s: &str) -> Option<Self> {
        let hex = s.strip_prefix("v1:")?;
        (hex.len() == 24
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| Self(s.to_owned()))
    }
}

impl fmt::Display for DataVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The version of the keys read (`None` for a key: the consumer reads it and the object lacks
/// it, e.g. an optional env key or an `items` entry of a key not there). Order does not matter.
pub fn version<'a>(keys: impl IntoIterator<Item = (&'a str, Option<KeyDigest>)>) -> DataVersion {
    let sorted: BTreeMap<&str, Option<KeyDigest>> = keys.into_iter().collect();
    let mut h = Sha256::new();
    h.update(b"reloadlet data-version v1");
    for (key, digest) in sorted {
        h.update((key.len() as u64).to_le_bytes());
        h.update(key.as_bytes());
        match digest {
            Some(d) => {
                h.update([1u8]);
                h.update(d.0);
            }
            None => h.update([0u8]),
        }
    }
    DataVersion(format!("v1:{}", hex::encode(&h.finalize()[..12])))
}

/// The version the agent computes from a volume: `files` are the object's projected
/// `(key, bytes)` pairs (the kubelet's payload, read back from the volume).
pub fn version_of_files<'a>(
    secret: &HashKey,
    namespace: &str,
    object: &SourceRef,
    files: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> DataVersion {
    let digests: Vec<(&str, Option<KeyDigest>)> = files
        .into_iter()
        .map(|(k, b)| (k, Some(key_digest(secret, namespace, object, k, b))))
        .collect();
    version(digests)
}

/// The agent's side: the `(key, bytes)` pairs of one ConfigMap/Secret among a volume's files
/// (`files`: path relative to the volume's data directory → bytes, as read back). `items`: the
/// source's `(key, path)` pairs when its spec lists them (a key whose path is absent is left
/// out: the object lacks it); without `items` every top-level file is a key (a key cannot hold
/// `/` nor start with `..`), which holds only when the source is the volume's only one, so
/// `None` is answered for a whole source beside others (its files cannot be told apart).
pub fn pairs_of_files<'a>(
    files: &'a BTreeMap<String, Vec<u8>>,
    items: Option<&'a [(String, String)]>,
    only_source: bool,
) -> Option<Vec<(&'a str, &'a [u8])>> {
    match items {
        Some(items) => Some(
            items
                .iter()
                .filter_map(|(key, path)| files.get(path).map(|b| (key.as_str(), b.as_slice())))
                .collect(),
        ),
        None if only_source => Some(
            files
                .iter()
                .filter(|(path, _)| !path.contains('/') && !path.starts_with(".."))
                .map(|(k, b)| (k.as_str(), b.as_slice()))
                .collect(),
        ),
        None => None,
    }
}

/// The published key digests of an object ([`ANNOTATION`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// When this data was last written at the latest: the bound of its managedFields, else when
    /// the controller first saw it (the object changed at or before it).
    pub since: Timestamp,
    /// Key → digest; `None`: over [`MAX_KEYS`], not published.
    pub keys: Option<BTreeMap<String, KeyDigest>>,
}

impl Published {
    /// The controller's side: the digests of the object's `(key, bytes)` pairs (a ConfigMap's
    /// `data` and `binaryData`, a Secret's `data`).
    pub fn of<'a>(
        secret: &HashKey,
        namespace: &str,
        object: &SourceRef,
        data: impl IntoIterator<Item = (&'a str, &'a [u8])>,
        since: Timestamp,
    ) -> Self {
        let keys: BTreeMap<String, KeyDigest> = data
            .into_iter()
            .map(|(k, b)| (k.to_owned(), key_digest(secret, namespace, object, k, b)))
            .collect();
        Self {
            since,
            keys: (keys.len() <= MAX_KEYS).then_some(keys),
        }
    }

    /// The annotation's value.
    pub fn render(&self) -> String {
        let mut out = format!("v1 since={}", self.since);
        match &self.keys {
            None => out.push_str(" keys=over-limit"),
            Some(keys) => {
                for (k, d) in keys {
                    out.push(' ');
                    out.push_str(k);
                    out.push('=');
                    out.push_str(&d.hex());
                }
            }
        }
        out
    }

    /// Reads the annotation (whoever can edit the object can write it: bounded, and any
    /// malformed value is refused with the reason).
    pub fn parse(value: &str) -> Result<Self, crate::core::invalid::Invalid> {
        if value.len() > MAX_VALUE {
            return Err(crate::invalid!("longer than {MAX_VALUE} bytes"));
        }
        let mut words = value.split(' ');
        if words.next() != Some("v1") {
            return Err("not a v1 data version".into());
        }
        let since = words
            .next()
            .and_then(|w| w.strip_prefix("since="))
            .and_then(|t| t.parse::<Timestamp>().ok())
            .ok_or("no valid since=")?;
        let mut keys = BTreeMap::new();
        for word in words {
            if word == "keys=over-limit" && keys.is_empty() {
                return Ok(Self { since, keys: None });
            }
            let (k, d) = word.rsplit_once('=').ok_or("a word without =")?;
            let valid_key = !k.is_empty()
                && k.len() <= 253
                && k.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
            let digest = KeyDigest::parse(d).filter(|_| valid_key);
            let Some(digest) = digest else {
                return Err(crate::invalid!(
                    "malformed key digest {:?}",
                    truncate(word, 64)
                ));
            };
            if keys.len() == MAX_KEYS {
                return Err(crate::invalid!("more than {MAX_KEYS} keys"));
            }
            keys.insert(k.to_owned(), digest);
        }
        Ok(Self {
            since,
            keys: Some(keys),
        })
    }

    /// The current version of what a consumer reading `keys` reads; `None` when not published
    /// per key (over the limit).
    pub fn version_for(&self, keys: &KeysRead) -> Option<DataVersion> {
        let published = self.keys.as_ref()?;
        Some(match keys {
            KeysRead::All => version(published.iter().map(|(k, d)| (k.as_str(), Some(*d)))),
            KeysRead::Only(only) => {
                version(only.iter().map(|k| (k.as_str(), published.get(k).copied())))
            }
        })
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::SourceKind;

    fn key() -> HashKey {
        HashKey::from_bytes([7; 32])
    }

    fn obj(kind: SourceKind, name: &str) -> SourceRef {
        SourceRef {
            kind,
            name: name.into(),
        }
    }

    const SINCE: &str = "2026-11-29T09:00:00Z";

    #[test]
    fn files_and_the_object_give_the_same_version_for_every_key_and_for_items() {
        let app = obj(SourceKind::ConfigMap, "app");
        let data: [(&str, &[u8]); 3] = [("a.conf", b"x=1"), ("b.conf", b"y=2"), ("bin", &[0, 255])];
        let published = Published::of(&key(), "web", &app, data, SINCE.parse().unwrap());
        // The agent reads the files back in any order.
        let files = [data[2], data[0], data[1]];
        assert_eq!(
            published.version_for(&KeysRead::All),
            Some(version_of_files(&key(), "web", &app, files))
        );
        let only_a = KeysRead::Only(["a.conf".to_string()].into());
        assert_eq!(
            published.version_for(&only_a),
            Some(version_of_files(&key(), "web", &app, [data[0]]))
        );
        // Round trip through the annotation.
        let text = published.render();
        assert!(
            text.starts_with("v1 since=2026-11-29T09:00:00Z a.conf="),
            "{text}"
        );
        assert_eq!(Published::parse(&text), Ok(published));
    }

    #[test]
    fn the_agent_reads_the_pairs_back_from_files_even_when_items_rename_them() {
        let app = obj(SourceKind::ConfigMap, "app");
        let data: [(&str, &[u8]); 2] = [("a.conf", b"x=1"), ("b.conf", b"y=2")];
        let published = Published::of(&key(), "web", &app, data, SINCE.parse().unwrap());
        // items: [{key: a.conf, path: conf/app.ini}]
        let files: BTreeMap<String, Vec<u8>> =
            [("conf/app.ini".to_string(), b"x=1".to_vec())].into();
        let items = [("a.conf".to_string(), "conf/app.ini".to_string())];
        let pairs = pairs_of_files(&files, Some(&items), false).unwrap();
        assert_eq!(
            Some(version_of_files(&key(), "web", &app, pairs)),
            published.version_for(&KeysRead::Only(["a.conf".to_string()].into()))
        );
        // A whole volume: every top-level file is a key.
        let whole: BTreeMap<String, Vec<u8>> = data
            .iter()
            .map(|(k, b)| (k.to_string(), b.to_vec()))
            .collect();
        let pairs = pairs_of_files(&whole, None, true).unwrap();
        assert_eq!(
            Some(version_of_files(&key(), "web", &app, pairs)),
            published.version_for(&KeysRead::All)
        );
        assert_eq!(
            pairs_of_files(&whole, None, false),
            None,
            "a whole source beside others"
        );
    }

    #[test]
    fn the_version_moves_with_the_data_only_and_differs_per_object_and_key() {
        let app = obj(SourceKind::Secret, "db");
        let v =
            |ns: &str, o: &SourceRef, k: &str, b: &[u8]| version_of_files(&key(), ns, o, [(k, b)]);
        let base = v("web", &app, "pw", b"hunter2");
        assert_eq!(base, v("web", &app, "pw", b"hunter2"));
        assert_ne!(base, v("web", &app, "pw", b"hunter3"), "data");
        assert_ne!(base, v("web", &app, "password", b"hunter2"), "key name");
        assert_ne!(base, v("other", &app, "pw", b"hunter2"), "namespace");
        assert_ne!(
            base,
            v("web", &obj(SourceKind::ConfigMap, "db"), "pw", b"hunter2"),
            "kind"
        );
        let other_key = version_of_files(
            &HashKey::from_bytes([8; 32]),
            "web",
            &app,
            [("pw", b"hunter2".as_slice())],
        );
        assert_ne!(
            base, other_key,
            "keyed: without the key a guess cannot be checked"
        );
        // A missing key reads differently from an empty value.
        let empty = version([("k", Some(key_digest(&key(), "web", &app, "k", b"")))]);
        assert_ne!(empty, version([("k", None)]));
    }

    #[test]
    fn hostile_annotations_are_refused_with_a_reason() {
        let good = format!("v1 since={SINCE} a=0123456789abcdef");
        assert!(Published::parse(&good).is_ok());
        for bad in [
            "".to_string(),
            "v2 since=x".into(),
            "v1".into(),
            "v1 since=yesterday".into(),
            format!("v1 since={SINCE} a=0123"),
            format!("v1 since={SINCE} a=0123456789abcdeg"),
            format!("v1 since={SINCE} =0123456789abcdef"),
            format!("v1 since={SINCE} a/b=0123456789abcdef"),
            format!("v1 since={SINCE} noequals"),
            format!("v1 since={SINCE} {}", "k=0123456789abcdef ".repeat(20_000)),
        ] {
            assert!(Published::parse(&bad).is_err(), "{:?}", truncate(&bad, 80));
        }
        let over = Published::parse(&format!("v1 since={SINCE} keys=over-limit")).unwrap();
        assert_eq!(over.version_for(&KeysRead::All), None);
        assert_eq!(
            DataVersion::parse("v1:0123456789abcdef01234567").map(|v| v.to_string()),
            Some("v1:0123456789abcdef01234567".into())
        );
        for bad in [
            "v1:",
            "v1:XYZ",
            "v2:0123456789abcdef01234567",
            "0123456789abcdef01234567",
        ] {
            assert_eq!(DataVersion::parse(bad), None, "{bad}");
        }
    }
}
