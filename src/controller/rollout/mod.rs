//! The rollout feature (`reloadlet.io/action: rollout`, docs/rollout.md): when the data an
//! opted-in pod reads of a ConfigMap (a Secret with `--secrets`) changes — only the keys it
//! consumes, through volumes or env — the pod's owning workload is rolled: one JSON merge
//! patch of its pod template (`kubectl.kubernetes.io/restartedAt`, and the workload's own
//! pacing record `reloadlet.io/rollout-pacing` in the same request), written by the executor
//! (`crate::execute::rollout`).
//!
//! The bookkeeping is the env consumers' ([`Tracker`], one GET per changed object, a
//! digest of what each pod reads, a baseline annotation on the pod:
//! `reloadlet.io/rollout-baseline`), so a controller restart or a leader change never rolls
//! a workload twice for one change, and a change made while no controller ran is rolled once.
//! Changes that arrive within [`COALESCE`] of the first are one batch: every workload is
//! patched once per batch, however many of its pods (on however many nodes) qualify.
//!
//! Escalation (`reloadlet.io/on-blocked: rollout` on an `action: evict` pod, issue #26 §2):
//! the agent evicts the pod on the change; when the pod still runs
//! `reloadlet.io/blocked-timeout` (default 10 m) after the change was seen — its eviction
//! was blocked by a budget, structurally or for longer than the timeout — the owner is
//! rolled as above. Seen from the API alone: a pod created before the change, still there.
//! On an `action: restart` pod (issue #45 §2), `on-blocked: rollout` rolls the owner only on
//! a structural block (a budget that allows no disruption while the workload keeps its size,
//! e.g. one replica under `minAvailable: 1`), at once, where the agent hands the restart off (`RestartHandedOff`); any
//! other change of such a pod is the restart grant's.

pub mod blocked;
pub mod compat;
pub mod explain;
pub mod pacing;
pub mod refs;

