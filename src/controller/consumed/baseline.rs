//! The baseline annotations (`reloadlet.io/env-baseline`, `reloadlet.io/rollout-baseline`):
//! the digests a pod's consumed objects had when it was last compared, signed with the
//! controller's key so that a pod author cannot forge one.

use crate::core::model::{SourceKind, SourceRef};
use crate::core::volume_digest::HashKey;
use hmac::Mac;
use std::collections::BTreeMap;

/// The MAC of a baseline value: which annotation of which pod (by UID) it is, and the
/// entries. 32 hex digits (128 bits of HMAC-SHA256 under the controller's key).
fn baseline_mac(key: &HashKey, annotation: &str, uid: &str, entries: &str) -> String {
    let mut mac = key.mac();
    for part in [
        b"reloadlet baseline".as_slice(),
        annotation.as_bytes(),
        uid.as_bytes(),
        entries.as_bytes(),
    ] {
        mac.update(&(part.len() as u64).to_le_bytes());
        mac.update(part);
    }
    hex::encode(&mac.finalize().into_bytes()[..16])
}

/// The value of `reloadlet.io/env-baseline` (`reloadlet.io/rollout-baseline`) of the pod
/// `uid`: `configmap/app-env=0123456789abcdef,…;mac=<32 hex>`, sorted. The MAC proves the
/// value is this controller's: a pod author can write the annotation, and a forged baseline
/// would make the controller take data as changed (issue #43 §2).
pub fn format_baseline(
    key: &HashKey,
    annotation: &str,
    uid: &str,
    digests: &BTreeMap<SourceRef, String>,
) -> String {
    let entries = digests
        .iter()
        .map(|(s, d)| format!("{}/{}={d}", s.kind.as_str(), s.name))
        .collect::<Vec<_>>()
        .join(",");
    let mac = baseline_mac(key, annotation, uid, &entries);
    format!("{entries};mac={mac}")
}

/// Parses a baseline annotation written by [`format_baseline`] for the pod `uid`. `None` when
/// its MAC is missing or wrong: not this controller's (a forgery, a copy from another pod, or
/// a value from before baselines were signed), so nothing in it is trusted and a baseline is
/// taken afresh. Entries that do not parse are left out (a baseline is then taken again for
/// them).
pub fn parse_baseline(
    key: &HashKey,
    annotation: &str,
    uid: &str,
    value: &str,
) -> Option<BTreeMap<SourceRef, String>> {
    let (entries, mac) = value.rsplit_once(";mac=")?;
    let want = baseline_mac(key, annotation, uid, entries);
    // Compared in constant time: the MAC is the only secret-derived value here.
    let equal = mac.len() == want.len()
        && mac
            .bytes()
            .zip(want.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if !equal {
        return None;
    }
    let mut out = BTreeMap::new();
    for entry in entries.split(',') {
        let Some((source, digest)) = entry.trim().split_once('=') else {
            continue;
        };
        let Some((kind, name)) = source.split_once('/') else {
            continue;
        };
        let kind = match kind {
            "configmap" => SourceKind::ConfigMap,
            "secret" => SourceKind::Secret,
            _ => continue,
        };
        let valid = digest.len() == 16 && digest.bytes().all(|b| b.is_ascii_hexdigit());
        if valid && !name.is_empty() {
            out.insert(
                SourceRef {
                    kind,
                    name: name.to_owned(),
                },
                digest.to_owned(),
            );
        }
    }
    Some(out)
}
