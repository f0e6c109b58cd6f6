//! A tiny HTTP/1.0 client for loopback probes (`/healthz`, `/readyz`, `/metrics`, a
//! workload's page) used by the tests, the demo and the benchmark.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// `GET path` from `addr` (e.g. `127.0.0.1:9102`): `(status, body)`, or `None` when nothing
/// answers.
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((code, body))
}
