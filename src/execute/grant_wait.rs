//! Carrying out the agent's side of the restart grant ([`super::restart_grant`] decides): the
//! request written on the pod with its Normal `RestartRequested` Event, the granted restart
//! through the executor's one restart path (spacing included), and `reloadlet.io/restarted`
//! once the containers run again. Writes go through the pod edge of `reloadlet.io/applied`
//! (a JSON merge patch of one annotation, conditional on the pod's UID; `dryRun=All` under
//! `--dry-run`, where nothing is requested at all).

use super::effect::{bounded, retried, API_CALL_TIMEOUT, ONCE_MORE};
use super::perform::{perform_once, Effect};
use super::restart::RestartJob;
use super::restart_grant::{Maker, Step};
use super::Inner;
use crate::core::model::PodInfo;
use crate::core::outcome::{ActionKind, Outcome};
use crate::core::policy::Decision;
use crate::core::restart_grant::{GRANT, REQUEST, RESTARTED};
use crate::core::restart_request::{
    controller_targets, is_controller_request, is_own_request, request_id, unchanged_since,
};
use crate::core::volume_digest::HashKey;
use crate::ports::{PatchError, PatchRequest, PatchTarget, PodRef};
use crate::retry::{Attempt, Retries};
use std::convert::Infallible;
use std::sync::Arc;

/// The agent's restart request as an [`Effect`]: [`Inner::write_request`], or under
/// `--dry-run` [`Inner::rehearse_request`].
struct RestartRequest {
    inner: Arc<Inner>,
    uid: String,
    jobs: Vec<RestartJob>,
}

impl Effect for RestartRequest {
    type Done = ();
    type Error = Infallible;

    async fn attempt(&self) -> Attempt<(), Infallible> {
        let inner = self.inner.clone();
        inner
            .write_request(self.uid.clone(), self.jobs.clone())
            .await;
        Attempt::Done(())
    }

    async fn rehearse(&self) -> Attempt<(), Infallible> {
        self.inner.rehearse_request(&self.uid, &self.jobs);
        Attempt::Done(())
    }
}

impl Inner {
    fn restart_key(&self) -> &HashKey {
        self.restart_key
            .get_or_init(|| HashKey::generate().expect("the kernel's random source (getrandom)"))
    }

    /// A `restart` decision without `--restart-without-grant`: the request is written on the
    /// pod and the restart waits here for its grant ([`RestartRequest`]).
    pub(super) async fn request_restart(self: Arc<Self>, uid: String, jobs: Vec<RestartJob>) {
        let request = RestartRequest {
            inner: self.clone(),
            uid,
            jobs,
        };
        perform_once(&self.report, &request).await
    }

    /// `--dry-run`'s request: said, nothing written, so nothing is granted or restarted.
    fn rehearse_request(&self, uid: &str, jobs: &[RestartJob]) {
        let (Some(first), Some(pod)) = (jobs.first(), self.pod(uid)) else {
            return;
        };
        let note = "dry-run: no restart was requested";
        let message = "dry-run: would request the controller's grant to restart";
        self.said_restart_rehearsed(&pod, first, note, message);
    }

