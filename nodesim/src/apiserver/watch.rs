//! Watches of pods, ConfigMaps, Secrets and Leases: newline-delimited JSON watch events
//! over a chunked response, each object rendered whole or as `PartialObjectMetadata`
//! (see [`super::render`]).

use super::render::{self, Render};
use super::selectors::{FieldQuery, LabelQuery};
use super::shared::Shared;
use super::status::ApiStatus;
use super::store::{ChangeKind, ObjEvent, PodEvent, Recorded, Resource, State, WatchSignal};
use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

/// Which objects a list or watch covers.
#[derive(Clone, Debug)]
pub(crate) struct PodFilter {
    pub resource: Resource,
    pub namespace: Option<String>,
    pub fields: FieldQuery,
    pub labels: LabelQuery,
}

impl PodFilter {
    /// Whether a ConfigMap/Secret/Lease (as JSON) is covered: namespace, labels, and the
    /// `metadata.name` / `metadata.namespace` fields every resource supports.
    pub fn matches_value(&self, v: &Value) -> bool {
        let meta = &v["metadata"];
        let text = |k: &str| meta[k].as_str().unwrap_or_default().to_string();
        let labels: std::collections::BTreeMap<String, String> =
            serde_json::from_value(meta["labels"].clone()).unwrap_or_default();
        self.namespace
            .as_ref()
            .is_none_or(|ns| text("namespace") == *ns)
            && self.fields.0.iter().all(|r| {
                let actual = match r.field.as_str() {
                    "metadata.name" => text("name"),
                    "metadata.namespace" => text("namespace"),
                    _ => String::new(),
                };
                (actual == r.value) != r.negated
            })
            && self.labels.matches(&labels)
    }

    /// [`Self::matches_value`] on a typed object's metadata (no JSON rendering).
    pub fn matches_meta(&self, meta: &ObjectMeta) -> bool {
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        self.namespace
            .as_ref()
            .is_none_or(|ns| meta.namespace.as_ref() == Some(ns))
            && self.fields.0.iter().all(|r| {
                let actual = match r.field.as_str() {
                    "metadata.name" => text(&meta.name),
                    "metadata.namespace" => text(&meta.namespace),
                    _ => String::new(),
                };
                (actual == r.value) != r.negated
            })
            && self
                .labels
                .matches(meta.labels.as_ref().unwrap_or(&Default::default()))
    }

    pub fn matches(&self, pod: &Pod) -> bool {
        self.namespace
            .as_ref()
            .is_none_or(|ns| pod.metadata.namespace.as_ref() == Some(ns))
            && self.fields.matches(pod)
            && self
                .labels
                .matches(pod.metadata.labels.as_ref().unwrap_or(&Default::default()))
    }
}

/// A parsed watch request.
#[derive(Clone, Debug)]
pub(crate) struct WatchRequest {
    pub filter: PodFilter,
    pub resource_version: Option<String>,
    pub timeout: Duration,
    pub bookmarks: bool,
    pub send_initial_events: bool,
    /// Whole objects or `PartialObjectMetadata` (the `Accept` header's `as=`).
    pub render: Render,
}

/// One watch event on the wire as the API server writes it: `{"type":…,"object":…}`, in that
/// order. The server encodes apimachinery's `WatchEvent` struct (`pkg/apis/meta/v1/watch.go`:
/// `Type` then `Object`), and Go's encoding/json writes a struct's fields in their declared
/// order. (`json!` sorts its keys, which put `object` first: kube's adjacently tagged
/// `WatchEvent` then buffers every object before it reads the tag, work no real server causes.)
#[derive(serde::Serialize)]
struct WatchEvent<'a> {
    #[serde(rename = "type")]
    type_: &'a str,
    object: &'a Value,
}

pub(crate) fn line(type_: &str, object: &Value) -> Bytes {
    let mut s = serde_json::to_string(&WatchEvent { type_, object }).unwrap_or_default();
    s.push('\n');
    Bytes::from(s)
}

fn pod_line(type_: &str, pod: &Pod, how: Render) -> Bytes {
    line(
        type_,
        &render::object(serde_json::to_value(pod).unwrap_or(Value::Null), how),
    )
}

fn value_line(type_: &str, v: &Value, how: Render) -> Bytes {
    line(type_, &render::object(v.clone(), how))
}

