//! Shared by the notification tests: a local HTTP server standing in for Slack, Teams,
//! Google Chat or a plain webhook, and small helpers.
#![allow(dead_code)]

#[allow(unused_imports)] // not every test binary waits
pub use test_support::wait::*;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use reloadlet::core::model::{SourceKind, SourceRef};
pub use reloadlet::core::outcome::{ActionKind, Outcome};
use reloadlet::outbound::notify::metrics::FailureLabels;
use reloadlet::outbound::notify::{
    Format, HttpPoster, Notification, Notifier, NotifyMetrics, NotifySettings, SecretUrl,
};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub const TOKEN: &str = "T000/B000/xoxbSECRETTOKEN";

// ---------------------------------------------------------------- the stand-in service

#[derive(Clone, Debug)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
    pub content_type: Option<String>,
    pub user_agent: Option<String>,
    pub body: Vec<u8>,
}

#[derive(Clone, Debug)]
pub enum Reply {
    Status(u16, &'static str),
    /// Answer 200 after this long.
    After(Duration),
}

#[derive(Clone, Default)]
pub struct Shared {
    seen: Arc<Mutex<Vec<Seen>>>,
    script: Arc<Mutex<VecDeque<Reply>>>,
}

pub struct Service {
    pub addr: SocketAddr,
    pub shared: Shared,
    _stop: tokio::task::JoinHandle<()>,
}

impl Service {
    /// Answers from `script`, then 200 "ok".
    pub async fn start(script: impl IntoIterator<Item = Reply>) -> Self {
        let shared = Shared::default();
        shared.script.lock().unwrap().extend(script);
        let app = axum::Router::new()
            .fallback(record)
            .with_state(shared.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            addr,
            shared,
            _stop: stop,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/services/{TOKEN}?key=k1", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self._stop.abort();
    }
}

async fn record(
    State(s): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let header = |h: &str| {
        headers
            .get(h)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    s.seen.lock().unwrap().push(Seen {
        method,
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        content_type: header("content-type"),
        user_agent: header("user-agent"),
        body: body.to_vec(),
    });
    let reply = s.script.lock().unwrap().pop_front();
    match reply {
        None => (StatusCode::OK, "ok").into_response(),
        Some(Reply::Status(code, body)) => {
            (StatusCode::from_u16(code).unwrap(), body).into_response()
        }
        Some(Reply::After(d)) => {
            tokio::time::sleep(d).await;
            (StatusCode::OK, "ok").into_response()
        }
    }
}

// ---------------------------------------------------------------- helpers

pub fn failure(pod: &str, configmap: &str) -> Notification {
    Notification {
        node: "node-1".into(),
        namespace: "shop".into(),
        pod: pod.into(),
        action: ActionKind::Signal,
        sources: vec![SourceRef {
            kind: SourceKind::ConfigMap,
            name: configmap.into(),
        }],
        outcome: Outcome::SignalFailed,
        blocked_for: Duration::ZERO,
        message: "kill(SIGHUP) of pid 4242: EPERM".into(),
    }
}

pub const LINE: &str = "SignalFailed: shop/web-0 on node-1 (signal; configmap app-config): kill(SIGHUP) of pid 4242: EPERM";

/// Fast settings for the real-clock tests: short backoff, no jitter.
pub fn settings(urls: &[String], format: Format) -> NotifySettings {
    NotifySettings {
        urls: urls.iter().map(|u| SecretUrl::parse(u).unwrap()).collect(),
        format,
        timeout: Duration::from_secs(5),
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(100),
        jitter: false,
        ..NotifySettings::default()
    }
}

pub fn start(s: &NotifySettings) -> (Notifier, NotifyMetrics, CancellationToken) {
    let metrics = NotifyMetrics::default();
    let cancel = CancellationToken::new();
    let poster = HttpPoster::for_settings(s).unwrap();
    let n = Notifier::start(s, poster, metrics.clone(), cancel.clone());
    (n, metrics, cancel)
}

pub fn delivered(m: &NotifyMetrics) -> u64 {
    m.sent.get() + m.failed_total()
}

pub trait FailedTotal {
    fn failed_total(&self) -> u64;
    fn failed_for(&self, reason: &'static str) -> u64;
}

impl FailedTotal for NotifyMetrics {
    fn failed_total(&self) -> u64 {
        [
            "timeout",
            "connect",
            "status_4xx",
            "status_5xx",
            "redirect",
            "other",
        ]
        .into_iter()
        .map(|r| self.failed_for(r))
        .sum()
    }
    fn failed_for(&self, reason: &'static str) -> u64 {
        self.failed.get_or_create(&FailureLabels { reason }).get()
    }
}
