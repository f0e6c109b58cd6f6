//! `apps/v1` Deployments, StatefulSets and DaemonSets stored and served like the other
//! objects (list/watch, whole or as `PartialObjectMetadata`, get, create, update, patch,
//! delete through [`super::objects`]), ReplicaSets served read-only, and what the
//! controllers share: where pods are scheduled, dependents of deleted workloads, and the
//! readiness log of a workload ([`ReadinessWatch`]).
//!
//! Registry strategies followed (kubernetes `pkg/registry/apps/{deployment,statefulset,
//! daemonset}/strategy.go`): a client write never sets `status` (`PrepareForUpdate` copies
//! the old status; create clears it); `metadata.generation` starts at 1 and is bumped when
//! the spec changes (for Deployments also when `metadata.annotations` change, "because
//! annotations are copied from deployments to their replica sets"). Defaults as
//! `pkg/apis/apps/v1/defaults.go`: `replicas` 1; Deployment strategy `RollingUpdate` with
//! `maxUnavailable`/`maxSurge` 25%; StatefulSet `updateStrategy` `RollingUpdate` with
//! `partition` 0 and `podManagementPolicy` `OrderedReady`; DaemonSet `updateStrategy`
//! `RollingUpdate` with `maxUnavailable` 1 and `maxSurge` 0; `revisionHistoryLimit` 10.
//! Validation (`pkg/apis/apps/validation`): the selector must be non-empty and match the
//! template's labels, else 422.

use super::model::{Key, ReplicaSetSim, Resource};
use super::objects::Stored;
use super::status::ApiStatus;
use super::store::State;
use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetUpdateStrategy, Deployment, DeploymentStrategy, ReplicaSet, ReplicaSetSpec,
    ReplicaSetStatus, RollingUpdateDaemonSet, RollingUpdateDeployment,
    RollingUpdateStatefulSetStrategy, StatefulSet, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;

/// The UID of the pod's `controller: true` owner.
pub(crate) fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

pub(crate) fn is_ready(pod: &Pod) -> bool {
    super::disruption::pod_is_ready(pod) && pod.metadata.deletion_timestamp.is_none()
}

impl State {
    /// Whether the pod belongs to the workload with this UID.
    pub(crate) fn pod_of_workload(&self, pod: &Pod, uid: &str) -> bool {
        let Some(owner) = controller_uid(&pod.metadata) else {
            return false;
        };
        owner == uid
            || self
                .replicasets
                .values()
                .any(|rs| rs.uid == owner && rs.owner.as_ref().is_some_and(|o| o.uid == uid))
    }

    /// The node for a new pod: the template's `nodeName`, else the server's node with the
    /// fewest pods among `siblings` (a stand-in for the scheduler's spreading).
    pub(crate) fn pick_node(&self, template_node: Option<&str>, siblings: &[&Pod]) -> String {
        if let Some(n) = template_node.filter(|n| !n.is_empty()) {
            return n.to_string();
        }
        self.workloads
            .nodes
            .iter()
            .min_by_key(|n| {
                siblings
                    .iter()
                    .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(n))
                    .count()
            })
            .cloned()
            .unwrap_or_else(|| "node-a".into())
    }

    /// A ReplicaSet of the emulation as the API serves it.
    pub(crate) fn replicaset_object(&self, rs: &ReplicaSetSim) -> ReplicaSet {
        let pods: Vec<&Pod> = self
            .pods
            .values()
            .filter(|p| rs.owns(p) && p.metadata.deletion_timestamp.is_none())
            .collect();
        let ready = i32::try_from(pods.iter().filter(|p| is_ready(p)).count()).unwrap_or(0);
        let replicas = i32::try_from(pods.len()).unwrap_or(0);
        let mut selector = rs
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        selector.retain(|k, _| rs.labels.is_empty() || rs.labels.contains_key(k));
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some(rs.name.clone()),
                namespace: Some(rs.namespace.clone()),
                uid: Some(rs.uid.clone()),
                labels: (!rs.labels.is_empty()).then(|| rs.labels.clone()),
                owner_references: rs.owner.clone().map(|o| vec![o]),
                resource_version: Some(rs.created_rv.to_string()),
                creation_timestamp: Some(Time(rs.created_at)),
                generation: Some(1),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(rs.replicas),
                selector: LabelSelector {
                    match_labels: Some(selector),
                    ..Default::default()
                },
                template: Some(rs.template.clone()),
                min_ready_seconds: None,
            }),
            status: Some(ReplicaSetStatus {
                replicas,
                ready_replicas: Some(ready),
                available_replicas: Some(ready),
                fully_labeled_replicas: Some(replicas),
                observed_generation: Some(1),
                ..Default::default()
            }),
        }
    }
}

