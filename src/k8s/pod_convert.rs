//! A decoded pod ([`PodView`]) → [`PodInfo`]: keeps only what reloadlet decides on. Nothing
//! else of the object (env values, mount paths, the other volume sources) is retained; of
//! `env`/`envFrom` only the ConfigMap/Secret references.

use super::pod_view::{ContainerStatusView, ContainerView, PodSpecView, PodView, VolumeView};
use crate::core::model::{
    ContainerId, ContainerInfo, ContainerKind, ContainerPort, CsiVolumeSpec, EnvKeys, EnvRef,
    PodInfo, RestartFacts, SourceKind, SourceRef, VolumeMount, VolumeSpec, ROOT_CA_CONFIGMAP,
    ROOT_CA_KEY, SECRETS_STORE_DRIVER, SECRET_PROVIDER_CLASS_ATTRIBUTE,
};
use crate::core::rollout::OwnerRef;
use k8s_openapi::api::core::v1::KeyToPath;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub fn pod_info(pod: &PodView) -> Option<PodInfo> {
    let meta = &pod.metadata;
    let uid = meta.uid.clone()?;
    let spec = pod.spec.as_ref()?;
    let status = pod.status.as_ref();
    let statuses = status
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    let init_statuses = status
        .and_then(|s| s.init_container_statuses.as_deref())
        .unwrap_or_default();

    let mut containers = Vec::new();
    for c in spec.init_containers.iter().flatten() {
        let kind = if c.restart_policy.as_deref() == Some("Always") {
            ContainerKind::SidecarInit
        } else {
            ContainerKind::Init
        };
        containers.push(container_info(c, kind, init_statuses));
    }
    for c in &spec.containers {
        containers.push(container_info(c, ContainerKind::Regular, statuses));
    }

    let controller = controller_of(meta);
    Some(PodInfo {
        uid,
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        annotations: meta.annotations.clone().unwrap_or_default().into(),
        labels: meta.labels.clone().unwrap_or_default().into(),
        volumes: spec.volumes.iter().flatten().map(volume_spec).collect(),
        containers,
        has_controller: controller.is_some(),
        controller: controller.map(Box::new),
        phase: status.and_then(|s| s.phase.clone()).unwrap_or_default(),
        // `podutil.IsPodReady` (k8s.io/kubernetes pkg/api/v1/pod/util.go): the Ready
        // condition is True (the restart grant waits for it).
        ready: condition(status, "Ready") == Some(true),
        terminating: meta.deletion_timestamp.is_some(),
        env: env_refs(spec),
        pod_ip: status
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse().ok()),
        host_network: spec.host_network.unwrap_or(false),
        restart: Box::new(RestartFacts {
            restart_policy: spec.restart_policy.clone(),
            termination_grace_seconds: spec.termination_grace_period_seconds,
            drain_gate: spec
                .readiness_gates
                .iter()
                .flatten()
                .any(|g| g.condition_type == crate::core::restart::DRAIN_GATE),
            drain_condition: condition(status, crate::core::restart::DRAIN_GATE),
            containers_ready: condition(status, "ContainersReady") == Some(true),
            unready_since: unready_since(status),
            stop_signals: spec
                .init_containers
                .iter()
                .flatten()
                .chain(&spec.containers)
                .filter_map(|c| {
                    let s = c.lifecycle.as_ref()?.stop_signal.as_ref()?;
                    Some((c.name.clone(), s.clone()))
                })
                .collect(),
        }),
        started: started(statuses),
    })
}

/// When the longest-running container started, when all of them run (`None` otherwise).
fn started(statuses: &[ContainerStatusView]) -> Option<jiff::Timestamp> {
    let mut earliest: Option<jiff::Timestamp> = None;
    for s in statuses {
        let t = s.state.as_ref()?.running.as_ref()?.started_at.as_ref()?.0;
        earliest = Some(earliest.map_or(t, |e| e.min(t)));
    }
    earliest
}

