//! Which pods consume a ConfigMap or Secret, and how: from the pod spec alone (pure).
//!
//! A pod consumes an object through a volume (a `configMap`/`secret` volume or a source of a
//! `projected` one; whole or through `items`), through a `subPath` mount of such a volume
//! (which the kubelet never updates), or through `env[].valueFrom` / `envFrom` (read once, when
//! the container starts). A volume no container mounts is not a consumption. CSI volumes are
//! written by their driver, not from a named object: the spec names a SecretProviderClass at
//! most, never the Secret it may sync, so they are not listed (docs/status.md).

use crate::core::annotations::{self, Action};
use crate::core::model::{EnvKeys, PodInfo, SourceRef};
use crate::core::pacing::{PacingDefaults, PacingSpec};
use crate::core::policy;
use crate::core::rollout::unrollable_by_pod;
use std::collections::BTreeSet;
use std::fmt;

/// One way a pod reads the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Via {
    /// A volume mounted whole by `containers`; `items`: the keys it projects (`None`: every key).
    Volume {
        volume: String,
        items: Option<Vec<String>>,
        containers: Vec<String>,
    },
    /// A volume `containers` mount only through `subPath`: the kubelet never updates it.
    SubPath {
        volume: String,
        containers: Vec<String>,
    },
    /// `env[].valueFrom` (`keys`) or `envFrom` (`keys` empty: every key) of `container`.
    Env {
        container: String,
        keys: Vec<String>,
        env_from: bool,
    },
}

impl Via {
    /// A short text for the `HOW` column: `volume config (items a.conf)`,
    /// `subPath of volume config (app)`, `env LOG_LEVEL (app)`, `envFrom (app)`.
    pub fn describe(&self) -> String {
        match self {
            Self::Volume { volume, items, .. } => match items {
                None => format!("volume {volume}"),
                Some(keys) => format!("volume {volume} (items {})", keys.join(",")),
            },
            Self::SubPath { volume, containers } => {
                format!("subPath of volume {volume} ({})", containers.join(","))
            }
            Self::Env {
                container,
                keys,
                env_from,
            } => {
                if *env_from {
                    format!("envFrom ({container})")
                } else {
                    format!("env {} ({container})", keys.join(","))
                }
            }
        }
    }

    pub fn is_env(&self) -> bool {
        matches!(self, Self::Env { .. })
    }
}

/// The action that applies to a consumer (the `ACTION` column).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConsumerAction {
    Signal,
    Http,
    Evict,
    /// An in-place container restart (when the pod's annotations ask for one).
    Restart,
    Rollout,
    /// No `reloadlet.io/action`.
    None,
    /// The annotations do not parse or do not fit the spec: nothing is done until fixed.
    Invalid(String),
}

impl ConsumerAction {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Signal => "signal",
            Self::Http => "http",
            Self::Evict => "evict",
            Self::Restart => "restart",
            Self::Rollout => "rollout",
            Self::None => "none",
            Self::Invalid(_) => "invalid",
        }
    }

    /// A restart of the container (in place, by eviction or by a rollout) re-reads env and
    /// re-prepares subPath mounts; a signal or an HTTP request does neither.
    pub fn restarts(&self) -> bool {
        matches!(self, Self::Evict | Self::Restart | Self::Rollout)
    }
}

impl fmt::Display for ConsumerAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How one pod consumes one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consumer {
    pub via: Vec<Via>,
    pub action: ConsumerAction,
    /// The pod's `reloadlet.io/configmaps` / `reloadlet.io/secrets` (when set) name the
    /// object; `false`: a change of it never triggers the action.
    pub counted: bool,
    /// `reloadlet.io/env-action`: the controller evicts the pod, or restarts its containers in
    /// place, on an env change.
    pub env_action: Option<annotations::EnvAction>,
    /// Its pacing annotations do not parse (the message): neither the agent nor the
    /// controller acts on it until they are fixed (`core::pacing::PacingSpec::parse`).
    pub pacing_invalid: Option<String>,
    /// Action `rollout`, and its controlling owner reference alone shows nothing would roll
    /// it (why: `core::rollout::unrollable_by_pod`).
    pub unrollable: Option<String>,
}

/// Which keys of the object the consumer reads, for comparing data versions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeysRead {
    All,
    Only(BTreeSet<String>),
}

impl Consumer {
    /// Every way it reads the object is through env.
    pub fn env_only(&self) -> bool {
        self.via.iter().all(Via::is_env)
    }

