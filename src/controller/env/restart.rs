//! Env consumers restarted in place (`reloadlet.io/env-action: restart`, or `action: restart`
//! without an env-action; docs/restart.md, "Env consumers"): the controller writes
//! `reloadlet.io/restart-request` on the pod — an id of its own, keyed with its key and naming
//! the containers to stop ([`crate::core::restart_request::controller_request_id`]) — and the
//! restart grant ([`crate::controller::restart_grant`]) grants it as it grants an agent's;
//! the pod's node agent verifies the id under the controller's key and stops the containers
//! (`execute::grant_wait`). The kubelet reads env again at each container start.
//!
//! **One request per pod at a time.** A pod that carries a request not restarted yet:
//! - the controller's own, not granted yet: newest wins — a new id names its containers and
//!   the new ones (one restart serves both changes);
//! - anything else (granted and in flight, or the node agent's own request): the restart is
//!   held here and asked once the pod shows that request restarted.
//!
//! **The baseline moves once the pod shows the restart done** (`reloadlet.io/restarted`
//! equal to the controller's id), not when the request is written: until then the change is
//! on the pod and its objects (the baseline differs from what the pod reads), so a
//! controller restart or a new leader finds it again — also when the node agent's request
//! replaced the controller's before its grant. Found again while the pod carries an
//! ungranted request of the controller's that names every container wanted (written by an
//! earlier run), that request serves the change: nothing is written again. A write that
//! fails is a Warning `RestartFailed` and the change is found again at the object's next
//! fetch.

use super::hash::{self, EnvDecision};
use super::EnvConsumers;
use crate::controller::consumed::Change;
use crate::controller::recorded;
use crate::core::model::{ContainerKind, PodInfo, SourceRef};
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::restart_grant::{id_of, GRANT, REQUEST, RESTARTED};
use crate::core::restart_request::{controller_request_id, controller_targets};
use crate::execute::patch::{PatchJob, PatchKind};
use crate::execute::report::Line;
use crate::ports::PodRef;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use tokio::sync::mpsc;

/// A restart the controller wants for one pod.
#[derive(Clone, Debug, Default)]
pub(super) struct Wanted {
    containers: BTreeSet<String>,
    changes: Vec<Change>,
}

impl Wanted {
    fn sources(&self) -> Vec<SourceRef> {
        let mut s: Vec<SourceRef> = self.changes.iter().map(|c| c.source.clone()).collect();
        s.sort();
        s.dedup();
        s
    }

    /// `self` (older) then `newer`: the baselines are acknowledged in this order, the newest
    /// digest of a source last.
    fn then(mut self, newer: Wanted) -> Wanted {
        self.join(newer);
        self
    }

    fn join(&mut self, other: Wanted) {
        self.containers.extend(other.containers);
        for c in other.changes {
            if !self.changes.contains(&c) {
                self.changes.push(c);
            }
        }
    }
}

/// The env restarts not yet requested, and the requests being written.
pub(super) struct EnvRestarts {
    /// Wanted, not written yet (held while the pod's request is someone else's, or in flight).
    wanted: HashMap<String, Wanted>,
    /// Being written: uid → (id, what it asks).
    writing: HashMap<String, (String, Wanted)>,
    /// Written, not restarted yet: uid → (id, what it asks, the pod has shown it). A request
    /// the node agent's replaced before it was granted is asked again ([`EnvConsumers::
    /// check_displaced`]).
    written: HashMap<String, (String, Wanted, bool)>,
    tx: mpsc::UnboundedSender<(String, String, Outcome)>,
    rx: mpsc::UnboundedReceiver<(String, String, Outcome)>,
}

impl Default for EnvRestarts {
    fn default() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            wanted: HashMap::new(),
            writing: HashMap::new(),
            written: HashMap::new(),
            tx,
            rx,
        }
    }
}

impl EnvRestarts {
    /// The outcome of a request write.
    pub(super) async fn next(&mut self) -> Option<(String, String, Outcome)> {
        self.rx.recv().await
    }