use super::consumed::{Change, Consumed, Fetched, Tracker};
use super::consumer_states::versions::PublishedVersions;
use super::feature::{Feature, Routed, World};
use crate::core::annotations::ROLLOUT_BASELINE;
use crate::core::disruption_budgets::BudgetIndex;
use crate::core::model::{PodInfo, SourceKind, SourceRef};
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::owner_chain::{Link, PodLink};
use crate::core::pacing::PacingDefaults;
use crate::core::rollout::{
    restart_patch, unrollable_by_pod, workload_of, OwnerRef, WorkloadKind, WorkloadRef,
};
use crate::execute::applied::Seen;
use crate::execute::patch::{PatchJob, PatchKind, Patches};
use crate::execute::report::Line;
use crate::execute::rollout::{RolloutJob, Rollouts};
use crate::ports::PodRef;
use crate::ports::{EnvApi, WorkloadApi};
use futures::future::BoxFuture;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Changes seen within this long of the first one are rolled together (one patch per
/// workload).
pub const COALESCE: Duration = Duration::from_secs(1);

/// What the rollout feature needs from outside.
pub struct RolloutDeps {
    /// GETs of the ConfigMaps/Secrets the pods read.
    pub api: Arc<dyn EnvApi>,
    /// Pod and ReplicaSet owners, workload strategies.
    pub workloads: Arc<dyn WorkloadApi>,
    /// The workload patches (and their reporting).
    pub rollouts: Rollouts,
    /// Writes the baseline annotations.
    pub baselines: Patches,
    /// Follow Secrets too (`--secrets`).
    pub secrets: bool,
    /// Roll Argo Rollouts (`--argo-rollouts`).
    pub argo: bool,
    /// Workloads with Reloader's annotations count as `action: rollout` (`--reloader-compat`).
    pub reloader_compat: bool,
    /// `kubectl.kubernetes.io/restartedAt`'s value: now, RFC 3339.
    pub now: fn() -> String,
    /// The controller's key: digests and baseline MACs (`crate::k8s::controller_key`).
    pub key: crate::core::volume_digest::HashKey,
    pub stop: CancellationToken,
    /// The data versions published (`reloadlet.io/applied` names the one rolled for).
    pub versions: PublishedVersions,
}

/// One pod's changes in a batch.
#[derive(Clone, Debug)]
struct Asking {
    pod: PodRef,
    changes: Vec<Change>,
    /// The pod as the controller knew it when it asked: what becomes of the rollout is
    /// recorded on it (`reloadlet.io/applied`, [`Asking::seen`]); `None`: not kept.
    known: Option<Arc<PodInfo>>,
}

impl Asking {
    fn new(pod: PodRef, changes: Vec<Change>, world: &World) -> Self {
        let known = world.shared(&pod.uid);
        Self {
            pod,
            changes,
            known,
        }
    }

    /// The sources it asks for, once each.
    fn sources(&self) -> Vec<SourceRef> {
        let mut out: Vec<SourceRef> = Vec::new();
        for c in &self.changes {
            if !out.contains(&c.source) {
                out.push(c.source.clone());
            }
        }
        out
    }

    /// What the pod's `reloadlet.io/applied` record is given with an outcome of its rollout.
    fn seen(
        &self,
        versions: &PublishedVersions,
        until: Option<jiff::Timestamp>,
    ) -> Option<(PodRef, Vec<SourceRef>, Seen)> {
        let pod = self.known.clone()?;
        let sources = self.sources();
        let seen = crate::controller::recorded::seen(pod, versions, until);
        Some((self.pod.clone(), sources, seen))
    }
}

pub struct RolloutFeature {
    deps: RolloutDeps,
    /// The objects the rolled pods read, and their GETs.
    consumed: Consumed,
    compat: compat::Compat,
    /// The batch being gathered, and when it is due.
    pending: BTreeMap<String, Asking>,
    due: Option<Instant>,
    /// Changes of `on-blocked: rollout` pods, rolled when the pod still runs at the instant.
    escalations: Vec<(Instant, Asking)>,
    /// Batches handled: the changes whose baseline moves on.
    done_tx: mpsc::UnboundedSender<Vec<Change>>,
    done_rx: mpsc::UnboundedReceiver<Vec<Change>>,
    /// The PodDisruptionBudgets, when followed: a structural block rolls at once.
    budgets: Option<blocked::Budgets>,
    /// Rollouts paced per workload (docs/pacing.md).
    pacing: Arc<pacing::RolloutPacing>,
}

impl RolloutFeature {
    pub fn new(deps: RolloutDeps) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Self {
            consumed: Consumed::new(
                Tracker::with(refs::references, ROLLOUT_BASELINE, true, deps.secrets)
                    .keyed(deps.key.clone()),
                deps.api.clone(),
                deps.stop.clone(),
            ),
            compat: compat::Compat::new(deps.reloader_compat, deps.secrets, deps.argo),
            deps,
            pending: BTreeMap::new(),
            due: None,
            escalations: Vec::new(),
            done_tx,
            done_rx,
            budgets: None,
            pacing: Arc::new(pacing::RolloutPacing::with_defaults(Default::default())),
        }
    }

    /// Follows the PodDisruptionBudgets: an `on-blocked: rollout` pod whose budget is
    /// structural is rolled at once.
    pub fn with_budgets(mut self, index: Arc<RwLock<BudgetIndex>>) -> Self {
        self.budgets = Some(blocked::Budgets::new(index));
        self
    }

    /// Paces rollouts with the flags' `--flap-threshold`, `--time-zone`, `--max-defer`
    /// (docs/pacing.md).
    pub fn with_pacing(mut self, defaults: PacingDefaults) -> Self {
        self.pacing = Arc::new(pacing::RolloutPacing::with_defaults(defaults));
        self
    }

    /// Tests: pacing on a given clock.
    #[cfg(test)]
    pub fn with_pacing_clock(
        mut self,
        defaults: PacingDefaults,
        clock: crate::core::pacing::WallClock,
    ) -> Self {
        self.pacing = Arc::new(pacing::RolloutPacing::new(defaults, clock));
        self
    }

    fn put_pod(&mut self, pod: &PodInfo, world: &World) {
        let Some(tracked) = self.compat.tracked(pod) else {
            self.consumed.tracker.remove_pod(&pod.uid);
            self.pacing.forget_pod(&pod.uid);
            return;
        };
        let report = self.deps.rollouts.reporter();
        // An `on-blocked: rollout` pod's pacing annotations are the agent's to report (it
        // acts on the change first); `action: rollout` and Reloader's workloads are ours.
        let warn = !matches!(refs::mode(pod), Some(refs::Mode::AfterBlocked(_)));
        let fixed = self.pacing.on_pod(pod, warn, world.leader, report);
        let fetch = self.consumed.tracker.put_pod(&tracked);
        self.consumed.pod_put(&pod.uid, fetch, fixed, world);
    }

    /// An object read: the pods whose consumed data changed join the batch.
    fn fetched(&mut self, fetched: Fetched, world: &World) {
        if !world.leader {
            return;
        }
        let changes =
            self.consumed
                .tracker
                .fetched(&fetched.key, fetched.seq, fetched.data.as_ref());
        let changes = self.compat.screen(
            changes,
            &fetched.key,
            fetched.data.as_ref(),
            world,
            &mut self.consumed.tracker,
        );
        drop(fetched.data);
        for change in changes {
            let Some((namespace, name)) = self.consumed.tracker.pod_name(&change.uid) else {
                continue;
            };
            let pod = PodRef {
                uid: change.uid.clone(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            };
            // An invalid pacing annotation: no rollout (warned when the pod was read); the
            // change is not marked, so fixing the annotation finds it again.
            if self.pacing.refuses(&change.uid) {
                tracing::info!(pod = %pod.full_name(), source = %change.source, "data the pod reads changed, but a pacing annotation of the pod is invalid; nothing rolled until it is fixed");
                continue;
            }
            // Not reported again in this run for the same data; the baseline moves once the
            // batch is handled.
            self.consumed.tracker.acting(&change);
            let mode = world
                .get(&change.uid)
                .and_then(|p| refs::mode_for(p, &change.source));
            if mode == Some(refs::Mode::WhenStructurallyBlocked) {
                let pod_now = world.get(&change.uid);
                if self.structurally_blocked(pod_now) || alone(pod_now, world) {
                    self.join_batch(Asking::new(pod, vec![change], world));
                } else {
                    // The restart is the grant's: the baseline moves on, nothing is rolled.
                    self.consumed.tracker.acknowledge(&change);
                }
                continue;
            }
            if let Some(refs::Mode::AfterBlocked(timeout)) = mode {
                if self.structurally_blocked(world.get(&change.uid)) {
                    let changes = vec![change];
                    self.join_batch(Asking::new(pod, changes, world));
                    continue;
                }
                tracing::info!(pod = %pod.full_name(), source = %change.source, timeout = %humantime::format_duration(timeout), "evict pod with on-blocked: rollout; its owner is rolled if the pod still runs after the timeout");
                let now = Instant::now();
                let at = Instant::from_std(crate::core::durations::later(now.into_std(), timeout));
                match self
                    .escalations
                    .iter_mut()
                    .find(|(_, a)| a.pod.uid == pod.uid)
                {
                    Some((_, asking)) => asking.changes.push(change),
                    None => self
                        .escalations
                        .push((at, Asking::new(pod, vec![change], world))),
                }
                continue;
            }
            self.pending
                .entry(change.uid.clone())
                .or_insert_with(|| Asking::new(pod, Vec::new(), world))
                .changes
                .push(change);
            self.due.get_or_insert_with(|| Instant::now() + COALESCE);
        }
    }

    /// Whether `pod`'s eviction is structurally blocked (logged, with the plain words).
    fn structurally_blocked(&self, pod: Option<&PodInfo>) -> bool {
        let (Some(budgets), Some(pod)) = (&self.budgets, pod) else {
            return false;
        };
        let Some((name, status)) = budgets.structural(pod) else {
            return false;
        };
        tracing::info!(
            pod = %format!("{}/{}", pod.namespace, pod.name),
            "{}; on-blocked: rollout, the agent sends no eviction or restart: rolling the owner now",
            status.structural_note(&name)
        );
        true
    }

    /// Joins the batch (due within [`COALESCE`]).
    fn join_batch(&mut self, asking: Asking) {
        self.pending
            .entry(asking.pod.uid.clone())
            .or_insert_with(|| Asking {
                pod: asking.pod.clone(),
                changes: Vec::new(),
                known: asking.known.clone(),
            })
            .changes
            .extend(asking.changes);
        self.due.get_or_insert_with(|| Instant::now() + COALESCE);
    }

    /// Escalations due: pods created before their change and still running join the batch;
    /// those gone were evicted (their replacements took a new baseline).
    fn escalate(&mut self, world: &World) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.escalations)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.escalations = later;
        for (_, asking) in due {
            let still = world
                .get(&asking.pod.uid)
                .is_some_and(|p| !p.terminating && refs::mode(p).is_some());
            if !still {
                continue;
            }
            tracing::warn!(pod = %asking.pod.full_name(), "the pod still runs after its blocked-timeout (on-blocked: rollout); rolling its owner");
            self.pending
                .entry(asking.pod.uid.clone())
                .or_insert_with(|| Asking {
                    pod: asking.pod.clone(),
                    changes: Vec::new(),
                    known: world.shared(&asking.pod.uid).or(asking.known.clone()),
                })
                .changes
                .extend(asking.changes);
            self.due.get_or_insert(now);
        }
    }

    /// The budgets changed: escalations whose pods are now structurally blocked join the
    /// batch without waiting for their timeout.
    fn budgets_changed(&mut self, world: &World) {
        if !world.leader || self.escalations.is_empty() {
            return;
        }
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.escalations)
            .into_iter()
            .partition(|(_, a)| {
                let pod = world
                    .get(&a.pod.uid)
                    .filter(|p| !p.terminating && refs::mode(p).is_some());
                self.structurally_blocked(pod)
            });
        self.escalations = later;
        for (_, asking) in now {
            self.join_batch(asking);
        }
    }

    /// Held rollouts whose time came: rolled for the pods that still ask (a pod gone was
    /// replaced or deleted; its replacement has its own baseline).
    fn release_held(&mut self, world: &World) {
        if !world.leader {
            self.pacing.clear_held(self.deps.rollouts.reporter());
            return;
        }
        let now = Instant::now().into_std();
        let due = self.pacing.take_due(now, self.deps.rollouts.reporter());
        for (_, asking) in due {
            let still: Vec<Asking> = asking
                .into_iter()
                .filter(|a| {
                    world.get(&a.pod.uid).is_some_and(|p| {
                        refs::mode(p).is_some() || self.compat.governing(p).is_some()
                    })
                })
                .collect();
            self.spawn_roll(still, false);
        }
    }

    /// The batch is due: resolved and rolled on the runtime.
    fn flush(&mut self) {
        self.due = None;
        let batch: Vec<Asking> = std::mem::take(&mut self.pending).into_values().collect();
        self.spawn_roll(batch, true);
    }

    /// Resolves and rolls `batch` on the runtime (`fresh`: new changes, not held ones).
    fn spawn_roll(&mut self, batch: Vec<Asking>, fresh: bool) {
        if batch.is_empty() {
            return;
        }
        let reloader = self.compat.enabled();
        let pacing = self.pacing.clone();
        let workloads = self.deps.workloads.clone();
        let rollouts = self.deps.rollouts.clone();
        let now = self.deps.now;
        let argo = self.deps.argo;
        let done = self.done_tx.clone();
        let stop = self.deps.stop.clone();
        let versions = self.deps.versions.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                handled = roll(batch, workloads.as_ref(), &rollouts, (now, argo, reloader), (&pacing, fresh, &versions)) => {
                    let _ = done.send(handled);
                }
            }
        });
    }
}

