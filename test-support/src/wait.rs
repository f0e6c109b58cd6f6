//! The one set of waiting helpers every test uses: poll with a deadline, never a bare
//! sleep, never a timed assertion. Deadlines are tokio's clock in async helpers, so they
//! also hold in virtual time under a paused clock: there, each look moves the clock by
//! [`POLL`] (tokio advances a paused clock to the next timer when every task is idle), so a
//! back-off or a recount that must fire does; [`until_yielding`] is for a loop whose timers
//! must not.
//!
//! The rules the suite keeps with them:
//! - an absence ([`never`]) follows a positive control in the same test: the same change
//!   acted on where it must be (a pod beside, a change after), so that a harness that sees
//!   nothing fails instead of passing; its window is one of the named `*_QUIET` below;
//! - a test that cannot run here says so in one line ([`skipped`]), and fails instead under
//!   `hack/test.sh` ([`root_or_skip`], [`skip_unless_required`]);
//! - every process a test starts gets default signal dispositions
//!   (`nodesim::runtime::default_signals`), whatever `nohup`, `setsid` or a shell left.
//!
//! The integration tests' support by topic is in `tests/support/` (`http.rs`, `image.rs`,
//! `notify.rs`, `watch.rs`, `runtime/`, `controller_process.rs`, `rng.rs`);
//! `tests/common/` is the simulated node harness, which re-exports this module.

use std::process::{Child, ExitStatus};
use std::time::Duration;

/// How often the helpers look again.
pub const POLL: Duration = Duration::from_millis(10);

// How long a test watches for something that must not happen ([`never`]), named by what
// would have happened by then. Each absence check follows a positive control in the same
// test (the same change acted on where it must be), so the window only has to cover the
// time between that control and the effect that must not come.

/// An agent action (signal, HTTP reload, eviction) that must not come: with `--debounce 0s`
/// the agent acts within milliseconds of the kubelet's write.
pub const AGENT_QUIET: Duration = Duration::from_millis(1500);
/// A controller action (rollout patch, env eviction, Event) that must not come: the
/// controller acts after a watch event and a GET, within its coalescing.
pub const CONTROLLER_QUIET: Duration = Duration::from_secs(3);
/// A nudge, or the SIGHUP a kubelet sync gives, that must not come: past the controller's
/// re-nudges 1 s and 3 s after a change.
pub const NUDGE_QUIET: Duration = Duration::from_secs(5);

/// Polls `f` until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn eventually<T>(what: &str, timeout: Duration, f: impl FnMut() -> Option<T>) -> T {
    eventually_showing(what, timeout, f, String::new).await
}

/// [`eventually`] while `child` runs: panics at once when it exits first, and in both
/// panics shows `log()` (e.g. the child's stderr).
pub async fn eventually_while_running<T>(
    what: &str,
    timeout: Duration,
    child: &mut Child,
    log: impl Fn() -> String,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let probe = || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("exited with {status} while waiting for: {what}\n{}", log());
        }
        f()
    };
    eventually_showing(what, timeout, probe, &log).await
}

/// Waits up to `timeout` for `child` to exit; then kills it. Returns how it ended.
pub async fn wait_exit(child: &mut Child, timeout: Duration) -> ExitStatus {
    match first(timeout, || child.try_wait().ok().flatten()).await {
        Some(status) => status,
        None => {
            let _ = child.kill();
            child.wait().expect("wait for a killed child")
        }
    }
}

/// The one poll loop on tokio's clock: `f`'s first `Some` within `timeout`, else `None`
/// (`f` is asked once more at the deadline).
async fn first<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// [`first`] without a runtime: the wall clock, a thread sleep between looks.
fn first_blocking<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// [`eventually`], with `context()` (a log) below the panic after `timeout`.
pub async fn eventually_showing<T>(
    what: &str,
    timeout: Duration,
    f: impl FnMut() -> Option<T>,
    context: impl Fn() -> String,
) -> T {
    first(timeout, f).await.unwrap_or_else(|| {
        panic!(
            "timed out after {timeout:?} waiting for: {what}\n{}",
            context()
        )
    })
}

/// [`eventually`] for a condition.
pub async fn until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    eventually(what, timeout, || done().then_some(())).await
}

