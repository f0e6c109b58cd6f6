//! What an `action: rollout` pod reads (pure): every ConfigMap/Secret of its volumes
//! (configMap, secret and projected sources; all of their keys, `data` and `binaryData`, or
//! only the keys the source's `items` list — all the kubelet projects, see
//! `crate::k8s::pod_convert::volume_spec`) and
//! the keys it references through env/envFrom (as the env consumers), narrowed by
//! `reloadlet.io/configmaps` / `reloadlet.io/secrets`. `kube-root-ca.crt` counts only when
//! the pod names it in `reloadlet.io/configmaps` (its publisher rewrites it on CA rotation,
//! which a workload rollout must not follow by default).

use crate::controller::consumed::digest::Selector;
use crate::controller::consumed::env_refs::{self, narrowed_in};
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
    /// `action: restart` with `reloadlet.io/on-blocked: rollout`: at once when a
    /// PodDisruptionBudget structurally blocks disrupting the pod (the agent then restarts
    /// nothing: `RestartHandedOff`) or the pod is the only one of its owner (the grant hands
    /// the request off); else never (the restart is the controller's grant's). Also
    /// `env-action: restart` with `on-blocked: rollout` and an action that neither restarts
    /// nor evicts (signal, http…), for the sources the pod reads through env only
    /// ([`references`]): the controller's env restart request is handed off by the same rule.
    WhenStructurallyBlocked,
}

/// Does the controller roll this pod's owner on a change, and when? (`action: rollout`, or
/// `action: evict` / `action: restart` with `on-blocked: rollout`; valid annotations,
/// running, not terminating.)
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
        Ok(Some(p)) if matches!(p.action, Action::Restart(_)) || env_restart_only(pod) => {
            match on_blocked(&pod.annotations) {
                Ok((OnBlocked::Rollout, _)) => Some(Mode::WhenStructurallyBlocked),
                _ => None,
            }
        }
        _ => None,
    }
}

/// [`mode`] for a change of `source`. An `action: evict` pod that restarts in place on env
/// changes (`env-action: restart`) is not evicted for a source it reads through env only: the
/// controller asks its restart, which the grant hands off by the rule of
/// [`Mode::WhenStructurallyBlocked`] — not a blocked eviction to wait out (the pod, restarted
/// in place, still runs after the timeout: its owner would be rolled once too many).
pub fn mode_for(pod: &PodInfo, source: &SourceRef) -> Option<Mode> {
    match mode(pod)? {
        Mode::AfterBlocked(_) if env_restarts(pod) && !mounted(pod, source) => {
            Some(Mode::WhenStructurallyBlocked)
        }
        mode => Some(mode),
    }
}

/// `reloadlet.io/env-action: restart`.
fn env_restarts(pod: &PodInfo) -> bool {
    matches!(
        annotations::env_action(&pod.annotations),
        Ok(Some(annotations::EnvAction::Restart))
    )
}

/// A volume of the pod projects `source` (its change is the agent's).
fn mounted(pod: &PodInfo, source: &SourceRef) -> bool {
    pod.volumes.iter().any(|v| v.sources.contains(source))
}

/// `reloadlet.io/env-action: restart` on a pod whose `action` neither restarts, evicts nor
/// rolls (signal, http…): only its env changes are restarts (the controller's requests).
pub(super) fn env_restart_only(pod: &PodInfo) -> bool {
    env_restarts(pod)
        && matches!(annotations::parse(&pod.annotations), Ok(Some(p)) if !matches!(
            p.action,
            Action::Restart(_) | Action::Evict { .. } | Action::Rollout
        ))
}

