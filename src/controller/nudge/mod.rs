//! The nudge feature: baselines of object versions, which pods qualify, the nudge schedule;
//! each due nudge is a patch job of the executor, whose outcome comes back here to be
//! counted (`reloadlet_nudges_total`) and to end the pod's re-nudges when it failed.

pub mod qualify;
pub mod schedule;

use super::feature::{Feature, Routed, World};
use super::metrics::ControllerMetrics;
use crate::core::model::{PodInfo, SourceKind, SourceRef};
use crate::core::outcome::Outcome;
use crate::execute::patch::{PatchJob, PatchKind, Patches};
use crate::ports::ObjectKey;
use crate::ports::PodRef;
use futures::future::BoxFuture;
use qualify::{pod_eligible, qualifies};
use schedule::{Baselines, Change, Nudge, PodKey, Scheduler, Seen};
use tokio::sync::mpsc;
use tokio::time::Instant;

pub struct Nudges {
    /// `--secrets`: Secrets are nudged for (their metadata may also be watched for env
    /// consumers alone).
    secrets: bool,
    baselines: Baselines,
    scheduler: Scheduler,
    patches: Patches,
    done_tx: mpsc::UnboundedSender<(Nudge, Outcome)>,
    done_rx: mpsc::UnboundedReceiver<(Nudge, Outcome)>,
    /// Patches sent and not answered yet: no more are sent meanwhile.
    in_flight: usize,
    metrics: ControllerMetrics,
    /// Dropped nudges already counted (ConfigMap, Secret).
    dropped_seen: (u64, u64),
}

impl Nudges {
    pub fn new(
        secrets: bool,
        max_nudges_per_second: u32,
        patches: Patches,
        metrics: ControllerMetrics,
    ) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Self {
            secrets,
            baselines: Baselines::default(),
            scheduler: Scheduler::new(max_nudges_per_second),
            patches,
            done_tx,
            done_rx,
            in_flight: 0,
            metrics,
            dropped_seen: (0, 0),
        }
    }

    /// An object changed after its baseline: schedule its qualifying pods (leader only).
    fn changed(&mut self, key: &ObjectKey, resource_version: &str, world: &World) {
        if !world.leader || (key.kind == SourceKind::Secret && !self.secrets) {
            return;
        }
        let now = Instant::now().into_std();
        let object = SourceRef {
            kind: key.kind,
            name: key.name.clone(),
        };
        let change = Change {
            kind: key.kind,
            name: key.name.clone(),
            resource_version: resource_version.to_owned(),
        };
        let mut scheduled = 0usize;
        for pod in world.pods_in(&key.namespace) {
            match qualifies(pod, &object) {
                Ok(()) => {
                    self.scheduler.schedule(pod_key(pod), change.clone(), now);
                    scheduled += 1;
                }
                Err(reason) => {
                    tracing::trace!(pod = %pod.full_name(), %object, %reason, "not nudged");
                }
            }
        }
        if scheduled > 0 {
            tracing::debug!(namespace = %key.namespace, %change, pods = scheduled, "object changed; nudging its pods");
        }
    }

    fn observed(&mut self, key: &ObjectKey, resource_version: &str, world: &World) {
        if self.baselines.observe(key, resource_version) == Seen::Changed {
            self.changed(key, resource_version, world);
        }
    }

    /// Sends the nudges that are due to the executor, all at once.
    fn flush(&mut self, world: &World) {
        let now = Instant::now().into_std();
        let due = self.scheduler.due(now);
        self.count_dropped();
        if !world.leader {
            self.scheduler.clear();
            return;
        }
        for nudge in due {
            let job = PatchJob {
                pod: PodRef {
                    uid: nudge.pod.uid.clone(),
                    namespace: nudge.pod.namespace.clone(),
                    name: nudge.pod.name.clone(),
                },
                kind: PatchKind::Nudge {
                    source: SourceRef {
                        kind: nudge.change.kind,
                        name: nudge.change.name.clone(),
                    },
                    still_wanted: |pod, source| qualifies(pod, source).is_ok(),
                },
                value: Some(nudge.value()),
            };
            let done = self.done_tx.clone();
            self.in_flight += 1;
            self.patches.request(job, move |outcome| {
                let _ = done.send((nudge, outcome));
            });
        }
    }

    /// A nudge's outcome: counted; a failure ends the pod's re-nudges.
    fn done(&mut self, nudge: Nudge, outcome: Outcome) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if !matches!(outcome, Outcome::Patched | Outcome::DryRun) {
            self.scheduler.cancel(&nudge.pod);
        }
        self.metrics.count(nudge.change.kind, outcome, 1);
    }

    fn count_dropped(&mut self) {
        let d = self.scheduler.dropped();
        let (cm, s) = (d.configmap, d.secret);
        if cm > self.dropped_seen.0 || s > self.dropped_seen.1 {
            tracing::warn!(
                dropped = (cm - self.dropped_seen.0) + (s - self.dropped_seen.1),
                "over --max-nudges-per-second: re-nudges dropped (every pod still gets its first nudge, in turn)"
            );
        }
        let dropped = Outcome::NudgeDropped;
        self.metrics
            .count(SourceKind::ConfigMap, dropped, cm - self.dropped_seen.0);
        self.metrics
            .count(SourceKind::Secret, dropped, s - self.dropped_seen.1);
        self.dropped_seen = (cm, s);
    }
}

impl Feature for Nudges {
    fn name(&self) -> &'static str {
        "nudge"
    }

    fn kinds(&self) -> Vec<SourceKind> {
        let mut kinds = vec![SourceKind::ConfigMap];
        if self.secrets {
            kinds.push(SourceKind::Secret);
        }
        kinds
    }

    fn route(&mut self, event: Routed<'_>, world: &World) {
        match event {
            Routed::Object {
                key,
                resource_version: Some(rv),
            } => self.observed(key, rv, world),
            Routed::Object {
                key,
                resource_version: None,
            } => self.baselines.forget(key),
            Routed::Listed { kind, objects } => {
                let listed: Vec<ObjectKey> = objects.iter().map(|(k, _)| k.clone()).collect();
                self.baselines.retain_listed(kind, &listed);
                // A relist after a watch gap: what changed meanwhile did change.
                for (key, rv) in objects {
                    self.observed(key, rv, world);
                }
            }
            Routed::PodPut(pod) => {
                if pod_eligible(pod).is_err() {
                    self.scheduler.cancel(&pod_key(pod));
                }
            }
            Routed::PodRemoved(pod) => self.scheduler.cancel(&pod_key(pod)),
            Routed::Leader(false) => self.scheduler.clear(),
            Routed::Leader(true) | Routed::PodsListed | Routed::Workload(_) => {}
        }
    }

    fn wake<'a>(&'a mut self, world: &'a World) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let wake = match self.in_flight {
                0 => self.scheduler.next_wakeup().map(Instant::from_std),
                _ => None,
            };
            tokio::select! {
                Some((nudge, outcome)) = self.done_rx.recv() => self.done(nudge, outcome),
                _ = sleep_until(wake) => self.flush(world),
            }
        })
    }

    fn settle(&mut self, _world: &World) {
        self.metrics.queue_depth.set(self.scheduler.depth() as i64);
        self.metrics
            .watched_objects
            .set(self.baselines.len() as i64);
    }
}

fn pod_key(pod: &PodInfo) -> PodKey {
    PodKey {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
