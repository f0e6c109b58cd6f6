//! `--reloader-compat` (issue #26 §3, docs/rollout.md "Reloader's annotations"): the pods of
//! a Deployment, StatefulSet, DaemonSet (or Argo Rollout) that carries Stakater Reloader's
//! annotations are handled as `reloadlet.io/action: rollout` pods — same tracker, same
//! baseline (`reloadlet.io/rollout-baseline`), same batch, one patch per workload.
//!
//! Where the annotations come from, as Reloader reads them (stakater/Reloader
//! `internal/pkg/reload/service.go`, `processResource`: `WorkloadAnnotations:
//! wl.GetAnnotations()`, `PodAnnotations: wl.GetPodTemplateAnnotations()`): the workload's
//! own metadata (watched metadata-only, [`Compat::workload`]) and its pod template's — which
//! every pod of the workload carries as its own annotations. The pure decision is
//! [`crate::core::reloader_compat::matching`]; this file keeps the index and applies it.
//!
//! - A pod with its own `reloadlet.io/action` is never governed by Reloader's annotations
//!   (the pod's annotation wins, whatever it asks).
//! - The pod's workload is found through its controlling owner: a StatefulSet or DaemonSet
//!   directly; a ReplicaSet named `<deployment>-<pod-template-hash>` (kubernetes
//!   `pkg/controller/deployment/sync.go`, `getNewReplicaSet`: `Name: d.Name + "-" +
//!   podTemplateSpecHash`, the same hash in the pod's `pod-template-hash` label) or
//!   `<rollout>-<rollouts-pod-template-hash>` (argoproj/argo-rollouts `rollout/sync.go`,
//!   `createDesiredReplicaSet`: `Name: c.rollout.Name + "-" + podTemplateSpecHash`).
//!   The roll itself resolves the owner again through the API, as for every rollout.
//! - Explicit lists (`configmap.reloader.stakater.com/reload: a,b`) roll even for objects
//!   the workload does not reference (Reloader's matcher does not look at references for
//!   them); plain names are followed as whole objects, regular expressions only match
//!   objects the pod references (the controller has no list of every ConfigMap's data).
//! - Like Reloader by default (`--reload-on-delete=false`, `shouldProcessEvent`), a deleted
//!   object rolls nothing; the baseline moves on.

use super::refs;
use crate::controller::consumed::{Change, Tracker};
use crate::controller::feature::World;
use crate::core::annotations::ACTION;
use crate::core::model::{PodInfo, SourceKind, SourceRef, VolumeSpec};
use crate::core::reloader_compat::{self as rc, Changed, Workload};
use crate::core::rollout::{WorkloadKind, WorkloadRef};
use crate::ports::ObjectData;
use crate::ports::{ObjectKey, WorkloadChange};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

pub use crate::core::reloader_compat::{DEPLOYMENT_HASH, ROLLOUT_HASH};
/// The name of the volume that stands for objects named only in a `…/reload` list.
const NAMED_ONLY: &str = "reloader-compat: named in a reload annotation";

/// The workloads' own annotations, and what was said once.
#[derive(Debug, Default)]
pub struct Compat {
    enabled: bool,
    secrets: bool,
    argo: bool,
    workloads: HashMap<WorkloadRef, BTreeMap<String, String>>,
    /// `…/reload` lists, compiled once per distinct text.
    lists: rc::ReloadLists,
    /// The "Secrets need --secrets" line was logged.
    said_secrets: bool,
}

impl Compat {
    pub fn new(enabled: bool, secrets: bool, argo: bool) -> Self {
        Self {
            enabled,
            secrets,
            argo,
            ..Self::default()
        }
    }