/// Every `env[].valueFrom.{configMapKeyRef,secretKeyRef}` and `envFrom[]` of every container
/// (init containers too: a restarted sidecar reads them again), sorted.
fn env_refs(spec: &PodSpecView) -> Vec<EnvRef> {
    let mut out = Vec::new();
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    for c in containers {
        let mut push = |kind, name: &str, keys, optional: Option<bool>| {
            if !name.is_empty() {
                out.push(EnvRef {
                    source: SourceRef {
                        kind,
                        name: name.to_owned(),
                    },
                    keys,
                    optional: optional.unwrap_or(false),
                    container: c.name.clone(),
                });
            }
        };
        for e in c.env.iter().flatten() {
            let Some(vf) = &e.value_from else { continue };
            if let Some(r) = &vf.config_map_key_ref {
                push(
                    SourceKind::ConfigMap,
                    &r.name,
                    EnvKeys::Key(r.key.clone()),
                    r.optional,
                );
            }
            if let Some(r) = &vf.secret_key_ref {
                push(
                    SourceKind::Secret,
                    &r.name,
                    EnvKeys::Key(r.key.clone()),
                    r.optional,
                );
            }
        }
        for ef in c.env_from.iter().flatten() {
            let prefix = ef.prefix.clone().unwrap_or_default();
            if let Some(r) = &ef.config_map_ref {
                push(
                    SourceKind::ConfigMap,
                    &r.name,
                    EnvKeys::All {
                        prefix: prefix.clone(),
                    },
                    r.optional,
                );
            }
            if let Some(r) = &ef.secret_ref {
                push(
                    SourceKind::Secret,
                    &r.name,
                    EnvKeys::All { prefix },
                    r.optional,
                );
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// ConfigMaps/Secrets the pod uses through env vars (`valueFrom`, `envFrom`) but mounts in no
/// volume: they never change in a running container, and no reload can help.
pub fn env_only_sources(pod: &PodView) -> Vec<SourceRef> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let mounted: Vec<SourceRef> = spec
        .volumes
        .iter()
        .flatten()
        .flat_map(|v| volume_spec(v).sources)
        .collect();
    let mut out: Vec<SourceRef> = Vec::new();
    let mut add = |kind, name: &str| {
        let s = SourceRef {
            kind,
            name: name.to_owned(),
        };
        if !mounted.contains(&s) && !out.contains(&s) {
            out.push(s);
        }
    };
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        for e in c.env.iter().flatten() {
            if let Some(vf) = &e.value_from {
                if let Some(r) = &vf.config_map_key_ref {
                    add(SourceKind::ConfigMap, &r.name);
                }
                if let Some(r) = &vf.secret_key_ref {
                    add(SourceKind::Secret, &r.name);
                }
            }
        }
        for ef in c.env_from.iter().flatten() {
            if let Some(r) = &ef.config_map_ref {
                add(SourceKind::ConfigMap, &r.name);
            }
            if let Some(r) = &ef.secret_ref {
                add(SourceKind::Secret, &r.name);
            }
        }
    }
    out
}

fn container_info(
    c: &ContainerView,
    kind: ContainerKind,
    statuses: &[ContainerStatusView],
) -> ContainerInfo {
    let status = statuses.iter().find(|s| s.name == c.name);
    ContainerInfo {
        name: c.name.clone(),
        kind,
        mounts: c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| VolumeMount {
                volume: m.name.clone(),
                sub_path: m.sub_path.as_deref().is_some_and(|s| !s.is_empty())
                    || m.sub_path_expr.as_deref().is_some_and(|s| !s.is_empty()),
            })
            .collect(),
        container_id: status
            .and_then(|s| s.container_id.as_deref())
            .and_then(ContainerId::parse),
        running: status
            .and_then(|s| s.state.as_ref())
            .is_some_and(|st| st.running.is_some()),
        ports: c
            .ports
            .iter()
            .flatten()
            // `protocol` defaults to TCP; a UDP or SCTP port is no HTTP endpoint.
            .filter(|p| p.protocol.as_deref().is_none_or(|proto| proto == "TCP"))
            .filter_map(|p| {
                Some(ContainerPort {
                    number: u16::try_from(p.container_port).ok().filter(|n| *n != 0)?,
                    name: p.name.clone().filter(|n| !n.is_empty()),
                })
            })
            .collect(),
    }
}

/// What reloadlet keeps of a volume. For a projected volume, also which files each source
/// writes, as the kubelet's projected plugin lays them out (kubernetes
/// `pkg/volume/projected/projected.go`, `collectData`): a configMap/secret source writes
/// `items[].path` for each item, or every key of its object when `items` is empty
/// (`configmap.MakePayload`/`secret.MakePayload`); a downwardAPI source writes `items[].path`
/// (`downwardapi.CollectData`); a serviceAccountToken source writes `path`; a
/// clusterTrustBundle source writes `path`; a podCertificate source writes
/// `credentialBundlePath`, `keyPath` and `certificateChainPath`, those that are set. The API server rejects two sources writing the same
/// path (`validateProjectionSources` in `pkg/apis/core/validation/validation.go`, "conflicting
/// duplicate paths"), so a path named in the spec belongs to exactly one source. Paths may
/// nest (`a/b.conf`); they are relative to the volume's `..data`.
fn volume_spec(v: &VolumeView) -> VolumeSpec {
    let mut spec = volume_spec_of(v);
    spec.source_items = source_items(v);
    spec
}

/// `(key, path)` of the `items` of each ConfigMap/Secret source that lists them.
fn source_items(v: &VolumeView) -> Vec<(SourceRef, Vec<(String, String)>)> {
    let pairs = |items: Option<&Vec<KeyToPath>>| -> Option<Vec<(String, String)>> {
        let pairs: Vec<(String, String)> = items
            .into_iter()
            .flatten()
            .map(|i| (i.key.clone(), i.path.clone()))
            .collect();
        (!pairs.is_empty()).then_some(pairs)
    };
    let mut out = Vec::new();
    let mut add = |kind: SourceKind, name: &str, items: Option<&Vec<KeyToPath>>| {
        if let Some(p) = pairs(items) {
            out.push((
                SourceRef {
                    kind,
                    name: name.to_owned(),
                },
                p,
            ));
        }
    };
    if v.csi.is_some() {
        return Vec::new();
    }
    if let Some(c) = &v.config_map {
        add(SourceKind::ConfigMap, &c.name, c.items.as_ref());
    }
    if let Some(s) = &v.secret {
        if let Some(name) = s.secret_name.as_deref() {
            add(SourceKind::Secret, name, s.items.as_ref());
        }
    }
    for source in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
        if let Some(c) = &source.config_map {
            add(SourceKind::ConfigMap, &c.name, c.items.as_ref());
        }
        if let Some(s) = &source.secret {
            add(SourceKind::Secret, &s.name, s.items.as_ref());
        }
    }
    out
}

