//! The pure side of a volume's content hash: the per-node [`HashKey`], the keyed
//! [`VolumeDigest`] of a volume's parts, and the stream both it and the unkeyed hash of
//! reloadlet 0.1 are computed from ([`Entry`]). No filesystem: the walk that lists a volume's
//! entries is [`crate::host::volume_read`].
//!
//! A [`VolumeDigest`] holds one HMAC-SHA256 per *part* of the volume: a projected source whose
//! files the pod spec names (`items`) is a part of its own, every other ConfigMap/Secret file
//! belongs to the [`REST`] part, and files of other sources are not hashed. The HMAC key is a
//! random per-node [`HashKey`], so a saved digest says nothing about the content to whoever
//! reads the state file without the key (no offline dictionary attack on a short Secret).
//! Digests have no `Display`; their `Debug` shows no bytes: a content hash never reaches a
//! log, an Event or a metric.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::core::model::SourceRef;

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

    /// An HMAC-SHA256 keyed with this key.
    pub fn mac(&self) -> Hmac<Sha256> {
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

/// Type tags in the hashed stream.
pub const FILE: u8 = b'f';
pub const DIR: u8 = b'd';
pub const SYMLINK: u8 = b'l';

/// One entry of a volume's tree: its type ([`FILE`], [`DIR`], [`SYMLINK`]), path relative to
/// the timestamped dir, mode and content (a file's SHA-256, a symlink's target string,
/// nothing for a directory).
pub struct Entry {
    pub kind: u8,
    pub rel: Vec<u8>,
    pub mode: u32,
    pub content: Vec<u8>,
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

/// The keyed digest of `entries` (in the walk's order), each file and symlink fed into the
/// HMAC of the part `part_of` names for its path (`None`: not hashed). Directories come from
/// the files below them (the kubelet's writer creates them 0755) and are not fed.
pub fn keyed_digest<'p>(
    key: &HashKey,
    entries: &[Entry],
    part_of: impl Fn(&str) -> Option<&'p str>,
) -> VolumeDigest {
    let mut macs: BTreeMap<String, Hmac<Sha256>> = BTreeMap::new();
    for e in entries {
        if e.kind == DIR {
            continue;
        }
        let rel = String::from_utf8_lossy(&e.rel);
        let Some(part) = part_of(&rel) else {
            continue;
        };
        let mac = match macs.get_mut(part) {
            Some(mac) => mac,
            None => macs.entry(part.to_owned()).or_insert_with(|| key.mac()),
        };
        e.feed(|bytes| mac.update(bytes));
    }
    VolumeDigest::from_parts(
        macs.into_iter()
            .map(|(part, mac)| (part, mac.finalize().into_bytes().into())),
    )
}

/// The unkeyed SHA-256 that reloadlet 0.1 saved (state file version 1) of `entries`: every
/// entry, directories included, the same stream as 0.1.
pub fn legacy_digest(entries: &[Entry]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for e in entries {
        e.feed(|bytes| hasher.update(bytes));
    }
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
