//! Writes of ConfigMaps, Secrets, Leases and pods as the real API server does them, shared
//! by the HTTP handlers and the in-process helpers (`ApiServer::apply_configmap` …), so a
//! test's "kubectl apply" and a client's request take the same path:
//!
//! - create answers 409 AlreadyExists for an existing name;
//! - update (PUT) and patch with a `metadata.resourceVersion` that is not the current one
//!   answer 409 Conflict (registry `Store.Update`: "the object has been modified; please
//!   apply your changes to the latest version and try again"); without one they are
//!   unconditional (ConfigMaps, Secrets, Leases and pods all `AllowUnconditionalUpdate`);
//! - a write that changes nothing is a no-op: no new resourceVersion, no watch event
//!   (apiserver `storage/etcd3/store.go` `GuaranteedUpdate`: when the new encoding equals
//!   the stored one, it returns the stored object without writing to etcd).

use super::events::merge_patch;
use super::managed_fields::{self, Operation, Writer};
use super::model::ApiChange;
use super::status::ApiStatus;
use super::store::{
    key_of, random_suffix, ChangeKind, Key, ObjEvent, Recorded, Resource, State, WatchSignal,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// The `Content-Type` of a PATCH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PatchType {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`: applied as a merge patch, which is what
    /// it is for metadata maps and scalar fields (the simulator has no list merge keys).
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply; JSON is YAML): merged, with
    /// field ownership per leaf and conflicts (see [`State::check_apply`]).
    Apply,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let ct = ct.split(';').next().unwrap_or_default().trim();
        match ct {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" => Some(PatchType::Apply),
            _ => None,
        }
    }
}

/// A resource the server stores whole and writes through this module.
pub(crate) trait Stored:
    k8s_openapi::Resource
    + k8s_openapi::Metadata<Ty = ObjectMeta>
    + Serialize
    + DeserializeOwned
    + Clone
    + PartialEq
{
    const RESOURCE: Resource;
    /// The API group of error details ("" for the core group).
    const ERROR_GROUP: &'static str;
    fn map(st: &State) -> &BTreeMap<Key, Self>;
    fn map_mut(st: &mut State) -> &mut BTreeMap<Key, Self>;
    /// What the simulated kubelet is told.
    fn change(_key: &Key) -> Option<ApiChange> {
        None
    }
    /// A controller acts on it: every client write is followed by `State::settle`.
    const CONTROLLED: bool = false;
    /// The registry strategy of a client write (`PrepareForCreate` / `PrepareForUpdate` and
    /// defaulting): `old` is the stored object of an update. Controllers' own writes skip it.
    fn prepare(_old: Option<&Self>, _new: &mut Self) {}
    /// Keeps `metadata.managedFields` ([`super::managed_fields`]).
    const MANAGED_FIELDS: bool = false;
    /// The registry's validation of a client write (422 when invalid).
    fn validate(&self) -> Result<(), ApiStatus> {
        Ok(())
    }
}

impl Stored for ConfigMap {
    const RESOURCE: Resource = Resource::ConfigMaps;
    const ERROR_GROUP: &'static str = "";
    const MANAGED_FIELDS: bool = true;
    fn map(st: &State) -> &BTreeMap<Key, Self> {
        &st.configmaps
    }
    fn map_mut(st: &mut State) -> &mut BTreeMap<Key, Self> {
        &mut st.configmaps
    }
    fn change(key: &Key) -> Option<ApiChange> {
        Some(ApiChange::ConfigMapChanged {
            namespace: key.0.clone(),
            name: key.1.clone(),
        })
    }
}

impl Stored for Secret {
    const RESOURCE: Resource = Resource::Secrets;
    const ERROR_GROUP: &'static str = "";
    const MANAGED_FIELDS: bool = true;
    fn map(st: &State) -> &BTreeMap<Key, Self> {
        &st.secrets
    }
    fn map_mut(st: &mut State) -> &mut BTreeMap<Key, Self> {
        &mut st.secrets
    }
    fn change(key: &Key) -> Option<ApiChange> {
        Some(ApiChange::SecretChanged {
            namespace: key.0.clone(),
            name: key.1.clone(),
        })
    }
}

