//! HTTP for ConfigMaps, Secrets and Leases (list/watch in all namespaces or one, get,
//! create, update, patch, delete), list pagination shared with pods, and pod PATCH.

use super::managed_fields::{manager_or_user_agent, Writer};
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

/// ConfigMaps, Secrets, Leases, apps/v1 workloads, and Argo Rollouts when `argo`.
pub(crate) fn router(argo: bool) -> Router<Arc<Shared>> {
    let base = if argo {
        routes::<super::argo::Rollout>("/apis/argoproj.io/v1alpha1").route(
            "/apis/argoproj.io/v1alpha1",
            get(|| async { Json(super::argo::discovery()) }),
        )
    } else {
        Router::new()
    };
    base.merge(routes::<ConfigMap>("/api/v1"))
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
    // Few, rendered from the emulation's bookkeeping: keyed here to page like the others.
    let sets: std::collections::BTreeMap<Key, Value> = state
        .object_values(Resource::ReplicaSets)
        .into_iter()
        .filter(|v| filter.matches_value(v))
        .map(|v| {
            let text = |k: &str| v["metadata"][k].as_str().unwrap_or_default().to_string();
            ((text("namespace"), text("name")), v)
        })
        .collect();
    let (items, meta) = paginate(&state, &sets, &filter, |_| true, Value::clone, &p)?;
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
    validate_watch(shared.watch_list(), p)?;
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

/// The watch options kube-apiserver refuses, as it refuses them: apimachinery
/// `pkg/apis/meta/internalversion/validation` `validateWatchOptions` (called by the
/// apiserver's `endpoints/handlers/get.go` `ListResource` with whether the `WatchList`
/// feature gate is on), whose errors become `errors.NewInvalid(ListOptions.meta.k8s.io)`: 422.
fn validate_watch(watch_list: bool, p: &HashMap<String, String>) -> Result<(), ApiStatus> {
    let send_initial = p.contains_key("sendInitialEvents");
    let rv_match = p.get("resourceVersionMatch").filter(|m| !m.is_empty());
    let mut errors: Vec<(&str, String)> = Vec::new();
    if send_initial {
        if rv_match.map(String::as_str) != Some("NotOlderThan") {
            errors.push((
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan".into(),
            ));
        }
        if !watch_list {
            errors.push((
                "sendInitialEvents",
                "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled".into(),
            ));
        }
    }
    if rv_match.is_some() && !send_initial {
        errors.push((
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
                .into(),
        ));
    }
    if errors.is_empty() {
        return Ok(());
    }
    Err(ApiStatus::invalid_list_options(&errors))
}

/// `resourceVersion` / `resourceVersionMatch` / `limit` / `continue` of a list over `map`'s
/// objects that `keep` admits, in key order: the page (only its objects are rendered) and its
/// ListMeta.
///
/// The continue token names the last key served, so each page starts where the previous one
/// ended (`BTreeMap::range`) and renders only its own objects: a paged list of n objects costs
/// O(n) in all. (It used to render every matching object for every page and slice out the
/// page: O(n²/limit) — at 20,000 pods and kube's page size of 500, 40 pages × 20,000 pods
/// serialized, which was most of the controller's 46 s start-up; see docs/controller.md.)
/// `remainingItemCount` is set only for a list without selectors, as kube-apiserver's etcd3
/// store does (it counts the remaining keys, which it cannot do under a selector).
pub(crate) fn paginate<T>(
    state: &State,
    map: &std::collections::BTreeMap<Key, T>,
    filter: &PodFilter,
    keep: impl Fn(&T) -> bool,
    render: impl Fn(&T) -> Value,
    p: &HashMap<String, String>,
) -> Result<(Vec<Value>, Value), ApiStatus> {
    use std::ops::Bound;
    let rv_match = p.get("resourceVersionMatch").map(String::as_str);
    if let Some(rv) = p.get("resourceVersion").filter(|r| !r.is_empty()) {
        let n: u64 = rv
            .parse()
            .map_err(|_| bad(format!("invalid resource version: {rv}")))?;
        if matches!(rv_match, Some("Exact" | "NotOlderThan"))
            && n != 0
            && n < state.journal.compacted_rv
        {
            return Err(ApiStatus::expired(
                "The resourceVersion for the provided list is too old.",
            ));
        }
    }
    let mut after: Option<Key> = None;
    if let Some(token) = p.get("continue").filter(|c| !c.is_empty()) {
        let (rv, key) = token
            .split_once(':')
            .and_then(|(a, b)| {
                let (ns, name) = b.split_once('/')?;
                Some((a.parse::<u64>().ok()?, (ns.to_string(), name.to_string())))
            })
            .ok_or_else(|| bad("continue key is not valid"))?;
        if rv < state.journal.compacted_rv {
            return Err(ApiStatus::expired(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
            ));
        }
        after = Some(key);
    }
    let limit = p
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let rest = || {
        let lower = after.clone().map_or(Bound::Unbounded, Bound::Excluded);
        map.range((lower, Bound::Unbounded))
            .filter(|(_, o)| keep(o))
    };
    let mut items = Vec::new();
    let mut last: Option<&Key> = None;
    let mut more = false;
    for (key, o) in rest() {
        if items.len() == limit {
            more = true;
            break;
        }
        items.push(render(o));
        last = Some(key);
    }
    let mut meta = json!({"resourceVersion": state.rv.to_string()});
    if let (true, Some((ns, name))) = (more, last) {
        meta["continue"] = Value::String(format!("{}:{ns}/{name}", state.rv));
        let unfiltered =
            filter.namespace.is_none() && filter.fields.0.is_empty() && filter.labels.0.is_empty();
        if unfiltered {
            let lower = Bound::Excluded(&(ns.clone(), name.clone()));
            let remaining = map.range::<Key, _>((lower, Bound::Unbounded)).count();
            meta["remainingItemCount"] = json!(remaining);
        }
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
    let (items, meta) = paginate(
        &state,
        T::map(&state),
        &filter,
        |o| filter.matches_meta(o.metadata()),
        value,
        &p,
    )?;
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

/// The writer of a create, update or patch that is not an apply.
fn updater(p: &HashMap<String, String>, headers: &HeaderMap) -> Writer<'static> {
    let agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    Writer::update(&manager_or_user_agent(
        p.get("fieldManager").map(String::as_str),
        agent,
    ))
}

async fn create<T: Stored>(
    AxState(s): Shr,
    Path(ns): Path<String>,
    headers: HeaderMap,
    Query(p): Params,
    body: Bytes,
) -> Answer {
    let obj = decode::<T>(&body)?;
    let out = s.lock().create_object(&ns, obj, &updater(&p, &headers))?;
    one(StatusCode::CREATED, value(&out), &headers)
}

async fn update<T: Stored>(
    AxState(s): Shr,
    Path(key): Path<Key>,
    headers: HeaderMap,
    Query(p): Params,
    body: Bytes,
) -> Answer {
    let obj = decode::<T>(&body)?;
    let out = s.lock().update_object(&key, obj, &updater(&p, &headers))?;
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
    // An update's manager may come from the User-Agent; an apply's is its fieldManager.
    let manager = updater(&p, &headers).manager;
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
