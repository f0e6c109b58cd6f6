//! The env-consumer feature (docs/env-consumers.md): which objects opted-in pods read through
//! env ([`tracker`], [`hash`]), one GET of each when it changes (retried with backoff), and
//! what a change does: an eviction through the executor's [`Evictions`], or a warning; the
//! baseline annotations are patch jobs of the executor.

pub mod explain;
pub mod hash;
pub mod pacing;
mod restart;

use super::consumed::{Change, Consumed, Fetched, Tracker};
use super::feature::{Feature, Routed, World};
use super::recorded;
use crate::core::model::{PodInfo, SourceKind};
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::pod_index::PodIndex;
use crate::execute::applied::Seen;
use crate::execute::evict::{EvictJob, Evictions};
use crate::execute::patch::{PatchJob, PatchKind, Patches};
use crate::execute::report::{Line, Reporter};
use crate::ports::EnvApi;
use crate::ports::PodRef;
use futures::future::BoxFuture;
use hash::EnvDecision;
use pacing::{EnvNotice, EnvPaced, EnvPacing};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What the env consumers need from outside.
pub struct EnvDeps {
    pub api: Arc<dyn EnvApi>,
    /// The agent's eviction executor (PDB-respecting, paced, one per pod).
    pub evictions: Evictions,
    /// The env-consumer pods, shared with `evictions` (it stops when a pod is gone).
    pub index: Arc<RwLock<PodIndex>>,
    /// Writes the baseline annotations.
    pub baselines: Patches,
    /// Warnings (`EnvNotReloaded`, `EvictionRefused`) as metrics, Events and notifications.
    pub reporter: Reporter,
    pub configmaps: bool,
    pub secrets: bool,
    /// Stops fetch retries.
    pub stop: CancellationToken,
    /// `--flap-threshold`, `--time-zone`, `--max-defer` (docs/pacing.md).
    pub pacing: crate::core::pacing::PacingDefaults,
    /// The controller's key: digests and baseline MACs (`crate::k8s::controller_key`).
    pub key: crate::core::volume_digest::HashKey,
    /// The data versions published (`reloadlet.io/applied` names the one acted for).
    pub versions: crate::controller::consumer_states::versions::PublishedVersions,
}

pub struct EnvConsumers {
    deps: EnvDeps,
    /// The objects the env consumers read, and their GETs.
    consumed: Consumed,
    /// Env evictions paced per pod; `warned`: the pacing error last reported per pod.
    pacing: EnvPacing,
    warned: HashMap<String, crate::core::invalid::Invalid>,
    gauges: crate::controller::metrics::PacingShare,
    /// `reloadlet.io/env-pacing` as last written (or found) on each pod that had one; `None`:
    /// removed.
    records: HashMap<String, Option<String>>,
    /// Env restarts in place: wanted, and the requests being written.
    restarts: restart::EnvRestarts,
}

impl EnvConsumers {
    pub fn new(deps: EnvDeps) -> Self {
        let clock =
            crate::core::pacing::WallClock::new(jiff::Timestamp::now(), Instant::now().into_std());
        Self {
            pacing: EnvPacing::new(deps.pacing.clone(), clock),
            warned: HashMap::new(),
            gauges: Default::default(),
            records: HashMap::new(),
            restarts: Default::default(),
            consumed: Consumed::new(
                Tracker::with(
                    crate::controller::consumed::env_refs::references,
                    crate::core::annotations::ENV_BASELINE,
                    deps.configmaps,
                    deps.secrets,
                )
                .settling()
                .keyed(deps.key.clone()),
                deps.api.clone(),
                deps.stop.clone(),
            ),
            deps,
        }
    }

