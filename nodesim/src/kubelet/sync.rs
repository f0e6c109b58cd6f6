//! When the simulated kubelet syncs a pod — and so re-projects its ConfigMap, Secret and
//! projected volumes from the API's current objects.
//!
//! The real kubelet (kubernetes/kubernetes):
//! - `pkg/kubelet/pod_workers.go` `completeWork`: after every sync of a pod without
//!   error, the pod is re-enqueued after `wait.Jitter(resyncInterval,
//!   workerResyncIntervalJitterFactor)` — `resyncInterval` is `syncFrequency` (default
//!   1 m), the jitter factor 0.5, so the next periodic sync comes 1–1.5 × syncFrequency
//!   after the LAST sync, whatever triggered it (the timer restarts after an immediate
//!   sync too). After a sync that changed the pod's phase (Pending → Running) it is
//!   re-enqueued with no delay (`case phaseTransition: Enqueue(podUID, 0)`).
//! - `pkg/kubelet/kubelet.go` `syncLoop`: a 1 s `syncTicker`; `syncLoopIteration` takes
//!   the pods whose work-queue time has come (`getPodsToSync`) and `HandlePodSyncs` them,
//!   so a due sync waits for the next tick.
//! - `pkg/kubelet/config/config.go` `podsDifferSemantically`: a pod update from the API is
//!   passed to `HandlePodUpdates` (an immediate `SyncPod`) only when spec, labels,
//!   deletionTimestamp, deletionGracePeriodSeconds or annotations differ, annotations
//!   compared by `isAnnotationMapEqual`, which ignores the kubelet-local keys
//!   (`kubernetes.io/config.source`, `…/config.mirror`, `…/config.seen`). A status-only
//!   change updates the kubelet's copy and syncs nothing.
//! - `SyncPod` → `volumeManager.WaitForAttachAndMount` → `ReprocessPod` →
//!   `MarkRemountRequired`: configMap/secret/projected volumes (`RequiresRemount`) are
//!   written again from the configmap/secret manager's object; with the default `Watch`
//!   strategy that object is already current (one reflector per referenced object), so a
//!   sync projects what the API holds at that moment. A ConfigMap change by itself
//!   triggers no sync (kubernetes#30189; the documented workaround is changing a pod
//!   annotation).
//! - The re-projection is not done by `SyncPod` itself but by the volume manager's two loops
//!   (`pkg/kubelet/volumemanager/volume_manager.go`, both `wait.Until` with a 100 ms sleep:
//!   `desiredStateOfWorldPopulatorLoopSleepPeriod`, `reconcilerLoopSleepPeriod`).
//!   `WaitForAttachAndMount` calls `ReprocessPod`, which only marks the pod for the
//!   populator; the populator's next pass (`populator/desired_state_of_world_populator.go`
//!   `processPodVolumes`) marks every volume of the pod remount-required at once
//!   (`MarkRemountRequired`); the reconciler's next pass after that
//!   (`reconciler/reconciler_common.go` `mountOrAttachVolumes`) starts one `MountVolume`
//!   per volume, each in its own goroutine (`nestedpendingoperations.Run`), ending in the
//!   AtomicWriter. `WaitForAttachAndMount` itself returns at once: the volumes are still
//!   mounted. So a sync swaps the pod's volumes 0–200 ms after it, all in one reconciler
//!   pass ([`remount_at`]).

use k8s_openapi::api::core::v1::Pod;
use rand::Rng;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How the simulated kubelet decides to re-project volumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// TEST SHORTCUT, not the kubelet's behaviour: every ConfigMap/Secret change is
    /// projected into every pod that uses it at once (after `sync_delay`). What most
    /// tests want: they exercise reloadlet, not the kubelet's schedule.
    ProjectOnChange,
    /// The kubelet's real timing (module docs): a periodic sync per pod every
    /// `sync_frequency` × jitter 0.5 (restarted after every sync), an immediate sync
    /// when the pod object differs semantically, re-projection from the API's current
    /// objects at sync time only.
    Faithful {
        /// The kubelet's `syncFrequency` (`--sync-frequency`, default 1 m).
        sync_frequency: Duration,
    },
}

impl SyncMode {
    /// The kubelet's defaults: faithful timing with `syncFrequency` 1 m.
    pub fn kubelet_default() -> Self {
        SyncMode::Faithful {
            sync_frequency: DEFAULT_SYNC_FREQUENCY,
        }
    }
}

/// `KubeletConfiguration.syncFrequency` default (`pkg/kubelet/apis/config/v1beta1/defaults.go`).
pub const DEFAULT_SYNC_FREQUENCY: Duration = Duration::from_secs(60);

/// `workerResyncIntervalJitterFactor` in pod_workers.go.
pub const RESYNC_JITTER_FACTOR: f64 = 0.5;

/// `syncLoop`'s ticker period.
pub const SYNC_TICK: Duration = Duration::from_secs(1);

/// `desiredStateOfWorldPopulatorLoopSleepPeriod` (`pkg/kubelet/volumemanager/volume_manager.go`).
pub const POPULATOR_PERIOD: Duration = Duration::from_millis(100);
/// `reconcilerLoopSleepPeriod` (same file).
pub const RECONCILER_PERIOD: Duration = Duration::from_millis(100);

/// The first pass of a loop started at `start` with `period` strictly after `after`.
fn next_pass(start: Instant, period: Duration, after: Instant) -> Instant {
    let since = after.saturating_duration_since(start).as_nanos();
    let n = since / period.as_nanos() + 1;
    start + Duration::from_nanos(u64::try_from(n * period.as_nanos()).unwrap_or(u64::MAX))
}