// ---- registry strategies ----

fn invalid(kind: &str, name: &str, detail: &str) -> ApiStatus {
    ApiStatus::failure(
        422,
        "Invalid",
        format!("{kind}.apps \"{name}\" is invalid: {detail}"),
    )
}

/// `ValidateDeploymentSpec` & co.: a non-empty selector that selects the template.
pub(crate) fn validate_selector(
    kind: &str,
    meta: &ObjectMeta,
    selector: &LabelSelector,
    template: &PodTemplateSpec,
) -> Result<(), ApiStatus> {
    let name = meta.name.as_deref().unwrap_or_default();
    let want = selector.match_labels.clone().unwrap_or_default();
    if want.is_empty()
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
    {
        return Err(invalid(
            kind,
            name,
            "spec.selector: Invalid value: \"null\": empty selector is invalid for deployment",
        ));
    }
    let have = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    if want.iter().any(|(k, v)| have.get(k) != Some(v)) {
        return Err(invalid(
            kind,
            name,
            "spec.template.metadata.labels: Invalid value: `selector` does not match template `labels`",
        ));
    }
    Ok(())
}

fn bump_generation(meta: &mut ObjectMeta, old: &ObjectMeta, changed: bool) {
    let gen = old.generation.unwrap_or(1);
    meta.generation = Some(if changed { gen + 1 } else { gen });
}

fn pct(s: &str) -> Option<IntOrString> {
    Some(IntOrString::String(s.into()))
}

impl Stored for Deployment {
    const RESOURCE: Resource = Resource::Deployments;
    const ERROR_GROUP: &'static str = "apps";
    const CONTROLLED: bool = true;
    fn map(st: &State) -> &BTreeMap<Key, Self> {
        &st.workloads.deployments
    }
    fn validate(&self) -> Result<(), ApiStatus> {
        let spec = self.spec.clone().unwrap_or_default();
        validate_selector("Deployment", &self.metadata, &spec.selector, &spec.template)
    }
    fn map_mut(st: &mut State) -> &mut BTreeMap<Key, Self> {
        &mut st.workloads.deployments
    }
    fn prepare(old: Option<&Self>, new: &mut Self) {
        let spec = new.spec.get_or_insert_with(Default::default);
        spec.replicas.get_or_insert(1);
        spec.revision_history_limit.get_or_insert(10);
        spec.progress_deadline_seconds.get_or_insert(600);
        let strategy = spec
            .strategy
            .get_or_insert_with(DeploymentStrategy::default);
        let kind = strategy.type_.get_or_insert_with(|| "RollingUpdate".into());
        if kind == "RollingUpdate" {
            let ru = strategy
                .rolling_update
                .get_or_insert_with(RollingUpdateDeployment::default);
            if ru.max_surge.is_none() {
                ru.max_surge = pct("25%");
            }
            if ru.max_unavailable.is_none() {
                ru.max_unavailable = pct("25%");
            }
        }
        match old {
            Some(old) => {
                new.status = old.status.clone();
                let changed =
                    new.spec != old.spec || new.metadata.annotations != old.metadata.annotations;
                bump_generation(&mut new.metadata, &old.metadata, changed);
            }
            None => {
                // PrepareForCreate: no status, generation 1.
                new.status = None;
                new.metadata.generation = Some(1);
            }
        }
    }
}

