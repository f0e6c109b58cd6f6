//! Does a pod qualify for a projection nudge when one ConfigMap/Secret changed? (pure)
//!
//! The kubelet re-projects a pod's configMap/secret/projected volumes when it syncs the pod,
//! and it syncs at once when the pod object changes semantically (kubelet `config.go`
//! `podsDifferSemantically` → `SyncPod` → `volumeManager.WaitForAttachAndMount` →
//! `ReprocessPod`). A nudge only helps a pod whose files would change: one that mounts the
//! object through a volume some running container sees other than through `subPath`.

use crate::core::annotations::{self, AnnotationError};
use crate::core::model::{ContainerKind, PodInfo, SourceKind, SourceRef};
use std::fmt;

/// `kube-root-ca.crt` is projected into every pod by the injected `kube-api-access-*` volume;
/// it only counts when the pod names it in `reloadlet.io/configmaps`.
pub const KUBE_ROOT_CA: &str = "kube-root-ca.crt";

/// Why a pod is not nudged for an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotQualified {
    /// No `reloadlet.io/action`.
    NotOptedIn,
    InvalidAnnotation(AnnotationError),
    /// `reloadlet.io/fast-projection: "false"`.
    OptedOut,
    /// `reloadlet.io/action: rollout`: new pods replace the pod; nothing reads its volumes
    /// again, so a nudge would be a wasted write.
    Rollout,
    NotRunning(String),
    Terminating,
    /// The pod does not project the object in any volume.
    NotProjected,
    /// `reloadlet.io/configmaps` / `reloadlet.io/secrets` leave the object out
    /// (`kube-root-ca.crt` is always left out unless named).
    NotListed,
    /// Only `subPath` mounts (or no running container) see the object: nothing on disk
    /// the containers see would change.
    SubPathOnly,
}

impl fmt::Display for NotQualified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotOptedIn => f.write_str("the pod has no reloadlet.io/action annotation"),
            Self::InvalidAnnotation(e) => write!(f, "invalid annotation: {e}"),
            Self::OptedOut => f.write_str("the pod says reloadlet.io/fast-projection: \"false\""),
            Self::Rollout => f.write_str(
                "action rollout: the controller rolls the workload, which replaces the pod",
            ),
            Self::NotRunning(phase) => write!(f, "the pod is not running (phase {phase:?})"),
            Self::Terminating => f.write_str("the pod is terminating"),
            Self::NotProjected => f.write_str("no volume of the pod projects it"),
            Self::NotListed => f.write_str(
                "reloadlet.io/configmaps / reloadlet.io/secrets leave it out (kube-root-ca.crt only counts when named)",
            ),
            Self::SubPathOnly => f.write_str(
                "containers mount it only through subPath (or not at all): the kubelet never updates those files",
            ),
        }
    }
}

/// Pod-level checks that do not depend on the object: opt-in, opt-out, phase.
pub fn pod_eligible(pod: &PodInfo) -> Result<crate::core::annotations::PodPolicy, NotQualified> {
    let policy = match annotations::parse(&pod.annotations) {
        Ok(Some(p)) => p,
        Ok(None) => return Err(NotQualified::NotOptedIn),
        Err(e) => return Err(NotQualified::InvalidAnnotation(e)),
    };
    if !annotations::fast_projection(&pod.annotations).unwrap_or(true) {
        return Err(NotQualified::OptedOut);
    }
    if policy.action == annotations::Action::Rollout {
        return Err(NotQualified::Rollout);
    }
    if pod.terminating {
        return Err(NotQualified::Terminating);
    }
    if pod.phase != "Running" {
        return Err(NotQualified::NotRunning(pod.phase.clone()));
    }
    Ok(policy)
}

/// `Ok(())` when a change of `object` (in the pod's namespace) should nudge `pod`.
pub fn qualifies(pod: &PodInfo, object: &SourceRef) -> Result<(), NotQualified> {
    let policy = pod_eligible(pod)?;
    let projecting: Vec<&str> = pod
        .volumes
        .iter()
        .filter(|v| v.sources.contains(object))
        .map(|v| v.name.as_str())
        .collect();
    if projecting.is_empty() {
        return Err(NotQualified::NotProjected);
    }
    let listed = match object.kind {
        SourceKind::ConfigMap => &policy.configmaps,
        SourceKind::Secret => &policy.secrets,
        // The driver, not the kubelet, writes a CSI volume: nothing to nudge.
        SourceKind::SecretProviderClass | SourceKind::CsiVolume | SourceKind::PodCertificate => {
            return Err(NotQualified::NotProjected)
        }
    };
    let named = listed.as_ref().is_some_and(|l| l.contains(&object.name));
    let root_ca = object.kind == SourceKind::ConfigMap && object.name == KUBE_ROOT_CA;
    if (policy.narrowed() || root_ca) && !named {
        return Err(NotQualified::NotListed);
    }
    let seen = pod
        .containers
        .iter()
        .filter(|c| c.kind != ContainerKind::Init)
        .flat_map(|c| &c.mounts)
        .any(|m| !m.sub_path && projecting.contains(&m.volume.as_str()));
    if !seen {
        return Err(NotQualified::SubPathOnly);
    }
    Ok(())
}