fn volume_spec_of(v: &VolumeView) -> VolumeSpec {
    let mut spec = VolumeSpec {
        name: v.name.clone(),
        ..VolumeSpec::default()
    };
    let cm = |name: &str| SourceRef {
        kind: SourceKind::ConfigMap,
        name: name.to_owned(),
    };
    let secret = |name: &str| SourceRef {
        kind: SourceKind::Secret,
        name: name.to_owned(),
    };
    let item_paths = |items: Option<&Vec<KeyToPath>>| -> Option<Vec<String>> {
        let paths: Vec<String> = items
            .into_iter()
            .flatten()
            .map(|i| i.path.clone())
            .collect();
        (!paths.is_empty()).then_some(paths)
    };
    if let Some(c) = &v.csi {
        // The Secrets Store driver reads its class from this attribute
        // (kubernetes-sigs/secrets-store-csi-driver `pkg/secrets-store/nodeserver.go`,
        // `NodePublishVolume`: `attrib[secretProviderClassField]`).
        let class = (c.driver == SECRETS_STORE_DRIVER)
            .then(|| {
                c.volume_attributes
                    .as_ref()
                    .and_then(|a| a.get(SECRET_PROVIDER_CLASS_ATTRIBUTE))
                    .cloned()
            })
            .flatten();
        spec.csi = Some(CsiVolumeSpec {
            driver: c.driver.clone(),
            class,
        });
        return spec;
    }
    // `items` project only the keys they list (kubernetes `pkg/volume/configmap/
    // configmap.go` and `pkg/volume/secret/secret.go`, `MakePayload`: without items every
    // key of `data` and `binaryData`, with items only `items[].key`).
    let item_keys = |items: Option<&Vec<KeyToPath>>| -> Option<Vec<String>> {
        let keys: Vec<String> = items.into_iter().flatten().map(|i| i.key.clone()).collect();
        (!keys.is_empty()).then_some(keys)
    };
    if let Some(c) = &v.config_map {
        if let Some(keys) = item_keys(c.items.as_ref()) {
            spec.source_keys.push((cm(&c.name), keys));
        }
        spec.sources.push(cm(&c.name));
    }
    if let Some(s) = &v.secret {
        if let Some(name) = s.secret_name.as_deref() {
            if let Some(keys) = item_keys(s.items.as_ref()) {
                spec.source_keys.push((secret(name), keys));
            }
            spec.sources.push(secret(name));
        }
    }
    let Some(p) = &v.projected else {
        // A configMap/secret volume has one source: every file is its own.
        return spec;
    };
    for src in p.sources.iter().flatten() {
        if let Some(c) = &src.config_map {
            let source = cm(&c.name);
            let paths = item_paths(c.items.as_ref()).or_else(|| {
                // Without `items` the files are the object's keys, unknown from the spec, except
                // for the root CA, whose publisher writes one key only.
                (c.name == ROOT_CA_CONFIGMAP).then(|| vec![ROOT_CA_KEY.to_owned()])
            });
            if let Some(paths) = paths {
                spec.source_paths.push((source.clone(), paths));
            }
            if let Some(keys) = item_keys(c.items.as_ref()) {
                spec.source_keys.push((source.clone(), keys));
            }
            spec.sources.push(source);
        }
        if let Some(s) = &src.secret {
            let source = secret(&s.name);
            if let Some(paths) = item_paths(s.items.as_ref()) {
                spec.source_paths.push((source.clone(), paths));
            }
            if let Some(keys) = item_keys(s.items.as_ref()) {
                spec.source_keys.push((source.clone(), keys));
            }
            spec.sources.push(source);
        }
        if let Some(d) = &src.downward_api {
            spec.other_paths
                .extend(d.items.iter().flatten().map(|i| i.path.clone()));
        }
        if let Some(t) = &src.service_account_token {
            spec.service_account_token = true;
            spec.other_paths.push(t.path.clone());
        }
        if let Some(b) = &src.cluster_trust_bundle {
            spec.other_paths.push(b.path.clone());
        }
        // Rewritten at each certificate rotation (a fresh key and chain, about daily with the
        // `kubernetes.io` signers): a part of the hash of its own, so a rotation is told from
        // a ConfigMap/Secret change in the same volume, and a source that counts only for a
        // pod naming its signer in reloadlet.io/pod-certificates (core::policy).
        if let Some(c) = &src.pod_certificate {
            let source = SourceRef {
                kind: SourceKind::PodCertificate,
                name: c.signer_name.clone(),
            };
            let paths = [
                &c.credential_bundle_path,
                &c.key_path,
                &c.certificate_chain_path,
            ]
            .into_iter()
            .flatten()
            .filter(|p| !p.is_empty())
            .cloned();
            // Two sources of one signer (two key types, say) are one source of two parts' files.
            match spec.source_paths.iter_mut().find(|(s, _)| *s == source) {
                Some((_, known)) => known.extend(paths),
                None => spec.source_paths.push((source.clone(), paths.collect())),
            }
            if !spec.sources.contains(&source) {
                spec.sources.push(source);
            }
        }
    }
    spec
}

