//! No log line carries a webhook URL's secret part, on any path (sent, retried, refused,
//! redirected, unreachable, dropped, deduped). Alone in its own test binary: tracing's
//! per-callsite interest cache is shared by the whole process, so a scoped subscriber
//! only sees every event when no other test runs beside it.

#[path = "support/notify.rs"]
mod notify_support;

use notify_support::*;
use reloadlet::outbound::notify::Format;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------- no URL in the logs

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn no_log_line_carries_the_webhook_url() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let svc = Service::start([
        Reply::Status(500, "oops"),
        Reply::Status(403, "invalid_token"),
        Reply::Status(302, ""),
    ])
    .await;
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!(
            "http://127.0.0.1:{}/services/{TOKEN}",
            l.local_addr().unwrap().port()
        )
    };
    let mut s = settings(&[svc.url(), refused], Format::Slack);
    s.queue_capacity = 1;
    tracing::info!("{}", s.describe());
    tracing::info!(?s, "settings");
    let (n, m, cancel) = start(&s);
    // a is pushed out of both queues by b (a full queue); the second b is deduped.
    n.notify(&failure("web-0", "cm-a"));
    n.notify(&failure("web-0", "cm-b"));
    n.notify(&failure("web-1", "cm-b"));
    assert_eq!((m.dropped.get(), m.deduped.get()), (2, 1));
    // b: 500 then 403. Nobody listens on the other webhook: 4 attempts each time.
    until("b", Duration::from_secs(20), || delivered(&m) == 2).await;
    // c: a redirect, not followed.
    n.notify(&failure("web-0", "cm-c"));
    until("c", Duration::from_secs(20), || delivered(&m) == 4).await;
    // d: 200.
    n.notify(&failure("web-0", "cm-d"));
    until("d", Duration::from_secs(20), || delivered(&m) == 6).await;
    assert_eq!(m.sent.get(), 1);
    cancel.cancel();

    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("http://127.0.0.1/…"),
        "the redacted form is logged:\n{text}"
    );
    assert!(
        text.contains("invalid_token"),
        "the refusal is logged:\n{text}"
    );
    for secret in ["SECRETTOKEN", "/services", "key=k1"] {
        assert!(!text.contains(secret), "{secret} leaked:\n{text}");
    }
}