    fn index(&self) -> std::sync::RwLockWriteGuard<'_, PodIndex> {
        self.deps.index.write().unwrap_or_else(|e| e.into_inner())
    }

    /// A pod added or changed: follow its env references (or stop following them).
    fn put_pod(&mut self, pod: &PodInfo, world: &World) {
        if hash::env_eligible(pod).is_err() || pod.env.is_empty() {
            self.remove_pod(&pod.uid);
            return;
        }
        if let Some(value) = pod.annotations.get(crate::core::pacing::ENV_PACING) {
            // Written by this replica, or by the last leader: compared when the pod is paced.
            self.records
                .entry(pod.uid.clone())
                .or_insert_with(|| Some(value.clone()));
        }
        let fixed = self.check_pacing(pod, world);
        let fetch = self.consumed.tracker.put_pod(pod);
        if self.consumed.tracker.tracks(&pod.uid) {
            // The World's kept pod, shared: no second copy per env consumer.
            match world.shared(&pod.uid) {
                Some(shared) => self.index().apply_shared(shared),
                None => self.index().apply(pod.clone()),
            };
        } else {
            self.index().delete(&pod.uid);
        }
        self.consumed.pod_put(&pod.uid, fetch, fixed, world);
        if world.leader {
            // A request of ours another replaced before its grant: wanted again.
            self.check_displaced(pod);
            // A restart held while another request of the pod was in flight.
            if self.restarts.wants(&pod.uid) {
                self.request_restart(pod);
            }
        }
    }

    /// A bad pacing annotation: one Warning per distinct error (leader only), and no
    /// eviction of the pod until it is fixed. `true`: it was invalid and is fixed now.
    fn check_pacing(&mut self, pod: &PodInfo, world: &World) -> bool {
        match self.pacing.on_pod(pod) {
            Ok(fixed) => {
                self.warned.remove(&pod.uid);
                if fixed {
                    tracing::info!(pod = %pod.full_name(), "pacing annotations fixed; comparing the pod's env sources again");
                }
                fixed
            }
            Err(message) => {
                if world.leader && self.warned.get(&pod.uid) != Some(&message) {
                    let outcome = Outcome::InvalidAnnotation;
                    let note = format!("no env eviction until fixed: {message}");
                    let line = Line::saying(
                        "invalid pacing annotation; no env eviction of this pod until it is fixed",
                    );
                    self.deps.reporter.said(
                        &PodRef::from(pod),
                        ActionKind::None,
                        outcome,
                        note,
                        &[],
                        &Seen::none(),
                        line.error(&message),
                    );
                    self.warned.insert(pod.uid.clone(), message);
                }
                false
            }
        }
    }

    fn remove_pod(&mut self, uid: &str) {
        self.pacing.forget(uid, Instant::now().into_std());
        self.warned.remove(uid);
        self.records.remove(uid);
        self.restarts.forget(uid);
        self.consumed.tracker.remove_pod(uid);
        self.index().delete(uid);
    }

    fn fetched(&mut self, fetched: Fetched, world: &World) {
        if !world.leader {
            return;
        }
        let changes =
            self.consumed
                .tracker
                .fetched(&fetched.key, fetched.seq, fetched.data.as_ref());
        drop(fetched.data);
        for settled in self.consumed.tracker.take_settled() {
            self.pacing.settle(&settled);
        }
        for change in changes {
            self.act(&change, fetched.seen);
        }
    }

    /// What a change of one env source does to one pod.
    fn act(&mut self, change: &Change, seen: std::time::Instant) {
        let pod = {
            let index = self.deps.index.read().unwrap_or_else(|e| e.into_inner());
            index.get(&change.uid).cloned()
        };
        let Some(pod) = pod else { return };
        let source = change.source.clone();
        let cause = hash::cause(&source);
        let pod_ref = PodRef::from(&pod);
        let report = &self.deps.reporter;
        match hash::decide(&pod, &source) {
            decision @ (EnvDecision::Evict | EnvDecision::Restart(_)) => {
                let action = match decision {
                    EnvDecision::Restart(_) => "restart",
                    _ => "evict",
                };
                let now = Instant::now().into_std();
                match self.pacing.gate(change, seen, now) {
                    EnvPaced::Act(changes) => {
                        self.carry_out(changes, seen, "env source changed; evicting");
                    }
                    EnvPaced::Held(notice) => {
                        let owner = self.pacing.owner_label(&pod.uid);
                        let versions = &self.deps.versions;
                        report_notice(report, versions, &pod, owner, notice, source);
                        self.keep_record(&pod);
                    }
                    EnvPaced::Refused(message) => {
                        tracing::warn!(pod = %pod.full_name(), cause = %cause, action, error = %message, "env source changed but a pacing annotation is invalid; nothing done");
                        return;
                    }
                }
                // Not reported again in this run; the baseline stays until the eviction's
                // replacement, so a held change is found again after a restart.
                self.consumed.tracker.acting(change);
                self.update_gauges();
            }
            EnvDecision::Refused(note) => {
                let outcome = Outcome::Refused;
                // The pod's record says it failed, and why (`reloadlet status`).
                let seen = recorded::seen(Arc::new(pod.clone()), &self.deps.versions, None);
                let sources = [source];
                let line = Line::note().cause(&cause);
                let action = ActionKind::Evict;
                report.said(&pod_ref, action, outcome, note, &sources, &seen, line);
                self.consumed.tracker.acknowledge(change);
            }
            EnvDecision::RestartRefused(note) => self.restart_refused(&pod, change, note),
            EnvDecision::Covered(why) => {
                tracing::debug!(pod = %pod.full_name(), cause = %cause, "env change left to the node agent: {why}");
                self.consumed.tracker.acknowledge(change);
            }
            EnvDecision::NotReloaded(note) => {
                let outcome = Outcome::EnvNotReloaded;
                let (line, seen) = (Line::note().cause(&cause), Seen::none());
                let action = ActionKind::None;
                report.said(&pod_ref, action, outcome, note, &[source], &seen, line);
                self.consumed.tracker.acknowledge(change);
            }
        }
    }
}

