//! The pod side of the agent: the pods the API shows (the index, the namespace filter applied
//! once where a pod enters), what is pending for them (the debouncer), what they ask (their
//! annotations validated, the decision cache) and what acting on a change means for one.

use super::decisions::Decisions;
use super::pacing::{class_of, report_notice, Paced, PodPacing};
use crate::contain::{Caught, Quarantine, Stage, QUARANTINE_CAP};
use crate::core::annotations::{Action, PROJECTION_NUDGE};
use crate::core::debounce::{Debouncer, PendingChange};
use crate::core::filters::NamespaceFilter;
use crate::core::model::{PodInfo, VolumeKey};
use crate::core::nudge_delay::{announced_volumes, nudged_source, NudgeDelays};
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::pod_index::{IndexChange, PodIndex};
use crate::core::policy::{self, ChangedVolumes, CheckedPolicy, Decision, HttpFence};
use crate::execute::applied::Seen;
use crate::execute::evict::EvictJob;
use crate::execute::http::HttpJob;
use crate::execute::report::Line;
use crate::execute::restart::RestartJob;
use crate::execute::signal::SignalJob;
use crate::execute::Executor;
use crate::k8s::pod_watch::PodUpdate;
use crate::ports::{ContainerProcesses, PodRef};
use crate::serve::health::Health;
use crate::serve::metrics::Metrics;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Instant;

/// What a pod update means for the agent's other owners.
#[derive(Debug, Default)]
pub struct Entered {
    /// Pods that left the API view.
    pub gone: Vec<String>,
    /// Pods became known: volumes that waited for them can be looked at.
    pub added: bool,
    /// The first pod list is in.
    pub first_sync: bool,
}

/// The namespace filter where pods enter, and what it kept out.
struct Door {
    filter: NamespaceFilter,
    /// Pods outside the namespace filter (UID → why): nothing is validated, looked up, warned
    /// about or acted on for them.
    outside: HashMap<String, String>,
}

pub struct Pods {
    index: Arc<RwLock<PodIndex>>,
    /// Changes waiting for their window to close, per pod.
    debouncer: Debouncer,
    /// Decisions per pod version and change ([`super::decisions`]): the policy is parsed once
    /// per pod version, not once per swap.
    decisions: Decisions,
    /// Fast projection: when each pod's latest nudge was seen.
    nudges: NudgeDelays,
    /// Pod UID → the annotation error already reported (report each error once).
    warned: HashMap<String, crate::core::invalid::Invalid>,
    /// Containers whose main process was looked up ahead of any change.
    warmed: HashSet<(String, String)>,
    /// `--namespaces` / `--exclude-namespaces`, applied once where a pod enters
    /// ([`Self::enter`]).
    door: Door,
    synced: bool,
    /// Per-pod pacing: debounce, minimum interval, flap breaker, windows (docs/pacing.md).
    pacing: PodPacing,
    processes: Arc<dyn ContainerProcesses>,
    health: Arc<Health>,
    metrics: Metrics,
    /// `--http-allow-host-network`: part of every pod's policy check.
    fence: HttpFence,
    /// Pods whose handling panicked (`crate::contain`), as they were then: kept in the index
    /// (their volumes still map to them) but neither validated nor acted on while they come
    /// again unchanged (a relist sends them all again); released when they change or go.
    poisoned: Quarantine<String, PodInfo>,
}

impl Pods {
    pub fn new(
        index: Arc<RwLock<PodIndex>>,
        debouncer: Debouncer,
        namespaces: NamespaceFilter,
        pacing: PodPacing,
        processes: Arc<dyn ContainerProcesses>,
        health: Arc<Health>,
        metrics: Metrics,
    ) -> Self {
        Self {
            index,
            debouncer,
            decisions: Decisions::default(),
            fence: HttpFence::default(),
            nudges: NudgeDelays::default(),
            warned: HashMap::new(),
            warmed: HashSet::new(),
            door: Door {
                filter: namespaces,
                outside: HashMap::new(),
            },
            synced: false,
            pacing,
            processes,
            health,
            metrics,
            poisoned: Quarantine::new(QUARANTINE_CAP),
        }
    }

