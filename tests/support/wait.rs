//! The one set of waiting helpers every test uses: poll with a deadline, never a bare
//! sleep, never a timed assertion. Deadlines are tokio's clock in async helpers, so they
//! also hold in virtual time under a paused clock.
#![allow(dead_code)] // each test binary uses a different part

use std::time::Duration;

/// How often the helpers look again.
const POLL: Duration = Duration::from_millis(10);

/// Polls `f` until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn eventually<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// [`eventually`] for a condition.
pub async fn until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    eventually(what, timeout, || done().then_some(())).await
}

/// Checks for `window` that `f` stays false.
pub async fn never(what: &str, window: Duration, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < deadline {
        assert!(!f(), "it happened, but must not: {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// [`eventually`] for tests without a runtime.
pub fn eventually_blocking<T>(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        std::thread::sleep(POLL);
    }
}

/// Whether the tests run as root (`/proc/self` belongs to the effective uid).
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// `true` when running as root; otherwise says the test is skipped: `if !root_or_skip() {
/// return; }`.
pub fn root_or_skip() -> bool {
    let root = is_root();
    if !root {
        eprintln!("skipped: needs root");
    }
    root
}
