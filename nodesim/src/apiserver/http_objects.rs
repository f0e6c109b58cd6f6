//! HTTP for ConfigMaps, Secrets and Leases (list/watch in all namespaces or one, get,
//! create, update, patch, delete), list pagination shared with pods, and pod PATCH.

use super::model::Resource;
use super::objects::{PatchType, Stored};
use super::render::{self, Render};
use super::selectors::{FieldQuery, LabelQuery};
use super::shared::Shared;
use super::status::ApiStatus;
use super::store::{Key, State};
use super::watch::{start_watch, PodFilter, WatchRequest};
use axum::body::Bytes;
use axum::extract::{Path, Query, State as AxState};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

type Shr = AxState<Arc<Shared>>;
type Params = Query<HashMap<String, String>>;
type Answer = Result<Response, ApiStatus>;

/// Routes of one stored resource under `prefix` (`/api/v1` or `/apis/<group>/<version>`).
fn routes<T: Stored + Send + Sync + 'static>(prefix: &str) -> Router<Arc<Shared>> {
    let plural = T::URL_PATH_SEGMENT;
    Router::new()
        .route(&format!("{prefix}/{plural}"), get(list_all::<T>))
        .route(
            &format!("{prefix}/namespaces/{{ns}}/{plural}"),
            get(list_ns::<T>).post(create::<T>),
        )
        .route(
            &format!("{prefix}/namespaces/{{ns}}/{plural}/{{name}}"),
            get(get_one::<T>)
                .put(update::<T>)
                .patch(patch::<T>)
                .delete(delete::<T>),
        )
}

/// ConfigMaps, Secrets and Leases.
pub(crate) fn router() -> Router<Arc<Shared>> {
    routes::<ConfigMap>("/api/v1")
        .merge(routes::<Secret>("/api/v1"))
        .merge(routes::<Lease>("/apis/coordination.k8s.io/v1"))
        .merge(routes::<Deployment>("/apis/apps/v1"))
        .merge(routes::<StatefulSet>("/apis/apps/v1"))
        .merge(routes::<DaemonSet>("/apis/apps/v1"))
        .route("/apis/apps/v1/replicasets", get(list_all_rs))
        .route("/apis/apps/v1/namespaces/{ns}/replicasets", get(list_ns_rs))
        .route(
            "/apis/apps/v1/namespaces/{ns}/replicasets/{name}",
            get(get_rs),
        )
}

/// ReplicaSets are read-only: the emulation's sets as the API serves them (lists and
/// watches through the same filter; a watch replays the current sets and then only
/// bookmarks, as the emulation records no ReplicaSet events).
fn list_rs(
    shared: Arc<Shared>,
    ns: Option<String>,
    p: HashMap<String, String>,
    headers: &HeaderMap,
) -> Answer {
    let how = render::from_headers(headers)?;
    let filter = filter_of(Resource::ReplicaSets, ns, &p)?;
    if let Some(req) = watch_of(&shared, filter.clone(), &p, how)? {
        return start_watch(shared, req);
    }
    let how = render::for_list(how)?;
    let state = shared.lock();
    let matching: Vec<Value> = state
        .object_values(Resource::ReplicaSets)
        .into_iter()
        .filter(|v| filter.matches_value(v))
        .collect();
    let (items, meta) = paginate(&state, matching, &p)?;
    Ok(Json(render::list(Resource::ReplicaSets, meta, items, how)).into_response())
}

async fn list_all_rs(AxState(s): Shr, headers: HeaderMap, Query(p): Params) -> Answer {
    list_rs(s, None, p, &headers)
}

async fn list_ns_rs(
    AxState(s): Shr,
    Path(ns): Path<String>,
    headers: HeaderMap,
    Query(p): Params,
) -> Answer {
    list_rs(s, Some(ns), p, &headers)
}

