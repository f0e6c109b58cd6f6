//! The async runtime both modes run on (the agent's volume → signal path has its own thread,
//! `agent::hot_thread`). In the agent, its worker threads run at `SCHED_IDLE` by default
//! (`--background-sched`, host/sched.rs): they carry what follows a signal — the log line,
//! metrics, the Event, the notification — and the API watches, evictions and the HTTP server,
//! none of which must take a CPU from the process just signalled. The blocking threads keep
//! the normal policy: they also carry the signals that cannot take the hot path (a process
//! not looked up yet, a kept process that exited).

use crate::config::agent::BackgroundSched;
use std::cell::Cell;

/// One worker, at most four blocking threads (/proc scans; a node agent never needs many at
/// once): each thread is another stack (and, with glibc, malloc arena) in the RSS.
pub fn build(background: BackgroundSched) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .worker_threads(1)
        .max_blocking_threads(4)
        .enable_all();
    if background == BackgroundSched::Idle {
        // Only worker threads park (tokio `runtime/scheduler/multi_thread/worker.rs`, the one
        // caller of `before_park`); blocking threads never do. A worker parks as soon as it
        // has nothing to run, so it is switched before its first follow-up work.
        builder.on_thread_park(lower_this_worker_once);
    }
    builder.build()
}

thread_local! {
    /// Whether this worker thread was switched already (one system call per thread, not per
    /// park).
    static SWITCHED: Cell<bool> = const { Cell::new(false) };
}

fn lower_this_worker_once() {
    if SWITCHED.get() {
        return;
    }
    SWITCHED.set(true);
    if let Err(e) = crate::host::sched::become_idle() {
        tracing::warn!(error = %e, "cannot switch the runtime's worker thread to SCHED_IDLE (--background-sched idle); it keeps the normal policy");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (worker, blocking thread) policies of a runtime built with `background`, each looked at
    /// after the worker has parked once.
    fn policies(background: BackgroundSched) -> (bool, bool) {
        let runtime = build(background).unwrap();
        runtime.block_on(async {
            // Spawned tasks run on the worker (block_on runs this future on the test's thread).
            let first = tokio::spawn(async { crate::host::sched::is_idle().unwrap() });
            let _ = first.await;
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            let worker = tokio::spawn(async { crate::host::sched::is_idle().unwrap() })
                .await
                .unwrap();
            let blocking = tokio::task::spawn_blocking(|| crate::host::sched::is_idle().unwrap())
                .await
                .unwrap();
            (worker, blocking)
        })
    }

    #[test]
    fn the_worker_runs_idle_and_blocking_threads_do_not() {
        assert_eq!(policies(BackgroundSched::Idle), (true, false));
        assert!(
            !crate::host::sched::is_idle().unwrap(),
            "the caller's thread is untouched"
        );
    }

    #[test]
    fn normal_leaves_every_thread_alone() {
        assert_eq!(policies(BackgroundSched::Normal), (false, false));
    }
}