/// One asking pod on its way to a patch: the pod and its owner's ReplicaSet as read (for
/// the owner chain's check), and its controlling owner.
struct Claim {
    asking: Asking,
    pod: PodLink,
    owner: OwnerRef,
    replica_set: Option<Link>,
}

/// Resolves each asking pod's workload, groups them, verifies each pod's owner chain and the
/// workload's grant ([`crate::core::owner_chain`]), and patches each workload once.
/// Returns the changes dealt with for good (rolled, or reported as unsupported or not
/// granted).
async fn roll(
    batch: Vec<Asking>,
    workloads: &dyn WorkloadApi,
    rollouts: &Rollouts,
    (now, argo, reloader): (fn() -> String, bool, bool),
    (pacing, fresh, versions): (&pacing::RolloutPacing, bool, &PublishedVersions),
) -> Vec<Change> {
    let report = rollouts.reporter();
    let mut handled = Vec::new();
    let mut groups: BTreeMap<WorkloadRef, Vec<Claim>> = BTreeMap::new();
    let mut replica_sets: HashMap<(String, String), Option<Link>> = HashMap::new();
    for asking in batch {
        let pod = &asking.pod;
        let read = match workloads.pod(&pod.namespace, &pod.name).await {
            // Gone, or replaced by another pod of the same name: its replacement has a
            // baseline of its own.
            Ok(Some(read)) if read.uid == pod.uid => read,
            Ok(_) => {
                handled.extend(asking.changes);
                continue;
            }
            Err(e) => {
                tracing::warn!(pod = %pod.full_name(), error = %e, "cannot read the pod's owner; the change is rolled with the next one");
                continue;
            }
        };
        let owner = read.owner.clone();
        let mut replica_set = None;
        if let Some(o) = owner.as_ref().filter(|o| o.kind == "ReplicaSet") {
            let key = (pod.namespace.clone(), o.name.clone());
            if !replica_sets.contains_key(&key) {
                match workloads.replica_set(&pod.namespace, &o.name).await {
                    Ok(found) => {
                        replica_sets.insert(key.clone(), found);
                    }
                    Err(e) => {
                        tracing::warn!(pod = %pod.full_name(), replica_set = %o.name, error = %e, "cannot read the pod's ReplicaSet; the change is rolled with the next one");
                        continue;
                    }
                }
            }
            replica_set = replica_sets.get(&key).cloned().flatten();
        }
        let rs_owner = replica_set.as_ref().and_then(|rs| rs.owner.clone());
        match workload_of(&pod.namespace, owner.as_ref(), |_| rs_owner) {
            Ok(w) if w.kind == WorkloadKind::ArgoRollout && !argo => {
                let why = format!("the pod belongs to Argo Rollout {}, and the controller runs without --argo-rollouts (Helm controller.rollout.argoRollouts)", w.name);
                let sources = sources_of(std::slice::from_ref(&asking));
                unsupported(report, pod, &why, &sources, (&[&asking], versions));
                handled.extend(asking.changes);
            }
            Ok(w) => {
                let Some(owner) = owner else { continue };
                groups.entry(w).or_default().push(Claim {
                    asking,
                    pod: read,
                    owner,
                    replica_set,
                });
            }
            Err(why) => {
                let sources = sources_of(std::slice::from_ref(&asking));
                // No owner, or one no rollout applies to: the pod tells it, nothing recorded.
                let told = unrollable_by_pod(owner.as_ref()).is_some();
                let recorded: &[&Asking] = if told { &[] } else { &[&asking] };
                unsupported(
                    report,
                    pod,
                    &why.to_string(),
                    &sources,
                    (recorded, versions),
                );
                handled.extend(asking.changes);
            }
        }
    }
    for (workload, claims) in groups {
        let sources = sources_of_claims(&claims);
        let regarding = claims[0].asking.pod.clone();
        let name = format!(
            "{} {}/{}",
            workload.kind.as_str(),
            workload.namespace,
            workload.name
        );
        let read = match workloads.workload(&workload).await {
            Ok(Some(read)) => read,
            Ok(None) => {
                let why = format!("{name} does not exist (any more)");
                let recorded: Vec<&Asking> = claims.iter().map(|c| &c.asking).collect();
                unsupported(report, &regarding, &why, &sources, (&recorded, versions));
                handled.extend(claims.into_iter().flat_map(|c| c.asking.changes));
                continue;
            }
            Err(e) => {
                tracing::warn!(workload = %name, error = %e, "cannot read the workload; the change is rolled with the next one");
                continue;
            }
        };
        // Authority: each pod's chain and the workload's grant. A pod that fails either is
        // told so and its change is done with; the others go on.
        let mut asking = Vec::new();
        for claim in claims {
            let verdict = crate::core::owner_chain::verify(
                &claim.pod.labels,
                &claim.owner,
                claim.replica_set.as_ref(),
                &workload,
                &read,
            )
            .map_err(|e| crate::core::invalid::Invalid::new(e.to_string()))
            .and_then(|()| {
                crate::core::owner_chain::granted(
                    &claim.pod.annotations,
                    workload.kind,
                    &workload.name,
                    &read,
                    |own, template| {
                        reloader && (compat::relevant(own) || compat::relevant(template))
                    },
                )
            });
            match verdict {
                Ok(()) => asking.push(claim.asking),
                Err(why) => {
                    let sources = sources_of(std::slice::from_ref(&claim.asking));
                    let seen = claim.asking.seen(versions, None).map(|(_, _, seen)| seen);
                    let (pod, seen) = (&claim.asking.pod, seen.unwrap_or_default());
                    not_granted(report, pod, why.as_str(), &sources, &seen);
                    handled.extend(claim.asking.changes);
                }
            }
        }
        if asking.is_empty() {
            continue;
        }
        let regarding = asking[0].pod.clone();
        let uid = read.link.uid.clone();
        let facts = match read.strategy.facts(workload.kind, &workload.name) {
            Ok(facts) => facts,
            Err(why) => {
                let recorded: Vec<&Asking> = asking.iter().collect();
                let why = why.to_string();
                unsupported(report, &regarding, &why, &sources, (&recorded, versions));
                handled.extend(asking.into_iter().flat_map(|a| a.changes));
                continue;
            }
        };
        // Paced per workload: held (its baselines stay) or refused, nothing rolled now.
        pacing.seed(&workload, workloads).await;
        let (asking, record) = match pacing.admit(&workload, asking, fresh, report, versions) {
            pacing::Admission::Roll(asking, record) => (asking, record),
            pacing::Admission::Held(record) => {
                if let Some(record) = record {
                    rollouts
                        .annotate(&workload, &pacing::record_patch(&record))
                        .await;
                }
                continue;
            }
            pacing::Admission::Refused => continue,
        };
        let sources = sources_of(&asking);
        let cause = sources
            .iter()
            .map(|s| format!("{}/{}", s.kind.as_str(), s.name))
            .collect::<Vec<_>>()
            .join(",");
        let job = RolloutJob {
            patch: pacing::with_record(restart_patch(workload.kind, &now(), &cause), &record),
            cause: format!("{} changed", list(&sources)),
            strategy_note: facts.note,
            regarding,
            pods: asking.len(),
            recorded: asking
                .iter()
                .filter_map(|a| a.seen(versions, None))
                .collect(),
            sources,
            workload,
            uid,
        };
        let outcome = rollouts.run(&job).await;
        if matches!(outcome, Outcome::RolloutRequested | Outcome::DryRun) {
            handled.extend(asking.into_iter().flat_map(|a| a.changes));
        }
    }
    handled
}