impl Stored for Lease {
    const RESOURCE: Resource = Resource::Leases;
    const ERROR_GROUP: &'static str = "coordination.k8s.io";
    fn map(st: &State) -> &BTreeMap<Key, Self> {
        &st.leases
    }
    fn map_mut(st: &mut State) -> &mut BTreeMap<Key, Self> {
        &mut st.leases
    }
}

fn to_value<T: Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

/// An update that names another UID than the stored object's: `rest.BeforeUpdate`
/// (apiserver `pkg/registry/rest/update.go`) keeps the old UID only when none is given, then
/// validates the common fields with `ValidateObjectMetaUpdate` (apimachinery
/// `pkg/api/validation/objectmeta.go`: `ValidateImmutableField(newMeta.GetUID(),
/// oldMeta.GetUID(), …)`), so a PUT or PATCH carrying another UID is 422 Invalid, `field is
/// immutable`. A client's UID in a merge patch therefore works as a precondition.
pub(crate) fn uid_unchanged(
    kind: &str,
    name: &str,
    new: &ObjectMeta,
    old: &ObjectMeta,
) -> Result<(), ApiStatus> {
    match new.uid.as_deref() {
        Some(uid) if new.uid != old.uid => {
            let mut s = ApiStatus::failure(
                422,
                "Invalid",
                format!(
                    "{kind} \"{name}\" is invalid: metadata.uid: Invalid value: \"{uid}\": field is immutable"
                ),
            );
            s.body["details"] = serde_json::json!({
                "name": name,
                "kind": kind.to_ascii_lowercase() + "s",
                "causes": [{"reason": "FieldValueInvalid", "message": format!("Invalid value: \"{uid}\": field is immutable"), "field": "metadata.uid"}]
            });
            Err(s)
        }
        _ => Ok(()),
    }
}

/// `errors.NewConflict(…, OptimisticLockErrorMsg)`.
pub(crate) fn conflict(group: &str, resource: &str, name: &str) -> ApiStatus {
    let qualified = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    let mut s = ApiStatus::failure(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {qualified} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
        ),
    );
    s.body["details"] = serde_json::json!({"name": name, "group": group, "kind": resource});
    s
}

/// Leaf paths of a patch (`spec.holderIdentity`, `metadata.annotations.a`), without
/// `apiVersion`, `kind`, `metadata.name/namespace/resourceVersion`.
fn leaves(v: &Value, prefix: &str, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                if matches!(
                    path.as_str(),
                    "apiVersion"
                        | "kind"
                        | "metadata.name"
                        | "metadata.namespace"
                        | "metadata.resourceVersion"
                ) {
                    continue;
                }
                leaves(x, &path, out);
            }
        }
        other => out.push((prefix.to_string(), other.clone())),
    }
}

fn lookup<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

/// The field manager of `kubectl apply` (client-side), which the in-process helpers write as.
pub(crate) const KUBECTL_APPLY: &str = "kubectl-client-side-apply";

/// Sets `new`'s managedFields for a client's write over `old` (ConfigMaps and Secrets).
fn track_fields<T: Stored>(old: Option<&T>, new: &mut T, writer: Option<&Writer<'_>>) {
    let Some(writer) = writer.filter(|_| T::MANAGED_FIELDS) else {
        return;
    };
    let fields = managed_fields::track(old.map(to_value).as_ref(), &to_value(&*new), writer);
    new.metadata_mut().managed_fields = (!fields.is_empty()).then_some(fields);
}

fn resource_version(meta: &ObjectMeta) -> Option<u64> {
    meta.resource_version
        .as_deref()
        .filter(|r| !r.is_empty())
        .and_then(|r| r.parse().ok())
}

