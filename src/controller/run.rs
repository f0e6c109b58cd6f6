//! The controller loop: inputs from the watches and the election → baselines → which pods
//! qualify → the nudge schedule → patches through a [`PodPatcher`]. Single task; the only
//! state is here.

use super::api::{EnvApi, Input, PatchError, PodPatcher};
use super::env::{EnvChange, EnvTracker};
use super::env_hash::{self, EnvDecision, ObjectData};
use super::metrics::{ControllerMetrics, NudgeOutcome};
use super::nudges::{Baselines, Change, Nudge, ObjectKey, PodKey, Scheduler, Seen};
use super::qualify::{pod_eligible, qualifies};
use crate::core::filters::NamespaceFilter;
use crate::core::model::{PodInfo, SourceKind, SourceRef};
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::pod_index::PodIndex;
use crate::execute::evict::{EvictJob, Evictions};
use crate::execute::report::Reporter;
use crate::ports::PodRef;
use crate::serve::health::Health;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub struct Controller<P: PodPatcher> {
    patcher: Arc<P>,
    filter: NamespaceFilter,
    /// Kinds whose first list must complete before /readyz.
    kinds: Vec<SourceKind>,
    /// `--secrets`: Secrets are nudged for (their metadata may also be watched for env
    /// consumers alone).
    nudge_secrets: bool,
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
    /// Events and notifications of what the controller does (`None` in tests that do not
    /// look at them).
    reporter: Option<Reporter>,
    env: Option<EnvState>,
}

/// What the env consumers need from outside (docs/env-consumers.md).
pub struct EnvDeps {
    pub api: Arc<dyn EnvApi>,
    /// The agent's eviction executor (PDB-respecting, paced, one per pod).
    pub evictions: Evictions,
    /// The env-consumer pods, shared with `evictions` (it stops when a pod is gone).
    pub index: Arc<RwLock<PodIndex>>,
    pub configmaps: bool,
    pub secrets: bool,
    /// Stops fetch retries.
    pub stop: CancellationToken,
}

struct EnvState {
    deps: EnvDeps,
    tracker: EnvTracker,
    results_tx: mpsc::UnboundedSender<EnvResult>,
    results_rx: mpsc::UnboundedReceiver<EnvResult>,
    /// At most this many GETs (and, separately, baseline writes) at a time.
    fetches: Arc<tokio::sync::Semaphore>,
    writes: Arc<tokio::sync::Semaphore>,
}

enum EnvResult {
    Fetched {
        key: ObjectKey,
        seq: u64,
        data: Option<ObjectData>,
        seen: std::time::Instant,
    },
    Written {
        uid: String,
        result: Result<bool, String>,
    },
}

