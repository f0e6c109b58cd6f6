//! Volume payloads from API objects, as the kubelet's configmap, secret and projected
//! volume plugins compute them (`MakePayload`, `collectData`), plus the
//! `kube-api-access-*` volume the ServiceAccount admission plugin injects.

use crate::volumes::atomic_writer::FileProjection;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapProjection, ConfigMapVolumeSource, KeyToPath, Pod, ProjectedVolumeSource,
    Secret, SecretVolumeSource, ServiceAccountTokenProjection, Volume, VolumeMount,
};
use std::collections::BTreeMap;

mod downward_api;
mod pod_certificate;
mod service_account;
pub use downward_api::{downward_api_field, format_map};
pub use pod_certificate::PodCertificates;
pub use service_account::{
    fake_token, inject_kube_api_access, kube_api_access_volume, random_name_suffix,
    root_ca_configmap, TokenCache,
};

/// Files of one volume: payload path → content and mode.
pub type Payload = BTreeMap<String, FileProjection>;

/// The kubelet's default file mode (`420`).
pub const DEFAULT_MODE: u32 = 0o644;
/// The ConfigMap the root-CA publisher puts in every namespace.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";
/// Prefix of the injected service-account volume.
pub const KUBE_API_ACCESS_PREFIX: &str = "kube-api-access-";
/// Where the injected volume is mounted in every container.
pub const SERVICE_ACCOUNT_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The token lifetime the admission plugin asks for.
pub const KUBE_API_ACCESS_TOKEN_SECONDS: i64 = 3607;

/// Where ConfigMaps and Secrets come from (the API server, or a map in tests).
pub trait SourceLookup {
    fn configmap(&self, namespace: &str, name: &str) -> Option<ConfigMap>;
    fn secret(&self, namespace: &str, name: &str) -> Option<Secret>;
}

/// Why a volume cannot be set up (the kubelet would keep the pod waiting).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProjectionError {
    #[error("configmap \"{namespace}/{name}\" not found")]
    ConfigMapNotFound { namespace: String, name: String },
    #[error("secret \"{namespace}/{name}\" not found")]
    SecretNotFound { namespace: String, name: String },
    #[error("{kind} \"{name}\" references non-existent key {key:?}")]
    MissingKey {
        kind: &'static str,
        name: String,
        key: String,
    },
    #[error("downward API field {0:?} is not supported by the simulator")]
    UnsupportedField(String),
    #[error("pod certificate of signer {0}")]
    PodCertificate(String),
}

fn mode_or(mode: Option<i32>, default: u32) -> u32 {
    mode.map(|m| (m as u32) & 0o7777).unwrap_or(default)
}

/// `MakePayload` of the configmap/secret plugins: every key, or only `items`.
fn make_payload(
    kind: &'static str,
    name: &str,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: u32,
    optional: bool,
) -> Result<Payload, ProjectionError> {
    let mut payload = Payload::new();
    match items {
        None | Some([]) => {
            for (key, value) in data {
                payload.insert(
                    key.clone(),
                    FileProjection {
                        data: value.clone(),
                        mode: default_mode,
                    },
                );
            }
        }
        Some(items) => {
            for item in items {
                let Some(value) = data.get(&item.key) else {
                    if optional {
                        continue;
                    }
                    return Err(ProjectionError::MissingKey {
                        kind,
                        name: name.to_owned(),
                        key: item.key.clone(),
                    });
                };
                let mode = mode_or(item.mode, default_mode);
                payload.insert(
                    item.path.clone(),
                    FileProjection {
                        data: value.clone(),
                        mode,
                    },
                );
            }
        }
    }
    Ok(payload)
}

fn configmap_data(cm: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (k, v) in cm.data.iter().flatten() {
        data.insert(k.clone(), v.clone().into_bytes());
    }
    for (k, v) in cm.binary_data.iter().flatten() {
        data.insert(k.clone(), v.0.clone());
    }
    data
}

fn secret_data(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (k, v) in secret.data.iter().flatten() {
        data.insert(k.clone(), v.0.clone());
    }
    // the API server folds write-only stringData into data, stringData winning
    for (k, v) in secret.string_data.iter().flatten() {
        data.insert(k.clone(), v.clone().into_bytes());
    }
    data
}

/// A `configMap` volume.
pub fn configmap_volume(
    source: &ConfigMapVolumeSource,
    namespace: &str,
    lookup: &dyn SourceLookup,
) -> Result<Payload, ProjectionError> {
    let optional = source.optional.unwrap_or(false);
    let data = match lookup.configmap(namespace, &source.name) {
        Some(cm) => configmap_data(&cm),
        None if optional => BTreeMap::new(),
        None => {
            return Err(ProjectionError::ConfigMapNotFound {
                namespace: namespace.into(),
                name: source.name.clone(),
            })
        }
    };
    let mode = mode_or(source.default_mode, DEFAULT_MODE);
    make_payload(
        "configmap",
        &source.name,
        &data,
        source.items.as_deref(),
        mode,
        optional,
    )
}

