//! A local HTTP server standing in for a pod's reload endpoint: bound to the pod's
//! `status.podIP` (nodesim hands out loopback addresses), it records every request and
//! answers from a script.
#![allow(dead_code)]

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct Seen {
    pub method: Method,
    /// Path and query.
    pub target: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub at: Instant,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Clone, Debug)]
pub enum Reply {
    Status(u16, &'static str),
    /// Answer 200 after this long.
    After(Duration),
}

#[derive(Clone)]
struct Shared {
    seen: Arc<Mutex<Vec<Seen>>>,
    script: Arc<Mutex<VecDeque<Reply>>>,
    /// The status once the script is used up.
    then: Arc<AtomicU16>,
}

pub struct Endpoint {
    pub addr: SocketAddr,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Endpoint {
    /// Listens on `addr`; answers from `script`, then 200 "ok".
    pub async fn start(addr: SocketAddr, script: impl IntoIterator<Item = Reply>) -> Self {
        let shared = Shared {
            seen: Arc::default(),
            script: Arc::new(Mutex::new(script.into_iter().collect())),
            then: Arc::new(AtomicU16::new(200)),
        };
        let app = axum::Router::new()
            .fallback(record)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, shared, task }
    }

    /// From now on, answer `status` once the script is used up.
    pub fn then_answer(&self, status: u16) {
        self.shared.then.store(status, Ordering::SeqCst);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.shared.seen.lock().unwrap().len()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record(
    State(s): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    s.seen.lock().unwrap().push(Seen {
        method,
        target: uri
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_default(),
        headers,
        body: body.to_vec(),
        at: Instant::now(),
    });
    let reply = s.script.lock().unwrap().pop_front();
    match reply {
        None => {
            let status = StatusCode::from_u16(s.then.load(Ordering::SeqCst)).unwrap();
            (status, "ok").into_response()
        }
        Some(Reply::Status(code, body)) => {
            (StatusCode::from_u16(code).unwrap(), body).into_response()
        }
        Some(Reply::After(d)) => {
            tokio::time::sleep(d).await;
            (StatusCode::OK, "ok").into_response()
        }
    }
}