const ENV_FETCHES_IN_FLIGHT: usize = 8;
const ENV_WRITES_IN_FLIGHT: usize = 4;

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
            nudge_secrets: secrets,
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
            reporter: None,
            env: None,
        }
    }

    /// Events and notifications (nudge failures, env outcomes) through the executor's
    /// reporter, like the agent's.
    pub fn with_reporter(mut self, reporter: Reporter) -> Self {
        self.reporter = Some(reporter);
        self
    }

    /// Follow env consumers (`--env-consumers`); needs [`Self::with_reporter`] first.
    pub fn with_env(mut self, deps: EnvDeps) -> Self {
        let (results_tx, results_rx) = mpsc::unbounded_channel();
        if deps.secrets && !self.kinds.contains(&SourceKind::Secret) {
            self.kinds.push(SourceKind::Secret);
        }
        self.env = Some(EnvState {
            tracker: EnvTracker::new(deps.configmaps, deps.secrets),
            deps,
            results_tx,
            results_rx,
            fetches: Arc::new(tokio::sync::Semaphore::new(ENV_FETCHES_IN_FLIGHT)),
            writes: Arc::new(tokio::sync::Semaphore::new(ENV_WRITES_IN_FLIGHT)),
        });
        self
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
                Some(result) = env_result(&mut self.env) => self.env_result(result),
                _ = sleep_until(wake) => self.flush().await,
                _ = heartbeat.tick() => {}
            }
            self.metrics.queue_depth.set(self.scheduler.depth() as i64);
            self.env_writes();
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
                self.env_object(&key, Some(&resource_version), now);
                if self.baselines.observe(&key, &resource_version) == Seen::Changed {
                    self.changed(&key, resource_version, now);
                }
            }
            Input::ObjectDeleted(key) => {
                self.env_object(&key, None, now);
                self.baselines.forget(&key);
            }
            Input::ObjectsListed { kind, objects } => {
                let listed: Vec<ObjectKey> = objects.iter().map(|(k, _)| k.clone()).collect();
                self.env_relisted(kind, &objects, now);
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
                // Compare every env consumer's baseline with what its objects hold now (a
                // change made while the controller was down is acted on here).
                self.env_fetch_all(now);
                // Decoding a full pod list is the largest allocation: hand it back.
                crate::host::memory::release_free_heap();
                self.update_ready();
            }
            Input::Leader(leader) => {
                if leader != self.leader {
                    self.leader = leader;
                    self.metrics.leader.set(i64::from(leader));
                    if !leader {
                        self.scheduler.clear();
                    }
                    if let Some(env) = &mut self.env {
                        env.tracker.forget_fetches();
                    }
                    if leader && self.pods_listed {
                        self.env_fetch_all(now);
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
        if !self.leader || (key.kind == SourceKind::Secret && !self.nudge_secrets) {
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
        self.env_pod(&pod);
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
        if let Some(env) = &mut self.env {
            env.tracker.remove_pod(uid);
            env.deps
                .index
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .delete(uid);
        }
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
            if let (Some(reporter), Err(e)) = (&self.reporter, &result) {
                let why = match e {
                    SendError::Gone => None,
                    SendError::Conflict(m) => Some(format!("conflict: {m}")),
                    SendError::Forbidden(m) => Some(format!("forbidden: {m}")),
                    SendError::Failed(m) => Some(m.clone()),
                };
                if let Some(why) = why {
                    let source = SourceRef {
                        kind: nudge.change.kind,
                        name: nudge.change.name.clone(),
                    };
                    let pod = PodRef {
                        uid: nudge.pod.uid.clone(),
                        namespace: nudge.pod.namespace.clone(),
                        name: nudge.pod.name.clone(),
                    };
                    let note = format!(
                        "projection nudge {} failed: {why}; the kubelet's periodic sync will project {source}",
                        nudge.value()
                    );
                    reporter.publish(
                        &pod,
                        ActionKind::None,
                        Outcome::NudgeFailed,
                        note,
                        &[source],
                    );
                }
            }
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

impl<P: PodPatcher> Controller<P> {
    /// A pod added or changed: follow its env references (or stop following them).
    fn env_pod(&mut self, pod: &PodInfo) {
        let (leader, listed) = (self.leader, self.pods_listed);
        let Some(env) = &mut self.env else { return };
        let mut index = env.deps.index.write().unwrap_or_else(|e| e.into_inner());
        if env_hash::env_eligible(pod).is_err() || pod.env.is_empty() {
            env.tracker.remove_pod(&pod.uid);
            index.delete(&pod.uid);
            return;
        }
        let fetch = env.tracker.put_pod(pod);
        if env.tracker.tracks(&pod.uid) {
            index.apply(pod.clone());
        } else {
            index.delete(&pod.uid);
        }
        drop(index);
        if leader && listed {
            let now = Instant::now().into_std();
            for key in fetch {
                env.fetch(key, None, now);
            }
        }
    }

    /// A ConfigMap/Secret's resourceVersion (`None`: deleted), from the metadata watch.
    fn env_object(&mut self, key: &ObjectKey, rv: Option<&str>, now: std::time::Instant) {
        if !self.leader || !self.pods_listed {
            return;
        }
        if let Some(env) = &mut self.env {
            if env.tracker.needs_fetch(key, rv) {
                env.fetch(key.clone(), rv, now);
            }
        }
    }

    /// After a relist of `kind`: what changed (or vanished) during a watch gap.
    fn env_relisted(
        &mut self,
        kind: SourceKind,
        objects: &[(ObjectKey, String)],
        now: std::time::Instant,
    ) {
        let Some(env) = &self.env else { return };
        let rvs: HashMap<&ObjectKey, &str> = objects.iter().map(|(k, v)| (k, v.as_str())).collect();
        let tracked: Vec<ObjectKey> = env
            .tracker
            .objects()
            .into_iter()
            .filter(|k| k.kind == kind)
            .collect();
        for key in tracked {
            let rv = rvs.get(&key).copied();
            self.env_object(&key, rv, now);
        }
    }

    fn env_fetch_all(&mut self, now: std::time::Instant) {
        if !self.leader {
            return;
        }
        if let Some(env) = &mut self.env {
            // Those the relist replayed just before were fetched already: one GET each.
            for key in env.tracker.unrequested() {
                env.fetch(key, None, now);
            }
        }
    }

    fn env_result(&mut self, result: EnvResult) {
        let leader = self.leader;
        let Some(env) = &mut self.env else { return };
        match result {
            EnvResult::Fetched {
                key,
                seq,
                data,
                seen,
            } => {
                if !leader {
                    return;
                }
                let changes = env.tracker.fetched(&key, seq, data.as_ref());
                drop(data);
                for change in changes {
                    self.env_act(&change, seen);
                }
            }
            EnvResult::Written { uid, result } => match result {
                Ok(_) => {}
                // Not retried (a 403 from RBAC or an admission policy would repeat for every
                // pod): the baseline stays in memory, and is written with the pod's next one.
                Err(e) => {
                    tracing::warn!(pod_uid = %uid, error = %e, "could not write the env baseline annotation; keeping it in memory (a restart before it is written takes a new baseline)");
                }
            },
        }
    }

    /// What a change of one env source does to one pod.
    fn env_act(&mut self, change: &EnvChange, seen: std::time::Instant) {
        let Some(env) = &mut self.env else { return };
        let pod = {
            let index = env.deps.index.read().unwrap_or_else(|e| e.into_inner());
            index.get(&change.uid).cloned()
        };
        let Some(pod) = pod else { return };
        let source = change.source.clone();
        let cause = env_hash::cause(&source);
        let pod_ref = PodRef::from(&pod);
        match env_hash::decide(&pod, &source) {
            EnvDecision::Evict => {
                tracing::info!(pod = %pod.full_name(), cause = %cause, action = "evict", "env source changed; evicting");
                env.deps.evictions.request(EvictJob {
                    pod: pod_ref,
                    cause,
                    first_seen: Some(seen),
                    sources: vec![source],
                });
                env.tracker.acting(change);
            }
            EnvDecision::Refused(note) => {
                tracing::warn!(pod = %pod.full_name(), cause = %cause, action = "evict", outcome = Outcome::Refused.as_str(), "{note}");
                if let Some(r) = &self.reporter {
                    r.record(
                        &pod_ref,
                        ActionKind::Evict,
                        Outcome::Refused,
                        note,
                        &[source],
                    );
                }
                env.tracker.acknowledge(change);
            }
            EnvDecision::NotReloaded(note) => {
                tracing::warn!(pod = %pod.full_name(), cause = %cause, outcome = Outcome::EnvNotReloaded.as_str(), "{note}");
                if let Some(r) = &self.reporter {
                    r.record(
                        &pod_ref,
                        ActionKind::None,
                        Outcome::EnvNotReloaded,
                        note,
                        &[source],
                    );
                }
                env.tracker.acknowledge(change);
            }
        }
    }

    /// Baseline annotations to write (leader only), a few at a time.
    fn env_writes(&mut self) {
        if !self.leader {
            return;
        }
        let Some(env) = &mut self.env else { return };
        for w in env.tracker.writes() {
            let api = env.deps.api.clone();
            let tx = env.results_tx.clone();
            let permits = env.writes.clone();
            tokio::spawn(async move {
                let Ok(_permit) = permits.acquire_owned().await else {
                    return;
                };
                let result = api
                    .write_baseline(&w.namespace, &w.name, &w.uid, &w.value)
                    .await;
                let _ = tx.send(EnvResult::Written { uid: w.uid, result });
            });
        }
    }
}

impl EnvState {
    /// One GET of `key` (retried with backoff while it fails); its answer comes back as an
    /// [`EnvResult`].
    fn fetch(&mut self, key: ObjectKey, rv: Option<&str>, seen: std::time::Instant) {
        let seq = self.tracker.start_fetch(&key, rv);
        let api = self.deps.api.clone();
        let tx = self.results_tx.clone();
        let permits = self.fetches.clone();
        let stop = self.deps.stop.clone();
        tokio::spawn(async move {
            let mut delay = Duration::from_millis(500);
            loop {
                let result = {
                    let Ok(_permit) = permits.clone().acquire_owned().await else {
                        return;
                    };
                    api.read(&key).await
                };
                match result {
                    Ok(data) => {
                        let _ = tx.send(EnvResult::Fetched {
                            key,
                            seq,
                            data,
                            seen,
                        });
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(kind = key.kind.as_str(), namespace = %key.namespace, name = %key.name, error = %e, retry_in_ms = delay.as_millis() as u64, "cannot read an env consumer's source; retrying");
                    }
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(60));
            }
        });
    }
}

async fn env_result(env: &mut Option<EnvState>) -> Option<EnvResult> {
    match env {
        Some(env) => env.results_rx.recv().await,
        None => std::future::pending().await,
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
