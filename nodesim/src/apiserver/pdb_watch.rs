//! PodDisruptionBudgets across all namespaces over HTTP: list and watch
//! (`/apis/policy/v1/poddisruptionbudgets[?watch=true]`), as kube's watcher on
//! `Api::<PodDisruptionBudget>::all` asks. PDB changes are few and the store keeps no PDB
//! history, so a watch compares the stored PDBs' resourceVersions every 50 ms and streams
//! the differences (ADDED / MODIFIED / DELETED).

use super::shared::Shared;
use super::status::ApiStatus;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

type Key = (String, String);

const POLL: Duration = Duration::from_millis(50);

fn snapshot(shared: &Shared) -> (u64, BTreeMap<Key, PodDisruptionBudget>) {
    let mut st = shared.lock();
    st.recompute_pdbs();
    let pdbs = st
        .pdbs
        .iter()
        .map(|(k, e)| (k.clone(), e.pdb.clone()))
        .collect();
    (st.rv, pdbs)
}

fn rv_of(pdb: &PodDisruptionBudget) -> u64 {
    pdb.metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn line(type_: &str, pdb: &PodDisruptionBudget) -> Bytes {
    super::watch::line(type_, &serde_json::to_value(pdb).unwrap_or(Value::Null))
}

/// `GET /apis/policy/v1/poddisruptionbudgets`: the list, or with `watch=true` a watch.
pub(crate) async fn list_or_watch_all(
    State(shared): State<Arc<Shared>>,
    Query(p): Query<HashMap<String, String>>,
) -> Result<Response, ApiStatus> {
    let (rv, pdbs) = snapshot(&shared);
    if !p.get("watch").is_some_and(|w| w == "true" || w == "1") {
        let items: Vec<Value> = pdbs
            .values()
            .map(|p| serde_json::to_value(p).unwrap_or(Value::Null))
            .collect();
        return Ok(axum::Json(json!({
            "kind": "PodDisruptionBudgetList",
            "apiVersion": "policy/v1",
            "metadata": {"resourceVersion": rv.to_string()},
            "items": items,
        }))
        .into_response());
    }
    let from: u64 = match p.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => 0,
        Some(r) => r
            .parse()
            .map_err(|_| ApiStatus::bad_request(format!("invalid resource version: {r}")))?,
    };
    let timeout = match p.get("timeoutSeconds") {
        Some(t) => Duration::from_secs(
            t.parse()
                .map_err(|_| ApiStatus::bad_request("invalid timeoutSeconds"))?,
        ),
        None => shared.default_watch_timeout,
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    tokio::spawn(run_watch(shared, from, timeout, tx));
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(ReceiverStream::new(rx)),
    )
        .into_response())
}

async fn run_watch(
    shared: Arc<Shared>,
    from: u64,
    timeout: Duration,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut outage = shared.outage.subscribe();
    let mut shutdown = shared.shutdown.clone();
    // Everything newer than the client's version is news to it.
    let mut seen: BTreeMap<Key, PodDisruptionBudget> = BTreeMap::new();
    let (_, now) = snapshot(&shared);
    for (k, pdb) in now {
        if rv_of(&pdb) > from && tx.send(Ok(line("ADDED", &pdb))).await.is_err() {
            return;
        }
        seen.insert(k, pdb);
    }
    let mut tick = tokio::time::interval(POLL);
    loop {
        let poll = tokio::select! {
            _ = tx.closed() => false,
            _ = tokio::time::sleep_until(deadline) => false,
            _ = shutdown.wait_for(|s| *s) => false,
            changed = outage.changed() => {
                if changed.is_err() || outage.borrow().is_some() {
                    false
                } else {
                    continue;
                }
            }
            _ = tick.tick() => true,
        };
        if !poll {
            return;
        }
        let (_, now) = snapshot(&shared);
        let mut lines = Vec::new();
        for (k, old) in &seen {
            if !now.contains_key(k) {
                lines.push(line("DELETED", old));
            }
        }
        for (k, pdb) in &now {
            match seen.get(k) {
                None => lines.push(line("ADDED", pdb)),
                Some(old) if rv_of(old) != rv_of(pdb) => lines.push(line("MODIFIED", pdb)),
                _ => {}
            }
        }
        seen = now;
        for l in lines {
            if tx.send(Ok(l)).await.is_err() {
                return;
            }
        }
    }
}