    /// Every way it reads the object is through subPath or env (nothing the kubelet updates in
    /// place), and at least one is a subPath.
    pub fn sub_path_only(&self) -> bool {
        self.via
            .iter()
            .all(|v| matches!(v, Via::SubPath { .. } | Via::Env { .. }))
            && self.via.iter().any(|v| matches!(v, Via::SubPath { .. }))
    }

    /// The union of the keys its ways read (`All` as soon as one reads every key).
    pub fn keys(&self) -> KeysRead {
        let mut keys = BTreeSet::new();
        for v in &self.via {
            match v {
                Via::Volume {
                    items: Some(items), ..
                } => keys.extend(items.iter().cloned()),
                Via::Env {
                    keys: k,
                    env_from: false,
                    ..
                } => keys.extend(k.iter().cloned()),
                _ => return KeysRead::All,
            }
        }
        KeysRead::Only(keys)
    }

    /// The `HOW` column: every way, joined.
    pub fn how(&self) -> String {
        self.via
            .iter()
            .map(Via::describe)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// How `pod` consumes `object` (a ConfigMap or Secret of the pod's namespace); `None` when it
/// does not. Bounded by the pod spec (already bounded by the API server); never panics.
pub fn consumer(pod: &PodInfo, object: &SourceRef) -> Option<Consumer> {
    let mut via = Vec::new();
    for v in &pod.volumes {
        if !v.sources.contains(object) {
            continue;
        }
        let mut whole = Vec::new();
        let mut sub = Vec::new();
        for c in &pod.containers {
            for m in c.mounts.iter().filter(|m| m.volume == v.name) {
                let list = if m.sub_path { &mut sub } else { &mut whole };
                if !list.contains(&c.name) {
                    list.push(c.name.clone());
                }
            }
        }
        let items = v
            .source_keys
            .iter()
            .find(|(s, _)| s == object)
            .map(|(_, keys)| keys.clone());
        if !whole.is_empty() {
            via.push(Via::Volume {
                volume: v.name.clone(),
                items,
                containers: whole,
            });
        }
        if !sub.is_empty() {
            via.push(Via::SubPath {
                volume: v.name.clone(),
                containers: sub,
            });
        }
    }
    for r in pod.env.iter().filter(|r| &r.source == object) {
        let (key, env_from) = match &r.keys {
            EnvKeys::Key(k) => (Some(k.clone()), false),
            EnvKeys::All { .. } => (None, true),
        };
        let merged = via.iter_mut().find_map(|v| match v {
            Via::Env {
                container,
                keys,
                env_from: f,
            } if *container == r.container && *f == env_from => Some(keys),
            _ => None,
        });
        match merged {
            Some(keys) => keys.extend(key.filter(|k| !keys.contains(k))),
            None => via.push(Via::Env {
                container: r.container.clone(),
                keys: key.into_iter().collect(),
                env_from,
            }),
        }
    }
    if via.is_empty() {
        return None;
    }
    let action = match policy::validated_policy(pod) {
        Ok(None) => ConsumerAction::None,
        Err(message) => ConsumerAction::Invalid(message.to_string()),
        Ok(Some(p)) => match p.action {
            Action::Signal { .. } => ConsumerAction::Signal,
            Action::Http(_) => ConsumerAction::Http,
            Action::Evict { .. } => ConsumerAction::Evict,
            Action::Rollout => ConsumerAction::Rollout,
            Action::Restart(_) => ConsumerAction::Restart,
        },
    };
    let counted = match action {
        ConsumerAction::None | ConsumerAction::Invalid(_) => false,
        _ => policy::source_counts(pod, object),
    };
    // The defaults' time zone is checked at startup: whether the pod's own annotations parse
    // does not depend on the flags.
    let pacing_invalid = PacingSpec::parse(&pod.annotations, &PacingDefaults::default())
        .err()
        .map(|e| e.to_string());
    let unrollable = (action == ConsumerAction::Rollout)
        .then(|| unrollable_by_pod(pod.controller.as_deref()))
        .flatten()
        .map(|why| why.to_string());
    Some(Consumer {
        via,
        action,
        counted,
        env_action: annotations::env_action(&pod.annotations).ok().flatten(),
        pacing_invalid,
        unrollable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{
        ContainerInfo, ContainerKind, EnvRef, SourceKind, VolumeMount, VolumeSpec,
    };

    fn cm(name: &str) -> SourceRef {
        SourceRef {
            kind: SourceKind::ConfigMap,
            name: name.into(),
        }
    }

    fn container(name: &str, mounts: &[(&str, bool)]) -> ContainerInfo {
        ContainerInfo {
            name: name.into(),
            kind: ContainerKind::Regular,
            mounts: mounts
                .iter()
                .map(|(v, sub)| VolumeMount {
                    volume: v.to_string(),
                    sub_path: *sub,
                })
                .collect(),
            container_id: None,
            running: true,
            ports: Vec::new(),
        }
    }

    fn pod(
        action: Option<&str>,
        volumes: Vec<VolumeSpec>,
        containers: Vec<ContainerInfo>,
    ) -> PodInfo {
        PodInfo {
            uid: "u".into(),
            namespace: "web".into(),
            name: "p".into(),
            annotations: action
                .map(|a| ("reloadlet.io/action".to_string(), a.to_string()))
                .into_iter()
                .collect(),
            volumes,
            containers,
            has_controller: true,
            phase: "Running".into(),
            ..Default::default()
        }
    }

    fn volume(name: &str, sources: &[SourceRef]) -> VolumeSpec {
        VolumeSpec {
            name: name.into(),
            sources: sources.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn each_way_of_consuming_is_found_with_its_action() {
        let app = cm("app");
        let mut items = volume("items", &[app.clone(), cm("other")]);
        items.source_keys = vec![(app.clone(), vec!["a.conf".into()])];
        let mut p = pod(
            Some("signal"),
            vec![
                volume("whole", std::slice::from_ref(&app)),
                items,
                volume("sub", std::slice::from_ref(&app)),
            ],
            vec![
                container("web", &[("whole", false), ("items", false), ("sub", true)]),
                container("side", &[("sub", true)]),
            ],
        );
        p.env = vec![
            EnvRef {
                source: app.clone(),
                keys: EnvKeys::Key("LEVEL".into()),
                optional: false,
                container: "web".into(),
            },
            EnvRef {
                source: app.clone(),
                keys: EnvKeys::Key("MODE".into()),
                optional: false,
                container: "web".into(),
            },
            EnvRef {
                source: app.clone(),
                keys: EnvKeys::All { prefix: "".into() },
                optional: true,
                container: "side".into(),
            },
        ];
        let c = consumer(&p, &app).expect("consumes");
        let hows: Vec<String> = c.via.iter().map(Via::describe).collect();
        assert_eq!(
            hows,
            [
                "volume whole",
                "volume items (items a.conf)",
                "subPath of volume sub (web,side)",
                "env LEVEL,MODE (web)",
                "envFrom (side)",
            ]
        );
        assert_eq!(c.action, ConsumerAction::Signal);
        assert!(c.counted);
        assert_eq!(c.keys(), KeysRead::All);
        assert!(!c.env_only() && !c.sub_path_only());
    }

    #[test]
    fn a_pod_that_does_not_mount_or_read_it_is_no_consumer() {
        let p = pod(
            Some("signal"),
            vec![
                volume("unmounted", &[cm("app")]),
                volume("v", &[cm("other")]),
            ],
            vec![container("web", &[("v", false)])],
        );
        assert_eq!(consumer(&p, &cm("app")), None);
        let secret = SourceRef {
            kind: SourceKind::Secret,
            name: "other".into(),
        };
        assert_eq!(consumer(&p, &secret), None, "same name, other kind");
    }

    #[test]
    fn actions_narrowing_and_invalid_annotations() {
        let app = cm("app");
        let v = || vec![volume("v", std::slice::from_ref(&app))];
        let c = || vec![container("web", &[("v", false)])];
        for (action, want) in [
            (None, ConsumerAction::None),
            (Some("http"), ConsumerAction::Invalid(String::new())),
            (Some("evict"), ConsumerAction::Evict),
            (Some("rollout"), ConsumerAction::Rollout),
            (Some("bogus"), ConsumerAction::Invalid(String::new())),
        ] {
            let got = consumer(&pod(action, v(), c()), &app).unwrap().action;
            match want {
                ConsumerAction::Invalid(_) => {
                    assert!(
                        matches!(got, ConsumerAction::Invalid(ref m) if !m.is_empty()),
                        "{action:?}: {got:?}"
                    )
                }
                want => assert_eq!(got, want, "{action:?}"),
            }
        }
        // The record reloadlet writes on the pod is one of its own annotations, never a typo.
        let mut recorded = pod(Some("signal"), v(), c());
        recorded.annotations.insert(
            crate::core::status::applied::ANNOTATION.into(),
            r#"{"v":1,"objects":[]}"#.into(),
        );
        assert_eq!(
            consumer(&recorded, &app).unwrap().action,
            ConsumerAction::Signal
        );
        let mut narrowed = pod(Some("signal"), v(), c());
        narrowed
            .annotations
            .insert("reloadlet.io/configmaps".into(), "other".into());
        narrowed.volumes.push(volume("o", &[cm("other")]));
        assert!(!consumer(&narrowed, &app).unwrap().counted);
        assert!(consumer(&narrowed, &cm("other")).is_none(), "not mounted");
    }

    #[test]
    fn what_the_pod_alone_tells_of_its_pacing_and_its_owner() {
        use crate::core::rollout::OwnerRef;
        let app = cm("app");
        let v = || vec![volume("v", std::slice::from_ref(&app))];
        let c = || vec![container("c", &[("v", false)])];
        let owned_by = |kind: &str, api_version: &str, action: &str| PodInfo {
            controller: Some(Box::new(OwnerRef {
                api_version: api_version.into(),
                kind: kind.into(),
                name: "o".into(),
                uid: "ou".into(),
            })),
            ..pod(Some(action), v(), c())
        };
        let with = |mut p: PodInfo, k: &str, value: &str| {
            p.annotations.insert(k.into(), value.into());
            p
        };
        // (pod, pacing invalid, unrollable)
        let cases: Vec<(&str, PodInfo, Option<&str>, Option<&str>)> = vec![
            (
                "a Deployment's pod",
                owned_by("ReplicaSet", "apps/v1", "rollout"),
                None,
                None,
            ),
            (
                "no owner",
                pod(Some("rollout"), v(), c()),
                None,
                Some("no controlling owner"),
            ),
            (
                "a Job's pod",
                owned_by("Job", "batch/v1", "rollout"),
                None,
                Some("Job o"),
            ),
            // The owner matters to a rollout only.
            (
                "a Job's pod signalled",
                owned_by("Job", "batch/v1", "signal"),
                None,
                None,
            ),
            (
                "an invalid window",
                with(
                    owned_by("StatefulSet", "apps/v1", "rollout"),
                    "reloadlet.io/window",
                    "sometimes",
                ),
                Some("reloadlet.io/window: \"sometimes\""),
                None,
            ),
            (
                "a window detail without a window",
                with(
                    pod(Some("signal"), v(), c()),
                    "reloadlet.io/window-duration",
                    "1h",
                ),
                Some("has no effect without reloadlet.io/window"),
                None,
            ),
            (
                "a valid debounce",
                with(
                    pod(Some("signal"), v(), c()),
                    "reloadlet.io/debounce",
                    "30s",
                ),
                None,
                None,
            ),
        ];
        for (name, p, pacing, unrollable) in cases {
            let got = consumer(&p, &app).unwrap();
            let says = |got: &Option<String>, want: Option<&str>| match (got, want) {
                (None, None) => true,
                (Some(got), Some(want)) => got.contains(want),
                _ => false,
            };
            assert!(says(&got.pacing_invalid, pacing), "{name}: {got:?}");
            assert!(says(&got.unrollable, unrollable), "{name}: {got:?}");
        }
    }

    #[test]
    fn keys_read_are_the_union_of_items_and_env_keys() {
        let app = cm("app");
        let mut items = volume("v", std::slice::from_ref(&app));
        items.source_keys = vec![(app.clone(), vec!["a".into(), "b".into()])];
        let mut p = pod(
            Some("evict"),
            vec![items],
            vec![container("web", &[("v", false)])],
        );
        p.env = vec![EnvRef {
            source: app.clone(),
            keys: EnvKeys::Key("c".into()),
            optional: false,
            container: "web".into(),
        }];
        let c = consumer(&p, &app).unwrap();
        assert_eq!(
            c.keys(),
            KeysRead::Only(["a", "b", "c"].map(String::from).into())
        );
        let env_only = {
            let mut p = p.clone();
            p.volumes.clear();
            consumer(&p, &app).unwrap()
        };
        assert!(env_only.env_only());
        let sub = pod(
            Some("signal"),
            vec![volume("v", std::slice::from_ref(&app))],
            vec![container("web", &[("v", true)])],
        );
        assert!(consumer(&sub, &app).unwrap().sub_path_only());
    }
}