    pub(super) fn wants(&self, uid: &str) -> bool {
        self.wanted.contains_key(uid)
    }

    /// The pod is gone.
    pub(super) fn forget(&mut self, uid: &str) {
        self.wanted.remove(uid);
        self.writing.remove(uid);
        self.written.remove(uid);
    }

    /// Leadership lost: what was wanted and not written, and what was written and not
    /// restarted yet, is found again by the next leader (the baselines did not move). Returns
    /// the changes to release.
    pub(super) fn clear_wanted(&mut self) -> Vec<Change> {
        let wanted = self.wanted.drain().flat_map(|(_, w)| w.changes);
        let written = self.written.drain().flat_map(|(_, (_, w, _))| w.changes);
        wanted.chain(written).collect()
    }
}

impl EnvConsumers {
    /// A restart decided for the pod of `changes` (all of one pod): its containers join what is
    /// wanted for the pod, asked now or once the pod's current request is restarted.
    pub(super) fn restart(&mut self, pod: &PodInfo, changes: Vec<Change>) {
        let mut wanted = Wanted::default();
        for change in changes {
            match hash::decide(pod, &change.source) {
                EnvDecision::Restart(containers) => {
                    wanted.containers.extend(containers);
                    self.consumed.tracker.acting(&change);
                    wanted.changes.push(change);
                }
                // Decided otherwise now (the annotations changed meanwhile): acknowledged,
                // the next change decides again.
                _ => self.consumed.tracker.acknowledge(&change),
            }
        }
        if wanted.changes.is_empty() {
            return;
        }
        let cause = wanted
            .sources()
            .iter()
            .map(hash::cause)
            .collect::<Vec<_>>()
            .join("; ");
        tracing::info!(pod = %pod.full_name(), cause = %cause, containers = ?wanted.containers, action = "restart", "env source changed; restarting in place");
        self.restarts
            .wanted
            .entry(pod.uid.clone())
            .or_default()
            .join(wanted);
        self.request_restart(pod);
    }