    /// The request written on the pod (its Normal `RestartRequested` Event), then the wait
    /// for its grant.
    async fn write_request(self: Arc<Self>, uid: String, jobs: Vec<RestartJob>) {
        let Some(first) = jobs.first().cloned() else {
            return;
        };
        let Some(pod) = self.pod(&uid) else {
            return;
        };
        let pod_ref = PodRef::from(&*pod);
        let Some(patcher) = self.pod_patcher.clone() else {
            let note = format!("not restarted: the agent writes no pod annotations here, so it cannot ask the controller's grant (reloadlet.io/restart-request); --restart-without-grant restarts without it: {}", first.cause());
            tracing::warn!(pod = %pod.full_name(), action = "restart", outcome = Outcome::RestartRefused.as_str(), "restart refused: no pod patch edge for the request");
            self.report.record_seen(
                &pod_ref,
                ActionKind::Restart,
                Outcome::RestartRefused,
                note,
                &first.sources,
                &first.seen,
            );
            return;
        };
        // Tagged with the containers a recovered restart would stop, as they run now: an
        // agent restarted mid-restart stops none of them twice (core::restart_request).
        let targets = recovered_jobs(&pod);
        let id = request_id(
            self.restart_key(),
            &uid,
            &change_bytes(&jobs),
            &instances(&pod, &targets),
        );
        let containers: Vec<String> = jobs.iter().map(|j| j.container.clone()).collect();
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .request(&uid, id.clone(), jobs);
        let written = write(patcher.as_ref(), &pod, REQUEST, &id).await;
        match written {
            Ok(()) => {
                let note = format!(
                    "restart of {} requested ({REQUEST}: {id}); waiting for the controller's grant (as many pods of the owner at once as its PodDisruptionBudget allows, one without a budget): {}",
                    containers.join(", "),
                    first.cause()
                );
                tracing::info!(pod = %pod.full_name(), request = %id, containers = ?containers, cause = %first.cause(), action = "restart", outcome = Outcome::RestartRequested.as_str(), "restart requested; waiting for the grant");
                self.report.record_seen(
                    &pod_ref,
                    ActionKind::Restart,
                    Outcome::RestartRequested,
                    note,
                    &first.sources,
                    &first.seen,
                );
                // Whether a controller is there to grant it.
                self.signals.spawn_on(
                    self.clone().watch_coordination(pod_ref.clone(), id.clone()),
                    &self.runtime,
                );
                // The grant may already be there (written before the request's echo).
                if let Some(now) = self.pod(&uid) {
                    self.grant_step(&now);
                }
            }
            Err(PatchError::NotFound) => {}
            Err(e) => {
                let note = format!(
                    "not restarted: could not write the restart request ({REQUEST}): {e}; the next change asks again: {}",
                    first.cause()
                );
                tracing::warn!(pod = %pod.full_name(), error = %e, action = "restart", outcome = Outcome::RestartFailed.as_str(), "could not write the restart request");
                self.report.record_seen(
                    &pod_ref,
                    ActionKind::Restart,
                    Outcome::RestartFailed,
                    note,
                    &first.sources,
                    &first.seen,
                );
            }
        }
    }

    /// The pod as its watch shows it: a grant that came, a restart that is over, or (after an
    /// agent restart) a granted request of its own to carry out.
    pub(super) fn grant_step(self: &Arc<Self>, pod: &PodInfo) {
        if self.restart_without_grant || self.report.dry_run() {
            return;
        }
        self.follow_controller_key();
        let key = self.restart_key().clone();
        // The controller's key as last read from its Secret (by its own task: the pod watch
        // never waits for it); `None`: not (yet) known, so no controller request verifies.
        let controller_key = self
            .controller_key
            .as_ref()
            .and_then(|k| k.borrow().clone());
        let uid = pod.uid.clone();
        let whose = |id: &str| {
            if is_own_request(&key, &uid, id) {
                Some(Maker::Agent)
            } else if controller_key
                .as_ref()
                .is_some_and(|k| is_controller_request(k, &uid, id))
            {
                Some(Maker::Controller)
            } else {
                None
            }
        };
        let step = self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .on_pod(pod, whose);
        let Some(step) = step else { return };
        let inner = self.clone();
        match step {
            Step::Perform { id, jobs } => {
                tracing::info!(pod = %pod.full_name(), grant = %id, "restart granted by the controller");
                self.signals
                    .spawn_on(inner.perform(uid, id, jobs), &self.runtime);
            }
            Step::Recover { id } => {
                let mut jobs = recovered_jobs(pod);
                // Containers that started anew since the request (the agent stopped them
                // before its own restart, or they exited) read the new config already.
                if let Some(unchanged) = unchanged_since(&key, &uid, &id, &instances(pod, &jobs)) {
                    let mut keep = unchanged.into_iter();
                    jobs.retain(|_| keep.next().unwrap_or(true));
                }
                tracing::info!(pod = %pod.full_name(), grant = %id, containers = jobs.len(), "a granted restart requested before the agent restarted; carrying it out (containers started anew since the request are not stopped again)");
                self.requests
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .begin(pod, &id, &jobs);
                self.signals
                    .spawn_on(inner.perform(uid, id, jobs), &self.runtime);
            }
            Step::Controller { id, mut jobs } => {
                let tagged = controller_key
                    .as_ref()
                    .map(|k| controller_jobs(k, pod, &id))
                    .unwrap_or_default();
                for job in tagged {
                    if !jobs.iter().any(|j| j.container == job.container) {
                        jobs.push(job);
                    }
                }
                let containers: Vec<&str> = jobs.iter().map(|j| j.container.as_str()).collect();
                tracing::info!(pod = %pod.full_name(), grant = %id, containers = ?containers, "the controller's env restart granted; carrying it out (containers started anew since the request are not stopped again)");
                self.requests
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .begin(pod, &id, &jobs);
                self.signals
                    .spawn_on(inner.perform(uid, id, jobs), &self.runtime);
            }
            Step::Record { id } => {
                let pod = pod.clone();
                self.signals.spawn_on(
                    async move {
                        let Some(patcher) = inner.pod_patcher.clone() else {
                            return;
                        };
                        match write(patcher.as_ref(), &pod, RESTARTED, &id).await {
                            Ok(()) => {
                                tracing::info!(pod = %pod.full_name(), restarted = %id, "restart recorded; the controller grants the next once the pod is Ready")
                            }
                            Err(PatchError::NotFound) => {}
                            Err(e) => {
                                tracing::warn!(pod = %pod.full_name(), restarted = %id, error = %e, "could not record the restart; the owner's next restart waits for it")
                            }
                        }
                    },
                    &self.runtime,
                );
            }
        }
    }