/// A BOOKMARK carries an empty object of the watched kind with only its
/// resourceVersion (apiserver `cacheWatcher` bookmark events), transformed like every
/// other object of the watch (`watchEmbeddedEncoder` → `doTransformObject`).
fn bookmark_line(resource: Resource, rv: u64, initial_events_end: bool, how: Render) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_events_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let (kind, api_version) = render::kind_of(resource);
    line(
        "BOOKMARK",
        &render::object(
            json!({"kind": kind, "apiVersion": api_version, "metadata": meta}),
            how,
        ),
    )
}

fn expired_line(message: String) -> Bytes {
    line("ERROR", &ApiStatus::expired(message).body)
}

/// What a watcher with `filter` sees of a pod change (a pod leaving the selector is
/// DELETED).
fn convert(filter: &PodFilter, ev: &PodEvent, how: Render) -> Option<Bytes> {
    if filter.resource != Resource::Pods {
        return None;
    }
    let new_m = filter.matches(&ev.new);
    match ev.kind {
        ChangeKind::Added => new_m.then(|| pod_line("ADDED", &ev.new, how)),
        ChangeKind::Deleted => new_m.then(|| pod_line("DELETED", &ev.new, how)),
        ChangeKind::Modified => {
            let old_m = ev.old.as_ref().is_some_and(|o| filter.matches(o));
            match (old_m, new_m) {
                (true, true) => Some(pod_line("MODIFIED", &ev.new, how)),
                (false, true) => Some(pod_line("ADDED", &ev.new, how)),
                (true, false) => {
                    let mut last = ev.old.clone()?;
                    last.metadata.resource_version = Some(ev.rv.to_string());
                    Some(pod_line("DELETED", &last, how))
                }
                (false, false) => None,
            }
        }
    }
}

/// The same for a ConfigMap, Secret or Lease change.
fn convert_object(filter: &PodFilter, ev: &ObjEvent, how: Render) -> Option<Bytes> {
    if filter.resource != ev.resource {
        return None;
    }
    let new_m = filter.matches_value(&ev.new);
    match ev.kind {
        ChangeKind::Added => new_m.then(|| value_line("ADDED", &ev.new, how)),
        ChangeKind::Deleted => new_m.then(|| value_line("DELETED", &ev.new, how)),
        ChangeKind::Modified => {
            let old_m = ev.old.as_ref().is_some_and(|o| filter.matches_value(o));
            match (old_m, new_m) {
                (true, true) => Some(value_line("MODIFIED", &ev.new, how)),
                (false, true) => Some(value_line("ADDED", &ev.new, how)),
                (true, false) => {
                    let mut last = ev.old.clone()?;
                    last["metadata"]["resourceVersion"] = json!(ev.rv.to_string());
                    Some(value_line("DELETED", &last, how))
                }
                (false, false) => None,
            }
        }
    }
}

fn convert_recorded(filter: &PodFilter, ev: &Recorded, how: Render) -> Option<Bytes> {
    match ev {
        Recorded::Pod(e) => convert(filter, e, how),
        Recorded::Object(e) => convert_object(filter, e, how),
    }
}

/// Per-stream bookkeeping.
struct Cursor {
    filter: PodFilter,
    render: Render,
    last_rv: u64,
}

impl Cursor {
    /// Lines for one broadcast message; `true` when the stream must end after them.
    fn handle(&mut self, msg: Result<WatchSignal, RecvError>) -> (Vec<Bytes>, bool) {
        match msg {
            Ok(WatchSignal::Pod(ev)) => {
                if ev.rv <= self.last_rv {
                    return (vec![], false);
                }
                self.last_rv = ev.rv;
                (
                    convert(&self.filter, &ev, self.render)
                        .into_iter()
                        .collect(),
                    false,
                )
            }
            Ok(WatchSignal::Object(ev)) => {
                if ev.rv <= self.last_rv {
                    return (vec![], false);
                }
                self.last_rv = ev.rv;
                (
                    convert_object(&self.filter, &ev, self.render)
                        .into_iter()
                        .collect(),
                    false,
                )
            }
            Ok(WatchSignal::Compacted { rv }) => (
                vec![expired_line(format!(
                    "too old resource version: {} ({rv})",
                    self.last_rv
                ))],
                true,
            ),
            Err(RecvError::Lagged(_)) => (
                vec![expired_line(format!(
                    "too old resource version: {} (watcher fell behind)",
                    self.last_rv
                ))],
                true,
            ),
            Err(RecvError::Closed) => (vec![], true),
        }
    }