    /// Writes the request for what is wanted for the pod, unless the pod's current request
    /// (not restarted yet) is someone else's or already granted; then it waits for the pod's
    /// next update ([`Self::put_pod`] calls this again).
    pub(super) fn request_restart(&mut self, pod: &PodInfo) {
        if self.restarts.writing.contains_key(&pod.uid) {
            return;
        }
        let Some(mut wanted) = self.restarts.wanted.remove(&pod.uid) else {
            return;
        };
        let key = self.deps.key.clone();
        let instances: Vec<(&str, Option<&str>)> = pod
            .containers
            .iter()
            .filter(|c| c.kind != ContainerKind::Init)
            .map(|c| {
                let id = c.container_id.as_ref().map(|i| i.id.as_str());
                (c.name.as_str(), id)
            })
            .collect();
        let request = id_of(&pod.annotations, REQUEST);
        if let Some(current) = request.filter(|r| id_of(&pod.annotations, RESTARTED) != Some(r)) {
            let ours = controller_targets(&key, &pod.uid, current, &instances);
            match ours {
                // Ours and not granted yet, written by an earlier run (a controller restart,
                // another leader) and naming every container wanted: it serves the change
                // (its restart is still to come); its baseline moves once it is restarted.
                Some(tagged)
                    if id_of(&pod.annotations, GRANT) != Some(current)
                        && !self.restarts.written.contains_key(&pod.uid)
                        && wanted.containers.iter().all(|w| {
                            instances
                                .iter()
                                .zip(&tagged)
                                .any(|((name, _), t)| *t && name == w)
                        }) =>
                {
                    tracing::info!(pod = %pod.full_name(), request = %current, containers = ?wanted.containers, "env restart: the pod's pending request of the controller's names these containers already; it serves the change");
                    self.restarts
                        .written
                        .insert(pod.uid.clone(), (current.to_owned(), wanted, true));
                    return;
                }
                // Ours and not granted yet: newest wins, naming its containers and serving its
                // changes too.
                Some(tagged) if id_of(&pod.annotations, GRANT) != Some(current) => {
                    for ((name, _), t) in instances.iter().zip(tagged) {
                        if t {
                            wanted.containers.insert((*name).to_owned());
                        }
                    }
                    if let Some((_, older, _)) = self
                        .restarts
                        .written
                        .remove(&pod.uid)
                        .filter(|(id, _, _)| id == current)
                    {
                        wanted = older.then(wanted);
                    }
                }
                // In flight, or the agent's: after it.
                _ => {
                    tracing::debug!(pod = %pod.full_name(), request = %current, "env restart waits: the pod's current restart request is not restarted yet");
                    self.restarts.wanted.insert(pod.uid.clone(), wanted);
                    return;
                }
            }
        }
        let chosen: Vec<(&str, Option<&str>)> = instances
            .iter()
            .copied()
            .filter(|(name, _)| wanted.containers.contains(*name))
            .collect();
        tracing::debug!(pod = %pod.full_name(), containers = ?chosen, "env restart: the containers to stop, as they run");
        let id = controller_request_id(&key, &pod.uid, &change_bytes(&wanted), &chosen);
        let Some(id) = id else {
            // The containers went away, or more than an id can name (a spec change between
            // the decision and now): the pod's next change decides again.
            for change in &wanted.changes {
                self.consumed.tracker.acknowledge(change);
            }
            tracing::info!(pod = %pod.full_name(), containers = ?wanted.containers, "env restart not requested: none or too many of its containers are left");
            return;
        };
        let tx = self.restarts.tx.clone();
        let (uid, written) = (pod.uid.clone(), id.clone());
        let job = PatchJob {
            pod: PodRef::from(pod),
            kind: PatchKind::RestartRequest,
            value: Some(id.clone()),
        };
        self.restarts.writing.insert(pod.uid.clone(), (id, wanted));
        self.deps.baselines.request(job, move |outcome| {
            let _ = tx.send((uid, written, outcome));
        });
    }

    /// A request write is over: acknowledged and reported (written), or reported as failed.
    pub(super) fn request_written(&mut self, uid: String, id: String, outcome: Outcome) {
        let Some((writing, wanted)) = self.restarts.writing.remove(&uid) else {
            return;
        };
        if writing != id {
            return;
        }
        let pod = {
            let index = self.deps.index.read().unwrap_or_else(|e| e.into_inner());
            index.shared(&uid)
        };
        let Some(pod) = pod else { return };
        let sources = wanted.sources();
        let cause = sources
            .iter()
            .map(hash::cause)
            .collect::<Vec<_>>()
            .join("; ");
        let containers: Vec<&str> = wanted.containers.iter().map(String::as_str).collect();
        let pod_ref = PodRef::from(&*pod);
        let seen = recorded::seen(pod.clone(), &self.deps.versions, None);
        let report = &self.deps.reporter;
        match outcome {
            Outcome::Patched => {
                // The baselines move once the pod shows it restarted (`check_displaced`).
                self.restarts
                    .written
                    .insert(uid.clone(), (id.clone(), wanted.clone(), false));
                let note = format!(
                    "restart of {} requested by the controller ({REQUEST}: {id}); waiting for its grant (as many pods of the owner at once as its PodDisruptionBudget allows, one without a budget), then the node agent restarts it in place and the kubelet reads env again: {cause}",
                    containers.join(", ")
                );
                let outcome = Outcome::RestartRequested;
                report.said(
                    &pod_ref,
                    ActionKind::Restart,
                    outcome,
                    note,
                    &sources,
                    &seen,
                    Line::saying("env restart requested; waiting for the grant").cause(&cause),
                );
            }
            Outcome::DryRun => {
                let note = format!("dry-run: no restart was requested: {cause}");
                report.record_seen(
                    &pod_ref,
                    ActionKind::Restart,
                    Outcome::DryRun,
                    note,
                    &sources,
                    &seen,
                );
            }
            Outcome::PodGone => {}
            failed => {
                for change in &wanted.changes {
                    self.consumed.tracker.release_change(change);
                }
                let note = format!(
                    "not restarted: could not write the restart request ({REQUEST}, {}); the object's next change asks again: {cause}",
                    failed.as_str()
                );
                let outcome = Outcome::RestartFailed;
                report.said(
                    &pod_ref,
                    ActionKind::Restart,
                    outcome,
                    note,
                    &sources,
                    &seen,
                    Line::note(),
                );
            }
        }
        // What was wanted meanwhile.
        if self.restarts.wants(&uid) {
            self.request_restart(&pod);
        }
    }

