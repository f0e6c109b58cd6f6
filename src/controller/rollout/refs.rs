//! What an `action: rollout` pod reads (pure): every ConfigMap/Secret of its volumes
//! (configMap, secret and projected sources; all of their keys, `data` and `binaryData`) and
//! the keys it references through env/envFrom (as the env consumers), narrowed by
//! `reloadlet.io/configmaps` / `reloadlet.io/secrets`. `kube-root-ca.crt` counts only when
//! the pod names it in `reloadlet.io/configmaps` (its publisher rewrites it on CA rotation,
//! which a workload rollout must not follow by default).

use crate::controller::env::hash::{self, narrowed_in, Selector};
use crate::core::annotations::{self, Action};
use crate::core::model::{EnvKeys, PodInfo, SourceKind, SourceRef, ROOT_CA_CONFIGMAP};
use crate::core::rollout::{on_blocked, OnBlocked};
use std::collections::BTreeMap;

/// When a change rolls a pod's owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `action: rollout`: at once.
    Now,
    /// `action: evict` with `reloadlet.io/on-blocked: rollout`: when the pod still runs
    /// this long after the change (its eviction was blocked; the agent keeps trying).
    AfterBlocked(std::time::Duration),
}

/// Does the controller roll this pod's owner on a change, and when? (`action: rollout`, or
/// `action: evict` with `on-blocked: rollout`; valid annotations, running, not terminating.)
/// Invalid `on-blocked` / `blocked-timeout` values are the agent's to report (it sees the
/// change on its node); the controller then does nothing.
pub fn mode(pod: &PodInfo) -> Option<Mode> {
    if pod.terminating || pod.phase != "Running" {
        return None;
    }
    match annotations::parse(&pod.annotations) {
        Ok(Some(p)) if p.action == Action::Rollout => Some(Mode::Now),
        Ok(Some(p)) if matches!(p.action, Action::Evict { .. }) => {
            match on_blocked(&pod.annotations) {
                Ok((OnBlocked::Rollout, timeout)) => Some(Mode::AfterBlocked(timeout)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The references a rollout pod's baseline covers (`configmaps`/`secrets`: the kinds
/// followed; Secrets only with `--secrets`).
pub fn references(
    pod: &PodInfo,
    configmaps: bool,
    secrets: bool,
) -> BTreeMap<SourceRef, Vec<Selector>> {
    let mut out = hash::references(pod, configmaps, secrets);
    let policy = annotations::parse(&pod.annotations).ok().flatten();
    let whole = Selector {
        keys: EnvKeys::All {
            prefix: String::new(),
        },
        optional: false,
        volume: true,
    };
    for source in pod.volumes.iter().flat_map(|v| &v.sources) {
        let followed = match source.kind {
            SourceKind::ConfigMap => configmaps,
            SourceKind::Secret => secrets,
            // No API object to read: a CSI driver writes these on the node only.
            SourceKind::SecretProviderClass | SourceKind::CsiVolume => false,
        };
        let root_ca_named = policy
            .as_ref()
            .and_then(|p| p.configmaps.as_ref())
            .is_some_and(|l| l.iter().any(|n| n == ROOT_CA_CONFIGMAP));
        let root_ca = source.kind == SourceKind::ConfigMap && source.name == ROOT_CA_CONFIGMAP;
        if !followed || !narrowed_in(policy.as_ref(), source) || (root_ca && !root_ca_named) {
            continue;
        }
        let list = out.entry(source.clone()).or_default();
        if !list.contains(&whole) {
            list.push(whole.clone());
            list.sort();
        }
    }
    out
}
