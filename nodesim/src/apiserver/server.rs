//! HTTP routing: the request log / outage / delay gate, and the handlers.

use super::access::{Decision, ForbiddenRecord};
use super::events::EventApi;
use super::http_objects;
use super::objects::PatchType;
use super::rbac::Attributes;
use super::records::RequestRecord;
use super::render;
use super::shared::Shared;
use super::status::ApiStatus;
use super::store::Key;
use super::store::Resource;
use super::store::State as Store;
use super::watch::start_watch;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

type Shr = State<Arc<Shared>>;
type Params = Query<HashMap<String, String>>;
type Answer = Result<Response, ApiStatus>;
/// A pod PATCH of the store: the pod itself, or its status.
type PodPatch = fn(
    &mut Store,
    &Key,
    PatchType,
    &[u8],
    bool,
) -> Result<k8s_openapi::api::core::v1::Pod, ApiStatus>;

/// The server's routes.
pub(crate) fn router(shared: Arc<Shared>, argo_rollouts: bool) -> Router {
    Router::new()
        .route("/api/v1/pods", get(list_all_pods))
        .route("/api/v1/namespaces/{ns}/pods", get(list_ns_pods))
        .route(
            "/api/v1/namespaces/{ns}/pods/{name}",
            get(get_pod).delete(delete_pod).patch(patch_pod),
        )
        .route("/api/v1/namespaces/{ns}/pods/{name}/eviction", post(evict))
        .route(
            "/api/v1/namespaces/{ns}/pods/{name}/status",
            axum::routing::patch(patch_pod_status),
        )
        .route(
            "/apis/events.k8s.io/v1/namespaces/{ns}/events",
            get(list_events_v1).post(create_event_v1),
        )
        .route(
            "/apis/events.k8s.io/v1/namespaces/{ns}/events/{name}",
            get(get_event_v1).patch(patch_event_v1),
        )
        .route(
            "/api/v1/namespaces/{ns}/events",
            get(list_events_core).post(create_event_core),
        )
        .route(
            "/api/v1/namespaces/{ns}/events/{name}",
            get(get_event_core).patch(patch_event_core),
        )
        .merge(http_objects::router(argo_rollouts))
        .route(
            "/apis/policy/v1/poddisruptionbudgets",
            get(super::pdb_watch::list_or_watch_all),
        )
        .route(
            "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
            get(list_pdbs),
        )
        .route(
            "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}",
            get(get_pdb),
        )
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(shared.clone(), gate))
        .with_state(shared)
}

/// A request being answered: its sequence number stays in `Records::answering` until it is
/// logged, or until its future is dropped (the client went away) unlogged.
struct Answering {
    shared: Arc<Shared>,
    seq: u64,
}

impl Answering {
    fn begin(shared: &Arc<Shared>) -> Self {
        let mut state = shared.lock();
        let seq = state.records.next_request;
        state.records.next_request += 1;
        state.records.answering.insert(seq);
        Self {
            shared: shared.clone(),
            seq,
        }
    }

    /// Logs the answered request: one lock, so no reader sees it neither answering nor
    /// logged.
    fn logged(self, record: RequestRecord) {
        let mut state = self.shared.lock();
        state.records.requests.push(record);
        state.records.answering.remove(&self.seq);
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.shared.lock().records.answering.remove(&self.seq);
    }
}

