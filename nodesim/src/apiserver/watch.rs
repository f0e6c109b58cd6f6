//! Pod watches: newline-delimited JSON watch events over a chunked response.

use super::selectors::{FieldQuery, LabelQuery};
use super::shared::Shared;
use super::status::ApiStatus;
use super::store::{ChangeKind, PodEvent, State, WatchSignal};
use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

/// Which pods a list or watch covers.
#[derive(Clone, Debug, Default)]
pub(crate) struct PodFilter {
    pub namespace: Option<String>,
    pub fields: FieldQuery,
    pub labels: LabelQuery,
}

impl PodFilter {
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
}

fn line(type_: &str, object: Value) -> Bytes {
    let mut s = json!({"type": type_, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

fn pod_line(type_: &str, pod: &Pod) -> Bytes {
    line(type_, serde_json::to_value(pod).unwrap_or(Value::Null))
}

fn bookmark_line(rv: u64, initial_events_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_events_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        json!({"kind": "Pod", "apiVersion": "v1", "metadata": meta}),
    )
}

fn expired_line(message: String) -> Bytes {
    line("ERROR", ApiStatus::expired(message).body)
}

/// What a watcher with `filter` sees of a change (a pod leaving the selector is DELETED).
fn convert(filter: &PodFilter, ev: &PodEvent) -> Option<Bytes> {
    let new_m = filter.matches(&ev.new);
    match ev.kind {
        ChangeKind::Added => new_m.then(|| pod_line("ADDED", &ev.new)),
        ChangeKind::Deleted => new_m.then(|| pod_line("DELETED", &ev.new)),
        ChangeKind::Modified => {
            let old_m = ev.old.as_ref().is_some_and(|o| filter.matches(o));
            match (old_m, new_m) {
                (true, true) => Some(pod_line("MODIFIED", &ev.new)),
                (false, true) => Some(pod_line("ADDED", &ev.new)),
                (true, false) => {
                    let mut last = ev.old.clone()?;
                    last.metadata.resource_version = Some(ev.rv.to_string());
                    Some(pod_line("DELETED", &last))
                }
                (false, false) => None,
            }
        }
    }
}

/// Per-stream bookkeeping.
struct Cursor {
    filter: PodFilter,
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
                (convert(&self.filter, &ev).into_iter().collect(), false)
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
        out.push(bookmark_line(self.last_rv, false));
        (out, false)
    }
}

/// Starts a watch: replays history after the given resourceVersion (or the current pods
/// as ADDED for "", "0" and sendInitialEvents), then streams changes.
pub(crate) fn start_watch(shared: Arc<Shared>, req: WatchRequest) -> Result<Response, ApiStatus> {
    let mut initial = Vec::new();
    let (rx, last_rv) = {
        let state = shared.lock();
        let rv_text = req.resource_version.clone().unwrap_or_default();
        let from_current = rv_text.is_empty() || rv_text == "0" || req.send_initial_events;
        if from_current {
            for pod in state.pods.values().filter(|p| req.filter.matches(p)) {
                initial.push(pod_line("ADDED", pod));
            }
            if req.send_initial_events && req.bookmarks {
                initial.push(bookmark_line(state.rv, true));
            }
        } else {
            let from: u64 = rv_text.parse().map_err(|_| {
                ApiStatus::bad_request(format!("invalid resource version: {rv_text}"))
            })?;
            if from < state.compacted_rv {
                initial.push(expired_line(format!(
                    "too old resource version: {from} ({})",
                    state.compacted_rv
                )));
                return Ok(stream_response(close_after(initial)));
            }
            for ev in state.history.iter().filter(|e| e.rv > from) {
                initial.extend(convert(&req.filter, ev));
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
    for l in initial {
        if tx.send(Ok(l)).await.is_err() {
            return;
        }
    }
    let mut cursor = Cursor {
        filter: req.filter.clone(),
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
