//! What the two outgoing HTTP clients (the `http` reload action in `reload_client.rs` and the
//! notification webhooks in `notify/http_poster.rs`) read from an answer the same way.

use http_body_util::BodyExt;
use hyper::body::Incoming;

/// The first `limit` bytes of a response body, lossily decoded and trimmed (for an Event or a
/// log line quoting what the server said). Stops reading there.
pub async fn body_prefix(mut body: Incoming, limit: usize) -> String {
    let mut prefix = Vec::new();
    while prefix.len() < limit {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    prefix.extend_from_slice(data);
                }
            }
            _ => break,
        }
    }
    prefix.truncate(limit);
    String::from_utf8_lossy(&prefix).trim().to_owned()
}

/// An error and its sources, `a: b: c`.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
