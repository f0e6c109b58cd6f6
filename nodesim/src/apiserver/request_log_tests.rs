//! The request log is read settled: a request that arrived before a read is in it, even while
//! its handler is still running (here held by the configured response delay).

use super::ApiServer;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `GET path` and reads the whole answer.
async fn get(addr: String, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_being_answered_is_in_the_log_read_after_it_arrived() {
    let api = ApiServer::start().await.unwrap();
    api.set_response_delay(Some(Duration::from_millis(400)));
    let addr = api.url().trim_start_matches("http://").to_owned();
    let before = api.request_count();
    let client = tokio::spawn(get(addr, "/api/v1/namespaces/shop/pods/web-0"));
    // Arrived, not answered: held in the delay.
    let deadline = Instant::now() + Duration::from_secs(10);
    while api.state().records.answering.is_empty() {
        assert!(Instant::now() < deadline, "the request never arrived");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(api.state().records.requests.len(), before, "not logged yet");
    // The read waits for it.
    let log = api.requests();
    let last = log.last().expect("the GET in the log");
    assert_eq!(
        (last.method.as_str(), last.path.as_str(), last.status),
        ("GET", "/api/v1/namespaces/shop/pods/web-0", 404)
    );
    assert!(client.await.unwrap().starts_with("HTTP/1.1 404"));
    assert!(api.state().records.answering.is_empty());
}

#[tokio::test]
async fn on_a_current_thread_runtime_the_read_does_not_wait() {
    let api = ApiServer::start().await.unwrap();
    api.set_response_delay(Some(Duration::from_secs(30)));
    let addr = api.url().trim_start_matches("http://").to_owned();
    let client = tokio::spawn(get(addr, "/api/v1/pods"));
    while api.state().records.answering.is_empty() {
        tokio::task::yield_now().await;
    }
    // Waiting here would keep the server (on this thread) from ever answering.
    assert!(api.requests().is_empty());
    client.abort();
}