impl EnvConsumers {
    /// Held env evictions whose time came: evicted now, once per pod, for every source held.
    fn fire_held(&mut self) {
        let now = Instant::now().into_std();
        for (first, seen, paced) in self.pacing.take_due(now) {
            match paced {
                EnvPaced::Act(changes) => {
                    self.carry_out(changes, seen, "deferred env eviction is due; evicting");
                }
                EnvPaced::Held(notice) => {
                    let pod = {
                        let index = self.deps.index.read().unwrap_or_else(|e| e.into_inner());
                        index.get(&first.uid).cloned()
                    };
                    let Some(pod) = pod else { continue };
                    let owner = self.pacing.owner_label(&pod.uid);
                    let (report, versions) = (&self.deps.reporter, &self.deps.versions);
                    report_notice(report, versions, &pod, owner, notice, first.source);
                    self.keep_record(&pod);
                }
                EnvPaced::Refused(_) => {}
            }
        }
        // A hold that ended without an eviction (its source came back to what the pod runs).
        let recorded: Vec<String> = self
            .records
            .iter()
            .filter(|(_, v)| v.is_some())
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in recorded {
            let pod = {
                let index = self.deps.index.read().unwrap_or_else(|e| e.into_inner());
                index.get(&uid).cloned()
            };
            if let Some(pod) = pod {
                self.keep_record(&pod);
            }
        }
        self.update_gauges();
    }

    /// Writes what is held for the pod on it (`reloadlet.io/env-pacing`, for `explain`) when
    /// that differs from what it carries: once when a hold begins or changes, removed when
    /// it ends. At most one write per held pod and hold, a few at a time (the baselines'
    /// executor); a failure is logged and not retried.
    fn keep_record(&mut self, pod: &PodInfo) {
        let value = self.pacing.record_of(&pod.uid).map(|r| r.to_value());
        if self.records.get(&pod.uid).unwrap_or(&None) == &value {
            return;
        }
        self.records.insert(pod.uid.clone(), value.clone());
        let job = PatchJob {
            pod: PodRef::from(pod),
            kind: PatchKind::EnvPacing,
            value,
        };
        self.deps.baselines.request(job, |_| {});
    }

    /// What the pods of `changes` decide now: a restart in place (asked per pod), else an
    /// eviction ([`Self::evict`]).
    fn carry_out(&mut self, changes: Vec<Change>, seen: std::time::Instant, why: &str) {
        let mut evict = Vec::new();
        let mut restart: Vec<(Arc<PodInfo>, Vec<Change>)> = Vec::new();
        for c in changes {
            let pod = {
                let index = self.deps.index.read().unwrap_or_else(|e| e.into_inner());
                index.shared(&c.uid)
            };
            let Some(pod) = pod else { continue };
            if !matches!(hash::decide(&pod, &c.source), EnvDecision::Restart(_)) {
                evict.push(c);
                continue;
            }
            match restart.iter_mut().find(|(p, _)| p.uid == c.uid) {
                Some((_, cs)) => cs.push(c),
                None => restart.push((pod, vec![c])),
            }
        }
        for (pod, changes) in restart {
            self.keep_record(&pod);
            self.restart(&pod, changes);
        }
        if !evict.is_empty() {
            self.evict(evict, seen, why);
        }
    }

    /// One eviction per pod still here, for all its `changes` (pods of one owner whose held
    /// evictions are released together come in one call).
    fn evict(&mut self, changes: Vec<Change>, seen: std::time::Instant, why: &str) {
        let mut by_pod: Vec<(String, Vec<crate::core::model::SourceRef>)> = Vec::new();
        for c in changes {
            match by_pod.iter_mut().find(|(uid, _)| *uid == c.uid) {
                Some((_, sources)) if sources.contains(&c.source) => {}
                Some((_, sources)) => sources.push(c.source),
                None => by_pod.push((c.uid, vec![c.source])),
            }
        }
        for (uid, sources) in by_pod {
            let pod = {
                let index = self.deps.index.read().unwrap_or_else(|e| e.into_inner());
                index.shared(&uid)
            };
            let Some(pod) = pod else { continue };
            let cause = sources
                .iter()
                .map(hash::cause)
                .collect::<Vec<_>>()
                .join("; ");
            tracing::info!(pod = %pod.full_name(), cause = %cause, action = "evict", "{why}");
            // Nothing is held for it any more (a blocked eviction keeps the pod).
            self.keep_record(&pod);
            // What becomes of it (blocked, failed) is recorded on the pod (issue #46 §2).
            let recorded = recorded::seen(pod.clone(), &self.deps.versions, None);
            self.deps.evictions.request(EvictJob {
                pod: PodRef::from(&*pod),
                cause,
                first_seen: Some(seen),
                sources,
                seen: recorded,
            });
        }
    }

