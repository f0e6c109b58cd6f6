//! The error of the API edges' reads: the server's (or the client's) message, as logged and
//! shown, with the HTTP status when the server answered, so that a caller can tell an
//! answer that will not change (404, 403) from one that may pass (5xx, 429, no answer).

/// A failed API request. Displays as its message alone (the text logs, notes and `explain`
/// have always shown).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// The HTTP status of the server's answer; `None`: no answer (connection, timeout,
    /// decoding).
    pub status: Option<u16>,
    pub message: String,
}

impl ApiError {
    /// An error with no HTTP answer (the client's own failure).
    pub fn other(message: impl Into<String>) -> Self {
        Self {
            status: None,
            message: message.into(),
        }
    }

    /// An answer with `status`.
    pub fn status(status: u16, message: impl Into<String>) -> Self {
        Self {
            status: Some(status),
            message: message.into(),
        }
    }

    /// 404.
    pub fn is_not_found(&self) -> bool {
        self.status == Some(404)
    }

    /// 409.
    pub fn is_conflict(&self) -> bool {
        self.status == Some(409)
    }

    /// 401 or 403: a missing permission, which no retry fixes.
    pub fn is_refused(&self) -> bool {
        matches!(self.status, Some(401 | 403))
    }

    /// May pass on a retry: no answer, 409, 429 or a 5xx.
    pub fn is_transient(&self) -> bool {
        match self.status {
            None => true,
            Some(s) => s == 409 || s == 429 || s >= 500,
        }
    }
}

/// A message with no HTTP answer (as [`ApiError::other`]).
impl From<String> for ApiError {
    fn from(message: String) -> Self {
        Self::other(message)
    }
}

impl From<&str> for ApiError {
    fn from(message: &str) -> Self {
        Self::other(message)
    }
}
