//! Env consumers, the pure part: which keys of a ConfigMap/Secret a pod reads through
//! `env`/`envFrom`, the digest of exactly those values, the baseline annotation, and what a
//! change does to the pod.
//!
//! What the kubelet puts into a container's environment (kubernetes
//! `pkg/kubelet/kubelet_pods.go`, `makeEnvironmentVariables`): for `configMapKeyRef` the value of
//! `configMap.Data[key]` (`secret.Data[key]` for `secretKeyRef`), the container failing to start
//! when it is missing unless `optional`; for `envFrom` every key of `configMap.Data`
//! (`secret.Data`) as `<prefix><key>`, nothing when an `optional` object is missing. It reads
//! them once, when it creates the container: a running container never sees a change.

use crate::core::annotations::{self, Action};
use crate::core::model::{EnvKeys, EnvRef, PodInfo, SourceKind, SourceRef};
use crate::core::volume_digest::HashKey;
use hmac::Mac;
use std::collections::BTreeMap;

use crate::ports::ObjectData;
use std::fmt;

/// What one pod reads of one object: the union of its containers' references.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Selector {
    pub keys: EnvKeys,
    pub optional: bool,
    /// Read through a volume (the rollout feature): `EnvKeys::All` then covers `binaryData`
    /// too, as the kubelet writes both into the volume.
    pub volume: bool,
}

/// The pod's env references grouped per object (sorted, deduplicated), restricted to the kinds
/// followed (`secrets`: with `--env-consumers-secrets`) and to the pod's
/// `reloadlet.io/configmaps` / `reloadlet.io/secrets` lists when it has them.
pub fn references(
    pod: &PodInfo,
    configmaps: bool,
    secrets: bool,
) -> BTreeMap<SourceRef, Vec<Selector>> {
    let policy = annotations::parse(&pod.annotations).ok().flatten();
    let mut out: BTreeMap<SourceRef, Vec<Selector>> = BTreeMap::new();
    for r in &pod.env {
        let followed = match r.source.kind {
            SourceKind::ConfigMap => configmaps,
            SourceKind::Secret => secrets,
            SourceKind::SecretProviderClass
            | SourceKind::CsiVolume
            | SourceKind::PodCertificate => false,
        };
        if !followed || !listed(policy.as_ref(), r) {
            continue;
        }
        let sel = Selector {
            keys: r.keys.clone(),
            optional: r.optional,
            volume: false,
        };
        let list = out.entry(r.source.clone()).or_default();
        if !list.contains(&sel) {
            list.push(sel);
        }
    }
    for list in out.values_mut() {
        list.sort();
    }
    out
}

fn listed(policy: Option<&annotations::PodPolicy>, r: &EnvRef) -> bool {
    narrowed_in(policy, &r.source)
}

/// Does `reloadlet.io/configmaps` / `reloadlet.io/secrets` (when the pod has either) name
/// `source`?
pub fn narrowed_in(policy: Option<&annotations::PodPolicy>, source: &SourceRef) -> bool {
    let Some(policy) = policy.filter(|p| p.narrowed()) else {
        return true;
    };
    let r = source;
    let list = match r.kind {
        SourceKind::ConfigMap => &policy.configmaps,
        SourceKind::Secret => &policy.secrets,
        SourceKind::SecretProviderClass | SourceKind::CsiVolume | SourceKind::PodCertificate => {
            return false
        }
    };
    list.as_ref().is_some_and(|l| l.contains(&r.name))
}