    fn update_gauges(&mut self) {
        let m = &self.deps.reporter.metrics().pacing;
        self.gauges.set(m, self.pacing.counts());
    }
}

/// The Event, notification and counter of a deferral or a flapping episode, once each.
fn report_notice(
    report: &Reporter,
    versions: &crate::controller::consumer_states::versions::PublishedVersions,
    pod: &PodInfo,
    owner: Option<&str>,
    notice: Option<EnvNotice>,
    source: crate::core::model::SourceRef,
) {
    let m = &report.metrics().pacing;
    let (action, what) = match hash::decide(pod, &source) {
        EnvDecision::Restart(_) => (ActionKind::Restart, "restart"),
        _ => (ActionKind::Evict, "eviction"),
    };
    let (outcome, note, held_until) = match notice {
        None => return,
        Some(EnvNotice::Deferred { until, why }) => {
            m.deferrals.inc();
            (
                Outcome::Deferred,
                format!(
                    "env {what} deferred until {until} ({}); it runs once then: {}",
                    why.as_str(),
                    hash::cause(&source)
                ),
                Some(until),
            )
        }
        Some(EnvNotice::Flapping(r)) => {
            m.flap_episodes.inc();
            let within = humantime::format_duration(r.within);
            let held = match owner {
                Some(owner) => format!("the env {what}s of {owner}'s pods"),
                None => format!("the env {what}"),
            };
            (
                Outcome::Flapping,
                format!(
                    "{} changed {} times within {within}: holding {held} until it has been quiet for {within}",
                    r.source, r.changes,
                ),
                None,
            )
        }
    };
    let sources = [source];
    let seen = recorded::seen(Arc::new(pod.clone()), versions, held_until);
    let line = Line::note();
    report.said(
        &PodRef::from(pod),
        action,
        outcome,
        note,
        &sources,
        &seen,
        line,
    );
}

impl Feature for EnvConsumers {
    fn name(&self) -> &'static str {
        "env"
    }

    fn kinds(&self) -> Vec<SourceKind> {
        let mut kinds = vec![SourceKind::ConfigMap];
        if self.deps.secrets {
            kinds.push(SourceKind::Secret);
        }
        kinds
    }

    fn route(&mut self, event: Routed<'_>, world: &World) {
        match event {
            Routed::Object {
                key,
                resource_version,
            } => self.consumed.object(key, resource_version, world),
            Routed::Listed { kind, objects } => self.consumed.relisted(kind, objects, world),
            Routed::PodPut(pod) => self.put_pod(pod, world),
            Routed::PodRemoved(pod) => self.remove_pod(&pod.uid),
            Routed::PodsListed => self.consumed.fetch_all(world),
            Routed::Workload(_) => {}
            Routed::Leader(leader) => {
                if !leader {
                    // What was held is found again if this replica leads again: the pods'
                    // baselines never moved, only the tracker's "asked for" marks must go.
                    for change in self.pacing.clear_held() {
                        self.consumed.tracker.release_change(&change);
                    }
                    for change in self.restarts.clear_wanted() {
                        self.consumed.tracker.release_change(&change);
                    }
                    self.update_gauges();
                }
                self.consumed.leader(leader, world);
            }
        }
    }

    fn wake<'a>(&'a mut self, world: &'a World) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let due = self.pacing.next_deadline();
            tokio::select! {
                fetched = self.consumed.next() => {
                    if let Some(fetched) = fetched {
                        self.fetched(fetched, world);
                    }
                }
                written = self.restarts.next() => {
                    if let Some((uid, id, outcome)) = written {
                        self.request_written(uid, id, outcome);
                    }
                }
                _ = sleep_until(due) => {
                    if world.leader {
                        self.fire_held();
                    }
                }
            }
        })
    }

    /// Baseline annotations to write (leader only), a few at a time.
    fn settle(&mut self, world: &World) {
        if !world.leader {
            return;
        }
        for w in self.consumed.tracker.writes() {
            let job = PatchJob {
                pod: PodRef {
                    uid: w.uid,
                    namespace: w.namespace,
                    name: w.name,
                },
                kind: PatchKind::EnvBaseline,
                value: Some(w.value),
            };
            // Not retried; a failure is logged by the executor and the baseline stays in
            // memory, written with the pod's next one.
            self.deps.baselines.request(job, |_| {});
        }
    }
}

async fn sleep_until(at: Option<std::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
