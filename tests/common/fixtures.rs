//! Fluent builders for the objects the tests create.

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::ByteString;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

pub fn configmap(namespace: &str, name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: meta(namespace, name),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

pub fn secret(namespace: &str, name: &str, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: meta(namespace, name),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

fn meta(namespace: &str, name: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        ..Default::default()
    }
}

pub struct PodBuilder {
    value: Value,
    /// The test's directory: absolute mount paths are placed under `<base>/mnt` so that
    /// no test creates directories on the host outside its own temp dir.
    base: Option<std::path::PathBuf>,
}

/// Where a container's `mountPath` lands: inside the test's temp dir, never on the host root.
pub fn sandboxed(base: &Path, mount_path: &str) -> String {
    base.join("mnt")
        .join(mount_path.trim_start_matches('/'))
        .display()
        .to_string()
}

pub fn pod(namespace: &str, name: &str) -> PodBuilder {
    PodBuilder {
        value: json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": {}, "labels": {"app": name}},
            "spec": {"nodeName": super::NODE, "containers": [], "volumes": []}
        }),
        base: None,
    }
}

impl PodBuilder {
    pub fn annotate(mut self, key: &str, value: &str) -> Self {
        self.value["metadata"]["annotations"][key] = json!(value);
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.value["metadata"]["labels"][key] = json!(value);
        self
    }

    pub fn signal(self) -> Self {
        self.annotate("reloadlet.io/action", "signal")
    }

    pub fn configmap_volume(self, volume: &str, configmap: &str) -> Self {
        self.volume(json!({"name": volume, "configMap": {"name": configmap}}))
    }

    pub fn secret_volume(self, volume: &str, secret: &str) -> Self {
        self.volume(json!({"name": volume, "secret": {"secretName": secret}}))
    }

    pub fn volume(mut self, v: Value) -> Self {
        self.value["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(v);
        self
    }

    /// A `sigrecorder` container writing to `out`; `mounts` are (volume, mountPath[, subPath]).
    pub fn recorder(mut self, name: &str, out: &Path, mounts: &[(&str, &str)]) -> Self {
        self.base
            .get_or_insert_with(|| out.parent().unwrap().to_path_buf());
        let c = recorder_container(name, out, mounts, false);
        self.container(c)
    }

    /// Same, plus a forked child process (a decoy that must never be signalled).
    pub fn recorder_with_child(
        mut self,
        name: &str,
        out: &Path,
        child_out: &Path,
        mounts: &[(&str, &str)],
    ) -> Self {
        self.base
            .get_or_insert_with(|| out.parent().unwrap().to_path_buf());
        let mut c = recorder_container(name, out, mounts, false);
        c["command"]
            .as_array_mut()
            .unwrap()
            .extend([json!("--child"), json!(child_out.display().to_string())]);
        self.container(c)
    }

    /// A `sigrecorder` container that takes signals the way `mode` says (`signalfd`,
    /// `sigwait`, `handler`, `ignore`).
    pub fn recorder_mode(
        mut self,
        name: &str,
        out: &Path,
        mounts: &[(&str, &str)],
        mode: &str,
    ) -> Self {
        self.base
            .get_or_insert_with(|| out.parent().unwrap().to_path_buf());
        let mut c = recorder_container(name, out, mounts, false);
        c["command"]
            .as_array_mut()
            .unwrap()
            .extend([json!("--mode"), json!(mode)]);
        self.container(c)
    }

    /// `shareProcessNamespace: true`: the pause process is PID 1, the containers are not.
    pub fn share_process_namespace(mut self) -> Self {
        self.value["spec"]["shareProcessNamespace"] = json!(true);
        self
    }

    pub fn sub_path_mount(
        mut self,
        container: &str,
        volume: &str,
        path: &str,
        sub_path: &str,
    ) -> Self {
        let path = sandboxed(
            self.base.as_deref().expect("a recorder container first"),
            path,
        );
        for c in self.value["spec"]["containers"].as_array_mut().unwrap() {
            if c["name"] == container {
                c["volumeMounts"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": volume, "mountPath": path, "subPath": sub_path}));
            }
        }
        self
    }

    pub fn container(mut self, c: Value) -> Self {
        self.value["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(c);
        self
    }

    pub fn init_container(mut self, c: Value) -> Self {
        if self.value["spec"]["initContainers"].is_null() {
            self.value["spec"]["initContainers"] = json!([]);
        }
        self.value["spec"]["initContainers"]
            .as_array_mut()
            .unwrap()
            .push(c);
        self
    }

    /// Guaranteed QoS: equal cpu/memory requests and limits on every container.
    pub fn guaranteed(mut self) -> Self {
        for c in self.value["spec"]["containers"].as_array_mut().unwrap() {
            let r = json!({"cpu": "100m", "memory": "64Mi"});
            c["resources"] = json!({"requests": r, "limits": r});
        }
        self
    }

    /// Burstable QoS: a request without a limit.
    pub fn burstable(mut self) -> Self {
        for c in self.value["spec"]["containers"].as_array_mut().unwrap() {
            c["resources"] = json!({"requests": {"memory": "16Mi"}});
        }
        self
    }

    pub fn owned_by_replicaset(mut self, rs: &str) -> Self {
        self.value["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": format!("{rs}-uid"), "controller": true
        }]);
        self
    }

    pub fn build(self) -> Pod {
        serde_json::from_value(self.value).expect("valid pod")
    }
}

pub fn recorder_container(
    name: &str,
    out: &Path,
    mounts: &[(&str, &str)],
    restart_always: bool,
) -> Value {
    let mut c = json!({
        "name": name,
        "image": "sigrecorder",
        "command": [super::sigrecorder(), out.display().to_string()],
        "volumeMounts": mounts
            .iter()
            .map(|(v, p)| json!({"name": v, "mountPath": sandboxed(out.parent().unwrap(), p)}))
            .collect::<Vec<_>>()
    });
    if restart_always {
        c["restartPolicy"] = json!("Always");
    }
    c
}

/// An env var `var` read from key `key` of ConfigMap (or, `kind` = `secret`, Secret) `name`.
pub fn env_key(var: &str, kind: &str, name: &str, key: &str) -> Value {
    let r = if kind == "secret" {
        "secretKeyRef"
    } else {
        "configMapKeyRef"
    };
    json!({"name": var, "valueFrom": {r: {"name": name, "key": key}}})
}

/// An inline CSI volume of the Secrets Store CSI driver for SecretProviderClass `class`.
pub fn spc_volume(name: &str, class: &str) -> Value {
    json!({"name": name, "csi": {"driver": "secrets-store.csi.k8s.io", "readOnly": true,
        "volumeAttributes": {"secretProviderClass": class}}})
}