fn sources_of(asking: &[Asking]) -> Vec<SourceRef> {
    let set: BTreeSet<SourceRef> = asking
        .iter()
        .flat_map(|a| a.changes.iter().map(|c| c.source.clone()))
        .collect();
    set.into_iter().collect()
}

fn sources_of_claims(claims: &[Claim]) -> Vec<SourceRef> {
    let set: BTreeSet<SourceRef> = claims
        .iter()
        .flat_map(|c| c.asking.changes.iter().map(|c| c.source.clone()))
        .collect();
    set.into_iter().collect()
}

fn list(sources: &[SourceRef]) -> String {
    sources
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Warning `RolloutNotGranted` on the pod, and a log line; no workload is written (the pod's
/// `reloadlet.io/applied` says it failed, and why).
fn not_granted(
    report: &crate::execute::report::Reporter,
    pod: &PodRef,
    why: &str,
    sources: &[SourceRef],
    seen: &Seen,
) {
    let outcome = Outcome::RolloutNotGranted;
    let note = format!("{} changed, nothing rolled: {why}", list(sources));
    let line = Line::note();
    report.said(pod, ActionKind::Rollout, outcome, note, sources, seen, line);
}

/// Warning `RolloutUnsupported` on the pod, and a log line; no workload is written. Each of
/// `recorded` (the asking pods, when the pod alone does not show why: an owning ReplicaSet
/// without a Deployment, a workload gone, updateStrategy OnDelete, Argo Rollouts off) records
/// it failed, and why (`reloadlet.io/applied`); what the pod's own owner reference tells
/// (`core::rollout::unrollable_by_pod`) `reloadlet status` derives from the pod, unwritten.
fn unsupported(
    report: &crate::execute::report::Reporter,
    pod: &PodRef,
    why: &str,
    sources: &[SourceRef],
    (recorded, versions): (&[&Asking], &PublishedVersions),
) {
    let outcome = Outcome::RolloutUnsupported;
    let note = |sources: &[SourceRef]| {
        format!(
            "reloadlet.io/action: rollout: {} changed, nothing rolled: {why}",
            list(sources)
        )
    };
    let (line, seen) = (Line::note(), Seen::none());
    report.said(
        pod,
        ActionKind::Rollout,
        outcome,
        note(sources),
        sources,
        &seen,
        line,
    );
    for asking in recorded {
        if let Some((pod, sources, seen)) = asking.seen(versions, None) {
            let note = note(&sources);
            let action = ActionKind::Rollout;
            report.note_applied(&pod, action, outcome, &note, &sources, &seen, None);
        }
    }
}

impl Feature for RolloutFeature {
    fn name(&self) -> &'static str {
        "rollout"
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
            Routed::PodRemoved(pod) => {
                self.consumed.tracker.remove_pod(&pod.uid);
                self.pacing.forget_pod(&pod.uid);
            }
            Routed::PodsListed => self.consumed.fetch_all(world),
            Routed::Workload(change) => {
                for uid in self.compat.workload(change, world) {
                    if let Some(pod) = world.get(&uid) {
                        self.put_pod(pod, world);
                    }
                }
            }
            Routed::Leader(leader) => {
                if !leader {
                    // Held rollouts are found again if this replica leads again: the pods'
                    // baselines never moved, only the tracker's "asked for" marks must go.
                    for asking in self.pacing.clear_held(self.deps.rollouts.reporter()) {
                        for change in &asking.changes {
                            self.consumed.tracker.release_change(change);
                        }
                    }
                }
                self.consumed.leader(leader, world);
            }
        }
    }

    fn wake<'a>(&'a mut self, world: &'a World) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let due = self.due;
            let sleep = async {
                match due {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let escalation = self.escalations.iter().map(|(at, _)| *at).min();
            let escalate = async {
                match escalation {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(fetched) = self.consumed.next() => self.fetched(fetched, world),
                () = blocked::changed(&mut self.budgets) => self.budgets_changed(world),
                () = self.pacing.due() => self.release_held(world),
                Some(handled) = self.done_rx.recv() => {
                    for change in &handled {
                        self.consumed.tracker.acknowledge(change);
                    }
                }
                () = sleep => {
                    if world.leader {
                        self.flush();
                    } else {
                        self.pending.clear();
                        self.due = None;
                    }
                }
                () = escalate => {
                    if world.leader {
                        self.escalate(world);
                    } else {
                        self.escalations.clear();
                    }
                }
            }
        })
    }

    /// Baseline annotations to write (leader only).
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
                kind: PatchKind::RolloutBaseline,
                value: Some(w.value),
            };
            self.deps.baselines.request(job, |_| {});
        }
    }
}

/// `pod` is the only pod of its owner (one replica): a restart would leave it no Ready pod,
/// so `on-blocked: rollout` rolls the owner instead, and the grant side hands the request
/// off (`controller::restart_grant`), by the same rule
/// ([`crate::core::restart_grant::only_pod_of_owner`]). Logged.
fn alone(pod: Option<&PodInfo>, world: &World) -> bool {
    let Some(pod) = pod else { return false };
    let alone = crate::core::restart_grant::only_pod_of_owner(pod, world.pods_in(&pod.namespace));
    if alone {
        tracing::info!(
            pod = %format!("{}/{}", pod.namespace, pod.name),
            "the only pod of its owner: a restart would leave no Ready pod; on-blocked: rollout, the owner is rolled now (surge-first)"
        );
    }
    alone
}

#[cfg(test)]
mod tests;