/// [`until`] without moving a paused clock: lets the other tasks run (`yield_now`) between
/// looks, for 10 s of wall clock. For a loop under test whose timers (a debounce, a grace)
/// must not fire meanwhile.
pub async fn until_yielding(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after 10s of wall clock waiting for: {what}"
        );
        tokio::task::yield_now().await;
    }
}

/// Checks for `window` that `f` stays false.
pub async fn never(what: &str, window: Duration, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < deadline {
        assert!(!f(), "it happened, but must not: {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// Whether `f` holds within `timeout` (polled): for a caller that fails with more context
/// than a panic here would have (a container's log), or that cleans up.
pub async fn within(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    first(timeout, || f().then_some(())).await.is_some()
}

/// [`within`] for code without a runtime (cleanup in `Drop`, setup before one).
pub fn within_blocking(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    first_blocking(timeout, || f().then_some(())).is_some()
}

/// [`eventually`] for tests without a runtime.
pub fn eventually_blocking<T>(what: &str, timeout: Duration, f: impl FnMut() -> Option<T>) -> T {
    first_blocking(timeout, f)
        .unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for: {what}"))
}

/// Whether the tests run as root (`/proc/self` belongs to the effective uid).
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// `true` when running as root. Otherwise, under `hack/test.sh` (`RELOADLET_REQUIRE_ROOT=1`)
/// the test fails: a suite that skipped its privileged half must not pass; outside it the
/// test is [`skipped`]: `if !root_or_skip() { return; }`.
pub fn root_or_skip() -> bool {
    let root = is_root();
    if !root {
        skip_unless_required(
            "RELOADLET_REQUIRE_ROOT",
            "needs root (run hack/test.sh as root, where skipping is an error)",
        );
    }
    root
}

/// A test that cannot run here: fails when `require` (e.g. `RELOADLET_REQUIRE_IMAGE`, which
/// `hack/test.sh` sets) is `1`, else says it is [`skipped`] and why.
pub fn skip_unless_required(require: &str, why: impl std::fmt::Display) {
    assert!(
        std::env::var_os(require).is_none_or(|v| v != "1"),
        "{require}=1 (hack/test.sh) forbids skipping this test, which {why}"
    );
    skipped(why);
}

/// The one way a test says it did not run: one line, `skipped <test>: <why>`, written to the
/// process's standard error itself, past libtest's capture, so that it shows in the output
/// of a passing run (an `eprintln!` would be swallowed with the test's other output).
pub fn skipped(why: impl std::fmt::Display) {
    use std::io::Write;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr().lock(), "skipped {test}: {why}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn under_a_paused_clock_a_wait_moves_it_until_done_and_fails_once_its_time_is_up() {
        let start = tokio::time::Instant::now();
        let at = start + Duration::from_secs(3);
        until("three seconds", Duration::from_secs(60), || {
            tokio::time::Instant::now() >= at
        })
        .await;
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        let never = tokio::spawn(until("never", Duration::from_secs(60), || false));
        assert!(never.await.unwrap_err().is_panic());
        assert_eq!(start.elapsed(), Duration::from_secs(63));
    }

    #[tokio::test(start_paused = true)]
    async fn a_yielding_wait_lets_tasks_run_without_moving_the_clock() {
        let start = tokio::time::Instant::now();
        let steps = Arc::new(AtomicU32::new(0));
        let counter = steps.clone();
        tokio::spawn(async move {
            for _ in 0..5 {
                counter.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        });
        until_yielding("five steps", || steps.load(Ordering::Relaxed) == 5).await;
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test]
    async fn a_wait_sees_a_blocking_thread_finish_and_an_absence_fails_when_it_happens() {
        let done = Arc::new(AtomicU32::new(0));
        let flag = done.clone();
        tokio::task::spawn_blocking(move || {
            std::thread::sleep(Duration::from_millis(30));
            flag.store(1, Ordering::Relaxed);
        });
        until("the blocking thread", Duration::from_secs(10), || {
            done.load(Ordering::Relaxed) == 1
        })
        .await;
        let seen = tokio::spawn(async move {
            never("the flag", Duration::from_secs(1), || {
                done.load(Ordering::Relaxed) == 1
            })
            .await
        });
        assert!(seen.await.unwrap_err().is_panic());
    }
}