impl State {
    /// Every stored object of a ConfigMap/Secret/Lease resource, as JSON.
    pub fn object_values(&self, resource: Resource) -> Vec<Value> {
        match resource {
            Resource::Pods => self.pods.values().map(to_value).collect(),
            Resource::ConfigMaps => self.configmaps.values().map(to_value).collect(),
            Resource::Secrets => self.secrets.values().map(to_value).collect(),
            Resource::Leases => self.leases.values().map(to_value).collect(),
            Resource::Deployments => self.workloads.deployments.values().map(to_value).collect(),
            Resource::StatefulSets => self.workloads.statefulsets.values().map(to_value).collect(),
            Resource::DaemonSets => self.workloads.daemonsets.values().map(to_value).collect(),
            Resource::Rollouts => self.workloads.rollouts.values().map(to_value).collect(),
            Resource::ReplicaSets => self
                .replicasets
                .values()
                .map(|rs| to_value(&self.replicaset_object(rs)))
                .collect(),
        }
    }

    /// Retains and broadcasts a change, and tells the kubelet.
    fn record_object<T: Stored>(&mut self, key: &Key, kind: ChangeKind, old: Option<&T>, new: &T) {
        let rv = self.rv;
        let ev = ObjEvent {
            rv,
            kind,
            resource: T::RESOURCE,
            old: old.map(to_value),
            new: to_value(new),
        };
        self.retain(Recorded::Object(ev.clone()));
        let _ = self
            .journal
            .watch_tx
            .send(WatchSignal::Object(Box::new(ev)));
        if let Some(change) = T::change(key) {
            let _ = self.journal.change_tx.send(change);
        }
    }

    /// Stores `new` over `old` (same key) unless nothing changed; stamps a new
    /// resourceVersion and emits MODIFIED (or ADDED) when it did.
    fn commit_object<T: Stored>(&mut self, key: &Key, new: T, writer: &Writer<'_>) -> T {
        let out = self.commit_object_as(key, new, Some(writer));
        if T::CONTROLLED {
            self.settle();
        }
        out
    }

    /// A controller's write (status, scale): no client strategy, no settling.
    pub(crate) fn commit_by_controller<T: Stored>(&mut self, key: &Key, new: T) -> T {
        self.commit_object_as(key, new, None)
    }

    /// `writer`: a client's write (`None`: a controller's).
    fn commit_object_as<T: Stored>(
        &mut self,
        key: &Key,
        mut new: T,
        writer: Option<&Writer<'_>>,
    ) -> T {
        let client = writer.is_some();
        let old = T::map(self).get(key).cloned();
        if let Some(old) = &old {
            let meta = new.metadata_mut();
            meta.uid = old.metadata().uid.clone();
            meta.creation_timestamp = old.metadata().creation_timestamp.clone();
            meta.namespace = old.metadata().namespace.clone();
            meta.resource_version = old.metadata().resource_version.clone();
            meta.generation = old.metadata().generation;
            if client {
                T::prepare(Some(old), &mut new);
            }
            track_fields(Some(old), &mut new, writer);
            // GuaranteedUpdate: an unchanged object is not written.
            if &new == old {
                return new;
            }
            let rv = self.next_rv();
            new.metadata_mut().resource_version = Some(rv.to_string());
            T::map_mut(self).insert(key.clone(), new.clone());
            self.record_object(key, ChangeKind::Modified, Some(old), &new);
        } else {
            new.metadata_mut().namespace = Some(key.0.clone());
            if client {
                T::prepare(None, &mut new);
            }
            track_fields(None, &mut new, writer);
            self.stamp_new(new.metadata_mut());
            T::map_mut(self).insert(key.clone(), new.clone());
            self.record_object::<T>(key, ChangeKind::Added, None, &new);
        }
        new
    }

