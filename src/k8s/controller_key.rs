//! The controller's key (issue #43 §2 and §3): the HMAC key of the digests it writes into pod
//! annotations (so a Secret's digest cannot be tested against guesses offline) and of the
//! MACs of its baselines (so a baseline a pod author wrote is not trusted). It must outlive a
//! restart and a leader change — every replica must verify what another wrote — and no tenant
//! may read it: it lives in a Secret in the controller's own namespace, which the controller
//! reads, or creates once with 32 random bytes (`getrandom(2)`). Two replicas starting at once
//! both try to create it; the API server accepts one create and answers 409 AlreadyExists to
//! the other (kubernetes `staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`,
//! `Create`: the storage's create fails on an existing key), which then reads the winner's.

use super::api_backoff;
use super::refusals::Watched;
use super::watch_loop::{self, Change, Pacing};
use crate::core::permission::Feature;
use crate::core::volume_digest::HashKey;
use crate::ports::RefusalSink;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::PostParams;
use kube::runtime::watcher;
use kube::{Api, Client};
use std::collections::BTreeMap;

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

/// The agent's side: follows the controller's key in `namespace` into `key`, with a watch of
/// that one Secret (LIST and WATCH with `fieldSelector=metadata.name=reloadlet-controller-key`,
/// as the kubelet follows a pod's Secrets: kubernetes
/// `pkg/kubelet/util/manager/watch_based_manager.go`). The API server authorizes a list or
/// watch of one name as a request for that name (`staging/src/k8s.io/apiserver/pkg/endpoints/
/// request/requestinfo.go`, `NewRequestInfo`: `fieldSelector` `RequiresExactMatch
/// ("metadata.name")` sets the request's name), so the Role's `resourceNames` still holds
/// and no other Secret is readable. A key the controller makes after the agent started, or
/// anew, is taken up as soon as it is written, not on a later poll: every record written
/// meanwhile carries no version, and `status` reads `pending` for it. A deleted Secret leaves
/// the key as it was until a new one is made (versions computed with it read `pending` after
/// a new key, the safe side). Failures back off as the pod watch's do; a refusal (403) is
/// reported through `denials` with the rule to add. Ends when every receiver is gone.
pub async fn follow(
    client: Client,
    namespace: String,
    denials: RefusalSink,
    key: tokio::sync::watch::Sender<Option<HashKey>>,
) {
    let api: Api<Secret> = Api::namespaced(client, &namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={SECRET}"));
    let ns = namespace.clone();
    let changes = watch_loop::changes(api, config, Pacing::UntilData, move |s: &Secret| {
        Some(key_of(s, &ns))
    });
    futures::pin_mut!(changes);
    let watched = Watched {
        feature: Feature::StatusRecord,
        group: "",
        resource: "secrets",
    };
    let mut failures = 0u32;
    let take = |found: Result<HashKey, KeyError>| match found {
        Ok(found) => {
            if key.borrow().as_ref() != Some(&found) {
                tracing::info!(
                    namespace,
                    secret = SECRET,
                    "the controller's key is read: status records carry data versions"
                );
                key.send_replace(Some(found));
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "the controller's key cannot be used; status records carry the versions of the last key read, or none")
        }
    };
    while let Some(change) = changes.next().await {
        watched.report_one(&denials, Some(&namespace), Some(SECRET), &change);
        if !matches!(change, Change::Failed(_)) {
            failures = 0;
        }
        match change {
            Change::Listed(found) => match found.into_iter().next() {
                Some(found) => take(found),
                None if key.borrow().is_none() => tracing::info!(
                    namespace,
                    secret = SECRET,
                    "no controller's key (is reloadlet controller installed?): status records carry no data version until it makes one"
                ),
                None => {}
            },
            Change::Applied(found) => take(found),
            Change::Deleted(_) => tracing::info!(
                namespace,
                secret = SECRET,
                "the controller's key Secret was deleted: versions are computed with the last key read until a new one is made"
            ),
            Change::Failed(e) => {
                let code = api_backoff::status_code(&e);
                if code == Some(410) {
                    tracing::debug!(error = %e, "the key's watch expired (410); relisting");
                } else {
                    failures += 1;
                    if matches!(code, Some(401 | 403)) {
                        // The refusal sink names the rule to add (log, Event, /readyz).
                        tracing::debug!(code, failures, "the key's watch refused");
                    } else if failures == 1 || watch_loop::worth_an_error(failures, code) {
                        tracing::warn!(code, failures, error = %e, "cannot watch the controller's key; status records carry the versions of the last key read (or none) meanwhile, retrying with backoff");
                    }
                }
            }
        }
        if key.is_closed() {
            return;
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
