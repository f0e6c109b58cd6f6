//! The controller's grant of restarts in place (issue #45 §2, docs/restart.md, "The grant"):
//! the node agents write `reloadlet.io/restart-request` on `action: restart` pods; the
//! Lease-holding controller writes `reloadlet.io/restart-grant` (the request's id) on as many
//! pods of one owner at once as the owner's PodDisruptionBudget allows, one at a time without
//! a budget, the next only once a restarted pod is Ready again
//! ([`crate::core::restart_grant::decide`]).
//!
//! Everything it decides from is on the pods (the three annotations and the Ready condition)
//! and the budgets' status, both re-read from the watches before each decision: a controller
//! restart or a new leader grants nothing twice and loses no request. Kept in memory only:
//! the grants being written (until their echo), when a restarted pod was first seen unready
//! (its `reloadlet.io/restart-timeout` starts again after a controller restart), and which
//! Warnings were given. Writes are the executor's ([`crate::execute::patch`],
//! `--dry-run` honoured), leader only.

use super::feature::{Feature, Routed, World};
use crate::core::disruption_budgets::BudgetIndex;
use crate::core::model::{PodInfo, SourceKind};
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::restart_grant::{decide, id_of, Allowed, Member, GRANT, REQUEST, RESTARTED};
use crate::execute::patch::{PatchJob, PatchKind, Patches};
use crate::execute::report::{Line, Reporter};
use crate::ports::PodRef;
use futures::future::BoxFuture;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// After a failed grant write, the owner is looked at again this much later.
const RETRY: Duration = Duration::from_secs(10);

/// An owner: the pod's controller ownerRef (`Pod`/its own name without one).
type Owner = (String, String, String);

pub struct GrantDeps {
    /// The executor's pod patches.
    pub patches: Patches,
    pub reporter: Reporter,
    /// The PodDisruptionBudgets as the controller's PDB watch keeps them (`None`: not
    /// followed, every owner one at a time).
    pub budgets: Option<Arc<RwLock<BudgetIndex>>>,
    /// The rollout feature runs (`--rollout`): the only pod of its owner that asks
    /// `on-blocked: rollout` is handed to it. Off: nothing would roll it, so its request is
    /// granted as any other (a moment without a Ready pod), not handed to no one.
    pub rolls: bool,
}

pub struct RestartGrants {
    deps: GrantDeps,
    budget_versions: Option<watch::Receiver<u64>>,
    /// The pods that carry a request or a grant, by owner.
    owners: HashMap<Owner, BTreeSet<String>>,
    dirty: BTreeSet<Owner>,
    /// Grants written (or being written) not yet seen on the pod: uid → id.
    writing: HashMap<String, String>,
    /// A restarted pod first seen not Ready: uid → (grant, when).
    unready_since: HashMap<String, (String, Instant)>,
    /// Warnings given: (uid, id, reason).
    warned: HashSet<(String, String, &'static str)>,
    retry_at: Option<Instant>,
    /// Owners whose grant write failed: looked at again at `retry_at`.
    retrying: BTreeSet<Owner>,
    tx: mpsc::UnboundedSender<(String, String, Owner, Outcome)>,
    rx: mpsc::UnboundedReceiver<(String, String, Owner, Outcome)>,
}

fn owner_of(pod: &PodInfo) -> Owner {
    match &pod.controller {
        Some(o) => (pod.namespace.clone(), o.kind.clone(), o.name.clone()),
        None => (pod.namespace.clone(), "Pod".into(), pod.name.clone()),
    }
}

/// A request not granted yet, on a pod that asks `reloadlet.io/on-blocked: rollout`, whose
/// owner has no other pod
/// ([`crate::core::restart_grant::only_pod_of_owner`]): the rollout's, not the grant's.
fn hands_off(pod: &PodInfo, world: &World) -> bool {
    let request = id_of(&pod.annotations, REQUEST);
    request.is_some()
        && id_of(&pod.annotations, GRANT) != request
        && matches!(
            crate::core::rollout::on_blocked(&pod.annotations),
            Ok((crate::core::rollout::OnBlocked::Rollout, _))
        )
        && crate::core::restart_grant::only_pod_of_owner(pod, world.pods_in(&pod.namespace))
}

/// Takes part in the grant: it asks for one, or holds one.
fn takes_part(pod: &PodInfo) -> bool {
    pod.annotations.contains_key(REQUEST) || pod.annotations.contains_key(GRANT)
}

impl RestartGrants {
    pub fn new(deps: GrantDeps) -> Self {
        let budget_versions = deps
            .budgets
            .as_ref()
            .map(|b| b.read().unwrap_or_else(|e| e.into_inner()).subscribe());
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            deps,
            budget_versions,
            owners: HashMap::new(),
            dirty: BTreeSet::new(),
            writing: HashMap::new(),
            unready_since: HashMap::new(),
            warned: HashSet::new(),
            retry_at: None,
            retrying: BTreeSet::new(),
            tx,
            rx,
        }
    }