    /// The pod as its watch shows it: a request of the controller's that the pod shows
    /// restarted has its changes' baselines move; one that the pod showed and that another
    /// request (the node agent's, written at the same moment) replaced before it was
    /// restarted is wanted again, asked once that other request is restarted (its baselines
    /// did not move: a controller restart meanwhile finds the change again).
    pub(super) fn check_displaced(&mut self, pod: &PodInfo) {
        let Some((id, _, seen)) = self.restarts.written.get_mut(&pod.uid) else {
            return;
        };
        let request = id_of(&pod.annotations, REQUEST);
        if id_of(&pod.annotations, RESTARTED) == Some(id.as_str()) {
            if let Some((_, done, _)) = self.restarts.written.remove(&pod.uid) {
                for change in &done.changes {
                    self.consumed.tracker.acknowledge(change);
                }
            }
            return;
        }
        if request == Some(id.as_str()) {
            *seen = true;
            return;
        }
        // Not shown yet (the watch is behind the write), or replaced by a newer one of ours
        // being written: nothing to say yet.
        if !*seen || self.restarts.writing.contains_key(&pod.uid) {
            return;
        }
        let Some((id, wanted, _)) = self.restarts.written.remove(&pod.uid) else {
            return;
        };
        let key = self.deps.key.clone();
        if request.is_some_and(|r| controller_targets(&key, &pod.uid, r, &[]).is_some()) {
            // Replaced by a newer request of ours (another replica's, a leader change): its
            // writer moves the baselines; here the changes may be found again.
            for change in &wanted.changes {
                self.consumed.tracker.release_change(change);
            }
            return;
        }
        tracing::info!(pod = %pod.full_name(), request = %id, replaced_by = ?request, "env restart request replaced before its grant; asked again after the request that replaced it");
        let newer = self.restarts.wanted.remove(&pod.uid).unwrap_or_default();
        self.restarts
            .wanted
            .insert(pod.uid.clone(), wanted.then(newer));
        self.request_restart(pod);
    }

    /// A restart refused for the pod (`RestartRefused`, recorded on it).
    pub(super) fn restart_refused(&mut self, pod: &PodInfo, change: &Change, note: String) {
        let outcome = Outcome::RestartRefused;
        let seen = recorded::seen(Arc::new(pod.clone()), &self.deps.versions, None);
        let sources = [change.source.clone()];
        let cause = hash::cause(&change.source);
        self.deps.reporter.said(
            &PodRef::from(pod),
            ActionKind::Restart,
            outcome,
            note,
            &sources,
            &seen,
            Line::note().cause(&cause),
        );
        self.consumed.tracker.acknowledge(change);
    }
}

/// What names one request (the id's content part): the changes (sources and digests) and the
/// moment, so that two requests never share an id.
fn change_bytes(wanted: &Wanted) -> Vec<u8> {
    let mut out = Vec::new();
    for c in &wanted.changes {
        out.extend_from_slice(c.source.to_string().as_bytes());
        out.push(0);
        out.extend_from_slice(c.digest.as_bytes());
        out.push(0);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    out.extend_from_slice(&now.as_nanos().to_le_bytes());
    out
}