/// The `explain` lines: does fast projection apply to the pod, per projected source, and why
/// not.
pub fn explain(pod: &PodInfo) -> String {
    let mut out = String::from("  fast projection (reloadlet controller):\n");
    if let Err(reason) = pod_eligible(pod) {
        out.push_str(&format!("    does not apply: {reason}\n"));
        return out;
    }
    let mut sources: Vec<&SourceRef> = pod.volumes.iter().flat_map(|v| &v.sources).collect();
    sources.sort();
    sources.dedup();
    if sources.is_empty() {
        out.push_str("    does not apply: no volume projects a ConfigMap or Secret\n");
    }
    for source in sources {
        let verdict = match qualifies(pod, source) {
            Ok(()) => match source.kind {
                SourceKind::ConfigMap => "nudged when it changes".to_owned(),
                SourceKind::Secret => {
                    "nudged when it changes (if the controller runs with --secrets)".to_owned()
                }
                SourceKind::SecretProviderClass
                | SourceKind::CsiVolume
                | SourceKind::PodCertificate => {
                    "not nudged: the CSI driver decides when to write".to_owned()
                }
            },
            Err(reason) => format!("not nudged: {reason}"),
        };
        out.push_str(&format!("    {source}: {verdict}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{ContainerInfo, VolumeMount, VolumeSpec};

    fn cm(name: &str) -> SourceRef {
        SourceRef {
            kind: SourceKind::ConfigMap,
            name: name.into(),
        }
    }
    fn secret(name: &str) -> SourceRef {
        SourceRef {
            kind: SourceKind::Secret,
            name: name.into(),
        }
    }
    fn mount(volume: &str, sub_path: bool) -> VolumeMount {
        VolumeMount {
            volume: volume.into(),
            sub_path,
        }
    }
    fn container(kind: ContainerKind, mounts: Vec<VolumeMount>) -> ContainerInfo {
        ContainerInfo {
            name: "app".into(),
            kind,
            mounts,
            container_id: None,
            running: true,
            ports: Vec::new(),
        }
    }

    /// A running, opted-in pod: volume `cfg` = configMap `app-cfg`, volume `both` =
    /// projected(configMap `shared`, secret `tls`), volume `kube-api-access` =
    /// projected(token, configMap kube-root-ca.crt); `app` mounts all three.
    fn pod(ann: &[(&str, &str)]) -> PodInfo {
        PodInfo {
            uid: "u1".into(),
            namespace: "ns".into(),
            name: "web".into(),
            annotations: ann
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            volumes: vec![
                VolumeSpec {
                    name: "cfg".into(),
                    sources: vec![cm("app-cfg")],
                    service_account_token: false,
                    source_paths: Vec::new(),
                    source_keys: Vec::new(),
                    source_items: Vec::new(),
                    other_paths: Vec::new(),
                    csi: None,
                },
                VolumeSpec {
                    name: "both".into(),
                    sources: vec![cm("shared"), secret("tls")],
                    service_account_token: false,
                    source_paths: Vec::new(),
                    other_paths: Vec::new(),
                    source_keys: Vec::new(),
                    source_items: Vec::new(),
                    csi: None,
                },
                VolumeSpec {
                    name: "kube-api-access".into(),
                    sources: vec![cm(KUBE_ROOT_CA)],
                    service_account_token: true,
                    source_paths: Vec::new(),
                    other_paths: Vec::new(),
                    csi: None,
                    source_keys: Vec::new(),
                    source_items: Vec::new(),
                },
            ],
            containers: vec![container(
                ContainerKind::Regular,
                vec![
                    mount("cfg", false),
                    mount("both", false),
                    mount("kube-api-access", false),
                ],
            )],
            phase: "Running".into(),
            ..PodInfo::default()
        }
    }

    const OPT_IN: (&str, &str) = ("reloadlet.io/action", "signal");

    #[test]
    fn table() {
        use NotQualified::*;
        let with = |f: &dyn Fn(&mut PodInfo)| {
            let mut p = pod(&[OPT_IN]);
            f(&mut p);
            p
        };
        let cases: Vec<(&str, PodInfo, SourceRef, Result<(), NotQualified>)> = vec![
            (
                "plain configMap volume",
                pod(&[OPT_IN]),
                cm("app-cfg"),
                Ok(()),
            ),
            ("projected configMap", pod(&[OPT_IN]), cm("shared"), Ok(())),
            ("projected secret", pod(&[OPT_IN]), secret("tls"), Ok(())),
            (
                "secret of the same name as a configMap is another object",
                pod(&[OPT_IN]),
                secret("app-cfg"),
                Err(NotProjected),
            ),
            (
                "not projected",
                pod(&[OPT_IN]),
                cm("other"),
                Err(NotProjected),
            ),
            ("no action", pod(&[]), cm("app-cfg"), Err(NotOptedIn)),
            (
                "invalid action",
                pod(&[("reloadlet.io/action", "reboot")]),
                cm("app-cfg"),
                Err(InvalidAnnotation(AnnotationError::UnknownAction(
                    "reboot".into(),
                ))),
            ),
            (
                "opted out",
                pod(&[OPT_IN, ("reloadlet.io/fast-projection", "false")]),
                cm("app-cfg"),
                Err(OptedOut),
            ),
            (
                "explicitly opted in",
                pod(&[OPT_IN, ("reloadlet.io/fast-projection", "true")]),
                cm("app-cfg"),
                Ok(()),
            ),
            (
                "pending",
                with(&|p| p.phase = "Pending".into()),
                cm("app-cfg"),
                Err(NotRunning("Pending".into())),
            ),
            (
                "terminating",
                with(&|p| p.terminating = true),
                cm("app-cfg"),
                Err(Terminating),
            ),
            (
                "kube-root-ca.crt unnamed",
                pod(&[OPT_IN]),
                cm(KUBE_ROOT_CA),
                Err(NotListed),
            ),
            (
                "kube-root-ca.crt named",
                pod(&[OPT_IN, ("reloadlet.io/configmaps", "kube-root-ca.crt")]),
                cm(KUBE_ROOT_CA),
                Ok(()),
            ),
            (
                "narrowed to another configMap",
                pod(&[OPT_IN, ("reloadlet.io/configmaps", "shared")]),
                cm("app-cfg"),
                Err(NotListed),
            ),
            (
                "narrowed to secrets only leaves configMaps out",
                pod(&[OPT_IN, ("reloadlet.io/secrets", "tls")]),
                cm("app-cfg"),
                Err(NotListed),
            ),
            (
                "subPath-only consumer",
                with(&|p| {
                    p.containers = vec![container(ContainerKind::Regular, vec![mount("cfg", true)])]
                }),
                cm("app-cfg"),
                Err(SubPathOnly),
            ),
            (
                "volume declared but mounted by no container (env-only style)",
                with(&|p| p.containers = vec![container(ContainerKind::Regular, vec![])]),
                cm("app-cfg"),
                Err(SubPathOnly),
            ),
            (
                "one subPath and one whole mount",
                with(&|p| {
                    p.containers = vec![
                        container(ContainerKind::Regular, vec![mount("cfg", true)]),
                        container(ContainerKind::SidecarInit, vec![mount("cfg", false)]),
                    ]
                }),
                cm("app-cfg"),
                Ok(()),
            ),
            (
                "only a finished init container mounts it",
                with(&|p| {
                    p.containers = vec![container(ContainerKind::Init, vec![mount("cfg", false)])]
                }),
                cm("app-cfg"),
                Err(SubPathOnly),
            ),
        ];
        for (what, pod, object, want) in cases {
            assert_eq!(qualifies(&pod, &object), want, "{what}");
        }
    }

    #[test]
    fn explain_names_each_source_and_why() {
        let text = explain(&pod(&[OPT_IN]));
        assert!(
            text.contains("configmap app-cfg: nudged when it changes\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "secret tls: nudged when it changes (if the controller runs with --secrets)"
            ),
            "{text}"
        );
        assert!(
            text.contains("configmap kube-root-ca.crt: not nudged: reloadlet.io/configmaps"),
            "{text}"
        );
        let off = explain(&pod(&[OPT_IN, ("reloadlet.io/fast-projection", "false")]));
        assert!(
            off.contains("does not apply: the pod says reloadlet.io/fast-projection: \"false\""),
            "{off}"
        );
    }

    #[test]
    fn reasons_read_as_sentences() {
        assert_eq!(
            NotQualified::SubPathOnly.to_string(),
            "containers mount it only through subPath (or not at all): the kubelet never updates those files"
        );
    }
}
