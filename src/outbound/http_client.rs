//! What the two outgoing HTTP clients (the `http` reload action in `reload_client.rs` and the
//! notification webhooks in `notify/http_poster.rs`) read from an answer the same way.

use http_body_util::BodyExt;
use hyper::body::Incoming;

/// The first `limit` bytes of a response body, lossily decoded and trimmed (for an Event or a
/// log line quoting what the server said). Stops reading there: the caller drops the body,
/// and with it the connection, so a server cannot make the client take in more.
pub async fn body_prefix(mut body: Incoming, limit: usize) -> String {
    let mut prefix = Vec::new();
    while prefix.len() < limit {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    take_up_to(&mut prefix, data, limit);
                }
            }
            _ => break,
        }
    }
    String::from_utf8_lossy(&prefix).trim().to_owned()
}

/// Appends to `prefix` as much of `data` as keeps it within `limit` bytes (a frame may be
/// far larger than what is kept: only that much is copied).
fn take_up_to(prefix: &mut Vec<u8>, data: &[u8], limit: usize) {
    let room = limit.saturating_sub(prefix.len());
    prefix.extend_from_slice(&data[..data.len().min(room)]);
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

#[cfg(test)]
mod tests {
    use super::take_up_to;

    #[test]
    fn a_large_frame_is_copied_only_up_to_the_limit() {
        let mut prefix = b"ab".to_vec();
        take_up_to(&mut prefix, &vec![b'x'; 1 << 20], 8);
        assert_eq!(prefix, b"abxxxxxx");
        take_up_to(&mut prefix, b"more", 8);
        assert_eq!(prefix.len(), 8);
    }
}