    /// `kubectl apply`-like, for tests and the kubelet: creates or replaces, no
    /// preconditions (a resourceVersion in `obj` is ignored). Its field manager is kubectl's
    /// client-side apply's.
    pub fn apply_object<T: Stored>(&mut self, mut obj: T) -> T {
        obj.metadata_mut().resource_version = None;
        let key = key_of(obj.metadata());
        self.commit_object(&key, obj, &Writer::update(KUBECTL_APPLY))
    }

    /// POST: 409 AlreadyExists when the name is taken.
    pub fn create_object<T: Stored>(
        &mut self,
        namespace: &str,
        mut obj: T,
        writer: &Writer<'_>,
    ) -> Result<T, ApiStatus> {
        obj.metadata_mut().namespace = Some(namespace.to_string());
        if obj
            .metadata()
            .name
            .as_deref()
            .unwrap_or_default()
            .is_empty()
            && obj.metadata().generate_name.is_none()
        {
            return Err(ApiStatus::failure(
                422,
                "Invalid",
                format!("{} \"\" is invalid: metadata.name: Required value: name or generateName is required", T::KIND),
            ));
        }
        if obj
            .metadata()
            .name
            .as_deref()
            .unwrap_or_default()
            .is_empty()
        {
            let prefix = obj.metadata().generate_name.clone().unwrap_or_default();
            obj.metadata_mut().name = Some(format!("{prefix}{}", random_suffix(5)));
        }
        let key = key_of(obj.metadata());
        if T::map(self).contains_key(&key) {
            return Err(ApiStatus::already_exists(
                T::ERROR_GROUP,
                T::URL_PATH_SEGMENT,
                &key.1,
            ));
        }
        obj.metadata_mut().resource_version = None;
        obj.metadata_mut().uid = None;
        obj.validate()?;
        Ok(self.commit_object(&key, obj, writer))
    }

