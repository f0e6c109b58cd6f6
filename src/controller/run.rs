//! The controller loop: inputs from the watches and the election → baselines → which pods
//! qualify → the nudge schedule → patches through a [`PodPatcher`]. Single task; the only
//! state is here.

use super::api::{Input, PatchError, PodPatcher};
use super::metrics::{ControllerMetrics, NudgeOutcome};
use super::nudges::{Baselines, Change, Nudge, ObjectKey, PodKey, Scheduler, Seen};
use super::qualify::{pod_eligible, qualifies};
use crate::filters::NamespaceFilter;
use crate::http::Health;
use crate::model::{PodInfo, SourceKind, SourceRef};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub struct Controller<P: PodPatcher> {
    patcher: Arc<P>,
    filter: NamespaceFilter,
    /// Kinds whose first list must complete before /readyz.
    kinds: Vec<SourceKind>,
    listed_kinds: BTreeSet<SourceKind>,
    pods_listed: bool,
    leader: bool,
    baselines: Baselines,
    scheduler: Scheduler,
    pods: HashMap<String, PodInfo>,
    by_namespace: HashMap<String, BTreeSet<String>>,
    metrics: ControllerMetrics,
    health: Arc<Health>,
    /// Object inputs that arrived before the first pod list: replayed after it, so a change
    /// seen meanwhile still finds its pods.
    held: Vec<Input>,
    /// A 403 is logged once until a patch succeeds again.
    forbidden_reported: bool,
    dropped_seen: (u64, u64),
}

impl<P: PodPatcher> Controller<P> {
    /// `leader`: the replica starts as leader only without leader election.
    pub fn new(
        patcher: Arc<P>,
        filter: NamespaceFilter,
        secrets: bool,
        max_nudges_per_second: u32,
        leader: bool,
        metrics: ControllerMetrics,
        health: Arc<Health>,
    ) -> Self {
        let mut kinds = vec![SourceKind::ConfigMap];
        if secrets {
            kinds.push(SourceKind::Secret);
        }
        metrics.leader.set(i64::from(leader));
        Self {
            patcher,
            filter,
            kinds,
            listed_kinds: BTreeSet::new(),
            pods_listed: false,
            leader,
            baselines: Baselines::default(),
            scheduler: Scheduler::new(max_nudges_per_second),
            pods: HashMap::new(),
            by_namespace: HashMap::new(),
            metrics,
            health,
            held: Vec::new(),
            forbidden_reported: false,
            dropped_seen: (0, 0),
        }
    }

    pub async fn run(mut self, mut inputs: mpsc::Receiver<Input>, shutdown: CancellationToken) {
        let mut heartbeat = tokio::time::interval(Duration::from_secs(5));
        loop {
            self.health.beat();
            let wake = self.scheduler.next_wakeup().map(Instant::from_std);
            tokio::select! {
                _ = shutdown.cancelled() => return,
                input = inputs.recv() => match input {
                    Some(input) => self.handle(input),
                    None => return,
                },
                _ = sleep_until(wake) => self.flush().await,
                _ = heartbeat.tick() => {}
            }
            self.metrics.queue_depth.set(self.scheduler.depth() as i64);
        }
    }