/// The digest (16 hex digits of HMAC-SHA256 under the controller's `key`) of exactly what
/// `selectors` read of `data` (`None`: the object does not exist). Every field is
/// length-prefixed and tagged, so a missing key, an empty value and a binary value all differ,
/// and the result does not depend on key order. Keyed: the digest of a Secret's data is
/// written into pod annotations that anyone who can read pods sees, and an unkeyed one would
/// let them test guesses of the Secret offline (issue #43 §3; the agent keys its volume
/// digests for the same reason, `crate::core::volume_digest`).
pub fn digest(key: &HashKey, selectors: &[Selector], data: Option<&ObjectData>) -> String {
    let mut h = key.mac();
    h.update(b"reloadlet object digest");
    let mut field = |tag: &[u8], bytes: &[u8]| {
        h.update(tag);
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    let mut sorted: Vec<&Selector> = selectors.iter().collect();
    sorted.sort();
    sorted.dedup();
    match data {
        None => field(b"absent", b""),
        Some(data) => {
            for sel in sorted {
                match &sel.keys {
                    EnvKeys::Key(key) => {
                        field(b"key", key.as_bytes());
                        match (data.text.get(key), data.binary.get(key)) {
                            (Some(v), _) => field(b"text", v.as_bytes()),
                            (None, Some(b)) => field(b"binary", b),
                            (None, None) => field(b"missing", b""),
                        }
                    }
                    // envFrom reads `data` of a ConfigMap (never `binaryData`) and `data` of a
                    // Secret (held in `binary`).
                    EnvKeys::All { prefix } => {
                        field(b"all", prefix.as_bytes());
                        if sel.volume {
                            // A volume holds every key of `data` and `binaryData`.
                            field(b"volume", b"");
                            for (k, v) in &data.text {
                                field(b"name", k.as_bytes());
                                field(b"text", v.as_bytes());
                            }
                            for (k, v) in &data.binary {
                                field(b"name", k.as_bytes());
                                field(b"binary", v);
                            }
                        } else if data.secret {
                            for (k, v) in &data.binary {
                                field(b"name", k.as_bytes());
                                field(b"binary", v);
                            }
                        } else {
                            for (k, v) in &data.text {
                                field(b"name", k.as_bytes());
                                field(b"text", v.as_bytes());
                            }
                        }
                    }
                }
            }
        }
    }
    hex::encode(&h.finalize().into_bytes()[..8])
}

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

/// Does the controller follow this pod's env at all? (opted in with a valid annotation,
/// running, not terminating).
pub fn env_eligible(pod: &PodInfo) -> Result<(), crate::core::invalid::Invalid> {
    match annotations::parse(&pod.annotations) {
        Ok(Some(p)) if p.action == Action::Rollout => {
            return Err("action rollout: a change rolls the owning workload instead".into())
        }
        Ok(Some(_)) => {}
        Ok(None) => return Err("the pod has no reloadlet.io/action annotation".into()),
        Err(e) => return Err(crate::invalid!("invalid annotation: {e}")),
    }
    if pod.terminating {
        return Err("the pod is terminating".into());
    }
    if pod.phase != "Running" {
        return Err(crate::invalid!(
            "the pod is not running (phase {:?})",
            pod.phase
        ));
    }
    Ok(())
}

/// What a change of an env source does to a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvDecision {
    /// Evict through the Eviction API (the agent's eviction, PDB-respecting).
    Evict,
    /// Warning `EvictionRefused`: no controller owns the pod and it did not allow it.
    Refused(String),
    /// Warning `EnvNotReloaded`: a signal or HTTP reload cannot refresh env.
    NotReloaded(String),
}

/// `reloadlet.io/action: evict` or `reloadlet.io/env-action: evict` evict (unowned pods only
/// with `reloadlet.io/evict-unowned: "true"`); any other action gets `EnvNotReloaded`.
pub fn decide(pod: &PodInfo, source: &SourceRef) -> EnvDecision {
    let policy = annotations::parse(&pod.annotations).ok().flatten();
    let env_evicts = annotations::env_evicts(&pod.annotations).unwrap_or(false);
    let (evict, allow_unowned) = match policy.as_ref().map(|p| &p.action) {
        Some(Action::Evict { allow_unowned }) => (true, *allow_unowned),
        _ => (
            env_evicts,
            pod.annotations
                .get(annotations::EVICT_UNOWNED)
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
        ),
    };
    if !evict {
        return EnvDecision::NotReloaded(format!(
            "{source} changed, but the pod reads it through env, which a running container never sees again; a signal or HTTP reload cannot refresh it. Mount it as a volume instead, or set reloadlet.io/env-action: evict to have the pod evicted (and recreated by its controller) on such a change"
        ));
    }
    if !pod.has_controller && !allow_unowned {
        return EnvDecision::Refused(format!(
            "not evicting: the pod has no controller to recreate it (set reloadlet.io/evict-unowned: \"true\" to allow): {} changed",
            Cause(source)
        ));
    }
    EnvDecision::Evict
}

/// The cause in Events and logs: `configmap app-env (env) changed`.
pub struct Cause<'a>(pub &'a SourceRef);

impl fmt::Display for Cause<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (env)", self.0)
    }
}

pub fn cause(source: &SourceRef) -> String {
    format!("{} changed", Cause(source))
}

#[cfg(test)]
mod tests;