/// Logs every request, applies the simulated outage and response delay.
async fn gate(State(shared): Shr, req: Request, next: Next) -> Response {
    let answering = Answering::begin(&shared);
    let at = Instant::now();
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let header_text = |headers: &HeaderMap, name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let accept = header_text(req.headers(), header::ACCEPT);
    let token = super::secure::bearer(req.headers());
    let content_type = header_text(req.headers(), header::CONTENT_TYPE);
    // Writes are small: keep their body for the log and hand it on.
    let (req, body) = if matches!(method.as_str(), "POST" | "PUT" | "PATCH") {
        let (parts, body) = req.into_parts();
        let bytes = axum::body::to_bytes(body, 16 << 20)
            .await
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        (
            Request::from_parts(parts, axum::body::Body::from(bytes)),
            text,
        )
    } else {
        (req, String::new())
    };
    let eviction = path.ends_with("/eviction");
    let in_flight = if eviction {
        shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1
    } else {
        0
    };
    if let Some(d) = shared.delay() {
        tokio::time::sleep(d).await;
    }
    let outage = *shared.outage.borrow();
    let attrs = Attributes::from_request(&method, &path, &query);
    let mut denied_by_rbac = false;
    let resp = match outage {
        Some(code) => ApiStatus::outage(code).into_response(),
        None if !shared.authenticates(&token) => super::secure::unauthorized().into_response(),
        None => {
            // Authorization follows authentication, before any handler (kube-apiserver's
            // WithAuthorization filter).
            let decision = shared.access().authorize(&token, &attrs);
            match decision {
                Decision::Admin | Decision::Allowed => next.run(req).await,
                Decision::Denied(status) => {
                    denied_by_rbac = true;
                    status.into_response()
                }
            }
        }
    };
    if resp.status() == StatusCode::FORBIDDEN {
        let mut access = shared.access();
        let user = access.user_name(&token);
        access.record_forbidden(ForbiddenRecord {
            user,
            method: method.clone(),
            path: path.clone(),
            attributes: attrs,
            rbac: denied_by_rbac,
        });
    }
    if eviction {
        shared.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
    answering.logged(RequestRecord {
        method,
        path,
        query,
        status: resp.status().as_u16(),
        at,
        in_flight,
        accept,
        content_type,
        body,
        token,
    });
    resp
}

async fn not_found() -> ApiStatus {
    ApiStatus::failure(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

fn json_response<T: Serialize>(code: StatusCode, body: &T) -> Response {
    (
        code,
        Json(serde_json::to_value(body).unwrap_or(Value::Null)),
    )
        .into_response()
}

fn bad(e: impl std::fmt::Display) -> ApiStatus {
    ApiStatus::bad_request(e.to_string())
}

// ---- pods ----

async fn list_all_pods(State(s): Shr, headers: HeaderMap, Query(p): Params) -> Answer {
    list_or_watch(s, None, p, &headers)
}

async fn list_ns_pods(
    State(s): Shr,
    Path(ns): Path<String>,
    headers: HeaderMap,
    Query(p): Params,
) -> Answer {
    list_or_watch(s, Some(ns), p, &headers)
}

fn list_or_watch(
    shared: Arc<Shared>,
    ns: Option<String>,
    p: HashMap<String, String>,
    headers: &HeaderMap,
) -> Answer {
    let how = render::from_headers(headers)?;
    let filter = http_objects::filter_of(Resource::Pods, ns, &p)?;
    if let Some(req) = http_objects::watch_of(&shared, filter.clone(), &p, how)? {
        return start_watch(shared, req);
    }
    let how = render::for_list(how)?;
    let state = shared.lock();
    let (items, meta) = http_objects::paginate(
        &state,
        &state.pods,
        &filter,
        |pod| filter.matches(pod),
        |pod| serde_json::to_value(pod).unwrap_or(Value::Null),
        &p,
    )?;
    Ok(Json(render::list(Resource::Pods, meta, items, how)).into_response())
}

async fn get_pod(
    State(s): Shr,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Answer {
    let pod = s.lock().pods.get(&(ns, name.clone())).cloned();
    match pod {
        Some(pod) => http_objects::one(
            StatusCode::OK,
            serde_json::to_value(&pod).unwrap_or(Value::Null),
            &headers,
        ),
        None => Err(ApiStatus::not_found("", "pods", &name)),
    }
}

/// PATCH of a pod: merge and strategic-merge (see [`super::objects`]).
async fn patch_pod(
    State(s): Shr,
    Path(key): Path<(String, String)>,
    Query(p): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    patch_pod_with(&s, &key, &p, &headers, &body, Store::patch_pod_as)
}

/// PATCH of `pods/status` (see [`super::pod_status`]).
async fn patch_pod_status(
    State(s): Shr,
    Path(key): Path<(String, String)>,
    Query(p): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    patch_pod_with(&s, &key, &p, &headers, &body, Store::patch_pod_status)
}

/// A pod PATCH through `apply` (the pod itself or its status): the patch type from the
/// Content-Type, `dryRun=All`, the patched pod as the answer.
fn patch_pod_with(
    s: &Shared,
    key: &(String, String),
    p: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
    apply: PodPatch,
) -> Answer {
    let how = http_objects::patch_type(headers)?;
    let dry_run = p.get("dryRun").is_some_and(|d| d == "All");
    let pod = apply(&mut s.lock(), key, how, body, dry_run)?;
    http_objects::one(
        StatusCode::OK,
        serde_json::to_value(&pod).unwrap_or(Value::Null),
        headers,
    )
}

async fn delete_pod(
    State(s): Shr,
    Path((ns, name)): Path<(String, String)>,
    Query(p): Params,
    body: Bytes,
) -> Answer {
    let mut grace = p.get("gracePeriodSeconds").and_then(|g| g.parse().ok());
    if grace.is_none() && !body.is_empty() {
        let opts: Value = serde_json::from_slice(&body).map_err(bad)?;
        grace = opts.get("gracePeriodSeconds").and_then(Value::as_i64);
    }
    let dry_run = p.get("dryRun").is_some_and(|d| d == "All");
    let mut state = s.lock();
    let key: Key = (ns, name.clone());
    if dry_run {
        return match state.pods.get(&key) {
            Some(pod) => Ok(json_response(StatusCode::OK, pod)),
            None => Err(ApiStatus::not_found("", "pods", &name)),
        };
    }
    match state.delete_pod_graceful(&key, grace) {
        Some(pod) => Ok(json_response(StatusCode::OK, &pod)),
        None => Err(ApiStatus::not_found("", "pods", &name)),
    }
}

async fn evict(
    State(s): Shr,
    Path((ns, name)): Path<(String, String)>,
    Query(p): Params,
    body: Bytes,
) -> ApiStatus {
    let dry_run = p.get("dryRun").is_some_and(|d| d == "All");
    s.lock().evict(&ns, &name, &body, dry_run)
}

// ---- events ----

fn is_merge_patch(headers: &HeaderMap) -> bool {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    ct.starts_with("application/merge-patch+json")
        || ct.starts_with("application/strategic-merge-patch+json")
}

fn create_event(s: &Shared, api: EventApi, ns: &str, body: &[u8]) -> Answer {
    let v = s.lock().create_event(api, ns, body)?;
    Ok((StatusCode::CREATED, Json(v)).into_response())
}

fn patch_event(s: &Shared, api: EventApi, key: Key, headers: &HeaderMap, body: &[u8]) -> Answer {
    if !is_merge_patch(headers) {
        return Err(ApiStatus::failure(
            415,
            "UnsupportedMediaType",
            "the simulator accepts merge and strategic-merge patches only",
        ));
    }
    let v = s.lock().patch_event(api, &key, body)?;
    Ok(Json(v).into_response())
}

fn get_event(s: &Shared, api: EventApi, key: Key) -> Answer {
    let state = s.lock();
    let v = match api {
        EventApi::EventsV1 => state.events.v1.get(&key).map(serde_json::to_value),
        EventApi::Core => state.events.core.get(&key).map(serde_json::to_value),
    };
    match v {
        Some(Ok(v)) => Ok(Json(v).into_response()),
        _ => Err(ApiStatus::not_found(
            if api == EventApi::Core {
                ""
            } else {
                "events.k8s.io"
            },
            "events",
            &key.1,
        )),
    }
}

async fn list_events_v1(State(s): Shr, Path(ns): Path<String>) -> Json<Value> {
    Json(s.lock().list_events(EventApi::EventsV1, &ns))
}
async fn list_events_core(State(s): Shr, Path(ns): Path<String>) -> Json<Value> {
    Json(s.lock().list_events(EventApi::Core, &ns))
}
async fn create_event_v1(State(s): Shr, Path(ns): Path<String>, body: Bytes) -> Answer {
    create_event(&s, EventApi::EventsV1, &ns, &body)
}
async fn create_event_core(State(s): Shr, Path(ns): Path<String>, body: Bytes) -> Answer {
    create_event(&s, EventApi::Core, &ns, &body)
}
async fn get_event_v1(State(s): Shr, Path(key): Path<(String, String)>) -> Answer {
    get_event(&s, EventApi::EventsV1, key)
}
async fn get_event_core(State(s): Shr, Path(key): Path<(String, String)>) -> Answer {
    get_event(&s, EventApi::Core, key)
}
async fn patch_event_v1(
    State(s): Shr,
    Path(key): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    patch_event(&s, EventApi::EventsV1, key, &headers, &body)
}
async fn patch_event_core(
    State(s): Shr,
    Path(key): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    patch_event(&s, EventApi::Core, key, &headers, &body)
}

// ---- PDBs (read only over HTTP) ----

fn list_body<T: Serialize>(kind: &str, api_version: &str, rv: u64, items: Vec<&T>) -> Response {
    Json(json!({
        "kind": kind,
        "apiVersion": api_version,
        "metadata": {"resourceVersion": rv.to_string()},
        "items": items.iter().map(|i| serde_json::to_value(i).unwrap_or(Value::Null)).collect::<Vec<_>>(),
    }))
    .into_response()
}

async fn list_pdbs(State(s): Shr, Path(ns): Path<String>) -> Response {
    let mut st = s.lock();
    st.recompute_pdbs();
    let items = st
        .pdbs
        .iter()
        .filter(|(k, _)| k.0 == ns)
        .map(|(_, e)| &e.pdb)
        .collect();
    list_body("PodDisruptionBudgetList", "policy/v1", st.rv, items)
}

async fn get_pdb(State(s): Shr, Path(key): Path<(String, String)>) -> Answer {
    let mut st = s.lock();
    st.recompute_pdbs();
    st.pdbs
        .get(&key)
        .map(|e| json_response(StatusCode::OK, &e.pdb))
        .ok_or_else(|| ApiStatus::not_found("policy", "poddisruptionbudgets", &key.1))
}