    /// `--reloader-compat` is on.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// What the tracker follows for `pod`: the pod itself for `reloadlet.io/action: rollout`
    /// (and `on-blocked: rollout`), the pod plus the objects its workload names only in a
    /// `…/reload` list when Reloader's annotations govern it, `None` when neither.
    pub fn tracked<'a>(&mut self, pod: &'a PodInfo) -> Option<Cow<'a, PodInfo>> {
        if refs::mode(pod).is_some() {
            return Some(Cow::Borrowed(pod));
        }
        let (workload, annotations) = self.governing(pod)?;
        let w = Workload {
            annotations,
            template: &pod.annotations,
        };
        let say = !self.secrets && !self.said_secrets && rc::wants_secrets(&w);
        let who = describe(workload);
        let named = self.named_only(pod, annotations);
        if say {
            self.said_secrets = true;
            tracing::warn!(workload = %who, "Reloader's Secret annotations are ignored: the controller runs without --secrets (Helm controller.secrets); only ConfigMaps roll this workload (logged once)");
        }
        if named.is_empty() {
            return Some(Cow::Borrowed(pod));
        }
        let mut view = pod.clone();
        view.volumes.push(VolumeSpec {
            name: NAMED_ONLY.into(),
            sources: named,
            ..VolumeSpec::default()
        });
        Some(Cow::Owned(view))
    }

    /// The workload whose Reloader annotations govern `pod`, and its own annotations
    /// (`None`: compat is off, the pod has its own `reloadlet.io/action`, is not running,
    /// belongs to no known workload, or neither carries a Reloader annotation).
    pub fn governing(&self, pod: &PodInfo) -> Option<(&WorkloadRef, &BTreeMap<String, String>)> {
        if !self.enabled
            || pod.annotations.contains_key(ACTION)
            || pod.terminating
            || pod.phase != "Running"
        {
            return None;
        }
        let key = self.workload_key(pod)?;
        let (workload, annotations) = self.workloads.get_key_value(&key)?;
        (relevant(annotations) || relevant(&pod.annotations)).then_some((workload, annotations))
    }

    fn workload_key(&self, pod: &PodInfo) -> Option<WorkloadRef> {
        let owner = pod.controller.as_ref()?;
        let group = owner.api_version.split_once('/').map_or("", |(g, _)| g);
        let at = |kind, name: &str| WorkloadRef {
            kind,
            namespace: pod.namespace.clone(),
            name: name.to_owned(),
        };
        let through_rs = |label: &str| {
            let hash = pod.labels.get(label)?;
            owner.name.strip_suffix(hash.as_str())?.strip_suffix('-')
        };
        match (group, owner.kind.as_str()) {
            ("apps", "StatefulSet") => Some(at(WorkloadKind::StatefulSet, &owner.name)),
            ("apps", "DaemonSet") => Some(at(WorkloadKind::DaemonSet, &owner.name)),
            ("apps", "ReplicaSet") => {
                if let Some(name) = through_rs(ROLLOUT_HASH).filter(|_| self.argo) {
                    return Some(at(WorkloadKind::ArgoRollout, name));
                }
                through_rs(DEPLOYMENT_HASH).map(|name| at(WorkloadKind::Deployment, name))
            }
            _ => None,
        }
    }

    /// Objects a `…/reload` list names by plain name that the pod does not reference.
    fn named_only(&self, pod: &PodInfo, workload: &BTreeMap<String, String>) -> Vec<SourceRef> {
        let selected = select(workload, &pod.annotations);
        let mut out = Vec::new();
        for (annotation, kind) in [
            (rc::CONFIGMAP_RELOAD, SourceKind::ConfigMap),
            (rc::SECRET_RELOAD, SourceKind::Secret),
        ] {
            if kind == SourceKind::Secret && !self.secrets {
                continue;
            }
            let Some(list) = selected.get(annotation) else {
                continue;
            };
            let list = self.lists.get(list);
            if list.too_long() {
                tracing::warn!(annotation, max = rc::MAX_LIST_ENTRIES, "a Reloader reload list names more objects than the maximum; the list is ignored");
                continue;
            }
            for name in list.entries().filter(|n| plain_name(n)) {
                let source = SourceRef {
                    kind,
                    name: name.to_owned(),
                };
                if !references(pod, &source) && !out.contains(&source) {
                    out.push(source);
                }
            }
        }
        out
    }

    /// A workload's metadata came or went. Returns the pods to look at again.
    pub fn workload(&mut self, change: &WorkloadChange, world: &World) -> Vec<String> {
        if !self.enabled {
            return Vec::new();
        }
        let mut touched: Vec<WorkloadRef> = Vec::new();
        match change {
            WorkloadChange::Applied(w) => {
                let old = self
                    .workloads
                    .insert(w.workload.clone(), w.annotations.clone());
                if old.as_ref() != Some(&w.annotations) {
                    touched.push(w.workload.clone());
                }
            }
            WorkloadChange::Deleted(w) => {
                if self.workloads.remove(w).is_some() {
                    touched.push(w.clone());
                }
            }
            WorkloadChange::Listed(kind, all) => {
                let fresh: HashMap<WorkloadRef, BTreeMap<String, String>> = all
                    .iter()
                    .map(|w| (w.workload.clone(), w.annotations.clone()))
                    .collect();
                let old: Vec<WorkloadRef> = self
                    .workloads
                    .keys()
                    .filter(|w| w.kind == *kind && !fresh.contains_key(*w))
                    .cloned()
                    .collect();
                for w in old {
                    self.workloads.remove(&w);
                    touched.push(w);
                }
                for (w, a) in fresh {
                    if self.workloads.get(&w) != Some(&a) {
                        touched.push(w.clone());
                    }
                    self.workloads.insert(w, a);
                }
            }
        }
        let mut pods = Vec::new();
        for w in &touched {
            for pod in world.pods_in(&w.namespace) {
                if self.workload_key(pod).as_ref() == Some(w) {
                    pods.push(pod.uid.clone());
                }
            }
        }
        pods
    }

    /// Keeps the changes that roll: every change of a pod that is not governed by Reloader's
    /// annotations, and those of governed pods that one of them asks for. The others are
    /// settled (their baseline moves on; nothing rolls).
    pub fn screen(
        &self,
        changes: Vec<Change>,
        key: &ObjectKey,
        data: Option<&ObjectData>,
        world: &World,
        tracker: &mut Tracker,
    ) -> Vec<Change> {
        changes
            .into_iter()
            .filter(|change| {
                let Some(pod) = world.get(&change.uid).filter(|p| refs::mode(p).is_none()) else {
                    return true;
                };
                let Some((workload, annotations)) = self.governing(pod) else {
                    return true;
                };
                let source = &change.source;
                let verdict = match data {
                    None => Err("deleted (Reloader does not roll on a delete by default)"),
                    Some(d) => rc::matching_with(
                        &Workload {
                            annotations,
                            template: &pod.annotations,
                        },
                        &Changed {
                            kind: key.kind,
                            name: &key.name,
                            annotations: &d.annotations,
                            referenced: references(pod, source),
                        },
                        &self.lists,
                    )
                    .ok_or("no Reloader annotation of the workload asks for it"),
                };
                match verdict {
                    Ok(annotation) => {
                        tracing::info!(workload = %describe(workload), source = %source, annotation, "Reloader annotation: rolling (--reloader-compat)");
                        true
                    }
                    Err(why) => {
                        tracing::debug!(workload = %describe(workload), source = %source, "not rolled: {why}");
                        tracker.acknowledge(change);
                        false
                    }
                }
            })
            .collect()
    }
}

