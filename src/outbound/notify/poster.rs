//! The edge: "POST this body to this URL". [`super::HttpPoster`] is the real one;
//! [`FakePoster`] records requests and answers from a script, for tests of everything
//! above it.

use super::format::Payload;
use super::secret_url::SecretUrl;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The part of an answer the sender needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostResponse {
    pub status: u16,
    /// `Retry-After` in seconds (Slack sends it with 429).
    pub retry_after: Option<Duration>,
    /// The first bytes of the body (lossy UTF-8), for the log line of a refusal: Slack
    /// answers `invalid_token` or `no_service`.
    pub body_prefix: String,
}

impl PostResponse {
    pub fn status(status: u16) -> Self {
        Self {
            status,
            retry_after: None,
            body_prefix: String::new(),
        }
    }
}

/// A request that got no HTTP answer. The text (the client's error and its causes, as one
/// line) never contains the URL's path or query.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The request could not be built.
    #[error("{0}")]
    Request(String),
    /// Connection refused or reset, TLS failure, the proxy refused the tunnel.
    #[error("{0}")]
    Transport(String),
}

/// POSTs one body. Implementations need no timeout of their own: the sender bounds each
/// attempt.
pub trait Poster: Send + Sync + 'static {
    fn post(
        &self,
        url: &SecretUrl,
        payload: &Payload,
    ) -> impl Future<Output = Result<PostResponse, PostError>> + Send;
}

/// One request the fake received, with the (tokio) time it arrived.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub url: SecretUrl,
    pub payload: Payload,
    pub at: tokio::time::Instant,
}

/// What the fake does with one request.
#[derive(Clone, Debug)]
pub enum Scripted {
    Answer(PostResponse),
    Fail(String),
    /// Never answers (the sender's timeout has to end it).
    Hang,
}

/// Records every request; answers from a script, then 200.
#[derive(Clone, Default)]
pub struct FakePoster {
    inner: Arc<Mutex<FakeState>>,
}

#[derive(Default)]
struct FakeState {
    script: VecDeque<Scripted>,
    seen: Vec<Recorded>,
}

impl FakePoster {
    pub fn new(script: impl IntoIterator<Item = Scripted>) -> Self {
        let f = Self::default();
        f.lock().script = script.into_iter().collect();
        f
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.lock().seen.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Poster for FakePoster {
    async fn post(&self, url: &SecretUrl, payload: &Payload) -> Result<PostResponse, PostError> {
        let next = {
            let mut s = self.lock();
            s.seen.push(Recorded {
                url: url.clone(),
                payload: payload.clone(),
                at: tokio::time::Instant::now(),
            });
            s.script
                .pop_front()
                .unwrap_or(Scripted::Answer(PostResponse::status(200)))
        };
        match next {
            Scripted::Answer(r) => Ok(r),
            Scripted::Fail(e) => Err(PostError::Transport(e)),
            Scripted::Hang => std::future::pending().await,
        }
    }
}
