//! The reload endpoint edge (`outbound::reload_client::ReloadClient`).

use futures::future::BoxFuture;

/// One reload request to a pod (`reloadlet.io/action: http`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpCall {
    pub method: crate::core::annotations::HttpMethod,
    /// `<scheme>://<pod IP>:<port><path>`.
    pub url: String,
    pub body: String,
}

/// What the pod answered: the status and the first bytes of the body (the first
/// [`HTTP_BODY_READ`] bytes at most, lossy UTF-8, trimmed). Tenant text: quoted only through
/// `execute::http::quoted_body`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpAnswer {
    pub status: u16,
    pub body_prefix: String,
}

/// The most bytes of a reload endpoint's answer body that are read; the client then hangs
/// up. (Of those, at most `execute::http::QUOTED_BODY_BYTES` are quoted.)
pub const HTTP_BODY_READ: usize = 4096;

/// Why a reload request got no HTTP answer. Each holds the client's error and its causes
/// as one line (`a: b: c`), the text logged and quoted in `ReloadFailed`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HttpCallError {
    /// The request could not be built from the call (the client refuses the URL).
    #[error("{0}")]
    Request(String),
    /// Connection refused or reset, TLS failure, the connection closed before an answer.
    #[error("{0}")]
    Transport(String),
}

/// Sends reload requests (`reload_client::ReloadClient`). Implementations need no timeout:
/// the executor bounds each call.
pub trait HttpCaller: Send + Sync {
    fn call(&self, call: &HttpCall) -> BoxFuture<'_, Result<HttpAnswer, HttpCallError>>;
}