    fn handle(&mut self, input: Input) {
        let now = Instant::now().into_std();
        let object_input = matches!(
            input,
            Input::Object { .. } | Input::ObjectDeleted(_) | Input::ObjectsListed { .. }
        );
        if object_input && !self.pods_listed {
            self.held.push(input);
            return;
        }
        match input {
            Input::Object {
                key,
                resource_version,
            } => {
                if self.filter.check(&key.namespace).is_some() {
                    return;
                }
                if self.baselines.observe(&key, &resource_version) == Seen::Changed {
                    self.changed(&key, resource_version, now);
                }
            }
            Input::ObjectDeleted(key) => self.baselines.forget(&key),
            Input::ObjectsListed { kind, objects } => {
                let listed: Vec<ObjectKey> = objects.iter().map(|(k, _)| k.clone()).collect();
                self.baselines.retain_listed(kind, &listed);
                for (key, rv) in objects {
                    if self.filter.check(&key.namespace).is_some() {
                        continue;
                    }
                    // A relist after a watch gap: what changed meanwhile did change.
                    if self.baselines.observe(&key, &rv) == Seen::Changed {
                        self.changed(&key, rv, now);
                    }
                }
                self.listed_kinds.insert(kind);
                self.update_ready();
            }
            Input::PodApplied(pod) => self.put_pod(pod),
            Input::PodDeleted { uid } => self.remove_pod(&uid),
            Input::PodsListed(pods) => {
                let keep: BTreeSet<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
                let gone: Vec<String> = self
                    .pods
                    .keys()
                    .filter(|uid| !keep.contains(uid.as_str()))
                    .cloned()
                    .collect();
                for uid in gone {
                    self.remove_pod(&uid);
                }
                for pod in pods {
                    self.put_pod(pod);
                }
                self.pods_listed = true;
                for held in std::mem::take(&mut self.held) {
                    self.handle(held);
                }
                // Decoding a full pod list is the largest allocation: hand it back.
                crate::memory::release_free_heap();
                self.update_ready();
            }
            Input::Leader(leader) => {
                if leader != self.leader {
                    self.leader = leader;
                    self.metrics.leader.set(i64::from(leader));
                    if !leader {
                        self.scheduler.clear();
                    }
                }
            }
            Input::WatchError { what, error } => {
                tracing::warn!(watch = what, %error, "watch failed; retrying with backoff");
                self.metrics
                    .watch_errors
                    .get_or_create(&super::metrics::WatchLabels { resource: what })
                    .inc();
            }
        }
        self.metrics.watched_pods.set(self.pods.len() as i64);
        self.metrics
            .watched_objects
            .set(self.baselines.len() as i64);
    }

    fn update_ready(&self) {
        let ready = self.pods_listed && self.kinds.iter().all(|k| self.listed_kinds.contains(k));
        self.health.set_ready(ready);
    }

