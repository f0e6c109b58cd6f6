//! What the controller keeps of each pod (docs/controller.md, "Memory"): at 100,000 pods
//! every byte per pod is 100 KB of the controller's heap, so the pod the watch converted is
//! trimmed to what the features read — the `reloadlet.io/` annotations (every annotation
//! they parse has that prefix) and Reloader's workload annotations (`--reloader-compat`
//! reads a pod template's), the labels only of env consumers and of `on-blocked: rollout`
//! pods (their evictions and budgets match PodDisruptionBudgets by label; nothing else
//! reads a pod's labels), the volumes that
//! project a ConfigMap, Secret or CSI source and the mounts of those (without the agent's
//! file lists, `source_paths` and `other_paths`), no container IDs but an env consumer's
//! that restarts in place (its request names each container by the ID it runs under,
//! `controller::env::restart`), no ports but an http
//! pod's (its policy names one, and `reloadlet_consumers` validates it), the controlling
//! owner's reference only for `--reloader-compat` (`rollout::compat`), env consumers (their
//! flap breaker counts per owner, `env::pacing`; `has_controller` stays) and `action: restart`
//! pods (the restart grant paces per owner and budget, with their labels too) — with every
//! buffer at its
//! length. The `kube-root-ca.crt` source of the injected `kube-api-access-*`
//! volume is kept only when the pod names it in `reloadlet.io/configmaps`: nudges
//! (`nudge::qualify`) and rollouts (`rollout::refs`) ignore it otherwise, and env consumers
//! read env references, not volumes. And the annotations and labels kept are one copy for
//! every pod that carries the same ([`Keeper`], `core::shared_map`).

use crate::core::annotations::{ACTION, CONFIGMAPS, PREFIX};
use crate::core::model::{PodInfo, SourceKind, ROOT_CA_CONFIGMAP};
use crate::core::reloader_compat::WORKLOAD_KEYS;
use crate::core::rollout::ON_BLOCKED;
use crate::core::shared_map::Interner;

/// What the controller keeps of each pod its watch sees: [`trimmed`] (or
/// [`trimmed_for_compat`]), holding one copy of each set of annotations or labels kept (the
/// pods of a workload carry the same: [`crate::core::shared_map`]).
pub struct Keeper {
    reloader_compat: bool,
    maps: Interner,
}

impl Keeper {
    pub fn new(reloader_compat: bool) -> Self {
        Self {
            reloader_compat,
            maps: Interner::default(),
        }
    }

    pub fn keep(&mut self, pod: PodInfo) -> PodInfo {
        let mut pod = if self.reloader_compat {
            trimmed_for_compat(pod)
        } else {
            trimmed(pod)
        };
        pod.annotations = self.maps.share(std::mem::take(&mut pod.annotations));
        pod.labels = self.maps.share(std::mem::take(&mut pod.labels));
        pod
    }
}

/// `pod` as the controller keeps it.
pub fn trimmed(mut pod: PodInfo) -> PodInfo {
    // reloadlet's own annotations, and Reloader's on a pod template (`--reloader-compat`).
    pod.annotations
        .retain(|k, _| k.starts_with(PREFIX) || WORKLOAD_KEYS.contains(&k.as_str()));
    // `action: restart` pods: the restart grant groups them by owner and finds their
    // budget by their labels (docs/restart.md, "The grant").
    let restarts = takes_part_in_restart_grant(&pod);
    // Labels: env consumers' evictions, `on-blocked: rollout` and the restart grant find
    // their budget by them.
    if pod.env.is_empty() && !pod.annotations.contains_key(ON_BLOCKED) && !restarts {
        pod.labels.clear();
    }
    let root_ca_named = pod
        .annotations
        .get(CONFIGMAPS)
        .is_some_and(|l| l.split(',').any(|n| n.trim() == ROOT_CA_CONFIGMAP));
    if !root_ca_named {
        let root_ca = |s: &crate::core::model::SourceRef| {
            s.kind == SourceKind::ConfigMap && s.name == ROOT_CA_CONFIGMAP
        };
        for v in &mut pod.volumes {
            v.sources.retain(|s| !root_ca(s));
            v.source_keys.retain(|(s, _)| !root_ca(s));
        }
    }
    pod.volumes
        .retain(|v| !v.sources.is_empty() || v.csi.is_some());
    for v in &mut pod.volumes {
        // The agent's file lists: no feature of the controller reads them.
        v.other_paths = Vec::new();
        v.source_paths = Vec::new();
        v.source_items = Vec::new();
        v.name.shrink_to_fit();
        v.sources.shrink_to_fit();
        v.source_keys.shrink_to_fit();
    }
    pod.volumes.shrink_to_fit();
    let kept: Vec<&str> = pod.volumes.iter().map(|v| v.name.as_str()).collect();
    // An http pod's ports: its policy is valid only with the port `reloadlet.io/http-port`
    // names, and `reloadlet_consumers` (`controller::consumer_states`) derives its state
    // from that policy, as `reloadlet status` does.
    let http = pod
        .annotations
        .get(ACTION)
        .is_some_and(|a| a.trim() == "http");
    let env_restarts = !pod.env.is_empty() && env_restarts(&pod);
    for c in &mut pod.containers {
        c.mounts.retain(|m| kept.contains(&m.volume.as_str()));
        c.mounts.shrink_to_fit();
        if !env_restarts {
            c.container_id = None;
        }
        if http {
            c.ports.shrink_to_fit();
        } else {
            c.ports = Vec::new();
        }
        c.name.shrink_to_fit();
    }
    pod.containers.shrink_to_fit();
    // The owner's apiVersion, kind and name (a box and three strings, ~0.2 KiB): read by
    // `--reloader-compat` ([`trimmed_for_compat`]) and by the env consumers' flap breaker,
    // which counts per owner (`env::pacing`; env consumers are few); `has_controller` says
    // enough for evictions and budgets.
    if pod.env.is_empty() && !restarts {
        pod.controller = None;
    }
    pod.env.shrink_to_fit();
    for s in [
        &mut pod.uid,
        &mut pod.namespace,
        &mut pod.name,
        &mut pod.phase,
    ] {
        s.shrink_to_fit();
    }
    pod
}