/// The references a rollout pod's baseline covers (`configmaps`/`secrets`: the kinds
/// followed; Secrets only with `--secrets`).
pub fn references(
    pod: &PodInfo,
    configmaps: bool,
    secrets: bool,
) -> BTreeMap<SourceRef, Vec<Selector>> {
    let mut out = env_refs::references(pod, configmaps, secrets);
    if env_restart_only(pod) {
        // Its volume changes are the agent's signal (or http…): never rolled.
        return out;
    }
    let policy = annotations::parse(&pod.annotations).ok().flatten();
    let whole = Selector {
        keys: EnvKeys::All {
            prefix: String::new(),
        },
        optional: false,
        volume: true,
    };
    for (volume, source) in pod
        .volumes
        .iter()
        .flat_map(|v| v.sources.iter().map(move |s| (v, s)))
    {
        let followed = match source.kind {
            SourceKind::ConfigMap => configmaps,
            SourceKind::Secret => secrets,
            // No API object to read: a CSI driver writes these on the node only.
            SourceKind::SecretProviderClass
            | SourceKind::CsiVolume
            | SourceKind::PodCertificate => false,
        };
        let root_ca_named = policy
            .as_ref()
            .and_then(|p| p.configmaps.as_ref())
            .is_some_and(|l| l.iter().any(|n| n == ROOT_CA_CONFIGMAP));
        let root_ca = source.kind == SourceKind::ConfigMap && source.name == ROOT_CA_CONFIGMAP;
        if !followed || !narrowed_in(policy.as_ref(), source) || (root_ca && !root_ca_named) {
            continue;
        }
        let listed = volume
            .source_keys
            .iter()
            .find(|(s, _)| s == source)
            .map(|(_, keys)| keys);
        let selectors = match listed {
            Some(keys) => keys
                .iter()
                .map(|k| Selector {
                    keys: EnvKeys::Key(k.clone()),
                    optional: false,
                    volume: true,
                })
                .collect(),
            None => vec![whole.clone()],
        };
        let list = out.entry(source.clone()).or_default();
        for sel in selectors {
            if !list.contains(&sel) {
                list.push(sel);
            }
        }
        list.sort();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::consumed::digest::digest;
    use crate::core::model::VolumeSpec;
    use crate::core::volume_digest::HashKey;
    use crate::ports::ObjectData;

    fn cm(name: &str) -> SourceRef {
        SourceRef {
            kind: SourceKind::ConfigMap,
            name: name.into(),
        }
    }

    fn data(pairs: &[(&str, &str)], binary: &[(&str, &[u8])]) -> ObjectData {
        ObjectData::of(pairs, binary)
    }

    #[test]
    fn when_a_change_rolls_the_owner_by_action_and_on_blocked() {
        let running = |pairs: &[(&str, &str)]| PodInfo {
            annotations: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            phase: "Running".into(),
            ..PodInfo::default()
        };
        let ten_min = std::time::Duration::from_secs(600);
        for (annotations, want) in [
            (&[("reloadlet.io/action", "rollout")][..], Some(Mode::Now)),
            (
                &[
                    ("reloadlet.io/action", "evict"),
                    ("reloadlet.io/on-blocked", "rollout"),
                ][..],
                Some(Mode::AfterBlocked(ten_min)),
            ),
            (
                &[
                    ("reloadlet.io/action", "restart"),
                    ("reloadlet.io/on-blocked", "rollout"),
                ][..],
                Some(Mode::WhenStructurallyBlocked),
            ),
            (&[("reloadlet.io/action", "restart")][..], None),
            (
                &[
                    ("reloadlet.io/action", "restart"),
                    ("reloadlet.io/on-blocked", "wait"),
                ][..],
                None,
            ),
            (
                &[
                    ("reloadlet.io/action", "restart"),
                    ("reloadlet.io/on-blocked", "later"),
                ][..],
                None,
            ),
            (
                &[
                    ("reloadlet.io/action", "signal"),
                    ("reloadlet.io/on-blocked", "rollout"),
                ][..],
                None,
            ),
            (
                &[
                    ("reloadlet.io/action", "signal"),
                    ("reloadlet.io/env-action", "restart"),
                    ("reloadlet.io/on-blocked", "rollout"),
                ][..],
                Some(Mode::WhenStructurallyBlocked),
            ),
            (
                &[
                    ("reloadlet.io/action", "signal"),
                    ("reloadlet.io/env-action", "restart"),
                ][..],
                None,
            ),
            (
                &[
                    ("reloadlet.io/action", "signal"),
                    ("reloadlet.io/env-action", "evict"),
                    ("reloadlet.io/on-blocked", "rollout"),
                ][..],
                None,
            ),
        ] {
            assert_eq!(mode(&running(annotations)), want, "{annotations:?}");
        }
        let mut terminating = running(&[("reloadlet.io/action", "rollout")]);
        terminating.terminating = true;
        assert_eq!(mode(&terminating), None);
    }

    #[test]
    fn an_env_restart_only_pod_covers_its_env_sources_not_its_volumes() {
        let mut pod = PodInfo {
            annotations: [
                ("reloadlet.io/action", "signal"),
                ("reloadlet.io/env-action", "restart"),
                ("reloadlet.io/on-blocked", "rollout"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            volumes: vec![VolumeSpec {
                name: "v".into(),
                sources: vec![cm("files")],
                ..VolumeSpec::default()
            }],
            env: vec![crate::core::model::EnvRef {
                source: cm("app-env"),
                keys: EnvKeys::Key("LOG".into()),
                optional: false,
                container: "app".into(),
            }],
            ..PodInfo::default()
        };
        let refs: Vec<SourceRef> = references(&pod, true, false).into_keys().collect();
        assert_eq!(refs, vec![cm("app-env")]);
        // action restart: its volumes count too (the agent hands its restarts off).
        pod.annotations
            .insert("reloadlet.io/action".into(), "restart".into());
        let refs: Vec<SourceRef> = references(&pod, true, false).into_keys().collect();
        assert_eq!(refs, vec![cm("app-env"), cm("files")]);
    }

    #[test]
    fn only_the_keys_a_volume_projects_through_items_count() {
        let mut pod = PodInfo {
            annotations: [("reloadlet.io/action".to_string(), "rollout".to_string())].into(),
            volumes: vec![VolumeSpec {
                name: "v".into(),
                sources: vec![cm("app")],
                source_keys: vec![(cm("app"), vec!["app.conf".into(), "logo".into()])],
                ..VolumeSpec::default()
            }],
            ..PodInfo::default()
        };
        let refs = references(&pod, true, false);
        let of = |d: &ObjectData| digest(&HashKey::from_bytes([7; 32]), &refs[&cm("app")], Some(d));
        let before = of(&data(
            &[("app.conf", "v1"), ("other", "x")],
            &[("logo", b"1")],
        ));
        // A key the volume does not project: the same digest, nothing rolls.
        let other = of(&data(
            &[("app.conf", "v1"), ("other", "y")],
            &[("logo", b"1")],
        ));
        assert_eq!(before, other);
        // A projected key, in `data` or `binaryData`: a change.
        assert_ne!(
            before,
            of(&data(
                &[("app.conf", "v2"), ("other", "x")],
                &[("logo", b"1")]
            ))
        );
        assert_ne!(
            before,
            of(&data(
                &[("app.conf", "v1"), ("other", "x")],
                &[("logo", b"2")]
            ))
        );

        // The same object also mounted whole by another volume: every key counts again.
        pod.volumes.push(VolumeSpec {
            name: "w".into(),
            sources: vec![cm("app")],
            ..VolumeSpec::default()
        });
        let refs = references(&pod, true, false);
        let of = |d: &ObjectData| digest(&HashKey::from_bytes([7; 32]), &refs[&cm("app")], Some(d));
        assert_ne!(
            of(&data(&[("app.conf", "v1"), ("other", "x")], &[])),
            of(&data(&[("app.conf", "v1"), ("other", "y")], &[]))
        );
    }
}
