//! Events of both APIs (`events.k8s.io/v1` and core `v1`): create, merge-patch, list.

use super::records::RecordedEvent;
use super::status::ApiStatus;
use super::store::{Key, State};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event as EventsV1Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// Which events API a request addressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventApi {
    /// `events.k8s.io/v1`
    EventsV1,
    /// core `v1`
    Core,
}

impl EventApi {
    fn group(self) -> &'static str {
        match self {
            Self::EventsV1 => "events.k8s.io",
            Self::Core => "",
        }
    }
    /// `apiVersion` of the list.
    pub fn api_version(self) -> &'static str {
        match self {
            Self::EventsV1 => "events.k8s.io/v1",
            Self::Core => "v1",
        }
    }
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    if let Value::Object(t) = target {
        for (k, v) in patch_map {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

fn decode<T: DeserializeOwned>(v: Value) -> Result<T, ApiStatus> {
    serde_json::from_value(v).map_err(|e| ApiStatus::bad_request(format!("invalid Event: {e}")))
}

fn encode<T: Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

fn meta_mut(v: &mut Value) -> Option<&mut serde_json::Map<String, Value>> {
    v.get_mut("metadata").and_then(Value::as_object_mut)
}

impl State {
    fn event_value(&self, api: EventApi, key: &Key) -> Option<Value> {
        match api {
            EventApi::EventsV1 => self.events.v1.get(key).map(encode),
            EventApi::Core => self.events.core.get(key).map(encode),
        }
    }

    fn store_event(&mut self, api: EventApi, key: Key, v: Value) -> Result<Value, ApiStatus> {
        match api {
            EventApi::EventsV1 => {
                let e: EventsV1Event = decode(v)?;
                let out = encode(&e);
                self.events.v1.insert(key, e);
                Ok(out)
            }
            EventApi::Core => {
                let e: CoreEvent = decode(v)?;
                let out = encode(&e);
                self.events.core.insert(key, e);
                Ok(out)
            }
        }
    }

    /// `POST .../events`: 201 with the stored object.
    pub fn create_event(
        &mut self,
        api: EventApi,
        namespace: &str,
        body: &[u8],
    ) -> Result<Value, ApiStatus> {
        let mut v: Value = serde_json::from_slice(body)
            .map_err(|e| ApiStatus::bad_request(format!("invalid Event body: {e}")))?;
        let mut meta: ObjectMeta =
            decode(v.get("metadata").cloned().unwrap_or(Value::Null)).unwrap_or_default();
        if meta.namespace.as_deref().is_some_and(|n| n != namespace) {
            return Err(ApiStatus::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        meta.namespace = Some(namespace.to_string());
        if meta.name.as_deref().unwrap_or_default().is_empty() && meta.generate_name.is_none() {
            return Err(ApiStatus::failure(
                422,
                "Invalid",
                "Event.events.k8s.io \"\" is invalid: metadata.name: Required value: name or generateName is required",
            ));
        }
        if let Some(name) = meta.name.as_ref().filter(|n| !n.is_empty()) {
            if self
                .event_value(api, &(namespace.to_string(), name.clone()))
                .is_some()
            {
                return Err(ApiStatus::already_exists(api.group(), "events", name));
            }
        }
        self.stamp_new(&mut meta);
        let key: Key = (namespace.to_string(), meta.name.clone().unwrap_or_default());
        v["metadata"] = encode(&meta);
        self.store_event(api, key, v)
    }

    /// `PATCH .../events/{name}` (merge or strategic merge, both applied as merge patch).
    pub fn patch_event(
        &mut self,
        api: EventApi,
        key: &Key,
        body: &[u8],
    ) -> Result<Value, ApiStatus> {
        let patch: Value = serde_json::from_slice(body)
            .map_err(|e| ApiStatus::bad_request(format!("invalid patch: {e}")))?;
        let Some(mut current) = self.event_value(api, key) else {
            return Err(ApiStatus::not_found(api.group(), "events", &key.1));
        };
        let fixed = current.get("metadata").cloned();
        merge_patch(&mut current, &patch);
        let rv = self.next_rv();
        if let (Some(m), Some(Value::Object(old))) = (meta_mut(&mut current), fixed) {
            for f in ["name", "namespace", "uid", "creationTimestamp"] {
                if let Some(v) = old.get(f) {
                    m.insert(f.to_string(), v.clone());
                }
            }
            m.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        self.store_event(api, key.clone(), current)
    }

    /// Events of one namespace as a list body.
    pub fn list_events(&self, api: EventApi, namespace: &str) -> Value {
        let items: Vec<Value> = match api {
            EventApi::EventsV1 => self
                .events
                .v1
                .iter()
                .filter(|(k, _)| k.0 == namespace)
                .map(|(_, e)| encode(e))
                .collect(),
            EventApi::Core => self
                .events
                .core
                .iter()
                .filter(|(k, _)| k.0 == namespace)
                .map(|(_, e)| encode(e))
                .collect(),
        };
        serde_json::json!({
            "kind": "EventList",
            "apiVersion": api.api_version(),
            "metadata": {"resourceVersion": self.rv.to_string()},
            "items": items,
        })
    }

    /// All events of both APIs, as a user would read them.
    pub fn recorded_events(&self) -> Vec<RecordedEvent> {
        let mut out: Vec<RecordedEvent> = self
            .events
            .v1
            .iter()
            .map(|((ns, name), e)| {
                let r = e.regarding.clone().unwrap_or_default();
                RecordedEvent {
                    namespace: ns.clone(),
                    name: name.clone(),
                    regarding_kind: r.kind.unwrap_or_default(),
                    regarding_name: r.name.unwrap_or_default(),
                    regarding_uid: r.uid.unwrap_or_default(),
                    type_: e.type_.clone().unwrap_or_default(),
                    reason: e.reason.clone().unwrap_or_default(),
                    note: e.note.clone().unwrap_or_default(),
                    count: e
                        .series
                        .as_ref()
                        .map(|s| s.count)
                        .or(e.deprecated_count)
                        .unwrap_or(1),
                    api: "events.k8s.io/v1".into(),
                    reporting_controller: e.reporting_controller.clone().unwrap_or_default(),
                }
            })
            .collect();
        out.extend(self.events.core.iter().map(|((ns, name), e)| {
            let r = e.involved_object.clone();
            RecordedEvent {
                namespace: ns.clone(),
                name: name.clone(),
                regarding_kind: r.kind.unwrap_or_default(),
                regarding_name: r.name.unwrap_or_default(),
                regarding_uid: r.uid.unwrap_or_default(),
                type_: e.type_.clone().unwrap_or_default(),
                reason: e.reason.clone().unwrap_or_default(),
                note: e.message.clone().unwrap_or_default(),
                count: e
                    .series
                    .as_ref()
                    .and_then(|s| s.count)
                    .or(e.count)
                    .unwrap_or(1),
                api: "v1".into(),
                reporting_controller: e
                    .reporting_component
                    .clone()
                    .filter(|c| !c.is_empty())
                    .or_else(|| e.source.as_ref().and_then(|s| s.component.clone()))
                    .unwrap_or_default(),
            }
        }));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(
            &mut t,
            &json!({"a": "z", "c": {"f": null}, "l": [3], "n": {"x": 1}}),
        );
        assert_eq!(
            t,
            json!({"a": "z", "c": {"d": "e"}, "l": [3], "n": {"x": 1}})
        );
    }
}