/// `reloadlet.io/env-action: restart`, or `action: restart` without an env-action: an env
/// change restarts its containers in place (`controller::env::hash::decide`).
fn env_restarts(pod: &PodInfo) -> bool {
    use crate::core::annotations::{env_action, EnvAction};
    match env_action(&pod.annotations).ok().flatten() {
        Some(a) => a == EnvAction::Restart,
        None => pod
            .annotations
            .get(ACTION)
            .is_some_and(|a| a.trim().eq_ignore_ascii_case("restart")),
    }
}

/// An `action: restart` pod, or one that carries the restart grant's request or grant.
fn takes_part_in_restart_grant(pod: &PodInfo) -> bool {
    use crate::core::restart_grant::{GRANT, REQUEST};
    pod.annotations
        .get(crate::core::annotations::ACTION)
        .is_some_and(|a| a.trim().eq_ignore_ascii_case("restart"))
        || pod.annotations.contains_key(REQUEST)
        || pod.annotations.contains_key(GRANT)
}

/// [`trimmed`], keeping also the controlling owner's reference and the labels through which
/// `--reloader-compat` finds a pod's Deployment (or Argo Rollout) from its ReplicaSet's name
/// (`pod-template-hash`, `rollouts-pod-template-hash`; `rollout::compat`): one label map per
/// pod more, only with compat on.
pub fn trimmed_for_compat(mut pod: PodInfo) -> PodInfo {
    let controller = pod.controller.take();
    use crate::core::reloader_compat::{DEPLOYMENT_HASH, ROLLOUT_HASH};
    let hashes: Vec<(String, String)> = pod
        .labels
        .iter()
        .filter(|(k, _)| *k == DEPLOYMENT_HASH || *k == ROLLOUT_HASH)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut kept = trimmed(pod);
    kept.labels.extend(hashes);
    kept.controller = controller;
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{
        ContainerInfo, ContainerKind, ContainerPort, EnvKeys, EnvRef, SourceKind, SourceRef,
        VolumeMount, VolumeSpec,
    };
    use crate::core::rollout::OwnerRef;
    use std::collections::BTreeMap;

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn cm(name: &str) -> SourceRef {
        SourceRef {
            kind: SourceKind::ConfigMap,
            name: name.into(),
        }
    }

    fn pod() -> PodInfo {
        let volume = |name: &str, sources: Vec<SourceRef>| VolumeSpec {
            name: name.into(),
            sources,
            other_paths: vec!["token".into()],
            ..VolumeSpec::default()
        };
        let mount = |v: &str| VolumeMount {
            volume: v.into(),
            sub_path: false,
        };
        PodInfo {
            uid: "u1".into(),
            namespace: "shop".into(),
            name: "web".into(),
            annotations: map(&[
                ("reloadlet.io/action", "signal"),
                ("kubectl.kubernetes.io/restartedAt", "2024-01-01T00:00:00Z"),
            ])
            .into(),
            labels: map(&[("app", "web")]).into(),
            volumes: vec![
                volume("conf", vec![cm("app-cfg")]),
                volume("scratch", vec![]),
            ],
            containers: vec![ContainerInfo {
                name: "app".into(),
                kind: ContainerKind::Regular,
                mounts: vec![mount("conf"), mount("scratch")],
                container_id: None,
                running: true,
                ports: vec![ContainerPort::named("http", 8080)],
            }],
            phase: "Running".into(),
            ..PodInfo::default()
        }
    }

    #[test]
    fn only_what_the_features_read_is_kept() {
        let kept = trimmed(pod());
        assert_eq!(*kept.annotations, map(&[("reloadlet.io/action", "signal")]));
        assert!(kept.labels.is_empty(), "not an env consumer");
        let volumes: Vec<&str> = kept.volumes.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(volumes, ["conf"]);
        assert!(kept.volumes[0].other_paths.is_empty());
        assert_eq!(kept.volumes[0].sources, [cm("app-cfg")]);
        let mounts: Vec<&str> = kept.containers[0]
            .mounts
            .iter()
            .map(|m| m.volume.as_str())
            .collect();
        assert_eq!(mounts, ["conf"]);
        assert!(kept.containers[0].ports.is_empty());
        assert_eq!(
            (
                kept.uid.as_str(),
                kept.namespace.as_str(),
                kept.name.as_str()
            ),
            ("u1", "shop", "web")
        );
    }

    /// An env consumer restarted in place keeps its container IDs (its request names each
    /// container by the ID it runs under); no other pod does.
    #[test]
    fn container_ids_are_kept_only_for_env_consumers_restarted_in_place() {
        let with = |annotations: &[(&str, &str)], env: bool| {
            let mut p = pod();
            p.annotations = map(annotations).into();
            p.containers[0].container_id =
                crate::core::model::ContainerId::parse("containerd://abc");
            if env {
                p.env = vec![EnvRef {
                    source: cm("app-env"),
                    keys: EnvKeys::Key("LOG".into()),
                    optional: false,
                    container: "app".into(),
                }];
            }
            trimmed(p).containers[0].container_id.is_some()
        };
        let restart = ("reloadlet.io/action", "restart");
        let signal = ("reloadlet.io/action", "signal");
        let env_restart = ("reloadlet.io/env-action", "restart");
        let env_evict = ("reloadlet.io/env-action", "evict");
        assert!(with(&[signal, env_restart], true));
        assert!(with(&[restart], true));
        assert!(!with(&[restart, env_evict], true));
        assert!(!with(&[signal], true));
        assert!(!with(&[restart], false), "no env consumer");
    }

    /// `reloadlet_consumers` derives a kept pod's state as `reloadlet status` derives the
    /// whole pod's: the consumer (how, which action) is the same for each action.
    #[test]
    fn a_kept_pod_is_the_same_consumer_as_the_whole_pod() {
        use crate::core::status::consumers::consumer;
        for (action, extra) in [
            ("signal", None),
            ("http", Some(("reloadlet.io/http-port", "http"))),
            ("evict", None),
            ("rollout", None),
        ] {
            let mut p = pod();
            p.annotations
                .insert("reloadlet.io/action".into(), action.into());
            if let Some((k, v)) = extra {
                p.annotations.insert(k.into(), v.into());
            }
            let whole = consumer(&p, &cm("app-cfg")).unwrap();
            assert!(
                !matches!(
                    whole.action,
                    crate::core::status::consumers::ConsumerAction::Invalid(_)
                ),
                "{action}: {whole:?}"
            );
            let kept = consumer(&trimmed(p), &cm("app-cfg")).unwrap();
            assert_eq!(kept, whole, "{action}");
        }
    }

    #[test]
    fn the_root_ca_volume_is_kept_only_when_the_pod_names_it() {
        let with_root_ca = |annotations: &[(&str, &str)]| {
            let mut p = pod();
            p.annotations = map(annotations).into();
            p.volumes.push(VolumeSpec {
                name: "kube-api-access-x7k2p".into(),
                sources: vec![cm(ROOT_CA_CONFIGMAP)],
                source_paths: vec![(cm(ROOT_CA_CONFIGMAP), vec!["ca.crt".into()])],
                service_account_token: true,
                ..VolumeSpec::default()
            });
            let names =
                |p: &PodInfo| -> Vec<String> { p.volumes.iter().map(|v| v.name.clone()).collect() };
            names(&trimmed(p))
        };
        assert_eq!(with_root_ca(&[("reloadlet.io/action", "signal")]), ["conf"]);
        assert_eq!(
            with_root_ca(&[
                ("reloadlet.io/action", "signal"),
                ("reloadlet.io/configmaps", "app-cfg, kube-root-ca.crt")
            ]),
            ["conf", "kube-api-access-x7k2p"]
        );
    }

    #[test]
    fn an_env_consumer_keeps_its_labels_for_its_budgets() {
        let mut p = pod();
        p.env = vec![EnvRef {
            source: cm("app-cfg"),
            keys: EnvKeys::Key("MODE".into()),
            optional: false,
            container: "app".into(),
        }];
        let kept = trimmed(p);
        assert_eq!(*kept.labels, map(&[("app", "web")]));
        assert_eq!(kept.env.len(), 1);
    }

    #[test]
    fn reloader_annotations_and_budget_labels_are_kept() {
        let mut p = pod();
        p.annotations
            .insert("reloader.stakater.com/auto".into(), "true".into());
        p.annotations
            .insert("reloadlet.io/on-blocked".into(), "rollout".into());
        let kept = trimmed(p);
        assert_eq!(
            kept.annotations
                .get("reloader.stakater.com/auto")
                .map(String::as_str),
            Some("true")
        );
        assert_eq!(
            *kept.labels,
            map(&[("app", "web")]),
            "an on-blocked pod's budget"
        );
    }

    #[test]
    fn compat_keeps_the_replica_set_hash_labels() {
        let mut p = pod();
        p.labels
            .insert("pod-template-hash".into(), "f888bd677".into());
        assert!(trimmed(p.clone()).labels.is_empty());
        assert_eq!(
            *trimmed_for_compat(p).labels,
            map(&[("pod-template-hash", "f888bd677")])
        );
    }

    #[test]
    fn the_owner_reference_is_kept_only_for_compat_and_env_consumers_and_ownership_always() {
        let owner = OwnerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "web-f888bd677".into(),
            uid: String::new(),
        };
        let mut p = pod();
        p.has_controller = true;
        p.controller = Some(Box::new(owner.clone()));
        let kept = trimmed(p.clone());
        assert!(kept.has_controller, "evictions and budgets read it");
        assert_eq!(kept.controller, None);
        let compat = trimmed_for_compat(p.clone());
        assert!(compat.has_controller);
        assert_eq!(compat.controller.as_deref(), Some(&owner));
        // The restart grant paces an `action: restart` pod per owner and budget (labels).
        let mut restarting = p.clone();
        restarting
            .annotations
            .insert("reloadlet.io/action".into(), " Restart".into());
        restarting.labels.insert("app".into(), "web".into());
        let kept = trimmed(restarting);
        assert_eq!(kept.controller.as_deref(), Some(&owner));
        assert_eq!(*kept.labels, map(&[("app", "web")]));
        // An env consumer's flap breaker counts per owner.
        p.env = vec![EnvRef {
            source: cm("app-cfg"),
            keys: EnvKeys::Key("MODE".into()),
            optional: false,
            container: "app".into(),
        }];
        assert_eq!(trimmed(p).controller.as_deref(), Some(&owner));
    }

    #[test]
    fn the_pods_of_one_workload_keep_one_copy_of_their_annotations_and_labels() {
        let mut keeper = Keeper::new(true);
        let replica = |name: &str, uid: &str, hash: &str| {
            let mut p = PodInfo {
                name: name.into(),
                uid: uid.into(),
                ..pod()
            };
            p.labels.insert("pod-template-hash".into(), hash.into());
            p
        };
        let a = keeper.keep(replica("web-1", "u1", "f888bd677"));
        let b = keeper.keep(replica("web-2", "u2", "f888bd677"));
        let mut other = replica("api-1", "u3", "5d9c7");
        other
            .annotations
            .insert("reloadlet.io/action".into(), "evict".into());
        let c = keeper.keep(other);
        assert!(a.annotations.shares_with(&b.annotations));
        assert!(a.labels.shares_with(&b.labels));
        assert_eq!(*a.annotations, map(&[("reloadlet.io/action", "signal")]));
        assert_eq!(*b.labels, map(&[("pod-template-hash", "f888bd677")]));
        assert!(!a.annotations.shares_with(&c.annotations));
        assert!(!a.labels.shares_with(&c.labels));
        assert_eq!(c.annotations.get("reloadlet.io/action").unwrap(), "evict");
        assert_eq!(*c.labels, map(&[("pod-template-hash", "5d9c7")]));
        assert_eq!((b.name.as_str(), c.name.as_str()), ("web-2", "api-1"));
    }
}
