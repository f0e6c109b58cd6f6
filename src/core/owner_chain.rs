//! Who may have a workload rolled (pure; issue #43 §2). A rollout patches a workload, so it
//! reaches every pod of it: the authority for it must come from the workload, never from
//! annotations a pod author wrote on one pod. Two checks run before any workload write:
//!
//! - [`verify`]: the owner chain as the API shows it. The pod's controlling owner reference
//!   names the ReplicaSet (StatefulSet, DaemonSet) by UID as well as by name, and that object
//!   has that UID; the ReplicaSet's owner reference names the Deployment (Argo Rollout) by
//!   UID; and each owner's selector selects the pod. Kubernetes' own controllers adopt a pod
//!   only under the same conditions (kubernetes `pkg/controller/controller_ref_manager.go`,
//!   `ClaimObject`: an owner reference whose UID differs from the controller's is not its
//!   own, and `match(obj)` is the selector), so a pod that fails them is not the workload's,
//!   whatever its `ownerReferences` say (anyone who can create a pod can write them).
//! - [`granted`]: the workload asks for it. The pod's `reloadlet.io/*` keys that decide a
//!   workload-wide action (the action, `on-blocked`, `blocked-timeout`, the pacing keys, the
//!   narrowing lists) must be the pod template's — a pod copies its template's annotations
//!   when it is created, so a difference is an edit of the pod alone; under
//!   `--reloader-compat`, Reloader's annotations must be on the workload or its template.

use super::label_selector::LabelSelector;
use super::rollout::{OwnerRef, WorkloadKind, WorkloadRef};
use std::collections::BTreeMap;

/// What one object of a pod's owner chain says of itself, as read from the API.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Link {
    pub uid: String,
    /// Its controlling owner reference.
    pub owner: Option<OwnerRef>,
    /// Its selector (`spec.selector`); `None` when it has none the API would accept (apps/v1
    /// requires a non-empty one: kubernetes `pkg/apis/apps/validation/validation.go`,
    /// "empty selector is invalid for deployment").
    pub selector: Option<LabelSelector>,
}

/// The pod as its metadata GET shows it (the controller's own pod cache keeps no labels).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodLink {
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Its controlling owner reference.
    pub owner: Option<OwnerRef>,
}

/// The workload as one GET shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadFacts {
    pub strategy: super::rollout::Strategy,
    pub link: Link,
    /// `metadata.annotations` of the workload itself.
    pub annotations: BTreeMap<String, String>,
    /// `spec.template.metadata.annotations`.
    pub template_annotations: BTreeMap<String, String>,
}

/// Why a pod's owner chain does not hold (Warning `RolloutNotGranted`, nothing written).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("the pod's owner reference names {kind} {name} with UID {claimed:?}, but {kind} {name} has UID {actual:?}: the pod is not that object's")]
    Uid {
        kind: String,
        name: String,
        claimed: String,
        actual: String,
    },
    #[error("{kind} {name} has no selector the API server would accept")]
    NoSelector { kind: String, name: String },
    #[error("{kind} {name}'s selector does not select the pod (it requires {requirement})")]
    NotSelected {
        kind: String,
        name: String,
        requirement: String,
    },
}