    fn put(&mut self, pod: &PodInfo) {
        let owner = owner_of(pod);
        if let Some(id) = self.writing.get(&pod.uid) {
            if id_of(&pod.annotations, GRANT) == Some(id.as_str()) {
                self.writing.remove(&pod.uid);
            }
        }
        if takes_part(pod) {
            self.owners
                .entry(owner.clone())
                .or_default()
                .insert(pod.uid.clone());
            self.dirty.insert(owner);
        } else if let Some(set) = self.owners.get_mut(&owner) {
            if set.remove(&pod.uid) {
                self.dirty.insert(owner);
            }
        }
    }

    fn remove(&mut self, pod: &PodInfo) {
        let owner = owner_of(pod);
        if let Some(set) = self.owners.get_mut(&owner) {
            set.remove(&pod.uid);
            if set.is_empty() {
                self.owners.remove(&owner);
            }
        }
        self.writing.remove(&pod.uid);
        self.unready_since.remove(&pod.uid);
        self.warned.retain(|(uid, _, _)| uid != &pod.uid);
        self.dirty.insert(owner);
    }

    fn all_dirty(&mut self) {
        self.dirty.extend(self.owners.keys().cloned());
    }

    /// The budget of the owner whose pod has `labels`, as the PDB watch knows it now.
    /// `None`: the budgets are followed but not listed yet (nothing is granted).
    fn allowed(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Option<Allowed> {
        let Some(budgets) = &self.deps.budgets else {
            return Some(Allowed::NoBudget);
        };
        let index = budgets.read().unwrap_or_else(|e| e.into_inner());
        if !index.synced() {
            return None;
        }
        Some(match index.disruptions_allowed(namespace, labels) {
            None => Allowed::NoBudget,
            Some(n) => Allowed::Budget(n),
        })
    }

    /// Decides for one owner and writes its grants.
    fn handle(&mut self, owner: &Owner, world: &World) {
        let Some(uids) = self.owners.get(owner) else {
            return;
        };
        let pods: Vec<Arc<PodInfo>> = uids
            .iter()
            .filter_map(|uid| world.shared(uid))
            .filter(|p| !p.terminating)
            .collect();
        // A request whose restart would leave the owner no Ready pod, on a pod that asks
        // `on-blocked: rollout`: never granted; the rollout feature rolls the owner (by the
        // same rule), and the pod is told once. Without the rollout feature: granted.
        let (handed_off, pods): (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) = pods
            .into_iter()
            .partition(|p| self.deps.rolls && hands_off(p, world));
        for pod in handed_off {
            self.hand_off(&pod, owner);
        }
        let now = Instant::now();
        let wall_now = jiff::Timestamp::now();
        // How long each granted pod has been unready: drained or stopped, restarted or not
        // (a container that never runs again gets no `restarted`, and is stuck all the same).
        for pod in &pods {
            let grant = id_of(&pod.annotations, GRANT);
            let granted_unready = grant.is_some() && !pod.ready;
            match (granted_unready, grant) {
                (true, Some(g)) => {
                    let since = self
                        .unready_since
                        .entry(pod.uid.clone())
                        .or_insert_with(|| (g.to_owned(), now));
                    if since.0 != g {
                        *since = (g.to_owned(), now);
                    }
                }
                _ => {
                    self.unready_since.remove(&pod.uid);
                }
            }
        }
        let members: Vec<Member<'_>> = pods
            .iter()
            .map(|p| {
                let grant = self
                    .writing
                    .get(&p.uid)
                    .map(String::as_str)
                    .or_else(|| id_of(&p.annotations, GRANT));
                Member {
                    name: p.name.as_str(),
                    request: id_of(&p.annotations, REQUEST),
                    grant,
                    restarted: id_of(&p.annotations, RESTARTED),
                    ready: p.ready,
                    unready_for: self.unready_since.get(&p.uid).map(|(_, at)| {
                        let seen = now.saturating_duration_since(*at);
                        // the Ready condition's own time outlives a controller restart
                        seen.max(unready_by_condition(p, wall_now))
                    }),
                    timeout: crate::core::restart::parse(&p.annotations)
                        .map(|s| s.timeout)
                        .unwrap_or(crate::core::restart::DEFAULT_TIMEOUT),
                }
            })
            .collect();
        let Some(first) = pods.first() else { return };
        let Some(allowed) = self.allowed(&first.namespace, &first.labels) else {
            return;
        };
        let decision = decide(&members, allowed);
        let mut writes = Vec::new();
        let mut warnings = Vec::new();
        for &i in &decision.stuck {
            let (m, pod) = (&members[i], &pods[i]);
            let what = if m.restarted.is_some() && m.restarted == m.grant {
                "restarted"
            } else {
                "stopped (its container has not run again)"
            };
            let note = format!(
                "{what} for grant {} but not Ready within reloadlet.io/restart-timeout {}: no further restarts of {} {} until it is",
                m.grant.unwrap_or_default(),
                humantime::format_duration(m.timeout),
                owner.1,
                owner.2
            );
            warnings.push((
                pod.clone(),
                m.grant.unwrap_or_default().to_owned(),
                Outcome::RestartStuck,
                note,
            ));
        }
        for &i in &decision.blocked_by_budget {
            let (m, pod) = (&members[i], &pods[i]);
            let note = format!(
                "restart request {} waits: the PodDisruptionBudget of {} {} allows no disruption now (status.disruptionsAllowed 0); it is granted once the budget allows one",
                m.request.unwrap_or_default(),
                owner.1,
                owner.2
            );
            warnings.push((
                pod.clone(),
                m.request.unwrap_or_default().to_owned(),
                Outcome::RestartBlocked,
                note,
            ));
        }
        for &i in &decision.grant {
            if let Some(request) = members[i].request {
                writes.push((pods[i].clone(), request.to_owned()));
            }
        }
        // A deadline for the in-flight pods that may become stuck.
        if decision.stuck.is_empty() {
            for m in members.iter().filter(|m| m.unready_for.is_some()) {
                let left = m.timeout.saturating_sub(m.unready_for.unwrap_or_default());
                let at = now + left;
                self.retry_at = Some(self.retry_at.map_or(at, |r| r.min(at)));
            }
        }
        for (pod, id, outcome, note) in warnings {
            if self
                .warned
                .insert((pod.uid.clone(), id.clone(), outcome.reason()))
            {
                self.deps.reporter.told(
                    &PodRef::from(&*pod),
                    ActionKind::Restart,
                    outcome,
                    note,
                    Line::note(),
                );
            }
        }
        for (pod, id) in writes {
            tracing::info!(pod = %pod.full_name(), request = %id, in_flight = decision.in_flight, allowed = ?allowed, "granting a restart");
            self.writing.insert(pod.uid.clone(), id.clone());
            let tx = self.tx.clone();
            let (uid, grant, owner) = (pod.uid.clone(), id.clone(), owner.clone());
            self.deps.patches.request(
                PatchJob {
                    pod: PodRef::from(&*pod),
                    kind: PatchKind::RestartGrant,
                    value: Some(id),
                },
                move |outcome| {
                    let _ = tx.send((uid, grant, owner, outcome));
                },
            );
        }
    }

    /// Tells a handed-off request's pod, once per request (Normal `RestartHandedOff`).
    fn hand_off(&mut self, pod: &PodInfo, owner: &Owner) {
        let request = id_of(&pod.annotations, REQUEST)
            .unwrap_or_default()
            .to_owned();
        let outcome = Outcome::RestartHandedOff;
        if !self
            .warned
            .insert((pod.uid.clone(), request.clone(), outcome.reason()))
        {
            return;
        }
        let note = format!(
            "restart request {request} not granted: the only pod of {} {}, so a restart would leave no Ready pod; reloadlet.io/on-blocked is rollout: reloadlet controller rolls the workload instead (surge-first)",
            owner.1, owner.2
        );
        let (pod, line) = (PodRef::from(pod), Line::note());
        let report = &self.deps.reporter;
        report.told(&pod, ActionKind::Restart, outcome, note, line);
    }

    fn written(&mut self, uid: String, grant: String, owner: Owner, outcome: Outcome) {
        match outcome {
            // The echo of the pod brings it (dry-run: kept, nothing is written twice).
            Outcome::Patched | Outcome::DryRun => {}
            _ => {
                if self.writing.get(&uid) == Some(&grant) {
                    self.writing.remove(&uid);
                }
                // Looked at again after RETRY (not at once: a 403 would repeat every turn).
                if outcome != Outcome::PodGone {
                    let at = Instant::now() + RETRY;
                    self.retry_at = Some(self.retry_at.map_or(at, |r| r.min(at)));
                    self.retrying.insert(owner);
                }
            }
        }
    }
}

impl Feature for RestartGrants {
    fn name(&self) -> &'static str {
        "restart-grant"
    }