/// When the volume manager swaps the volumes of a pod synced at `synced`: the reconciler's
/// first pass after the populator's first pass after the sync (module docs); the loops
/// started at `populator` and `reconciler`.
pub fn remount_at(populator: Instant, reconciler: Instant, synced: Instant) -> Instant {
    let populated = next_pass(populator, POPULATOR_PERIOD, synced);
    next_pass(reconciler, RECONCILER_PERIOD, populated)
}

/// A random phase for one of the volume manager's loops (`[0, period)` after `start`).
pub fn loop_start(start: Instant, period: Duration) -> Instant {
    start + period.mul_f64(rand::rng().random::<f64>())
}

/// One `..data` swap of a volume by a sync, for tests and benchmarks.
#[derive(Clone, Debug)]
pub struct SwapRecord {
    pub volume: String,
    /// `CLOCK_MONOTONIC` just after the swap ([`crate::clock::monotonic_ns`]).
    pub monotonic_ns: i128,
}

/// Why a pod was synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncReason {
    /// The first sync: volumes set up, containers started.
    Start,
    /// The pod object changed semantically.
    PodUpdate,
    /// The periodic resync came due.
    Periodic,
    /// The sync right after the pod's phase changed (Pending → Running).
    PhaseTransition,
    /// [`crate::kubelet::SimKubelet::resync_all`].
    Forced,
    /// [`SyncMode::ProjectOnChange`]: a ConfigMap/Secret changed (test shortcut).
    SourceChanged,
}

/// One sync of one pod, for tests.
#[derive(Clone, Debug)]
pub struct SyncRecord {
    pub reason: SyncReason,
    pub at: Instant,
}

/// `wait.Jitter(d, factor)`: `d + rand[0,1) × factor × d`.
pub fn jitter(d: Duration, factor: f64) -> Duration {
    let extra: f64 = rand::rng().random::<f64>() * factor;
    d + d.mul_f64(extra)
}

/// The first `syncLoop` tick at or after `due` (ticks every [`SYNC_TICK`] from `start`).
pub fn next_tick(start: Instant, due: Instant) -> Instant {
    let since = due.saturating_duration_since(start);
    let tick = SYNC_TICK.as_nanos();
    let n = since.as_nanos().div_ceil(tick);
    start + Duration::from_nanos(u64::try_from(n * tick).unwrap_or(u64::MAX))
}

/// Annotation keys the kubelet sets itself and ignores when comparing pods
/// (`pkg/kubelet/config/config.go` `localAnnotations`).
const LOCAL_ANNOTATIONS: &[&str] = &[
    "kubernetes.io/config.source",
    "kubernetes.io/config.mirror",
    "kubernetes.io/config.seen",
];

fn without_local(a: Option<&BTreeMap<String, String>>) -> BTreeMap<&str, &str> {
    a.into_iter()
        .flatten()
        .filter(|(k, _)| !LOCAL_ANNOTATIONS.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// The kubelet's `podsDifferSemantically`: spec, labels, deletion fields or annotations
/// (kubelet-local keys ignored) — never status.
pub fn differs_semantically(old: &Pod, new: &Pod) -> bool {
    old.spec != new.spec
        || old.metadata.labels != new.metadata.labels
        || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || old.metadata.deletion_grace_period_seconds != new.metadata.deletion_grace_period_seconds
        || without_local(old.metadata.annotations.as_ref())
            != without_local(new.metadata.annotations.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;

    fn annotated(pairs: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.annotations = Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        p
    }

    #[test]
    fn status_and_local_annotations_do_not_count() {
        let a = annotated(&[("x", "1")]);
        let mut b = a.clone();
        b.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        assert!(!differs_semantically(&a, &b));
        let c = annotated(&[("x", "1"), ("kubernetes.io/config.seen", "now")]);
        assert!(!differs_semantically(&a, &c));
        assert!(differs_semantically(&a, &annotated(&[("x", "2")])));
        let mut d = a.clone();
        d.metadata.deletion_grace_period_seconds = Some(30);
        assert!(differs_semantically(&a, &d));
    }

    #[test]
    fn jitter_stays_within_one_and_a_half_times() {
        for _ in 0..100 {
            let j = jitter(Duration::from_secs(60), RESYNC_JITTER_FACTOR);
            assert!(j >= Duration::from_secs(60) && j < Duration::from_secs(90));
        }
    }

    #[test]
    fn a_sync_is_remounted_by_the_reconciler_pass_after_the_populator_pass() {
        let s = Instant::now();
        let ms = Duration::from_millis;
        // Populator passes at 30, 130, …; reconciler passes at 70, 170, …
        let (p, r) = (s + ms(30), s + ms(70));
        assert_eq!(remount_at(p, r, s + ms(100)), s + ms(170));
        assert_eq!(remount_at(p, r, s + ms(140)), s + ms(270));
        // A pass at the very instant of the sync does not see it.
        assert_eq!(remount_at(p, r, s + ms(130)), s + ms(270));
        for _ in 0..100 {
            let (p, r) = (loop_start(s, ms(100)), loop_start(s, ms(100)));
            let at = remount_at(p, r, s + ms(1000));
            assert!(at > s + ms(1000) && at <= s + ms(1200), "{:?}", at - s);
        }
    }

    #[test]
    fn due_syncs_wait_for_the_next_tick() {
        let s = Instant::now();
        assert_eq!(
            next_tick(s, s + Duration::from_millis(1500)),
            s + Duration::from_secs(2)
        );
        assert_eq!(
            next_tick(s, s + Duration::from_secs(3)),
            s + Duration::from_secs(3)
        );
        assert_eq!(next_tick(s, s), s);
    }
}