impl Stored for StatefulSet {
    const RESOURCE: Resource = Resource::StatefulSets;
    const ERROR_GROUP: &'static str = "apps";
    const CONTROLLED: bool = true;
    fn map(st: &State) -> &BTreeMap<Key, Self> {
        &st.workloads.statefulsets
    }
    fn validate(&self) -> Result<(), ApiStatus> {
        let spec = self.spec.clone().unwrap_or_default();
        validate_selector(
            "StatefulSet",
            &self.metadata,
            &spec.selector,
            &spec.template,
        )
    }
    fn map_mut(st: &mut State) -> &mut BTreeMap<Key, Self> {
        &mut st.workloads.statefulsets
    }
    fn prepare(old: Option<&Self>, new: &mut Self) {
        let spec = new.spec.get_or_insert_with(Default::default);
        spec.replicas.get_or_insert(1);
        spec.revision_history_limit.get_or_insert(10);
        spec.pod_management_policy
            .get_or_insert_with(|| "OrderedReady".into());
        let strategy = spec
            .update_strategy
            .get_or_insert_with(StatefulSetUpdateStrategy::default);
        let kind = strategy.type_.get_or_insert_with(|| "RollingUpdate".into());
        if kind == "RollingUpdate" {
            strategy
                .rolling_update
                .get_or_insert_with(RollingUpdateStatefulSetStrategy::default)
                .partition
                .get_or_insert(0);
        }
        match old {
            Some(old) => {
                new.status = old.status.clone();
                bump_generation(&mut new.metadata, &old.metadata, new.spec != old.spec);
            }
            None => {
                // PrepareForCreate: no status, generation 1.
                new.status = None;
                new.metadata.generation = Some(1);
            }
        }
    }
}

impl Stored for DaemonSet {
    const RESOURCE: Resource = Resource::DaemonSets;
    const ERROR_GROUP: &'static str = "apps";
    const CONTROLLED: bool = true;
    fn map(st: &State) -> &BTreeMap<Key, Self> {
        &st.workloads.daemonsets
    }
    fn validate(&self) -> Result<(), ApiStatus> {
        let spec = self.spec.clone().unwrap_or_default();
        validate_selector("DaemonSet", &self.metadata, &spec.selector, &spec.template)
    }
    fn map_mut(st: &mut State) -> &mut BTreeMap<Key, Self> {
        &mut st.workloads.daemonsets
    }
    fn prepare(old: Option<&Self>, new: &mut Self) {
        let spec = new.spec.get_or_insert_with(Default::default);
        spec.revision_history_limit.get_or_insert(10);
        let strategy = spec
            .update_strategy
            .get_or_insert_with(DaemonSetUpdateStrategy::default);
        let kind = strategy.type_.get_or_insert_with(|| "RollingUpdate".into());
        if kind == "RollingUpdate" {
            let ru = strategy
                .rolling_update
                .get_or_insert_with(RollingUpdateDaemonSet::default);
            ru.max_unavailable.get_or_insert(IntOrString::Int(1));
            ru.max_surge.get_or_insert(IntOrString::Int(0));
        }
        match old {
            Some(old) => {
                new.status = old.status.clone();
                bump_generation(&mut new.metadata, &old.metadata, new.spec != old.spec);
            }
            None => {
                // PrepareForCreate: no status, generation 1.
                new.status = None;
                new.metadata.generation = Some(1);
            }
        }
    }
}

// ---- what the controllers share ----

/// `intstr.GetScaledValueFromIntOrPercent(v, total, roundUp)`; an unparsable percentage
/// (validation rejects it on the real server) counts as 0.
pub(crate) fn scaled(v: Option<&IntOrString>, total: i32, round_up: bool) -> i32 {
    match v {
        None => 0,
        Some(IntOrString::Int(i)) => *i,
        Some(IntOrString::String(s)) => {
            let pct: i64 = s
                .strip_suffix('%')
                .and_then(|p| p.trim().parse().ok())
                .unwrap_or(0);
            let x = pct * i64::from(total);
            let v = if round_up { (x + 99) / 100 } else { x / 100 };
            i32::try_from(v).unwrap_or(0)
        }
    }
}

