//! Which keys of which ConfigMaps/Secrets a pod reads through `env`/`envFrom`, grouped per
//! object: what the env consumers follow, and part of what the rollout feature follows.
//!
//! What the kubelet puts into a container's environment (kubernetes
//! `pkg/kubelet/kubelet_pods.go`, `makeEnvironmentVariables`): for `configMapKeyRef` the value of
//! `configMap.Data[key]` (`secret.Data[key]` for `secretKeyRef`); for `envFrom` every key of
//! `configMap.Data` (`secret.Data`) as `<prefix><key>`.

use super::digest::Selector;
use crate::core::annotations;
use crate::core::model::{EnvRef, PodInfo, SourceKind, SourceRef};
use std::collections::BTreeMap;

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