async fn get_rs(AxState(s): Shr, Path(key): Path<Key>, headers: HeaderMap) -> Answer {
    let v = {
        let st = s.lock();
        st.replicasets
            .get(&key)
            .map(|rs| value(&st.replicaset_object(rs)))
    }
    .ok_or_else(|| ApiStatus::not_found("apps", "replicasets", &key.1))?;
    one(StatusCode::OK, v, &headers)
}

pub(crate) fn truthy(p: &HashMap<String, String>, k: &str) -> bool {
    p.get(k).is_some_and(|v| v == "true" || v == "1")
}

fn bad(e: impl std::fmt::Display) -> ApiStatus {
    ApiStatus::bad_request(e.to_string())
}

/// The filter of a list or watch request.
pub(crate) fn filter_of(
    resource: super::store::Resource,
    ns: Option<String>,
    p: &HashMap<String, String>,
) -> Result<PodFilter, ApiStatus> {
    Ok(PodFilter {
        resource,
        namespace: ns,
        fields: FieldQuery::parse(p.get("fieldSelector").map_or("", |s| s)).map_err(bad)?,
        labels: LabelQuery::parse(p.get("labelSelector").map_or("", |s| s)).map_err(bad)?,
    })
}

/// A watch request (`watch=true`), or `None` for a list.
pub(crate) fn watch_of(
    shared: &Shared,
    filter: PodFilter,
    p: &HashMap<String, String>,
    how: Render,
) -> Result<Option<WatchRequest>, ApiStatus> {
    if !truthy(p, "watch") {
        return Ok(None);
    }
    let timeout = match p.get("timeoutSeconds") {
        Some(t) => Duration::from_secs(t.parse().map_err(|_| bad("invalid timeoutSeconds"))?),
        None => shared.default_watch_timeout,
    };
    Ok(Some(WatchRequest {
        filter,
        resource_version: p.get("resourceVersion").cloned(),
        timeout,
        bookmarks: truthy(p, "allowWatchBookmarks"),
        send_initial_events: truthy(p, "sendInitialEvents"),
        // Watch events carry single objects: `as=PartialObjectMetadata`.
        render: render::for_object(how)?,
    }))
}

/// `resourceVersion` / `resourceVersionMatch` / `limit` / `continue` of a list over
/// `matching` (already filtered, in key order): the page and its ListMeta.
pub(crate) fn paginate(
    state: &State,
    matching: Vec<Value>,
    p: &HashMap<String, String>,
) -> Result<(Vec<Value>, Value), ApiStatus> {
    let rv_match = p.get("resourceVersionMatch").map(String::as_str);
    if let Some(rv) = p.get("resourceVersion").filter(|r| !r.is_empty()) {
        let n: u64 = rv
            .parse()
            .map_err(|_| bad(format!("invalid resource version: {rv}")))?;
        if matches!(rv_match, Some("Exact" | "NotOlderThan")) && n != 0 && n < state.compacted_rv {
            return Err(ApiStatus::expired(
                "The resourceVersion for the provided list is too old.",
            ));
        }
    }
    let mut offset = 0usize;
    if let Some(token) = p.get("continue").filter(|c| !c.is_empty()) {
        let (rv, off) = token
            .split_once(':')
            .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<usize>().ok()?)))
            .ok_or_else(|| bad("continue key is not valid"))?;
        if rv < state.compacted_rv {
            return Err(ApiStatus::expired(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
            ));
        }
        offset = off;
    }
    let limit = p
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let end = limit.map_or(matching.len(), |l| (offset + l).min(matching.len()));
    let items: Vec<Value> = matching
        .get(offset.min(end)..end)
        .unwrap_or_default()
        .to_vec();
    let mut meta = json!({"resourceVersion": state.rv.to_string()});
    if end < matching.len() {
        meta["continue"] = Value::String(format!("{}:{end}", state.rv));
        meta["remainingItemCount"] = json!(matching.len() - end);
    }
    Ok((items, meta))
}

