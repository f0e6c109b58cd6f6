//! The kubelet's crash-loop back-off: when a container whose main process exited may start
//! again in the same pod.
//!
//! Modelled on the real code, read before writing this:
//! - `pkg/kubelet/kuberuntime/kuberuntime_manager.go`, `doBackOff`: the key is the pod and
//!   the container; `ts` is the exited container's `FinishedAt`; if
//!   `backOff.IsInBackOffSince(key, ts)` the start is refused (`CrashLoopBackOff`), else
//!   `backOff.Next(key, ts)` and the container starts at once — so the first restart is
//!   immediate.
//! - `pkg/kubelet/kubelet.go`: `backOffPeriod = 10 s`, `MaxContainerBackOff = 300 s`,
//!   `flowcontrol.NewBackOff(backOffPeriod, MaxContainerBackOff)`.
//! - client-go `util/flowcontrol/backoff.go`: `IsInBackOffSince` is
//!   `now − eventTime < entry.backoff` unless the entry `hasExpired`; `Next` starts a new
//!   entry at the initial duration when there is none or it `hasExpired`, else doubles it up
//!   to the max, and sets `lastUpdate = now`; `hasExpired(eventTime, lastUpdate, max)` is
//!   `eventTime − lastUpdate > 2 × max` — a container that ran 10 min since its last start
//!   begins again at 10 s.
//!
//! Exit codes do not matter under `restartPolicy: Always` (exit 0 is backed off too).
//! No jitter: the client-go version nodesim follows has none for this back-off.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// `backOffPeriod` (pkg/kubelet/kubelet.go).
pub const INITIAL: Duration = Duration::from_secs(10);
/// `MaxContainerBackOff` (pkg/kubelet/kubelet.go).
pub const MAX: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, Debug)]
struct Entry {
    backoff: Duration,
    last_update: Instant,
}

/// Per-container back-off entries of one kubelet (key: pod UID + container name).
#[derive(Debug)]
pub struct CrashLoopBackOff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

impl Default for CrashLoopBackOff {
    fn default() -> Self {
        Self::new(INITIAL, MAX)
    }
}

impl CrashLoopBackOff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            entries: HashMap::new(),
        }
    }

    /// `hasExpired`: `event − last_update > 2 × max`.
    fn expired(&self, event: Instant, entry: &Entry) -> bool {
        event.saturating_duration_since(entry.last_update) > self.max.saturating_mul(2)
    }

    /// `doBackOff` for a container that finished at `finished`: `None` when it may start now
    /// (the entry moves on, as `Next` does), else how long it must still wait.
    pub fn try_start(&mut self, key: &str, finished: Instant, now: Instant) -> Option<Duration> {
        if let Some(entry) = self.entries.get(key) {
            let since = now.saturating_duration_since(finished);
            if !self.expired(finished, entry) && since < entry.backoff {
                return Some(entry.backoff - since);
            }
        }
        let fresh = Entry {
            backoff: self.initial,
            last_update: now,
        };
        let next = match self.entries.get(key) {
            Some(e) if !self.expired(finished, e) => Entry {
                backoff: e.backoff.saturating_mul(2).min(self.max),
                last_update: now,
            },
            _ => fresh,
        };
        self.entries.insert(key.to_owned(), next);
        None
    }

    /// The current back-off of `key` (`Get`), zero when it has none.
    pub fn current(&self, key: &str) -> Duration {
        self.entries.get(key).map(|e| e.backoff).unwrap_or_default()
    }

    /// Forgets the entries of a pod that is gone.
    pub fn forget_pod(&mut self, pod_uid: &str) {
        let prefix = format!("{pod_uid}/");
        self.entries.retain(|k, _| !k.starts_with(&prefix));
    }
}

/// The key of one container of one pod.
pub fn key(pod_uid: &str, container: &str) -> String {
    format!("{pod_uid}/{container}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn first_restart_at_once_then_ten_seconds_doubling_to_five_minutes() {
        let mut b = CrashLoopBackOff::default();
        let t0 = Instant::now();
        // first exit: no entry, starts at once; the entry is 10 s from now on
        assert_eq!(b.try_start("p/c", t0, t0), None);
        assert_eq!(b.current("p/c"), S(10));
        // exits again 1 s after its start: waits out the 10 s from its exit
        let f1 = t0 + S(1);
        assert_eq!(b.try_start("p/c", f1, f1), Some(S(10)));
        assert_eq!(b.try_start("p/c", f1, f1 + S(4)), Some(S(6)));
        assert_eq!(b.try_start("p/c", f1, f1 + S(10)), None);
        assert_eq!(b.current("p/c"), S(20));
        // each quick exit doubles, up to 300 s
        let mut at = f1 + S(10);
        for want in [40, 80, 160, 300, 300] {
            let finished = at + S(1);
            let wait = b.try_start("p/c", finished, finished).expect("backed off");
            at = finished + wait;
            assert_eq!(b.try_start("p/c", finished, at), None);
            assert_eq!(b.current("p/c"), S(want));
        }
    }

    #[test]
    fn a_second_exit_within_ten_minutes_waits_however_long_it_ran() {
        let mut b = CrashLoopBackOff::default();
        let t0 = Instant::now();
        assert_eq!(b.try_start("p/c", t0, t0), None);
        // ran 60 s, then stopped from outside: the window counts from its exit
        let f = t0 + S(60);
        assert_eq!(b.try_start("p/c", f, f), Some(S(10)));
        assert_eq!(b.try_start("p/c", f, f + S(10)), None);
        assert_eq!(b.current("p/c"), S(20));
        // ran 9 min since that start: still inside 2 x 300 s, 20 s now
        let f2 = f + S(10) + S(540);
        assert_eq!(b.try_start("p/c", f2, f2), Some(S(20)));
    }

    #[test]
    fn ten_minutes_of_running_resets_the_entry() {
        let mut b = CrashLoopBackOff::default();
        let t0 = Instant::now();
        assert_eq!(b.try_start("p/c", t0, t0), None);
        let f = t0 + S(1);
        assert_eq!(b.try_start("p/c", f, f + S(10)), None);
        assert_eq!(b.current("p/c"), S(20));
        // ran for more than 2 × 300 s since that start: back to 10 s
        let started = f + S(10);
        let f2 = started + S(601);
        assert_eq!(b.try_start("p/c", f2, f2), None);
        assert_eq!(b.current("p/c"), S(10));
    }

    #[test]
    fn containers_and_pods_are_apart() {
        let mut b = CrashLoopBackOff::default();
        let t0 = Instant::now();
        assert_eq!(b.try_start(&key("p", "a"), t0, t0), None);
        assert_eq!(b.try_start(&key("p", "b"), t0, t0), None);
        assert!(b.try_start(&key("p", "a"), t0, t0).is_some());
        b.forget_pod("p");
        assert_eq!(b.try_start(&key("p", "a"), t0, t0), None);
    }
}