    /// An object changed after its baseline: schedule its qualifying pods (leader only).
    fn changed(&mut self, key: &ObjectKey, resource_version: String, now: std::time::Instant) {
        if !self.leader {
            return;
        }
        let object = SourceRef {
            kind: key.kind,
            name: key.name.clone(),
        };
        let change = Change {
            kind: key.kind,
            name: key.name.clone(),
            resource_version,
        };
        let Some(uids) = self.by_namespace.get(&key.namespace) else {
            return;
        };
        let mut scheduled = 0usize;
        for uid in uids {
            let Some(pod) = self.pods.get(uid) else {
                continue;
            };
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

    fn put_pod(&mut self, pod: PodInfo) {
        if self.filter.check(&pod.namespace).is_some() {
            self.remove_pod(&pod.uid);
            return;
        }
        if pod_eligible(&pod).is_err() {
            self.scheduler.cancel(&pod_key(&pod));
        }
        self.by_namespace
            .entry(pod.namespace.clone())
            .or_default()
            .insert(pod.uid.clone());
        self.pods.insert(pod.uid.clone(), pod);
    }

    fn remove_pod(&mut self, uid: &str) {
        if let Some(pod) = self.pods.remove(uid) {
            self.scheduler.cancel(&pod_key(&pod));
            if let Some(set) = self.by_namespace.get_mut(&pod.namespace) {
                set.remove(uid);
                if set.is_empty() {
                    self.by_namespace.remove(&pod.namespace);
                }
            }
        }
    }

    /// Sends the nudges that are due, concurrently; then accounts for them.
    async fn flush(&mut self) {
        let now = Instant::now().into_std();
        let due = self.scheduler.due(now);
        self.count_dropped();
        if !self.leader {
            self.scheduler.clear();
            return;
        }
        let results = futures::future::join_all(
            due.into_iter()
                .map(|nudge| send(self.patcher.clone(), nudge)),
        )
        .await;
        for (nudge, result) in results {
            let outcome = match &result {
                Ok(()) => {
                    self.forbidden_reported = false;
                    tracing::debug!(pod = %format!("{}/{}", nudge.pod.namespace, nudge.pod.name), value = %nudge.value(), "nudged");
                    NudgeOutcome::Patched
                }
                Err(SendError::Gone) => {
                    self.scheduler.cancel(&nudge.pod);
                    NudgeOutcome::Gone
                }
                Err(SendError::Conflict(e)) => {
                    tracing::warn!(pod = %format!("{}/{}", nudge.pod.namespace, nudge.pod.name), error = %e, "nudge conflicted twice; the kubelet's periodic sync will project the change");
                    self.scheduler.cancel(&nudge.pod);
                    NudgeOutcome::Conflict
                }
                Err(SendError::Forbidden(e)) => {
                    if !self.forbidden_reported {
                        tracing::error!(pod = %format!("{}/{}", nudge.pod.namespace, nudge.pod.name), error = %e, "patching pods is forbidden: check the controller's ClusterRole (pods patch) and admission policies; changes will wait for the kubelet's periodic sync");
                        self.forbidden_reported = true;
                    }
                    self.scheduler.cancel(&nudge.pod);
                    NudgeOutcome::Forbidden
                }
                Err(SendError::Failed(e)) => {
                    tracing::warn!(pod = %format!("{}/{}", nudge.pod.namespace, nudge.pod.name), error = %e, "nudge failed; the kubelet's periodic sync will project the change");
                    self.scheduler.cancel(&nudge.pod);
                    NudgeOutcome::Failed
                }
            };
            self.metrics.count(nudge.change.kind, outcome, 1);
        }
    }

    fn count_dropped(&mut self) {
        let d = self.scheduler.dropped();
        let (cm, s) = (d.configmap, d.secret);
        if cm > self.dropped_seen.0 || s > self.dropped_seen.1 {
            tracing::warn!(
                dropped = (cm - self.dropped_seen.0) + (s - self.dropped_seen.1),
                "over --max-nudges-per-second: nudges dropped (those pods wait for the kubelet's periodic sync)"
            );
        }
        self.metrics.count(
            SourceKind::ConfigMap,
            NudgeOutcome::Dropped,
            cm - self.dropped_seen.0,
        );
        self.metrics.count(
            SourceKind::Secret,
            NudgeOutcome::Dropped,
            s - self.dropped_seen.1,
        );
        self.dropped_seen = (cm, s);
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

enum SendError {
    Gone,
    Conflict(String),
    Forbidden(String),
    Failed(String),
}

/// One patch; on 404/409 the pod is read again and, if it is still the same pod and still
/// qualifies, patched once more.
async fn send<P: PodPatcher>(patcher: Arc<P>, nudge: Nudge) -> (Nudge, Result<(), SendError>) {
    let value = nudge.value();
    let (ns, name) = (&nudge.pod.namespace, &nudge.pod.name);
    let first = patcher.patch_nudge(ns, name, &value).await;
    let result = match first {
        Ok(()) => Ok(()),
        Err(PatchError::NotFound | PatchError::Conflict(_)) => {
            let object = SourceRef {
                kind: nudge.change.kind,
                name: nudge.change.name.clone(),
            };
            match patcher.get(ns, name).await {
                Ok(Some(pod)) if pod.uid == nudge.pod.uid && qualifies(&pod, &object).is_ok() => {
                    match patcher.patch_nudge(ns, name, &value).await {
                        Ok(()) => Ok(()),
                        Err(PatchError::NotFound) => Err(SendError::Gone),
                        Err(e) => Err(classify(e)),
                    }
                }
                Ok(Some(_)) | Ok(None) => Err(SendError::Gone),
                Err(e) => Err(classify(e)),
            }
        }
        Err(e) => Err(classify(e)),
    };
    (nudge, result)
}

fn classify(e: PatchError) -> SendError {
    match e {
        PatchError::NotFound => SendError::Gone,
        PatchError::Conflict(m) => SendError::Conflict(m),
        PatchError::Forbidden(m) => SendError::Forbidden(m),
        PatchError::Other(m) => SendError::Failed(m),
    }
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