    /// `--http-allow-host-network`: what `http` pods may reach (the default refuses
    /// `hostNetwork` pods).
    pub fn with_http_fence(mut self, fence: HttpFence) -> Self {
        self.fence = fence;
        self.decisions = Decisions::new(fence);
        self
    }

    pub fn index(&self) -> std::sync::RwLockReadGuard<'_, PodIndex> {
        super::read_index(&self.index)
    }

    fn index_mut(&self) -> std::sync::RwLockWriteGuard<'_, PodIndex> {
        self.index.write().unwrap_or_else(|e| e.into_inner())
    }

    fn index_len(&self) -> usize {
        self.index().len()
    }

    /// Whether the first pod list is in.
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// Whether the pod is inside the namespace filter.
    pub fn in_scope(&self, pod: &PodInfo) -> bool {
        !self.door.outside.contains_key(&pod.uid)
    }

    #[cfg(test)]
    pub fn debouncer(&self) -> &Debouncer {
        &self.debouncer
    }

    /// How many pods have a version taken in by the decisions ([`Decisions::prepare`]).
    #[cfg(test)]
    pub fn decided_pods(&self) -> usize {
        self.decisions.len()
    }

    #[cfg(test)]
    pub fn debouncer_mut(&mut self) -> &mut Debouncer {
        &mut self.debouncer
    }

    /// Whether the pod has a change waiting (debounced, or held by its pacing).
    pub fn pending(&self, pod_uid: &str) -> bool {
        self.debouncer.contains(pod_uid) || self.pacing.is_held(pod_uid)
    }

    /// The pod's volumes are gone: what was pending or held for it is dropped.
    pub fn drop_pending(&mut self, pod_uid: &str) {
        self.debouncer.remove_pod(pod_uid);
        self.pacing.forget(pod_uid);
    }

    pub fn pacing(&self) -> &PodPacing {
        &self.pacing
    }

    pub fn pacing_mut(&mut self) -> &mut PodPacing {
        &mut self.pacing
    }

    /// When the earliest change waiting (debounced or held) is due.
    pub fn next_deadline(&self) -> Option<std::time::Instant> {
        match (self.debouncer.next_deadline(), self.pacing.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The held changes whose time came by `now` (acted on with `fresh: false`).
    pub fn take_held_due(&mut self, now: Instant) -> Vec<(String, PendingChange)> {
        self.pacing.take_due(now)
    }

    /// The changes whose window closed by `now`.
    pub fn take_due(&mut self, now: Instant) -> Vec<(String, PendingChange)> {
        self.debouncer.take_due(now)
    }

    /// A change due on its announcement, decided at `at` instead (a volume of the pod is
    /// still being hashed: its swap may belong to the same sync).
    pub fn postpone(&mut self, pod_uid: &str, change: PendingChange, at: Instant) {
        self.debouncer.postpone(pod_uid, change, at);
    }

    /// A change of a pod not known yet, decided again at `at`.
    pub fn requeue(&mut self, pod_uid: &str, change: PendingChange, at: Instant) {
        self.debouncer.requeue(pod_uid, change, at);
    }

    /// The content of the pod's volume `key` changed at `at` (`now`: the clock, for the
    /// nudge's delay): its action follows after the debounce.
    pub fn content_changed(&mut self, key: &VolumeKey, at: Instant, now: Instant) {
        if let Some(delay) = self.nudges.on_swap(&key.pod_uid, now) {
            self.metrics
                .timing
                .projection_delay
                .observe(delay.as_secs_f64());
            tracing::debug!(volume = %key, delay_ms = delay.as_secs_f64() * 1e3, "projection nudge answered");
        }
        match self.pacing.debounce_window(&key.pod_uid) {
            None => self.debouncer.add(&key.pod_uid, &key.volume, at),
            Some(own) => self
                .debouncer
                .add_within(&key.pod_uid, &key.volume, at, own),
        }
    }

    /// Where a pod enters the agent: the namespace filter, once per update.
    fn enter(&mut self, pod: &PodInfo) {
        match self.door.filter.check(&pod.namespace) {
            Some(reason) => {
                self.door.outside.insert(pod.uid.clone(), reason);
            }
            None => {
                self.door.outside.remove(&pod.uid);
            }
        }
    }

    /// Whether the pod is quarantined (its handling panicked, and it has not changed since).
    #[cfg(test)]
    pub fn poisoned(&self, uid: &str) -> bool {
        self.poisoned.contains(uid)
    }

    /// A pod entering, contained ([`crate::contain`]): its annotations validated, its nudge
    /// seen. `None`: outside the namespace filter, quarantined at this very version, or its
    /// handling panicked now (then quarantined).
    fn admit(&mut self, pod: &PodInfo, exec: &Executor, now: Instant) -> Option<CheckedPolicy> {
        if self.poisoned.holds(pod.uid.as_str(), pod) {
            return None;
        }
        let step = crate::contain::catch(|| {
            let checked = self.validate(pod, exec);
            self.see_nudge(pod, now);
            checked
        });
        match step {
            Ok(checked) => checked,
            Err(caught) => {
                self.poison(pod, Stage::PodUpdate, &caught, exec);
                None
            }
        }
    }

    /// The executor told of the pod as the index now holds it (contained): only after the
    /// index has it, since what the executor starts from it (a granted restart, a gate to
    /// open) looks the pod up there. Not for a pod quarantined at this version.
    fn tell(&mut self, uid: &str, exec: &Executor) {
        let Some(pod) = self.index().shared(uid) else {
            return;
        };
        if self.poisoned.holds(uid, &*pod) {
            return;
        }
        if let Err(caught) = crate::contain::catch(|| exec.pod_updated(&pod)) {
            self.poison(&pod, Stage::PodUpdate, &caught, exec);
        }
    }

    /// A panic was caught while handling `pod` in `stage`: logged and counted, what the pod
    /// had pending or half-made here is dropped, the pod quarantined at this version, and a
    /// Warning `InternalError` Event says so when the pod is inside the namespace filter
    /// (itself contained: a second panic is logged).
    pub fn poison(&mut self, pod: &PodInfo, stage: Stage, caught: &Caught, exec: &Executor) {
        tracing::error!(
            pod = %pod.full_name(),
            pod_uid = %pod.uid,
            stage = stage.as_str(),
            panic = %caught.message,
            at = caught.location.as_deref().unwrap_or("?"),
            "panic while handling a pod; it is skipped until it changes"
        );
        crate::contain::count(&self.metrics, stage);
        let uid = &pod.uid;
        self.debouncer.remove_pod(uid);
        self.pacing.forget(uid);
        self.decisions.forget(uid);
        self.nudges.forget(uid);
        self.warned.remove(uid);
        self.poisoned.hold(uid.clone(), pod.clone());
        if !self.in_scope(pod) {
            // Outside the namespace filter nothing is told about a pod.
            return;
        }
        let note = caught.pod_note();
        let pod_ref = PodRef::from(pod);
        let reported = crate::contain::catch(|| {
            let line = Line::written();
            exec.report(
                &pod_ref,
                ActionKind::None,
                Outcome::InternalError,
                note,
                line,
            );
        });
        if let Err(again) = reported {
            tracing::error!(pod = %pod.full_name(), panic = %again.message, "panic while reporting a caught panic; no Event");
        }
    }

    /// Takes in a pod update (`now`: the clock).
    pub fn on_update(&mut self, update: PodUpdate, exec: &Executor, now: Instant) -> Entered {
        let mut entered = Entered::default();
        match update {
            PodUpdate::Apply(pod) => {
                self.enter(&pod);
                let checked = self.admit(&pod, exec, now);
                self.warm([(&pod, checked.as_ref())], false, exec);
                let uid = pod.uid.clone();
                let change = self.index_mut().apply(pod);
                self.tell(&uid, exec);
                if let Some(checked) = checked {
                    self.prepare(&uid, checked);
                }
                if change == IndexChange::Added {
                    tracing::debug!("pod added to the index");
                    entered.added = true;
                }
            }
            PodUpdate::Delete { uid } => {
                self.index_mut().delete(&uid);
                self.forget(&uid, exec);
                entered.gone.push(uid);
            }
            PodUpdate::Resync(list) => {
                let mut checked = Vec::with_capacity(list.len());
                for pod in &list {
                    self.enter(pod);
                    checked.push(self.admit(pod, exec, now));
                }
                if !self.synced {
                    tracing::info!(pods = list.len(), "pod list synced");
                }
                self.warm(
                    list.iter().zip(checked.iter().map(Option::as_ref)),
                    !self.synced,
                    exec,
                );
                let checked: Vec<(String, CheckedPolicy)> = list
                    .iter()
                    .zip(checked)
                    .filter_map(|(pod, policy)| Some((pod.uid.clone(), policy?)))
                    .collect();
                let uids: Vec<String> = list.iter().map(|p| p.uid.clone()).collect();
                let gone = self.index_mut().reset(list);
                for uid in &uids {
                    self.tell(uid, exec);
                }
                for (uid, policy) in checked {
                    self.prepare(&uid, policy);
                }
                for uid in &gone {
                    self.forget(uid, exec);
                }
                entered.gone = gone;
                entered.added = true;
                // Decoding a full pod list is the agent's largest allocation: hand it back.
                crate::host::memory::release_free_heap();
                if self.synced {
                    self.metrics.watch.api_watch_restarts.inc();
                } else {
                    self.synced = true;
                    entered.first_sync = true;
                }
            }
            PodUpdate::WatchError(e) => {
                self.metrics.watch.api_watch_restarts.inc();
                if self.synced {
                    tracing::warn!(error = %e, cached_pods = self.index_len(), "pod watch failed; retrying with backoff (signals keep working from the cached pods)");
                } else {
                    tracing::warn!(error = %e, "pod watch failed before the first pod list; retrying with backoff; no pod is known yet, so volume changes cannot be acted on until a pod list arrives");
                }
            }
        }
        self.metrics.watch.watched_pods.set(self.index_len() as i64);
        entered
    }

    /// Fast projection: note when a new `reloadlet.io/projection-nudge` value shows up, and
    /// which of the pod's volumes the sync it causes will swap (the debouncer acts once they
    /// have, `core::debounce`). A pod with its own `reloadlet.io/debounce` keeps it: nothing
    /// is announced for it.
    fn see_nudge(&mut self, pod: &PodInfo, now: Instant) {
        let nudge = pod.annotations.get(PROJECTION_NUDGE).map(String::as_str);
        let own_debounce = self.pacing.debounce_window(&pod.uid).is_some();
        if self.nudges.is_new(&pod.uid, nudge) && self.in_scope(pod) && !own_debounce {
            let volumes = nudge
                .and_then(nudged_source)
                .map(|source| announced_volumes(pod, &source))
                .unwrap_or_default();
            tracing::debug!(pod = %pod.full_name(), ?nudge, ?volumes, "projection nudge: these volumes will swap");
            self.debouncer.announce(&pod.uid, volumes, now);
        }
        if let Some(delay) = self.nudges.on_pod(&pod.uid, nudge, now) {
            self.metrics
                .timing
                .projection_delay
                .observe(delay.as_secs_f64());
        }
    }

    /// A pod left the API view: a change still in its debounce window is dropped.
    fn forget(&mut self, uid: &str, exec: &Executor) {
        self.nudges.forget(uid);
        self.decisions.forget(uid);
        exec.pod_deleted(uid);
        if self.debouncer.remove_pod(uid) | self.pacing.forget(uid) {
            tracing::info!(
                pod_uid = uid,
                "pod deleted while its change was pending; no action"
            );
        }
        self.warned.remove(uid);
        self.poisoned.release(uid);
        self.door.outside.remove(uid);
        self.warmed.retain(|(pod, _)| pod != uid);
        self.processes.forget_pod(uid);
    }

    /// Reports a malformed annotation as soon as the pod is seen (once per distinct error).
    fn validate(&mut self, pod: &PodInfo, exec: &Executor) -> Option<CheckedPolicy> {
        if !self.in_scope(pod) {
            return None;
        }
        // The pacing annotations are read on every update (a pod that did not opt in keeps
        // them for when it does), and refused only for a pod that opted in.
        let pacing = self.pacing.on_pod(pod);
        let policy = policy::validated_policy_with(pod, self.fence);
        let checked = match &policy {
            Err(message) => Err(message.clone()),
            Ok(Some(_)) => pacing,
            Ok(None) => Ok(()),
        };
        match checked {
            Err(message) => {
                if self.warned.get(&pod.uid) != Some(&message) {
                    let outcome = Outcome::InvalidAnnotation;
                    let line =
                        Line::saying("invalid reloadlet annotation; the pod will not be reloaded")
                            .error(&message);
                    exec.report(
                        &pod.into(),
                        ActionKind::None,
                        outcome,
                        message.to_string(),
                        line,
                    );
                    self.warned.insert(pod.uid.clone(), message);
                }
            }
            Ok(_) => {
                self.warned.remove(&pod.uid);
            }
        }
        Some(policy)
    }

    /// The pod version just put in the index is decided with `checked`, its policy as
    /// [`Self::validate`] found it (not parsed again at its first swap).
    fn prepare(&mut self, uid: &str, checked: CheckedPolicy) {
        let pod = self.index().shared(uid);
        if let Some(pod) = pod {
            self.decisions.prepare(&pod, checked);
        }
    }

    /// Looks up, in one pass over /proc, the main processes of the containers a signal
    /// could target, so that a later change costs two small reads instead of a scan.
    /// `then_ready`: report ready once the pass is done (the first pod list), so that the
    /// first swaps after `/readyz` take the kept pidfds rather than a /proc scan of their
    /// own beside the pass (tens of milliseconds at 250 pods). Each pod comes with its policy
    /// as [`Self::validate`] checked it (`None`: outside the namespace filter).
    fn warm<'a>(
        &mut self,
        pods: impl IntoIterator<Item = (&'a PodInfo, Option<&'a CheckedPolicy>)>,
        then_ready: bool,
        exec: &Executor,
    ) {
        let mut targets = Vec::new();
        for (pod, policy) in pods {
            let signals = matches!(
                policy,
                Some(Ok(Some(p))) if matches!(p.action, Action::Signal { .. })
            );
            // Outside --namespaces / --exclude-namespaces nothing will be signalled: no
            // /proc pass and no pidfd for it.
            if !signals || pod.terminating || !self.in_scope(pod) {
                continue;
            }
            for c in pod.containers.iter().filter(|c| c.running) {
                let Some(id) = &c.container_id else { continue };
                if self.warmed.insert((pod.uid.clone(), id.id.clone())) {
                    targets.push((pod.uid.clone(), id.clone()));
                }
            }
        }
        let ready = then_ready.then(|| self.health.clone());
        if targets.is_empty() {
            if let Some(health) = ready {
                report_ready(&health, 0);
            }
            return;
        }
        let processes = self.processes.clone();
        // On the async runtime's blocking pool: a pass over /proc is no work for the hot
        // thread.
        exec.runtime().spawn_blocking(move || {
            let found = processes.warm(&targets);
            tracing::debug!(
                containers = targets.len(),
                found,
                "main processes looked up ahead"
            );
            if let Some(health) = ready {
                report_ready(&health, found);
            }
        });
    }

    /// Decides and acts on a pod's change (`changed`: which sources of its volumes changed).
    /// `false` when the pod is not (yet) in the index.
    /// `fresh`: a new change, not a held one coming due. Paced (held) changes are kept by
    /// the pod's pacing and come back through [`Self::take_held_due`].
    #[allow(clippy::too_many_arguments)]
    pub fn act(
        &mut self,
        uid: &str,
        change: &PendingChange,
        fresh: bool,
        changed: impl FnOnce(&PodInfo) -> ChangedVolumes,
        seen: impl FnOnce() -> Seen,
        exec: &Executor,
        now: Instant,
    ) -> Acted {
        let Some(pod) = self.index().shared(uid) else {
            return Acted::Unknown;
        };
        if let Some(reason) = self.door.outside.get(uid) {
            tracing::debug!(pod = %pod.full_name(), reason, "outside the namespace filter; no action");
            return Acted::Done;
        }
        if self.poisoned.holds(uid, &pod) {
            tracing::debug!(pod = %pod.full_name(), "quarantined after a panic until it changes; no action");
            return Acted::Done;
        }
        // The volumes, for a log line or an Event (none is written before a signal).
        let volumes = || {
            change
                .volumes
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
        };
        let decision = self.decisions.decide(&pod, changed(&pod));
        let pod: &PodInfo = &pod;
        let (kind, sources) = match &*decision {
            Decision::Evict { cause } => (Some(ActionKind::Evict), &cause.sources[..]),
            Decision::Http { cause, .. } => (Some(ActionKind::Http), &cause.sources[..]),
            Decision::Signal { cause, .. } => (Some(ActionKind::Signal), &cause.sources[..]),
            Decision::Restart { cause, .. } => (Some(ActionKind::Restart), &cause.sources[..]),
            _ => (None, &[][..]),
        };
        // What keeps changing, for a flap report: the pod's changed sources, else its volumes.
        let source = || match sources {
            [] => format!("volume {}", volumes().join(", volume ")),
            _ => sources
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        };
        // Only for an action: a pod that did not opt in costs nothing more.
        let seen = if kind.is_some() { seen() } else { Seen::none() };
        if let Some(kind) = kind {
            match self
                .pacing
                .gate(uid, change, class_of(kind), fresh, now, source)
            {
                Paced::Act => {}
                Paced::Held(notice) => {
                    report_notice(pod, kind, notice, &volumes(), sources, &seen, exec);
                    return Acted::Held;
                }
                Paced::Refused(message) => {
                    let outcome = Outcome::InvalidAnnotation;
                    let note = format!("volume changed, no action: {message}");
                    let changed = volumes();
                    let line = Line::saying(
                        "volume changed but a pacing annotation is invalid; no action",
                    );
                    let line = line.volumes(&changed).error(&message);
                    exec.report(&pod.into(), ActionKind::None, outcome, note, line);
                    // Not handled: kept by the pacing until the annotation is fixed.
                    return Acted::Held;
                }
            }
        }
        // An action the pod's own settings refuse: its Warning, counted, and one log line.
        let refused = |(action, outcome, what), message: &String, cause: &policy::Cause| {
            let changed = volumes();
            let line = Line::saying(what).volumes(&changed);
            let line = line.cause(cause).error(message);
            exec.report(&pod.into(), action, outcome, message.clone(), line);
        };
        match &*decision {
            Decision::NotOptedIn => {
                tracing::debug!(pod = %pod.full_name(), volumes = ?volumes(), "not opted in; no action");
            }
            Decision::NothingToDo { reason } => {
                tracing::info!(pod = %pod.full_name(), volumes = ?volumes(), action = "none", reason, "volume changed; nothing to do");
            }
            Decision::AlreadyTerminating => {
                tracing::info!(pod = %pod.full_name(), volumes = ?volumes(), action = "evict", outcome = Outcome::Skipped.as_str(), "pod already terminating");
            }
            Decision::Invalid { message } => {
                let outcome = Outcome::InvalidAnnotation;
                let note = format!("volume changed, no action: {message}");
                let changed = volumes();
                let line = Line::saying("volume changed but the annotation is invalid; no action");
                let line = line.volumes(&changed).error(message);
                exec.report(&pod.into(), ActionKind::None, outcome, note, line);
            }
            Decision::SubPathOnly { action, message } => {
                let outcome = Outcome::SubPathNotUpdated;
                let changed = volumes();
                let line = Line::saying("no action").volumes(&changed).error(message);
                exec.report(&pod.into(), *action, outcome, message.clone(), line);
            }
            Decision::EvictRefused { message, cause } => {
                let what = (ActionKind::Evict, Outcome::Refused, "eviction refused");
                refused(what, message, cause);
            }
            Decision::Evict { cause } => {
                tracing::info!(pod = %pod.full_name(), volumes = ?volumes(), cause = %cause, action = "evict", "requesting eviction");
                exec.evict(EvictJob {
                    pod: PodRef::from(pod),
                    cause: cause.to_string(),
                    first_seen: Some(change.first_seen),
                    sources: cause.sources.clone(),
                    seen: seen.clone(),
                });
            }
            Decision::Http { target, cause } => {
                tracing::info!(pod = %pod.full_name(), volumes = ?volumes(), cause = %cause, action = "http", "requesting a reload over HTTP");
                exec.http(HttpJob {
                    pod_uid: pod.uid.clone(),
                    target: target.clone(),
                    sources: cause.sources.clone(),
                    first_seen: change.first_seen,
                    seen: seen.clone(),
                });
            }
            Decision::RestartRefused { message, cause } => {
                let what = (
                    ActionKind::Restart,
                    Outcome::RestartRefused,
                    "restart refused",
                );
                refused(what, message, cause);
            }
            Decision::Restart { targets, cause } => {
                let mut jobs = Vec::with_capacity(targets.len());
                for t in targets {
                    tracing::info!(pod = %pod.full_name(), volumes = ?volumes(), container = %t.target.container, cause = %cause, action = "restart", "restarting the container in place");
                    jobs.push(RestartJob {
                        pod_uid: pod.uid.clone(),
                        container: t.target.container.clone(),
                        stop: t.stop.clone(),
                        first_seen: change.first_seen,
                        sources: cause.sources.clone(),
                        seen: seen.clone(),
                    });
                }
                exec.restart_pod(&pod.uid, jobs);
            }
            Decision::Signal {
                signal,
                check,
                targets,
                cause,
            } => {
                for target in targets {
                    let job = SignalJob {
                        pod_uid: pod.uid.clone(),
                        container: target.container.clone(),
                        signal: *signal,
                        first_seen: change.first_seen,
                        attempt: 1,
                        check: *check,
                        sources: cause.sources.clone(),
                        seen: seen.clone(),
                    };
                    exec.signal(job);
                }
            }
        }
        Acted::Done
    }
}

/// What became of a change given to [`Pods::act`].
#[derive(Debug, PartialEq, Eq)]
pub enum Acted {
    /// The pod is not (yet) in the index.
    Unknown,
    /// Decided (acted on, or nothing to do): its content is the one handled.
    Done,
    /// Held by the pod's pacing, acted on later.
    Held,
}

/// `/readyz` answers 200 from now on: the pod list is in and the main processes of its
/// signal targets looked up (`processes` of them found).
/// Start-up is over then (the first list decoded, the pass over /proc made): its code need
/// not stay mapped (`host::memory::release_startup_code`).
fn report_ready(health: &Health, processes: usize) {
    health.set_ready(true);
    tracing::info!(processes, "main processes looked up; ready");
    let released = crate::host::memory::release_startup_code();
    tracing::debug!(bytes = released, "start-up code unmapped");
}
