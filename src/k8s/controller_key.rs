//! The controller's key (issue #43 §2 and §3): the HMAC key of the digests it writes into pod
//! annotations (so a Secret's digest cannot be tested against guesses offline) and of the
//! MACs of its baselines (so a baseline a pod author wrote is not trusted). It must outlive a
//! restart and a leader change — every replica must verify what another wrote — and no tenant
//! may read it: it lives in a Secret in the controller's own namespace, which the controller
//! reads, or creates once with 32 random bytes (`getrandom(2)`). Two replicas starting at once
//! both try to create it; the API server accepts one create and answers 409 AlreadyExists to
//! the other (kubernetes `staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`,
//! `Create`: the storage's create fails on an existing key), which then reads the winner's.

use super::refusals::report;
use crate::core::permission::{Feature, Request};
use crate::core::volume_digest::HashKey;
use crate::ports::RefusalSink;
use crate::retry::Backoff;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::PostParams;
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::time::Duration;

/// The Secret's name (RBAC: `get` on this name, `create` on secrets, in the controller's
/// namespace only) and its one key.
pub const SECRET: &str = "reloadlet-controller-key";
const DATA_KEY: &str = "key";

/// Why the key could not be had (the controller does not start without it).
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("reading Secret {namespace}/{SECRET}: {source}")]
    Read {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("creating Secret {namespace}/{SECRET}: {source}")]
    Create {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("Secret {namespace}/{SECRET} holds no 32-byte \"key\"; delete it and a new one is made (every baseline is then taken afresh)")]
    Malformed { namespace: String },
    #[error("the kernel's random source: {0}")]
    Random(#[from] std::io::Error),
}

/// The key in `namespace`'s Secret, made first when there is none.
pub async fn load_or_create(client: Client, namespace: &str) -> Result<HashKey, KeyError> {
    let api: Api<Secret> = Api::namespaced(client, namespace);
    let read = |e| KeyError::Read {
        namespace: namespace.to_owned(),
        source: e,
    };
    if let Some(found) = api.get_opt(SECRET).await.map_err(read)? {
        return key_of(&found, namespace);
    }
    let key = HashKey::generate()?;
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(SECRET.into()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/name".to_owned(),
                "reloadlet".to_owned(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            DATA_KEY.to_owned(),
            ByteString(key.as_bytes().to_vec()),
        )])),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            tracing::info!(namespace, secret = SECRET, "created the controller's key");
            Ok(key)
        }
        // Another replica made it first: its key is the key.
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let found = api.get(SECRET).await.map_err(read)?;
            key_of(&found, namespace)
        }
        Err(e) => Err(KeyError::Create {
            namespace: namespace.to_owned(),
            source: e,
        }),
    }
}

/// The key in `namespace`'s Secret, read only (`get`, never created: the agent's side).
/// `Ok(None)`: there is none (no controller installed, or it has not made one yet).
pub async fn read(
    client: Client,
    namespace: &str,
    denials: &RefusalSink,
) -> Result<Option<HashKey>, KeyError> {
    let api: Api<Secret> = Api::namespaced(client, namespace);
    let result = api.get_opt(SECRET).await;
    report(
        denials,
        Request::new(Feature::StatusRecord, "get", "", "secrets"),
        Some(namespace),
        &result,
    );
    let found = result.map_err(|e| KeyError::Read {
        namespace: namespace.to_owned(),
        source: e,
    })?;
    found.map(|s| key_of(&s, namespace)).transpose()
}

/// Between two looks for the key while there is none (or it cannot be read): 5 s doubling to
/// 10 min, ±20 %. Once it is had, it is read again every [`REREAD`] (a key made anew —
/// the Secret deleted — is then taken up; meanwhile versions are computed with the old one and
/// `status` says `pending`, the safe side).
const LOOK_AGAIN: Backoff = Backoff::doubling(Duration::from_secs(5), Duration::from_secs(600));
const REREAD: Duration = Duration::from_secs(3600);
/// Asked to read it again (`look_again`: a restart request shaped like the controller's did
/// not verify): not sooner than this after the last read, so a pod author writing such ids
/// costs one read a minute at most.
const LOOK_AGAIN_EVERY: Duration = Duration::from_secs(60);

/// The agent's side: follows the controller's key in `namespace` into `key` (the status
/// record's versions need it), looking again with a back-off while there is none; never
/// spins. A refusal (403) is reported through `denials`. `look_again` wakes it before its
/// time, at most once per [`LOOK_AGAIN_EVERY`].
pub async fn follow(
    client: Client,
    namespace: String,
    denials: RefusalSink,
    key: tokio::sync::watch::Sender<Option<HashKey>>,
    look_again: std::sync::Arc<tokio::sync::Notify>,
) {
    let mut delays = LOOK_AGAIN.delays();
    loop {
        let wait = match read(client.clone(), &namespace, &denials).await {
            Ok(Some(found)) => {
                let new = key.borrow().as_ref() != Some(&found);
                if new {
                    tracing::info!(
                        namespace,
                        secret = SECRET,
                        "the controller's key is read: status records carry data versions"
                    );
                    key.send_replace(Some(found));
                }
                delays.reset();
                REREAD
            }
            Ok(None) => {
                let wait = delays.next().unwrap_or(REREAD);
                tracing::info!(namespace, secret = SECRET, retry_in_s = wait.as_secs(), "no controller's key (is reloadlet controller installed?): status records carry no data version until there is one");
                wait
            }
            Err(e) => {
                let wait = delays.next().unwrap_or(REREAD);
                tracing::warn!(error = %e, retry_in_s = wait.as_secs(), "cannot read the controller's key; status records carry no data version meanwhile");
                wait
            }
        };
        if key.is_closed() {
            return;
        }
        let read_at = tokio::time::Instant::now();
        tokio::select! {
            _ = tokio::time::sleep(crate::retry::spread(wait)) => {}
            _ = look_again.notified() => {
                tokio::time::sleep_until(read_at + LOOK_AGAIN_EVERY.min(wait)).await;
                tracing::debug!(namespace, secret = SECRET, "reading the controller's key again: a restart request did not verify under the one known");
            }
        }
    }
}

fn key_of(secret: &Secret, namespace: &str) -> Result<HashKey, KeyError> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(DATA_KEY))
        .and_then(|b| <[u8; 32]>::try_from(b.0.as_slice()).ok())
        .ok_or_else(|| KeyError::Malformed {
            namespace: namespace.to_owned(),
        })?;
    Ok(HashKey::from_bytes(bytes))
}