/// `explain`'s sentence for a workload governed by Reloader's annotations (`own`: its
/// own annotations, `template`: its pod template's; `secrets`: whether the controller runs
/// with `--secrets`, `None` when not known).
pub fn explain_line(
    workload: &WorkloadRef,
    own: &BTreeMap<String, String>,
    template: &BTreeMap<String, String>,
    secrets: Option<bool>,
) -> String {
    let (annotations, from) = if relevant(own) {
        (own, describe(workload))
    } else {
        (template, "its pod template".to_string())
    };
    let keys: Vec<String> = [
        rc::AUTO,
        rc::CONFIGMAP_AUTO,
        rc::SECRET_AUTO,
        rc::CONFIGMAP_RELOAD,
        rc::SECRET_RELOAD,
        rc::SEARCH,
    ]
    .iter()
    .filter_map(|k| annotations.get(*k).map(|v| format!("{k}: {v}")))
    .collect();
    let mut line = format!(
        "{} on {from}: rolled by the controller as reloadlet.io/action: rollout (--reloader-compat)",
        keys.join(", ")
    );
    let w = Workload {
        annotations: own,
        template,
    };
    if rc::wants_secrets(&w) {
        match secrets {
            Some(true) => {}
            Some(false) => line.push_str("; Secrets roll nothing: the controller runs without --secrets (Helm controller.secrets)"),
            None => line.push_str("; its Secret annotations need the controller's --secrets (Helm controller.secrets): without it no Secret change rolls it"),
        }
    }
    line
}

/// Reloader's `selectAnnotations`: the workload's own when it has a relevant key, else the
/// template's.
fn select<'a>(
    own: &'a BTreeMap<String, String>,
    template: &'a BTreeMap<String, String>,
) -> &'a BTreeMap<String, String> {
    if relevant(own) {
        own
    } else {
        template
    }
}

/// Any of Reloader's annotations that make a workload roll (`hasRelevantAnnotations`).
pub fn relevant(annotations: &BTreeMap<String, String>) -> bool {
    rc::WORKLOAD_KEYS
        .iter()
        .any(|k| annotations.contains_key(*k))
}

/// Whether the pod's spec reads `source` (a volume, a projected source, env or envFrom).
fn references(pod: &PodInfo, source: &SourceRef) -> bool {
    pod.volumes
        .iter()
        .filter(|v| v.name != NAMED_ONLY)
        .any(|v| v.sources.contains(source))
        || pod.env.iter().any(|e| &e.source == source)
}

/// A `…/reload` entry that is a plain object name (DNS-1123 characters), not a pattern.
fn plain_name(entry: &str) -> bool {
    !entry.is_empty()
        && entry
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

fn describe(w: &WorkloadRef) -> String {
    format!("{} {}/{}", w.kind.as_str(), w.namespace, w.name)
}

#[cfg(test)]
mod tests;