/// The `ownerReferences` entry with `controller: true`.
pub fn controller_of(meta: &ObjectMeta) -> Option<OwnerRef> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| OwnerRef {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            name: o.name.clone(),
            uid: o.uid.clone(),
        })
}

/// Whether the condition `type_` is `"True"`; `None`: the status has no such condition.
/// The `Ready` condition's `lastTransitionTime` while it is not `True`.
fn unready_since(status: Option<&super::pod_view::PodStatusView>) -> Option<jiff::Timestamp> {
    let c = status?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")?;
    (c.status != "True").then(|| c.last_transition_time.as_ref().map(|t| t.0))?
}

fn condition(status: Option<&super::pod_view::PodStatusView>, type_: &str) -> Option<bool> {
    let c = status?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)?;
    Some(c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::ContainerRuntime;
    use serde_json::json;

    #[test]
    fn items_keep_the_keys_each_source_projects() {
        let volume = |v: serde_json::Value| volume_spec(&serde_json::from_value(v).unwrap());
        let cm = |n: &str| SourceRef {
            kind: SourceKind::ConfigMap,
            name: n.into(),
        };
        let sec = |n: &str| SourceRef {
            kind: SourceKind::Secret,
            name: n.into(),
        };
        let keys = |v: &[&str]| v.iter().map(|k| k.to_string()).collect::<Vec<_>>();
        let v = volume(json!({"name": "a", "configMap": {"name": "app",
            "items": [{"key": "app.conf", "path": "conf/app.conf"}]}}));
        assert_eq!(v.source_keys, [(cm("app"), keys(&["app.conf"]))]);
        let v = volume(json!({"name": "b", "secret": {"secretName": "tls",
            "items": [{"key": "tls.crt", "path": "crt"}, {"key": "tls.key", "path": "key"}]}}));
        assert_eq!(v.source_keys, [(sec("tls"), keys(&["tls.crt", "tls.key"]))]);
        // With their paths, for the agent's status record (a plain volume too).
        let pair = |k: &str, p: &str| (k.to_string(), p.to_string());
        assert_eq!(
            v.source_items,
            [(
                sec("tls"),
                vec![pair("tls.crt", "crt"), pair("tls.key", "key")]
            )]
        );
        let v = volume(json!({"name": "c", "projected": {"sources": [
            {"configMap": {"name": "one", "items": [{"key": "k", "path": "p"}]}},
            {"configMap": {"name": "two"}},
            {"secret": {"name": "s", "items": [{"key": "t", "path": "q"}]}}]}}));
        assert_eq!(
            v.source_keys,
            [(cm("one"), keys(&["k"])), (sec("s"), keys(&["t"]))]
        );
        assert_eq!(
            v.source_items,
            [
                (cm("one"), vec![pair("k", "p")]),
                (sec("s"), vec![pair("t", "q")])
            ]
        );
        assert!(volume(json!({"name": "d", "configMap": {"name": "all"}}))
            .source_keys
            .is_empty());
    }

    #[test]
    fn csi_volumes_keep_driver_and_the_secrets_store_class_only() {
        let volume = |v: serde_json::Value| volume_spec(&serde_json::from_value(v).unwrap());
        let spc = volume(json!({"name": "secrets", "csi": {
            "driver": "secrets-store.csi.k8s.io", "readOnly": true,
            "volumeAttributes": {"secretProviderClass": "vault-db"}}}));
        assert_eq!(
            spc.csi,
            Some(CsiVolumeSpec {
                driver: "secrets-store.csi.k8s.io".into(),
                class: Some("vault-db".into())
            })
        );
        assert!(spc.sources.is_empty());
        let cm = volume(json!({"name": "certs", "csi": {
            "driver": "csi.cert-manager.io",
            "volumeAttributes": {"csi.cert-manager.io/issuer-name": "ca", "secretProviderClass": "x"}}}));
        assert_eq!(
            cm.csi,
            Some(CsiVolumeSpec {
                driver: "csi.cert-manager.io".into(),
                class: None
            })
        );
        assert_eq!(volume(json!({"name": "data", "emptyDir": {}})).csi, None);
    }

    #[test]
    fn the_drain_gate_its_condition_and_containers_ready_are_read() {
        let info = |v: serde_json::Value| {
            let pod: PodView = serde_json::from_value(v).unwrap();
            pod_info(&pod).unwrap()
        };
        let spec = json!({"containers": [{"name": "app"}],
            "readinessGates": [{"conditionType": "reloadlet.io/restart-drain"}]});
        let p = info(json!({"metadata": {"uid": "u"}, "spec": spec}));
        assert!(p.restart.drain_gate);
        assert_eq!(p.restart.drain_condition, None);
        assert!(!p.restart.containers_ready);
        let p = info(
            json!({"metadata": {"uid": "u"}, "spec": spec, "status": {"conditions": [
            {"type": "ContainersReady", "status": "True"},
            {"type": "reloadlet.io/restart-drain", "status": "False"}]}}),
        );
        assert_eq!(p.restart.drain_condition, Some(false));
        assert!(p.restart.containers_ready);
        let p = info(
            json!({"metadata": {"uid": "u"}, "spec": {"containers": [{"name": "app"}],
            "readinessGates": [{"conditionType": "example.com/other"}]}}),
        );
        assert!(!p.restart.drain_gate);
        // unready since its Ready condition's lastTransitionTime; Ready: none
        let ready = |status: &str| {
            info(
                json!({"metadata": {"uid": "u"}, "spec": {"containers": [{"name": "app"}]},
                "status": {"conditions": [{"type": "Ready", "status": status,
                    "lastTransitionTime": "2026-11-29T10:00:00Z"}]}}),
            )
        };
        assert_eq!(
            ready("False").restart.unready_since,
            Some("2026-11-29T10:00:00Z".parse().unwrap())
        );
        assert_eq!(ready("True").restart.unready_since, None);
    }

    #[test]
    fn keeps_the_declared_tcp_ports_and_host_network() {
        let pod: PodView = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "n", "uid": "u"},
            "spec": {
                "hostNetwork": true,
                "containers": [{"name": "app", "ports": [
                    {"name": "web", "containerPort": 9090},
                    {"containerPort": 8080, "protocol": "TCP"},
                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                    {"name": "sctp", "containerPort": 36412, "protocol": "SCTP"},
                    {"name": "huge", "containerPort": 70000}
                ]}]
            }
        }))
        .unwrap();
        let info = pod_info(&pod).unwrap();
        assert!(info.host_network);
        assert_eq!(
            info.containers[0].ports,
            [
                ContainerPort::named("web", 9090),
                ContainerPort::unnamed(8080)
            ]
        );
        let plain: PodView = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "n", "uid": "u"},
            "spec": {"containers": [{"name": "app"}]}
        }))
        .unwrap();
        let info = pod_info(&plain).unwrap();
        assert!(!info.host_network && info.containers[0].ports.is_empty());
    }

    #[test]
    fn converts_a_realistic_pod() {
        let pod: PodView = serde_json::from_value(json!({
            "metadata": {
                "name": "web-0", "namespace": "shop", "uid": "1f0e-22",
                "annotations": {"reloadlet.io/action": "signal"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "x", "controller": true}],
                "managedFields": [{"manager": "kubectl"}]
            },
            "spec": {
                "initContainers": [
                    {"name": "migrate", "image": "m", "volumeMounts": [{"name": "conf", "mountPath": "/c"}]},
                    {"name": "proxy", "image": "p", "restartPolicy": "Always", "volumeMounts": [{"name": "tls", "mountPath": "/t"}]}
                ],
                "containers": [{"name": "nginx", "image": "nginx", "volumeMounts": [
                    {"name": "conf", "mountPath": "/etc/nginx/conf.d"},
                    {"name": "conf", "mountPath": "/etc/nginx/nginx.conf", "subPath": "nginx.conf"},
                    {"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
                ]}],
                "volumes": [
                    {"name": "conf", "configMap": {"name": "nginx-conf"}},
                    {"name": "tls", "secret": {"secretName": "tls"}},
                    {"name": "both", "projected": {"sources": [{"configMap": {"name": "a"}}, {"secret": {"name": "b"}}]}},
                    {"name": "kube-api-access-abcde", "projected": {"sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                        {"configMap": {"name": "kube-root-ca.crt"}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}
                    ]}},
                    {"name": "mixed", "projected": {"sources": [
                        {"serviceAccountToken": {"audience": "vault", "path": "vault/token"}},
                        {"configMap": {"name": "app-config"}},
                        {"secret": {"name": "db", "items": [{"key": "u", "path": "db/user"}, {"key": "p", "path": "db/password"}]}},
                        {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                        {"clusterTrustBundle": {"signerName": "example.com/x", "path": "bundle.pem"}},
                        {"podCertificate": {"signerName": "example.com/mtls", "keyType": "ED25519",
                            "credentialBundlePath": "mtls/bundle.pem", "keyPath": "mtls/key.pem"}}
                    ]}},
                    {"name": "scratch", "emptyDir": {}}
                ]
            },
            "status": {
                "phase": "Running",
                "containerStatuses": [{"name": "nginx", "containerID": "containerd://abc123", "image": "", "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {}}}],
                "initContainerStatuses": [{"name": "proxy", "containerID": "cri-o://def", "image": "", "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {}}}]
            }
        }))
        .unwrap();
        let info = pod_info(&pod).unwrap();
        assert_eq!(info.full_name(), "shop/web-0");
        assert!(info.has_controller);
        let owner = info.controller.as_ref().unwrap();
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("ReplicaSet", "web")
        );
        assert!(!info.terminating);
        let kinds: Vec<_> = info
            .containers
            .iter()
            .map(|c| (c.name.as_str(), c.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("migrate", ContainerKind::Init),
                ("proxy", ContainerKind::SidecarInit),
                ("nginx", ContainerKind::Regular)
            ]
        );
        let nginx = &info.containers[2];
        assert!(nginx.running);
        assert_eq!(
            nginx.container_id.as_ref().map(|c| c.runtime),
            Some(ContainerRuntime::Containerd)
        );
        assert_eq!(
            nginx.mounts.iter().map(|m| m.sub_path).collect::<Vec<_>>(),
            [false, true, false]
        );
        assert_eq!(
            info.containers[1].container_id.as_ref().map(|c| c.runtime),
            Some(ContainerRuntime::CriO)
        );
        let token = info.volume("kube-api-access-abcde").unwrap();
        assert!(token.service_account_token);
        // kube-root-ca.crt without `items`: its one key.
        assert_eq!(
            token.source_paths,
            [(
                SourceRef {
                    kind: SourceKind::ConfigMap,
                    name: "kube-root-ca.crt".into()
                },
                vec!["ca.crt".to_owned()]
            )]
        );
        assert_eq!(token.other_paths, ["token", "namespace"]);
        let mixed = info.volume("mixed").unwrap();
        assert_eq!(mixed.other_paths, ["vault/token", "labels", "bundle.pem"]);
        // A podCertificate source is a source of its own (its files are its part of the
        // hash), named by its signer.
        let mtls = SourceRef {
            kind: SourceKind::PodCertificate,
            name: "example.com/mtls".into(),
        };
        assert_eq!(
            mixed.source_paths,
            [
                (
                    SourceRef {
                        kind: SourceKind::Secret,
                        name: "db".into()
                    },
                    vec!["db/user".to_owned(), "db/password".to_owned()]
                ),
                (
                    mtls.clone(),
                    vec!["mtls/bundle.pem".to_owned(), "mtls/key.pem".to_owned()]
                )
            ]
        );
        assert_eq!(mixed.sources.len(), 3);
        assert_eq!(mixed.sources[2], mtls);
        // A plain configMap volume: its items are all its own; nothing to tell apart.
        assert!(info.volume("conf").unwrap().source_paths.is_empty());
        assert_eq!(info.volume("both").unwrap().sources.len(), 2);
        assert!(info.volume("scratch").unwrap().sources.is_empty());
    }

    #[test]
    fn a_pod_without_uid_or_spec_is_skipped() {
        assert!(pod_info(&PodView::default()).is_none());
    }
}
