//! The service account's part of a pod's volumes: the `kube-api-access-*` volume the
//! ServiceAccount admission plugin injects (plugin/pkg/admission/serviceaccount/admission.go),
//! the root CA the publisher keeps in every namespace, and the tokens the kubelet's token
//! manager holds until they rotate.

use super::*;

/// Service-account tokens the kubelet holds for a pod, until the next rotation.
///
/// Re-projecting with the same cache gives the same bytes (a resync writes nothing);
/// [`TokenCache::rotate`] makes the next projection issue fresh tokens (the ~48-minute swap).
#[derive(Debug, Default, Clone)]
pub struct TokenCache {
    tokens: BTreeMap<(String, i64), String>,
    rotations: u64,
}

impl TokenCache {
    /// Forgets every token: the next projection issues new ones.
    pub fn rotate(&mut self) {
        self.tokens.clear();
        self.rotations += 1;
    }

    pub(super) fn get(&mut self, pod: &Pod, source: &ServiceAccountTokenProjection) -> String {
        let audience = source.audience.clone().unwrap_or_default();
        let expiration = source
            .expiration_seconds
            .unwrap_or(KUBE_API_ACCESS_TOKEN_SECONDS);
        let rotations = self.rotations;
        self.tokens
            .entry((audience.clone(), expiration))
            .or_insert_with(|| fake_token(pod, &audience, expiration, rotations))
            .clone()
    }
}

/// A JWT-looking token (header.claims.signature, base64url) for the pod's service account.
/// Not signed by anything: nothing in the simulation verifies it.
pub fn fake_token(pod: &Pod, audience: &str, expiration_seconds: i64, rotation: u64) -> String {
    let now = crate::clock::now().as_second();
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.as_deref())
        .unwrap_or("default");
    let audience = if audience.is_empty() {
        "https://kubernetes.default.svc.cluster.local"
    } else {
        audience
    };
    let header = serde_json::json!({ "alg": "RS256", "kid": "nodesim" });
    let claims = serde_json::json!({
        "aud": [audience],
        "exp": now + expiration_seconds,
        "iat": now,
        "nbf": now,
        "iss": "https://kubernetes.default.svc.cluster.local",
        "jti": format!("{:032x}", rand::random::<u128>()),
        "kubernetes.io": {
            "namespace": ns,
            "pod": { "name": pod.metadata.name, "uid": pod.metadata.uid },
            "serviceaccount": { "name": sa },
            "nodesim.rotation": rotation,
        },
        "sub": format!("system:serviceaccount:{ns}:{sa}"),
    });
    let signature: Vec<u8> = (0..256).map(|_| rand::random::<u8>()).collect();
    format!(
        "{}.{}.{}",
        base64url(header.to_string().as_bytes()),
        base64url(claims.to_string().as_bytes()),
        base64url(&signature)
    )
}

/// Unpadded base64url.
pub(super) fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// The root CA the simulated cluster publishes as `kube-root-ca.crt` (a PEM-shaped blob).
pub fn root_ca_configmap(namespace: &str) -> ConfigMap {
    let body =
        base64url(b"nodesim fake cluster root certificate authority, not a real certificate");
    let pem = format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n");
    ConfigMap {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(ROOT_CA_CONFIGMAP.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("ca.crt".to_owned(), pem)])),
        ..Default::default()
    }
}

/// The `kube-api-access-<suffix>` volume as the ServiceAccount admission plugin writes it.
pub fn kube_api_access_volume(suffix: &str) -> Volume {
    use k8s_openapi::api::core::v1::{
        DownwardAPIProjection, DownwardAPIVolumeFile, ObjectFieldSelector, VolumeProjection,
    };
    Volume {
        name: format!("{KUBE_API_ACCESS_PREFIX}{suffix}"),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(0o644),
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        expiration_seconds: Some(KUBE_API_ACCESS_TOKEN_SECONDS),
                        path: "token".into(),
                        audience: None,
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: ROOT_CA_CONFIGMAP.into(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".into(),
                            path: "ca.crt".into(),
                            mode: None,
                        }]),
                        optional: None,
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".into(),
                            field_ref: Some(ObjectFieldSelector {
                                api_version: Some("v1".into()),
                                field_path: "metadata.namespace".into(),
                            }),
                            ..Default::default()
                        }]),
                    }),
                    ..Default::default()
                },
            ]),
        }),
        ..Default::default()
    }
}

/// Five characters from the alphabet Kubernetes uses for generated names.
pub fn random_name_suffix() -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHANUMS[rand::random_range(0..ALPHANUMS.len())] as char)
        .collect()
}

/// What the ServiceAccount admission plugin does on pod creation: unless
/// `automountServiceAccountToken: false` or a volume is already mounted there, add a
/// `kube-api-access-<random>` volume and mount it read-only in every container.
/// Returns the volume name when one was added.
pub fn inject_kube_api_access(pod: &mut Pod) -> Option<String> {
    let spec = pod.spec.as_mut()?;
    if spec.automount_service_account_token == Some(false) {
        return None;
    }
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    if volumes
        .iter()
        .any(|v| v.name.starts_with(KUBE_API_ACCESS_PREFIX))
    {
        return None;
    }
    let volume = kube_api_access_volume(&random_name_suffix());
    let name = volume.name.clone();
    volumes.push(volume);
    let containers = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten());
    for container in containers {
        let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
        if mounts
            .iter()
            .any(|m| m.mount_path == SERVICE_ACCOUNT_MOUNT_PATH)
        {
            continue;
        }
        mounts.push(VolumeMount {
            name: name.clone(),
            mount_path: SERVICE_ACCOUNT_MOUNT_PATH.into(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    Some(name)
}
