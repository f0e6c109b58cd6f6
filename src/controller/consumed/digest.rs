//! The digest of what one pod reads of one ConfigMap/Secret: exactly the keys it reads (through
//! `env`/`envFrom`, or a volume for the rollout feature), keyed with the controller's key.

use crate::core::model::EnvKeys;
use crate::core::volume_digest::HashKey;
use crate::ports::ObjectData;
use hmac::Mac;

/// What one pod reads of one object: the union of its containers' references.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Selector {
    pub keys: EnvKeys,
    pub optional: bool,
    /// Read through a volume (the rollout feature): `EnvKeys::All` then covers `binaryData`
    /// too, as the kubelet writes both into the volume.
    pub volume: bool,
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
