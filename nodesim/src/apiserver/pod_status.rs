//! `PATCH /api/v1/namespaces/{ns}/pods/{name}/status`: the `pods/status` subresource, as
//! the API server's `podStatusStrategy` treats it (pkg/registry/core/pod/strategy.go,
//! `PrepareForUpdate`): the spec, `ownerReferences` and `deletionTimestamp` stay as they are;
//! the status is patched. A strategic merge patch merges `status.conditions` by `type`
//! (`patchMergeKey:"type" patchStrategy:"merge"` on `PodStatus.Conditions`, k8s.io/api
//! core/v1 types.go); a JSON merge patch (RFC 7386) replaces the list. A `metadata.uid` in
//! the patch that is not the pod's is a precondition failure (409), as a `resourceVersion`
//! that is not the current one is (optimistic concurrency, as for any update).

use super::events::merge_patch;
use super::objects::{conflict, PatchType};
use super::status::ApiStatus;
use super::store::{Key, State};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

/// Strategic merge of `status.conditions` by `type` in `target` with `patch`'s list; the
/// rest of `patch` merged as RFC 7386. A condition `{"type": t, "$patch": "delete"}` removes
/// it.
pub(crate) fn strategic_status(target: &mut Value, patch: &Value) {
    let mut patch = patch.clone();
    let conditions = patch
        .get_mut("status")
        .and_then(|s| s.as_object_mut())
        .and_then(|s| s.remove("conditions"));
    merge_patch(target, &patch);
    let Some(Value::Array(changes)) = conditions else {
        return;
    };
    let status = target.as_object_mut().map(|t| {
        t.entry("status")
            .or_insert_with(|| Value::Object(Default::default()))
    });
    let Some(Value::Object(status)) = status else {
        return;
    };
    let list = status
        .entry("conditions")
        .or_insert_with(|| Value::Array(vec![]));
    if !list.is_array() {
        *list = Value::Array(vec![]);
    }
    let Value::Array(list) = list else { return };
    for change in changes {
        let Some(t) = change.get("type").and_then(Value::as_str) else {
            continue;
        };
        let at = list
            .iter()
            .position(|c| c.get("type").and_then(Value::as_str) == Some(t));
        if change.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(i) = at {
                list.remove(i);
            }
            continue;
        }
        match at {
            Some(i) => merge_patch(&mut list[i], &change),
            None => list.push(change),
        }
    }
}

impl State {
    pub(crate) fn patch_pod_status(
        &mut self,
        key: &Key,
        how: PatchType,
        body: &[u8],
        dry_run: bool,
    ) -> Result<Pod, ApiStatus> {
        let patch: Value = serde_json::from_slice(body)
            .map_err(|e| ApiStatus::bad_request(format!("error decoding patch: {e}")))?;
        let Some(current) = self.pods.get(key).cloned() else {
            return Err(ApiStatus::not_found("", "pods", &key.1));
        };
        // another UID: 422, metadata.uid being immutable (`super::objects::uid_unchanged`)
        if let Some(uid) = patch.pointer("/metadata/uid").and_then(Value::as_str) {
            let named = ObjectMeta {
                uid: Some(uid.to_owned()),
                ..ObjectMeta::default()
            };
            super::objects::uid_unchanged("Pod", &key.1, &named, &current.metadata)?;
        }
        // optimistic concurrency, as for any update
        if let Some(rv) = patch
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
        {
            if Some(rv) != current.metadata.resource_version.as_deref() {
                return Err(conflict("", "pods", &key.1));
            }
        }
        let mut merged = serde_json::to_value(&current).unwrap_or(Value::Null);
        match how {
            PatchType::Strategic => strategic_status(&mut merged, &patch),
            PatchType::Merge => merge_patch(&mut merged, &patch),
            PatchType::Apply => {
                return Err(ApiStatus::failure(
                    415,
                    "UnsupportedMediaType",
                    "the simulator does not server-side apply pods/status",
                ))
            }
        }
        let mut pod: Pod = serde_json::from_value(merged).map_err(|e| {
            ApiStatus::failure(422, "Invalid", format!("invalid patch result: {e}"))
        })?;
        // podStatusStrategy.PrepareForUpdate
        pod.spec = current.spec.clone();
        pod.metadata.owner_references = current.metadata.owner_references.clone();
        pod.metadata.deletion_timestamp = current.metadata.deletion_timestamp.clone();
        pod.metadata.uid = current.metadata.uid.clone();
        pod.metadata.name = current.metadata.name.clone();
        pod.metadata.namespace = current.metadata.namespace.clone();
        pod.metadata.resource_version = current.metadata.resource_version.clone();
        if pod == current || dry_run {
            return Ok(pod);
        }
        let pod = self.commit_pod(pod);
        self.settle();
        Ok(self.pods.get(key).cloned().unwrap_or(pod))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conditions_merge_by_type_and_the_rest_as_a_merge_patch() {
        let mut pod = json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "x/gate", "status": "True", "reason": "A"},
        ]}});
        strategic_status(
            &mut pod,
            &json!({"status": {"conditions": [
                {"type": "x/gate", "status": "False"},
                {"type": "y/new", "status": "True"},
            ]}}),
        );
        assert_eq!(
            pod,
            json!({"status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "x/gate", "status": "False", "reason": "A"},
                {"type": "y/new", "status": "True"},
            ]}})
        );
        strategic_status(
            &mut pod,
            &json!({"status": {"conditions": [{"type": "y/new", "$patch": "delete"}]}}),
        );
        assert_eq!(pod["status"]["conditions"].as_array().unwrap().len(), 2);
        let mut bare = json!({"metadata": {"name": "p"}});
        strategic_status(
            &mut bare,
            &json!({"status": {"conditions": [{"type": "g", "status": "True"}]}}),
        );
        assert_eq!(bare["status"]["conditions"][0]["type"], "g");
    }
}