    fn kinds(&self) -> Vec<SourceKind> {
        Vec::new()
    }

    fn route(&mut self, event: Routed<'_>, _world: &World) {
        match event {
            Routed::PodPut(pod) => self.put(pod),
            Routed::PodRemoved(pod) => self.remove(pod),
            Routed::PodsListed | Routed::Leader(true) => self.all_dirty(),
            Routed::Leader(false) => {
                // Another leader decides from the pods: nothing of ours is in flight.
                self.writing.clear();
                self.retry_at = None;
            }
            Routed::Object { .. } | Routed::Listed { .. } | Routed::Workload(_) => {}
        }
    }

    fn wake<'a>(&'a mut self, _world: &'a World) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let retry = self.retry_at;
            let budgets = async {
                match &mut self.budget_versions {
                    Some(rx) => {
                        if rx.changed().await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some((uid, grant, owner, outcome)) = self.rx.recv() => {
                    self.written(uid, grant, owner, outcome);
                }
                () = budgets => self.all_dirty(),
                () = async {
                    match retry {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => {
                    self.retry_at = None;
                    // The owners whose write failed, and those with a pod that may be stuck.
                    self.dirty.append(&mut self.retrying);
                    self.all_dirty();
                }
            }
        })
    }

    fn settle(&mut self, world: &World) {
        if !world.leader || !world.pods_listed {
            return;
        }
        for owner in std::mem::take(&mut self.dirty) {
            self.handle(&owner, world);
        }
    }
}

/// How long the pod has been unready by its `Ready` condition's `lastTransitionTime`
/// (zero when not told, or in the future on a skewed clock).
fn unready_by_condition(pod: &PodInfo, now: jiff::Timestamp) -> std::time::Duration {
    pod.restart
        .unready_since
        .and_then(|since| now.duration_since(since).try_into().ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