/// `controller.ComputeHash` (pkg/controller/controller_utils.go): an FNV-32a hash of the
/// pod template, written with `rand.SafeEncodeString` over its decimal form (the simulator
/// hashes the template's JSON, not Go's `DeepHashObject` dump, so the values differ from a
/// real cluster's while keeping their shape and their stability).
pub(crate) fn template_hash(template: &PodTemplateSpec) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let text = serde_json::to_string(template).unwrap_or_default();
    let mut h: u32 = 0x811c_9dc5;
    for b in text.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h.to_string()
        .bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// An `ownerReference` with `controller: true`, as controllers set on what they create.
pub(crate) fn controller_ref(
    kind: &str,
    meta: &ObjectMeta,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// What a controller creates a pod from.
pub(crate) struct NewPod<'a> {
    pub namespace: &'a str,
    pub name: String,
    pub template: &'a PodTemplateSpec,
    pub extra_labels: BTreeMap<String, String>,
    pub owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    pub node: String,
}

impl State {
    /// Creates a controller's pod (Pending, bound to its node) without settling.
    pub(crate) fn spawn_pod(&mut self, new: NewPod<'_>) {
        let tmeta = new.template.metadata.clone().unwrap_or_default();
        let mut labels = tmeta.labels.unwrap_or_default();
        labels.extend(new.extra_labels);
        let mut spec = new.template.spec.clone().unwrap_or_default();
        spec.node_name = Some(new.node);
        let mut pod = Pod {
            metadata: ObjectMeta {
                name: Some(new.name),
                namespace: Some(new.namespace.to_string()),
                labels: Some(labels),
                annotations: tmeta.annotations,
                owner_references: Some(vec![new.owner]),
                ..Default::default()
            },
            spec: Some(spec),
            status: Some(k8s_openapi::api::core::v1::PodStatus {
                phase: Some("Pending".into()),
                ..Default::default()
            }),
        };
        self.stamp_new(&mut pod.metadata);
        crate::volumes::projection::inject_kube_api_access(&mut pod);
        self.commit_pod(pod);
    }

    /// Pods whose controller is `uid`, in name order.
    pub(crate) fn pods_controlled_by(&self, uid: &str) -> Vec<Pod> {
        self.pods
            .values()
            .filter(|p| controller_uid(&p.metadata) == Some(uid))
            .cloned()
            .collect()
    }

    /// The garbage collector (background propagation): ReplicaSets and pods whose
    /// controller was deleted are deleted (pods gracefully). Returns whether it did anything.
    pub(crate) fn collect_garbage(&mut self) -> bool {
        if self.workloads.deleted_owners.is_empty() {
            return false;
        }
        let owners = self.workloads.deleted_owners.clone();
        let gone_sets: Vec<Key> = self
            .replicasets
            .iter()
            .filter(|(_, rs)| rs.owner.as_ref().is_some_and(|o| owners.contains(&o.uid)))
            .map(|(k, _)| k.clone())
            .collect();
        let mut changed = false;
        for k in gone_sets {
            if let Some(rs) = self.replicasets.remove(&k) {
                self.workloads.deleted_owners.insert(rs.uid);
                changed = true;
            }
        }
        let owners = self.workloads.deleted_owners.clone();
        let doomed: Vec<Key> = self
            .pods
            .iter()
            .filter(|(_, p)| {
                p.metadata.deletion_timestamp.is_none()
                    && controller_uid(&p.metadata).is_some_and(|u| owners.contains(u))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in doomed {
            self.graceful_no_settle(&k, None);
            changed = true;
        }
        changed
    }

    /// Runs the workload controllers until nothing changes (a few passes at most), the
    /// ReplicaSet emulation after each, then writes their statuses.
    pub(crate) fn reconcile_workloads(&mut self) {
        for _ in 0..4 {
            let mut changed = self.collect_garbage();
            changed |= self.sync_deployments();
            changed |= self.sync_statefulsets();
            changed |= self.sync_daemonsets();
            changed |= self.sync_rollouts();
            self.reconcile_replicasets();
            if !changed {
                break;
            }
        }
        self.deployment_statuses();
    }
}