fn selects(
    kind: &str,
    name: &str,
    selector: Option<&LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> Result<(), ChainError> {
    let selector = selector.ok_or_else(|| ChainError::NoSelector {
        kind: kind.to_owned(),
        name: name.to_owned(),
    })?;
    match selector.first_mismatch(labels) {
        None => Ok(()),
        Some(r) => Err(ChainError::NotSelected {
            kind: kind.to_owned(),
            name: name.to_owned(),
            requirement: r.to_string(),
        }),
    }
}

fn same_uid(owner: &OwnerRef, actual: &str) -> Result<(), ChainError> {
    if !actual.is_empty() && owner.uid == actual {
        return Ok(());
    }
    Err(ChainError::Uid {
        kind: owner.kind.clone(),
        name: owner.name.clone(),
        claimed: owner.uid.clone(),
        actual: actual.to_owned(),
    })
}

/// Checks the chain pod → (ReplicaSet →) workload. `pod_owner`: the pod's controlling owner
/// reference; `replica_set`: that ReplicaSet as read, when the owner is one.
pub fn verify(
    pod_labels: &BTreeMap<String, String>,
    pod_owner: &OwnerRef,
    replica_set: Option<&Link>,
    workload: &WorkloadRef,
    facts: &WorkloadFacts,
) -> Result<(), ChainError> {
    let kind = workload.kind.as_str();
    match replica_set {
        Some(rs) => {
            same_uid(pod_owner, &rs.uid)?;
            selects(
                "ReplicaSet",
                &pod_owner.name,
                rs.selector.as_ref(),
                pod_labels,
            )?;
            let rs_owner = rs.owner.as_ref().ok_or_else(|| ChainError::Uid {
                kind: kind.to_owned(),
                name: workload.name.clone(),
                claimed: String::new(),
                actual: facts.link.uid.clone(),
            })?;
            same_uid(rs_owner, &facts.link.uid)?;
        }
        None => same_uid(pod_owner, &facts.link.uid)?,
    }
    selects(
        kind,
        &workload.name,
        facts.link.selector.as_ref(),
        pod_labels,
    )
}

/// The `reloadlet.io/*` keys reloadlet writes itself (the controller; the agent its status
/// record): never the pod author's to grant.
const WRITTEN_BY_RELOADLET: [&str; 10] = [
    super::status::applied::ANNOTATION,
    super::annotations::ROLLOUT_BASELINE,
    super::annotations::ENV_BASELINE,
    super::annotations::PROJECTION_NUDGE,
    super::rollout::RESTARTED_FOR,
    super::pacing::ENV_PACING,
    super::pacing::ROLLOUT_PACING,
    super::restart_grant::REQUEST,
    super::restart_grant::GRANT,
    super::restart_grant::RESTARTED,
];

/// The `reloadlet.io/*` keys of `annotations` that the pod author decides.
fn deciding(annotations: &BTreeMap<String, String>) -> BTreeMap<&str, &str> {
    annotations
        .iter()
        .filter(|(k, _)| k.starts_with("reloadlet.io/"))
        .filter(|(k, _)| !WRITTEN_BY_RELOADLET.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Does the workload grant what the pod asks? `reloader`: under `--reloader-compat`, whether
/// Reloader's annotations are on the workload or its template (the caller's matcher decides).
/// `Err`: the one sentence a Warning says.
pub fn granted(
    pod_annotations: &BTreeMap<String, String>,
    kind: WorkloadKind,
    name: &str,
    facts: &WorkloadFacts,
    reloader: impl FnOnce(&BTreeMap<String, String>, &BTreeMap<String, String>) -> bool,
) -> Result<(), crate::core::invalid::Invalid> {
    let of_pod = deciding(pod_annotations);
    if of_pod.is_empty() {
        // Governed by Reloader's annotations (no reloadlet.io/action on the pod).
        return if reloader(&facts.annotations, &facts.template_annotations) {
            Ok(())
        } else {
            Err(crate::invalid!(
                "Reloader's annotations that ask for this rollout are not on {} {name} nor its pod template: a workload is rolled only when it asks",
                kind.as_str()
            ))
        };
    }
    let of_template = deciding(&facts.template_annotations);
    if of_pod == of_template {
        return Ok(());
    }
    let key = of_pod
        .keys()
        .chain(of_template.keys())
        .find(|k| of_pod.get(*k) != of_template.get(*k))
        .copied()
        .unwrap_or_default();
    let shown = |v: Option<&&str>| match v {
        Some(v) => format!("{v:?}"),
        None => "absent".to_owned(),
    };
    Err(crate::invalid!(
        "{key} is {} on the pod but {} in {} {name}'s pod template: a workload is rolled only as its template asks (a pod's own annotations cannot grant it)",
        shown(of_pod.get(key)),
        shown(of_template.get(key)),
        kind.as_str()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::label_selector::Requirement;
    use crate::core::rollout::Strategy;

    fn owner(kind: &str, name: &str, uid: &str) -> OwnerRef {
        OwnerRef {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    fn app_web() -> Option<LabelSelector> {
        Some(LabelSelector {
            requirements: vec![Requirement::Equal("app".into(), "web".into())],
        })
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn deployment() -> (WorkloadRef, WorkloadFacts) {
        let w = WorkloadRef {
            kind: WorkloadKind::Deployment,
            namespace: "ns".into(),
            name: "web".into(),
        };
        let facts = WorkloadFacts {
            strategy: Strategy::deployment_default(3),
            link: Link {
                uid: "d-uid".into(),
                owner: None,
                selector: app_web(),
            },
            annotations: BTreeMap::new(),
            template_annotations: map(&[("reloadlet.io/action", "rollout")]),
        };
        (w, facts)
    }

    fn rs(uid: &str, owner_uid: &str) -> Link {
        Link {
            uid: uid.into(),
            owner: Some(owner("Deployment", "web", owner_uid)),
            selector: app_web(),
        }
    }

    #[test]
    fn the_chain_holds_only_with_matching_uids_and_selectors() {
        let (w, facts) = deployment();
        let labels = map(&[("app", "web")]);
        let pod_owner = owner("ReplicaSet", "web-6d4f", "rs-uid");
        assert_eq!(
            verify(
                &labels,
                &pod_owner,
                Some(&rs("rs-uid", "d-uid")),
                &w,
                &facts
            ),
            Ok(())
        );
        // A bare pod naming another Deployment's ReplicaSet with a wrong UID.
        let forged = owner("ReplicaSet", "web-6d4f", "made-up");
        let err = verify(&labels, &forged, Some(&rs("rs-uid", "d-uid")), &w, &facts).unwrap_err();
        assert!(
            err.to_string()
                .contains("names ReplicaSet web-6d4f with UID \"made-up\""),
            "{err}"
        );
        // A ReplicaSet owned by another Deployment of the same name (deleted and re-made).
        assert!(matches!(
            verify(
                &labels,
                &pod_owner,
                Some(&rs("rs-uid", "old-d")),
                &w,
                &facts
            ),
            Err(ChainError::Uid { .. })
        ));
        // Labels the owners do not select.
        let err = verify(
            &map(&[("app", "other")]),
            &pod_owner,
            Some(&rs("rs-uid", "d-uid")),
            &w,
            &facts,
        )
        .unwrap_err();
        assert!(err.to_string().contains("does not select the pod"), "{err}");
        // No selector (never from a valid API object): refused.
        let mut no_sel = facts.clone();
        no_sel.link.selector = None;
        assert!(matches!(
            verify(
                &labels,
                &pod_owner,
                Some(&rs("rs-uid", "d-uid")),
                &w,
                &no_sel
            ),
            Err(ChainError::NoSelector { .. })
        ));
        // A StatefulSet's pod: owned directly, the same checks.
        let sts = WorkloadRef {
            kind: WorkloadKind::StatefulSet,
            ..w.clone()
        };
        let direct = owner("StatefulSet", "web", "d-uid");
        assert_eq!(verify(&labels, &direct, None, &sts, &facts), Ok(()));
        let stale = owner("StatefulSet", "web", "");
        assert!(verify(&labels, &stale, None, &sts, &facts).is_err());
    }

    #[test]
    fn only_the_template_grants_a_workload_wide_action() {
        let (_, facts) = deployment();
        let no_reloader = |_: &BTreeMap<String, String>, _: &BTreeMap<String, String>| false;
        let kind = WorkloadKind::Deployment;
        // The template asks, the pod copied it (and carries what the controller wrote).
        let pod = map(&[
            ("reloadlet.io/action", "rollout"),
            (
                "reloadlet.io/rollout-baseline",
                "configmap/a=0011223344556677",
            ),
            ("other.io/x", "y"),
            // The agent's status record (its hand-off of a blocked eviction, say).
            ("reloadlet.io/applied", r#"{"v":1,"objects":[]}"#),
        ]);
        assert_eq!(granted(&pod, kind, "web", &facts, no_reloader), Ok(()));
        // A pod-only edit: the action, a pacing key, on-blocked.
        for (key, value) in [
            ("reloadlet.io/action", "evict"),
            ("reloadlet.io/min-interval", "0s"),
            ("reloadlet.io/on-blocked", "rollout"),
        ] {
            let mut edited = pod.clone();
            edited.insert(key.into(), value.into());
            let err = granted(&edited, kind, "web", &facts, no_reloader).unwrap_err();
            assert!(
                err.starts_with(key) && err.contains("Deployment web's pod template"),
                "{err}"
            );
        }
        // A template that never asked: a pod cannot ask for it.
        let mut plain = facts.clone();
        plain.template_annotations.clear();
        let err = granted(&pod, kind, "web", &plain, no_reloader).unwrap_err();
        assert_eq!(err, "reloadlet.io/action is \"rollout\" on the pod but absent in Deployment web's pod template: a workload is rolled only as its template asks (a pod's own annotations cannot grant it)");
        // Reloader's annotations: the workload's (or its template's), never the pod's alone.
        let reloader = |own: &BTreeMap<String, String>, _: &BTreeMap<String, String>| {
            own.contains_key("reloader.stakater.com/auto")
        };
        let compat_pod = map(&[("reloader.stakater.com/auto", "true")]);
        assert!(granted(&compat_pod, kind, "web", &plain, reloader).is_err());
        let mut asks = plain.clone();
        asks.annotations
            .insert("reloader.stakater.com/auto".into(), "true".into());
        assert_eq!(granted(&compat_pod, kind, "web", &asks, reloader), Ok(()));
    }
}