/// A `secret` volume (decoded bytes).
pub fn secret_volume(
    source: &SecretVolumeSource,
    namespace: &str,
    lookup: &dyn SourceLookup,
) -> Result<Payload, ProjectionError> {
    let optional = source.optional.unwrap_or(false);
    let name = source.secret_name.clone().unwrap_or_default();
    let data = match lookup.secret(namespace, &name) {
        Some(s) => secret_data(&s),
        None if optional => BTreeMap::new(),
        None => {
            return Err(ProjectionError::SecretNotFound {
                namespace: namespace.into(),
                name,
            })
        }
    };
    let mode = mode_or(source.default_mode, DEFAULT_MODE);
    make_payload(
        "secret",
        &name,
        &data,
        source.items.as_deref(),
        mode,
        optional,
    )
}

/// A `projected` volume: its sources merged in order (a later path wins).
pub fn projected_volume(
    source: &ProjectedVolumeSource,
    pod: &Pod,
    lookup: &dyn SourceLookup,
    tokens: &mut TokenCache,
    certificates: &mut PodCertificates,
) -> Result<Payload, ProjectionError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let default_mode = mode_or(source.default_mode, DEFAULT_MODE);
    let mut payload = Payload::new();
    for projection in source.sources.iter().flatten() {
        if let Some(cm) = &projection.config_map {
            let optional = cm.optional.unwrap_or(false);
            match lookup.configmap(namespace, &cm.name) {
                Some(obj) => {
                    let data = configmap_data(&obj);
                    payload.extend(make_payload(
                        "configmap",
                        &cm.name,
                        &data,
                        cm.items.as_deref(),
                        default_mode,
                        optional,
                    )?);
                }
                None if optional => {}
                None => {
                    return Err(ProjectionError::ConfigMapNotFound {
                        namespace: namespace.into(),
                        name: cm.name.clone(),
                    })
                }
            }
        }
        if let Some(s) = &projection.secret {
            let optional = s.optional.unwrap_or(false);
            match lookup.secret(namespace, &s.name) {
                Some(obj) => {
                    let data = secret_data(&obj);
                    payload.extend(make_payload(
                        "secret",
                        &s.name,
                        &data,
                        s.items.as_deref(),
                        default_mode,
                        optional,
                    )?);
                }
                None if optional => {}
                None => {
                    return Err(ProjectionError::SecretNotFound {
                        namespace: namespace.into(),
                        name: s.name.clone(),
                    })
                }
            }
        }
        if let Some(d) = &projection.downward_api {
            for item in d.items.iter().flatten() {
                let Some(field) = &item.field_ref else {
                    return Err(ProjectionError::UnsupportedField(format!(
                        "resourceFieldRef at {}",
                        item.path
                    )));
                };
                let data = downward_api_field(pod, &field.field_path)?;
                payload.insert(
                    item.path.clone(),
                    FileProjection {
                        data,
                        mode: mode_or(item.mode, default_mode),
                    },
                );
            }
        }
        if let Some(t) = &projection.service_account_token {
            let token = tokens.get(pod, t);
            payload.insert(
                t.path.clone(),
                FileProjection {
                    data: token.into_bytes(),
                    mode: default_mode,
                },
            );
        }
        if let Some(c) = &projection.pod_certificate {
            for (path, data) in certificates.files(pod, c)? {
                payload.insert(
                    path,
                    FileProjection {
                        data,
                        mode: default_mode,
                    },
                );
            }
        }
        // clusterTrustBundle: not simulated
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::service_account::base64url;
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, SecretProjection, VolumeProjection};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::ByteString;

    #[derive(Default)]
    struct Objects {
        cms: Vec<ConfigMap>,
        secrets: Vec<Secret>,
    }

    impl SourceLookup for Objects {
        fn configmap(&self, ns: &str, name: &str) -> Option<ConfigMap> {
            self.cms
                .iter()
                .find(|c| {
                    c.metadata.namespace.as_deref() == Some(ns)
                        && c.metadata.name.as_deref() == Some(name)
                })
                .cloned()
        }
        fn secret(&self, ns: &str, name: &str) -> Option<Secret> {
            self.secrets
                .iter()
                .find(|c| {
                    c.metadata.namespace.as_deref() == Some(ns)
                        && c.metadata.name.as_deref() == Some(name)
                })
                .cloned()
        }
    }

    fn meta(ns: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        }
    }

    fn objects() -> Objects {
        Objects {
            cms: vec![ConfigMap {
                metadata: meta("ns", "app"),
                data: Some(BTreeMap::from([
                    ("a.conf".into(), "A".into()),
                    ("b.conf".into(), "B".into()),
                ])),
                binary_data: Some(BTreeMap::from([("bin".into(), ByteString(vec![0, 1, 2]))])),
                ..Default::default()
            }],
            secrets: vec![Secret {
                metadata: meta("ns", "creds"),
                data: Some(BTreeMap::from([(
                    "password".into(),
                    ByteString(b"hunter2".to_vec()),
                )])),
                ..Default::default()
            }],
        }
    }

    fn data(p: &Payload) -> BTreeMap<&str, (&[u8], u32)> {
        p.iter()
            .map(|(k, v)| (k.as_str(), (v.data.as_slice(), v.mode)))
            .collect()
    }

    #[test]
    fn configmap_volume_all_keys_or_items() {
        let o = objects();
        let all = configmap_volume(
            &ConfigMapVolumeSource {
                name: "app".into(),
                ..Default::default()
            },
            "ns",
            &o,
        )
        .unwrap();
        assert_eq!(
            data(&all),
            BTreeMap::from([
                ("a.conf", (&b"A"[..], 0o644)),
                ("b.conf", (&b"B"[..], 0o644)),
                ("bin", (&[0u8, 1, 2][..], 0o644))
            ])
        );
        let items = ConfigMapVolumeSource {
            name: "app".into(),
            default_mode: Some(0o600),
            items: Some(vec![
                KeyToPath {
                    key: "a.conf".into(),
                    path: "conf.d/a.conf".into(),
                    mode: Some(0o400),
                },
                KeyToPath {
                    key: "b.conf".into(),
                    path: "b".into(),
                    mode: None,
                },
            ]),
            ..Default::default()
        };
        let got = configmap_volume(&items, "ns", &o).unwrap();
        assert_eq!(
            data(&got),
            BTreeMap::from([
                ("conf.d/a.conf", (&b"A"[..], 0o400)),
                ("b", (&b"B"[..], 0o600))
            ])
        );

        let mut missing_key = items.clone();
        missing_key.items.as_mut().unwrap().push(KeyToPath {
            key: "nope".into(),
            path: "n".into(),
            mode: None,
        });
        assert!(matches!(
            configmap_volume(&missing_key, "ns", &o),
            Err(ProjectionError::MissingKey { .. })
        ));
        missing_key.optional = Some(true);
        assert_eq!(configmap_volume(&missing_key, "ns", &o).unwrap().len(), 2);

        let absent = ConfigMapVolumeSource {
            name: "gone".into(),
            ..Default::default()
        };
        assert!(matches!(
            configmap_volume(&absent, "ns", &o),
            Err(ProjectionError::ConfigMapNotFound { .. })
        ));
        let absent_optional = ConfigMapVolumeSource {
            optional: Some(true),
            ..absent
        };
        assert!(configmap_volume(&absent_optional, "ns", &o)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn secret_volume_gives_decoded_bytes() {
        let o = objects();
        let src = SecretVolumeSource {
            secret_name: Some("creds".into()),
            ..Default::default()
        };
        assert_eq!(
            data(&secret_volume(&src, "ns", &o).unwrap()),
            BTreeMap::from([("password", (&b"hunter2"[..], 0o644))])
        );
        let other_ns = secret_volume(&src, "elsewhere", &o);
        assert!(matches!(
            other_ns,
            Err(ProjectionError::SecretNotFound { .. })
        ));
    }

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                labels: Some(BTreeMap::from([
                    ("app".into(), "web".into()),
                    ("tier".into(), "a \"b\"\n".into()),
                ])),
                annotations: Some(BTreeMap::from([("x".into(), "1".into())])),
                uid: Some("u-1".into()),
                ..meta("ns", "web-0")
            },
            spec: Some(PodSpec::default()),
            ..Default::default()
        }
    }

    #[test]
    fn projected_volume_merges_sources_and_keeps_tokens_until_rotation() {
        let o = objects();
        let mut volume = kube_api_access_volume("abcde");
        let sources = volume.projected.as_mut().unwrap().sources.as_mut().unwrap();
        sources.push(VolumeProjection {
            secret: Some(SecretProjection {
                name: "creds".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        let mut o = o;
        o.cms.push(root_ca_configmap("ns"));
        let mut tokens = TokenCache::default();
        let mut certs = PodCertificates::default();
        let src = volume.projected.as_ref().unwrap();
        let first = projected_volume(src, &pod(), &o, &mut tokens, &mut certs).unwrap();
        let names: Vec<&str> = first.keys().map(String::as_str).collect();
        assert_eq!(names, ["ca.crt", "namespace", "password", "token"]);
        assert_eq!(first["namespace"].data, b"ns");
        let token = String::from_utf8(first["token"].data.clone()).unwrap();
        assert_eq!(token.split('.').count(), 3, "JWT-shaped: {token}");
        assert!(token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.'));

        let again = projected_volume(src, &pod(), &o, &mut tokens, &mut certs).unwrap();
        assert_eq!(again, first, "same token until rotation");
        tokens.rotate();
        let rotated = projected_volume(src, &pod(), &o, &mut tokens, &mut certs).unwrap();
        assert_ne!(rotated["token"], first["token"]);
        assert_eq!(rotated["ca.crt"], first["ca.crt"]);
    }

    #[test]
    fn pod_certificates_are_key_then_chain_and_new_only_at_rotation() {
        use k8s_openapi::api::core::v1::PodCertificateProjection;
        let src = ProjectedVolumeSource {
            sources: Some(vec![VolumeProjection {
                pod_certificate: Some(PodCertificateProjection {
                    signer_name: "example.com/mtls".into(),
                    key_type: "ED25519".into(),
                    credential_bundle_path: Some("bundle.pem".into()),
                    key_path: Some("tls.key".into()),
                    certificate_chain_path: Some("tls.crt".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let (o, mut tokens, mut certs) =
            (objects(), TokenCache::default(), PodCertificates::default());
        let first = projected_volume(&src, &pod(), &o, &mut tokens, &mut certs).unwrap();
        let text = |p: &Payload, f: &str| String::from_utf8(p[f].data.clone()).unwrap();
        assert!(text(&first, "tls.key").starts_with("-----BEGIN PRIVATE KEY-----"));
        assert!(text(&first, "tls.crt").starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(
            text(&first, "bundle.pem"),
            text(&first, "tls.key") + &text(&first, "tls.crt"),
            "the bundle is the key's PEM block, then the chain's"
        );
        let again = projected_volume(&src, &pod(), &o, &mut tokens, &mut certs).unwrap();
        assert_eq!(again, first, "a resync writes the same credentials");
        certs.rotate();
        let rotated = projected_volume(&src, &pod(), &o, &mut tokens, &mut certs).unwrap();
        assert_ne!(rotated["tls.key"], first["tls.key"]);
        assert_ne!(rotated["tls.crt"], first["tls.crt"]);
    }

    #[test]
    fn downward_api_fields_format_like_the_kubelet() {
        let p = pod();
        assert_eq!(
            downward_api_field(&p, "metadata.labels").unwrap(),
            b"app=\"web\"\ntier=\"a \\\"b\\\"\\n\""
        );
        assert_eq!(
            downward_api_field(&p, "metadata.annotations").unwrap(),
            b"x=\"1\""
        );
        assert_eq!(
            downward_api_field(&p, "metadata.labels['app']").unwrap(),
            b"web"
        );
        assert_eq!(downward_api_field(&p, "metadata.name").unwrap(), b"web-0");
        assert!(downward_api_field(&p, "status.podIP").is_err());
    }

    #[test]
    fn injects_kube_api_access_once_and_mounts_it_everywhere() {
        let mut p = pod();
        p.spec.as_mut().unwrap().containers = vec![Default::default(), Default::default()];
        let name = inject_kube_api_access(&mut p).unwrap();
        assert!(
            name.starts_with(KUBE_API_ACCESS_PREFIX)
                && name.len() == KUBE_API_ACCESS_PREFIX.len() + 5
        );
        assert_eq!(
            inject_kube_api_access(&mut p),
            None,
            "second injection is a no-op"
        );
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.volumes.as_ref().unwrap().len(), 1);
        for c in &spec.containers {
            let m = &c.volume_mounts.as_ref().unwrap()[0];
            assert_eq!(
                (m.name.as_str(), m.mount_path.as_str()),
                (name.as_str(), SERVICE_ACCOUNT_MOUNT_PATH)
            );
        }
        let mut opted_out = pod();
        opted_out
            .spec
            .as_mut()
            .unwrap()
            .automount_service_account_token = Some(false);
        assert_eq!(inject_kube_api_access(&mut opted_out), None);
    }

    #[test]
    fn base64url_matches_known_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("\u{ff}\u{fe}", "w7_Dvg"),
        ] {
            assert_eq!(base64url(input.as_bytes()), want, "{input:?}");
        }
    }
}
