//! The controller's key (issue #43 §2 and §3): the HMAC key of the digests it writes into pod
//! annotations (so a Secret's digest cannot be tested against guesses offline) and of the
//! MACs of its baselines (so a baseline a pod author wrote is not trusted). It must outlive a
//! restart and a leader change — every replica must verify what another wrote — and no tenant
//! may read it: it lives in a Secret in the controller's own namespace, which the controller
//! reads, or creates once with 32 random bytes (`getrandom(2)`). Two replicas starting at once
//! both try to create it; the API server accepts one create and answers 409 AlreadyExists to
//! the other (kubernetes `staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`,
//! `Create`: the storage's create fails on an existing key), which then reads the winner's.

use crate::core::volume_digest::HashKey;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::PostParams;
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