    /// Drains what is queued (under the state lock, so nothing older is in flight) and
    /// returns those lines followed by a BOOKMARK at the current resourceVersion.
    fn bookmark(
        &mut self,
        state: &State,
        rx: &mut broadcast::Receiver<WatchSignal>,
    ) -> (Vec<Bytes>, bool) {
        let mut out = Vec::new();
        loop {
            let msg = match rx.try_recv() {
                Ok(m) => Ok(m),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Lagged(n)) => Err(RecvError::Lagged(n)),
                Err(TryRecvError::Closed) => Err(RecvError::Closed),
            };
            let (lines, end) = self.handle(msg);
            out.extend(lines);
            if end {
                return (out, true);
            }
        }
        self.last_rv = self.last_rv.max(state.rv);
        out.push(bookmark_line(
            self.filter.resource,
            self.last_rv,
            false,
            self.render,
        ));
        (out, false)
    }
}

/// Starts a watch: replays history after the given resourceVersion (or the current objects
/// as ADDED for "", "0" and sendInitialEvents), then streams changes.
pub(crate) fn start_watch(shared: Arc<Shared>, req: WatchRequest) -> Result<Response, ApiStatus> {
    let mut initial = Vec::new();
    let (rx, last_rv) = {
        let state = shared.lock();
        let rv_text = req.resource_version.clone().unwrap_or_default();
        let from_current = rv_text.is_empty() || rv_text == "0" || req.send_initial_events;
        if from_current {
            if req.filter.resource == Resource::Pods {
                for pod in state.pods.values().filter(|p| req.filter.matches(p)) {
                    initial.push(pod_line("ADDED", pod, req.render));
                }
            } else {
                for v in state.object_values(req.filter.resource) {
                    if req.filter.matches_value(&v) {
                        initial.push(value_line("ADDED", &v, req.render));
                    }
                }
            }
            if req.send_initial_events && req.bookmarks {
                initial.push(bookmark_line(
                    req.filter.resource,
                    state.rv,
                    true,
                    req.render,
                ));
            }
        } else {
            let from: u64 = rv_text.parse().map_err(|_| {
                ApiStatus::bad_request(format!("invalid resource version: {rv_text}"))
            })?;
            if from < state.journal.compacted_rv {
                initial.push(expired_line(format!(
                    "too old resource version: {from} ({})",
                    state.journal.compacted_rv
                )));
                return Ok(stream_response(close_after(initial)));
            }
            for ev in state.journal.history.iter().filter(|e| e.rv() > from) {
                initial.extend(convert_recorded(&req.filter, ev, req.render));
            }
        }
        (shared.watch_tx.subscribe(), state.rv)
    };
    let (tx, body_rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    tokio::spawn(run_watch(shared, req, rx, last_rv, initial, tx));
    Ok(stream_response(body_rx))
}

fn close_after(lines: Vec<Bytes>) -> mpsc::Receiver<Result<Bytes, Infallible>> {
    let (tx, rx) = mpsc::channel(lines.len().max(1));
    for l in lines {
        let _ = tx.try_send(Ok(l));
    }
    rx
}

fn stream_response(rx: mpsc::Receiver<Result<Bytes, Infallible>>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(ReceiverStream::new(rx)),
    )
        .into_response()
}

async fn run_watch(
    shared: Arc<Shared>,
    req: WatchRequest,
    mut rx: broadcast::Receiver<WatchSignal>,
    last_rv: u64,
    initial: Vec<Bytes>,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
) {
    let _open = super::shared::OpenWatch::new(shared.clone(), req.filter.resource);
    for l in initial {
        if tx.send(Ok(l)).await.is_err() {
            return;
        }
    }
    let mut cursor = Cursor {
        filter: req.filter.clone(),
        render: req.render,
        last_rv,
    };
    let deadline = tokio::time::Instant::now() + req.timeout;
    let interval = shared.bookmark_interval.max(Duration::from_millis(10));
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    let mut outage = shared.outage.subscribe();
    let mut shutdown = shared.shutdown.clone();
    loop {
        let (lines, end) = tokio::select! {
            _ = tx.closed() => return,
            _ = tokio::time::sleep_until(deadline) => return,
            _ = shutdown.wait_for(|s| *s) => return,
            changed = outage.changed() => {
                if changed.is_err() || outage.borrow().is_some() {
                    return;
                }
                continue;
            }
            msg = rx.recv() => cursor.handle(msg),
            _ = ticker.tick(), if req.bookmarks => {
                let state = shared.lock();
                cursor.bookmark(&state, &mut rx)
            }
        };
        for l in lines {
            if tx.send(Ok(l)).await.is_err() {
                return;
            }
        }
        if end {
            return;
        }
    }
}