    /// Once: a task that, whenever the controller's key is read anew (first read, or made
    /// anew), looks at every pod again, so a controller request granted before the key was
    /// known is carried out without waiting for the pod's next update. It holds the executor
    /// weakly (it ends with it).
    fn follow_controller_key(self: &Arc<Self>) {
        let Some(mut rx) = self.controller_key.clone() else {
            return;
        };
        self.controller_key_followed.call_once(|| {
            let weak = Arc::downgrade(self);
            self.runtime.spawn(async move {
                while rx.changed().await.is_ok() {
                    let Some(inner) = weak.upgrade() else { return };
                    let pods: Vec<Arc<PodInfo>> = {
                        let index = inner.index.read().unwrap_or_else(|e| e.into_inner());
                        index
                            .iter()
                            .filter(|p| p.annotations.contains_key(GRANT))
                            .filter_map(|p| index.shared(&p.uid))
                            .collect()
                    };
                    for pod in pods {
                        inner.grant_step(&pod);
                    }
                }
            });
        });
    }

    /// Stops the granted containers (each through the spaced restart path), then looks at the
    /// pod again: once they run again, `restarted` is written.
    async fn perform(self: Arc<Self>, uid: String, id: String, jobs: Vec<RestartJob>) {
        let stops = jobs.into_iter().map(|job| self.clone().restart_one(job));
        let stopped = futures::future::join_all(stops)
            .await
            .into_iter()
            .filter(|s| *s)
            .count();
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .stopped(&uid, &id, stopped);
        if let Some(pod) = self.pod(&uid) {
            self.grant_step(&pod);
        }
    }
}