fn list_or_watch<T: Stored>(
    shared: Arc<Shared>,
    ns: Option<String>,
    p: HashMap<String, String>,
    headers: &HeaderMap,
) -> Answer {
    let how = render::from_headers(headers)?;
    let filter = filter_of(T::RESOURCE, ns, &p)?;
    if let Some(req) = watch_of(&shared, filter.clone(), &p, how)? {
        return start_watch(shared, req);
    }
    let how = render::for_list(how)?;
    let state = shared.lock();
    let matching: Vec<Value> = state
        .object_values(T::RESOURCE)
        .into_iter()
        .filter(|v| filter.matches_value(v))
        .collect();
    let (items, meta) = paginate(&state, matching, &p)?;
    Ok(Json(render::list(T::RESOURCE, meta, items, how)).into_response())
}

async fn list_all<T: Stored>(AxState(s): Shr, headers: HeaderMap, Query(p): Params) -> Answer {
    list_or_watch::<T>(s, None, p, &headers)
}

async fn list_ns<T: Stored>(
    AxState(s): Shr,
    Path(ns): Path<String>,
    headers: HeaderMap,
    Query(p): Params,
) -> Answer {
    list_or_watch::<T>(s, Some(ns), p, &headers)
}

/// One object as asked in `Accept`.
pub(crate) fn one(code: StatusCode, v: Value, headers: &HeaderMap) -> Answer {
    let how = render::for_object(render::from_headers(headers)?)?;
    Ok((code, Json(render::object(v, how))).into_response())
}

fn value<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

async fn get_one<T: Stored>(AxState(s): Shr, Path(key): Path<Key>, headers: HeaderMap) -> Answer {
    let v = s
        .lock()
        .object_values_get::<T>(&key)
        .ok_or_else(|| ApiStatus::not_found(T::ERROR_GROUP, T::URL_PATH_SEGMENT, &key.1))?;
    one(StatusCode::OK, v, &headers)
}

fn decode<T: Stored>(body: &[u8]) -> Result<T, ApiStatus> {
    serde_json::from_slice(body)
        .map_err(|e| ApiStatus::bad_request(format!("invalid {}: {e}", T::KIND)))
}

async fn create<T: Stored>(
    AxState(s): Shr,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    let obj = decode::<T>(&body)?;
    let out = s.lock().create_object(&ns, obj)?;
    one(StatusCode::CREATED, value(&out), &headers)
}

async fn update<T: Stored>(
    AxState(s): Shr,
    Path(key): Path<Key>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    let obj = decode::<T>(&body)?;
    let out = s.lock().update_object(&key, obj)?;
    one(StatusCode::OK, value(&out), &headers)
}

/// The patch type from `Content-Type`, 415 otherwise (as the real server for e.g.
/// `application/json-patch+json`, which the simulator does not implement).
pub(crate) fn patch_type(headers: &HeaderMap) -> Result<PatchType, ApiStatus> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    PatchType::from_content_type(ct).ok_or_else(|| {
        ApiStatus::failure(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {ct:?})"),
        )
    })
}

async fn patch<T: Stored>(
    AxState(s): Shr,
    Path(key): Path<Key>,
    headers: HeaderMap,
    Query(p): Params,
    body: Bytes,
) -> Answer {
    let how = patch_type(&headers)?;
    let manager = p.get("fieldManager").cloned().unwrap_or_default();
    if how == PatchType::Apply && manager.is_empty() {
        // apiserver patch.go: "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager:
        // Required value: is required for apply patch"
        return Err(ApiStatus::failure(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    }
    let out = s
        .lock()
        .patch_object::<T>(&key, how, &body, &manager, truthy(&p, "force"))?;
    one(StatusCode::OK, value(&out), &headers)
}

async fn delete<T: Stored>(AxState(s): Shr, Path(key): Path<Key>, headers: HeaderMap) -> Answer {
    let out = s.lock().delete_object::<T>(&key)?;
    one(StatusCode::OK, value(&out), &headers)
}

impl State {
    /// One stored ConfigMap/Secret/Lease as JSON.
    pub fn object_values_get<T: Stored>(&self, key: &Key) -> Option<Value> {
        T::map(self).get(key).map(value)
    }
}