    /// PUT: 404 when missing, 409 Conflict on a stale resourceVersion.
    pub fn update_object<T: Stored>(
        &mut self,
        key: &Key,
        obj: T,
        writer: &Writer<'_>,
    ) -> Result<T, ApiStatus> {
        let Some(current) = T::map(self).get(key) else {
            return Err(ApiStatus::not_found(
                T::ERROR_GROUP,
                T::URL_PATH_SEGMENT,
                &key.1,
            ));
        };
        if obj.metadata().name.as_deref() != Some(key.1.as_str()) {
            return Err(ApiStatus::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        if let Some(rv) = resource_version(obj.metadata()) {
            if Some(rv) != resource_version(current.metadata()) {
                return Err(conflict(T::ERROR_GROUP, T::URL_PATH_SEGMENT, &key.1));
            }
        }
        uid_unchanged(T::KIND, &key.1, obj.metadata(), current.metadata())?;
        let before = to_value(current);
        obj.validate()?;
        let out = self.commit_object(key, obj, writer);
        self.own_changes(T::RESOURCE, key, &before, &to_value(&out), "");
        Ok(out)
    }

    /// PATCH.
    pub fn patch_object<T: Stored>(
        &mut self,
        key: &Key,
        how: PatchType,
        body: &[u8],
        field_manager: &str,
        force: bool,
    ) -> Result<T, ApiStatus> {
        let patch: Value = serde_json::from_slice(body)
            .map_err(|e| ApiStatus::bad_request(format!("error decoding patch: {e}")))?;
        let current = match T::map(self).get(key) {
            Some(c) => c.clone(),
            // Server-side apply creates what does not exist.
            None if how == PatchType::Apply => {
                let mut obj: T = serde_json::from_value(patch.clone())
                    .map_err(|e| ApiStatus::bad_request(format!("invalid object: {e}")))?;
                obj.metadata_mut().name = Some(key.1.clone());
                let writer = Writer {
                    manager: field_manager.to_owned(),
                    operation: Operation::Apply(&patch),
                };
                let out = self.create_object(&key.0, obj, &writer)?;
                self.own_applied(T::RESOURCE, key, &patch, field_manager);
                return Ok(out);
            }
            None => {
                return Err(ApiStatus::not_found(
                    T::ERROR_GROUP,
                    T::URL_PATH_SEGMENT,
                    &key.1,
                ))
            }
        };
        let before = to_value(&current);
        if how == PatchType::Apply && !force {
            self.check_apply(T::RESOURCE, key, &before, &patch, field_manager)?;
        }
        let mut merged = before.clone();
        merge_patch(&mut merged, &patch);
        let obj: T = serde_json::from_value(merged).map_err(|e| {
            ApiStatus::failure(422, "Invalid", format!("invalid patch result: {e}"))
        })?;
        if resource_version(obj.metadata()) != resource_version(current.metadata()) {
            return Err(conflict(T::ERROR_GROUP, T::URL_PATH_SEGMENT, &key.1));
        }
        uid_unchanged(T::KIND, &key.1, obj.metadata(), current.metadata())?;
        obj.validate()?;
        let writer = Writer {
            manager: field_manager.to_owned(),
            operation: match how {
                PatchType::Apply => Operation::Apply(&patch),
                PatchType::Merge | PatchType::Strategic => Operation::Update,
            },
        };
        let out = self.commit_object(key, obj, &writer);
        if how == PatchType::Apply {
            self.own_applied(T::RESOURCE, key, &patch, field_manager);
        } else {
            self.own_changes(T::RESOURCE, key, &before, &to_value(&out), field_manager);
        }
        Ok(out)
    }

    /// DELETE.
    pub fn delete_object<T: Stored>(&mut self, key: &Key) -> Result<T, ApiStatus> {
        let Some(mut gone) = T::map_mut(self).remove(key) else {
            return Err(ApiStatus::not_found(
                T::ERROR_GROUP,
                T::URL_PATH_SEGMENT,
                &key.1,
            ));
        };
        self.managers.remove(&(T::RESOURCE, key.clone()));
        let rv = self.next_rv();
        gone.metadata_mut().resource_version = Some(rv.to_string());
        self.record_object(key, ChangeKind::Deleted, None, &gone);
        if T::CONTROLLED {
            // The garbage collector deletes its dependents (background propagation).
            if let Some(uid) = gone.metadata().uid.clone() {
                self.workloads.deleted_owners.insert(uid);
            }
            self.settle();
        }
        Ok(gone)
    }

    /// Server-side apply without `force`: a field another manager owns may only be
    /// "applied" with the value it already has (structured-merge-diff conflicts; apiserver
    /// answers 409 Conflict listing the conflicting fields and their manager).
    fn check_apply(
        &self,
        resource: Resource,
        key: &Key,
        current: &Value,
        patch: &Value,
        manager: &str,
    ) -> Result<(), ApiStatus> {
        let Some(owners) = self.managers.get(&(resource, key.clone())) else {
            return Ok(());
        };
        let mut out = Vec::new();
        leaves(patch, "", &mut out);
        let conflicts: Vec<String> = out
            .iter()
            .filter(|(path, value)| {
                owners.get(path).is_some_and(|m| m != manager)
                    && lookup(current, path) != Some(value)
            })
            .map(|(path, _)| format!("conflict with \"{}\": .{path}", owners[path]))
            .collect();
        if conflicts.is_empty() {
            return Ok(());
        }
        let (kind, _) = super::render::kind_of(resource);
        let mut s = ApiStatus::failure(
            409,
            "Conflict",
            format!(
                "Apply failed with {} conflict{}: {}",
                conflicts.len(),
                if conflicts.len() == 1 { "" } else { "s" },
                conflicts.join(", ")
            ),
        );
        s.body["details"] = serde_json::json!({"name": key.1, "kind": kind.to_lowercase()});
        Err(s)
    }

    fn own_applied(&mut self, resource: Resource, key: &Key, patch: &Value, manager: &str) {
        let mut out = Vec::new();
        leaves(patch, "", &mut out);
        let owners = self.managers.entry((resource, key.clone())).or_default();
        for (path, v) in out {
            if v.is_null() {
                owners.remove(&path);
            } else {
                owners.insert(path, manager.to_string());
            }
        }
    }

    /// An update (PUT, merge or strategic patch) takes ownership of what it changed and
    /// drops ownership of what it removed.
    fn own_changes(
        &mut self,
        resource: Resource,
        key: &Key,
        before: &Value,
        after: &Value,
        manager: &str,
    ) {
        let (mut b, mut a) = (Vec::new(), Vec::new());
        leaves(before, "", &mut b);
        leaves(after, "", &mut a);
        let a: BTreeMap<String, Value> = a.into_iter().collect();
        let b: BTreeMap<String, Value> = b.into_iter().collect();
        let owners = self.managers.entry((resource, key.clone())).or_default();
        for path in b.keys().filter(|p| !a.contains_key(*p)) {
            owners.remove(path);
        }
        for (path, v) in &a {
            if path.starts_with("metadata.")
                && !path.starts_with("metadata.labels")
                && !path.starts_with("metadata.annotations")
            {
                continue;
            }
            if b.get(path) != Some(v) {
                owners.insert(
                    path.clone(),
                    if manager.is_empty() {
                        "unknown".into()
                    } else {
                        manager.to_string()
                    },
                );
            }
        }
    }

    /// PATCH of a pod's main resource: metadata and spec (the pod strategy keeps the
    /// status of the main resource); a patch that changes nothing is a no-op.
    pub fn patch_pod(&mut self, key: &Key, how: PatchType, body: &[u8]) -> Result<Pod, ApiStatus> {
        self.patch_pod_as(key, how, body, false)
    }

    /// [`Self::patch_pod`]; `dry_run` (`dryRun=All`): answered as the patch would leave the
    /// pod, nothing stored.
    pub fn patch_pod_as(
        &mut self,
        key: &Key,
        how: PatchType,
        body: &[u8],
        dry_run: bool,
    ) -> Result<Pod, ApiStatus> {
        let patch: Value = serde_json::from_slice(body)
            .map_err(|e| ApiStatus::bad_request(format!("error decoding patch: {e}")))?;
        if how == PatchType::Apply {
            return Err(ApiStatus::failure(
                415,
                "UnsupportedMediaType",
                "the simulator does not server-side apply pods",
            ));
        }
        let Some(current) = self.pods.get(key).cloned() else {
            return Err(ApiStatus::not_found("", "pods", &key.1));
        };
        let mut merged = to_value(&current);
        merge_patch(&mut merged, &patch);
        let mut pod: Pod = serde_json::from_value(merged).map_err(|e| {
            ApiStatus::failure(422, "Invalid", format!("invalid patch result: {e}"))
        })?;
        if resource_version(&pod.metadata) != resource_version(&current.metadata) {
            return Err(conflict("", "pods", &key.1));
        }
        uid_unchanged("Pod", &key.1, &pod.metadata, &current.metadata)?;
        pod.status = current.status.clone();
        pod.metadata.uid = current.metadata.uid.clone();
        pod.metadata.namespace = current.metadata.namespace.clone();
        pod.metadata.name = current.metadata.name.clone();
        pod.metadata.creation_timestamp = current.metadata.creation_timestamp.clone();
        pod.metadata.deletion_timestamp = current.metadata.deletion_timestamp.clone();
        pod.metadata.deletion_grace_period_seconds = current.metadata.deletion_grace_period_seconds;
        pod.metadata.generation = current.metadata.generation;
        // GuaranteedUpdate: nothing changed, nothing written.
        if pod == current {
            return Ok(current);
        }
        if pod.spec != current.spec {
            pod.metadata.generation = Some(current.metadata.generation.unwrap_or(1) + 1);
        }
        if dry_run {
            return Ok(pod);
        }
        let pod = self.commit_pod(pod);
        self.settle();
        Ok(self.pods.get(key).cloned().unwrap_or(pod))
    }
}