/// What names one change (the request id's content part): the changed sources, the kubelet
/// writes seen (their `..<timestamp>` directories) and the moment of the decision, so that
/// two changes of the same source never share an id.
fn change_bytes(jobs: &[RestartJob]) -> Vec<u8> {
    let mut out = Vec::new();
    for job in jobs {
        out.extend_from_slice(job.container.as_bytes());
        out.push(0);
        out.extend_from_slice(job.cause().as_bytes());
        out.push(0);
        out.extend_from_slice(format!("{:?}", job.seen).as_bytes());
        out.push(0);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    out.extend_from_slice(&now.as_nanos().to_le_bytes());
    out
}

/// The jobs of a recovered grant: the containers the restart decision would pick when it
/// does not know which volumes changed (`core::policy::recovered_restart`).
fn recovered_jobs(pod: &PodInfo) -> Vec<RestartJob> {
    let Decision::Restart { targets, cause } = crate::core::policy::recovered_restart(pod) else {
        return Vec::new();
    };
    targets
        .into_iter()
        .map(|t| RestartJob {
            pod_uid: pod.uid.clone(),
            container: t.target.container,
            stop: t.stop,
            first_seen: std::time::Instant::now(),
            sources: cause.sources.clone(),
            seen: super::applied::Seen::none(),
        })
        .collect()
}

/// The jobs of the controller's env restart `id`: the pod's containers (classic init
/// containers never) whose name and current container ID are among the id's tags
/// (`core::restart_request::controller_targets`): a container started anew since the request
/// read the new env already and is not stopped. Stop plans as for `action: restart`; none
/// for a pod a restart cannot serve (`core::restart::refusal`: the controller does not ask
/// for one) or whose restart annotations are invalid.
fn controller_jobs(key: &HashKey, pod: &PodInfo, id: &str) -> Vec<RestartJob> {
    use crate::core::model::ContainerKind;
    use crate::core::restart;
    let candidates: Vec<&crate::core::model::ContainerInfo> = pod
        .containers
        .iter()
        .filter(|c| c.kind != ContainerKind::Init)
        .collect();
    let instances: Vec<(&str, Option<&str>)> = candidates
        .iter()
        .map(|c| {
            let id = c.container_id.as_ref().map(|i| i.id.as_str());
            (c.name.as_str(), id)
        })
        .collect();
    let Some(tagged) = controller_targets(key, &pod.uid, id, &instances) else {
        return Vec::new();
    };
    tracing::debug!(pod = %pod.full_name(), grant = %id, containers = ?instances, tagged = ?tagged, "the controller's env restart: which containers run as at its request");
    if let Some(why) = restart::refusal(pod) {
        tracing::warn!(pod = %pod.full_name(), grant = %id, "the controller's env restart is not carried out: {why}");
        return Vec::new();
    }
    let spec = match restart::parse(&pod.annotations) {
        Ok(spec) => spec,
        Err(e) => {
            tracing::warn!(pod = %pod.full_name(), grant = %id, error = %e, "the controller's env restart is not carried out: invalid restart annotation");
            return Vec::new();
        }
    };
    candidates
        .into_iter()
        .zip(tagged)
        .filter(|(_, t)| *t)
        .filter_map(|(c, _)| {
            let stop = match restart::stop_plan(pod, &spec, &c.name) {
                Ok(stop) => stop,
                Err(e) => {
                    tracing::warn!(pod = %pod.full_name(), container = %c.name, error = %e, "the controller's env restart does not stop this container");
                    return None;
                }
            };
            let mut sources: Vec<crate::core::model::SourceRef> = pod
                .env
                .iter()
                .filter(|r| r.container == c.name)
                .map(|r| r.source.clone())
                .collect();
            sources.sort();
            sources.dedup();
            Some(RestartJob {
                pod_uid: pod.uid.clone(),
                container: c.name.clone(),
                stop,
                first_seen: std::time::Instant::now(),
                sources,
                seen: super::applied::Seen::none(),
            })
        })
        .collect()
}

/// The containers of `jobs` as they run in `pod`: name and container ID.
fn instances<'a>(pod: &'a PodInfo, jobs: &'a [RestartJob]) -> Vec<(&'a str, Option<&'a str>)> {
    jobs.iter()
        .map(|j| {
            let id = pod
                .containers
                .iter()
                .find(|c| c.name == j.container)
                .and_then(|c| c.container_id.as_ref())
                .map(|c| c.id.as_str());
            (j.container.as_str(), id)
        })
        .collect()
}

/// One annotation on the pod, conditional on its UID, bounded by [`API_CALL_TIMEOUT`]; tried
/// once more after a failure that is neither a 404 nor a 403.
async fn write(
    patcher: &dyn crate::ports::Patcher,
    pod: &PodInfo,
    annotation: &'static str,
    value: &str,
) -> Result<(), PatchError> {
    let req = PatchRequest {
        target: PatchTarget::Pod,
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: Some(pod.uid.clone()),
        annotation,
        value: Some(value.to_owned()),
    };
    let mut retries = Retries::new(&ONCE_MORE);
    retried(
        &mut retries,
        || bounded(API_CALL_TIMEOUT, patcher.patch(&req)),
        |e| matches!(e, PatchError::Conflict(_) | PatchError::Other(_)),
        |e, _| tracing::debug!(pod = %pod.full_name(), annotation, error = %e, "pod write failed; trying once more"),
    )
    .await
}

#[cfg(test)]
mod tests;
