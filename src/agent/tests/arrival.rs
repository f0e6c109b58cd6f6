//! A pod's arrival: the pass over /proc that keeps its signal targets' main processes, `/readyz`
//! after the first list's pass, and its policy taken in for its decisions; handlers driven
//! with the fakes of [`crate::ports::fake`], as in [`super`].

use super::{pod, world, world_with, UID};
use crate::agent::*;
use crate::ports::fake;

/// Polls `cond` on the wall clock (the warm pass runs on a real blocking thread, outside the
/// paused clock) for at most 10 s.
fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[tokio::test(start_paused = true)]
async fn ready_only_once_the_first_pod_lists_signal_targets_are_looked_up() {
    use std::sync::atomic::Ordering;
    /// Ends the held warm pass however the test ends (the runtime waits for it).
    struct Release(Arc<fake::Processes>);
    impl Drop for Release {
        fn drop(&mut self) {
            self.0.hold_warm.store(false, Ordering::Relaxed);
        }
    }
    let mut w = world(None);
    w.processes.hold_warm.store(true, Ordering::Relaxed);
    let release = Release(w.processes.clone());
    w.agent.on_pod(PodUpdate::Resync(vec![pod("signal")]));
    wait_for("the warm pass to begin", || {
        w.processes.warms.load(Ordering::Relaxed) == 1
    });
    assert!(
        !w.health.is_ready(),
        "ready while the warm pass still runs: the first swaps would scan /proc"
    );
    drop(release);
    wait_for("/readyz after the warm pass", || w.health.is_ready());
}

#[tokio::test(start_paused = true)]
async fn pods_outside_the_namespace_filter_are_not_looked_up_ahead() {
    use std::sync::atomic::Ordering;
    let mut w = world_with(None, |s| {
        s.scope.namespaces.exclude.insert("web".into());
    });
    w.agent.on_pod(PodUpdate::Resync(vec![pod("signal")]));
    w.agent.on_pod(PodUpdate::Apply(pod("signal")));
    assert!(w.health.is_ready());
    assert_eq!(w.processes.warms.load(Ordering::Relaxed), 0);
    // In scope, the same pod is looked up.
    let mut w = world(None);
    w.agent.on_pod(PodUpdate::Resync(vec![pod("signal")]));
    wait_for("/readyz after the warm pass", || w.health.is_ready());
    assert_eq!(w.processes.warms.load(Ordering::Relaxed), 1);
}

#[tokio::test(start_paused = true)]
async fn each_pod_version_in_scope_is_taken_in_by_the_decisions_on_arrival() {
    // In scope: the policy checked on arrival is kept for the first swap's decision.
    let mut w = world(None);
    w.agent.on_pod(PodUpdate::Resync(vec![pod("signal")]));
    assert_eq!(w.agent.pods.decided_pods(), 1);
    let mut next = pod("signal");
    next.phase = "Pending".into();
    w.agent.on_pod(PodUpdate::Apply(next));
    assert_eq!(w.agent.pods.decided_pods(), 1);
    w.agent.on_pod(PodUpdate::Delete { uid: UID.into() });
    assert_eq!(w.agent.pods.decided_pods(), 0);
    // Outside the namespace filter nothing is parsed or kept.
    let mut w = world_with(None, |s| {
        s.scope.namespaces.exclude.insert("web".into());
    });
    w.agent.on_pod(PodUpdate::Resync(vec![pod("signal")]));
    w.agent.on_pod(PodUpdate::Apply(pod("signal")));
    assert_eq!(w.agent.pods.decided_pods(), 0);
}

#[tokio::test(start_paused = true)]
async fn ready_at_once_when_the_first_pod_list_has_nothing_to_signal() {
    let mut w = world(None);
    w.agent.on_pod(PodUpdate::Resync(vec![pod("evict")]));
    assert!(w.health.is_ready());
    assert_eq!(
        w.processes.warms.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}
