//! The controller loop: it only routes. Inputs from the watches and the election pass the
//! namespace filter once, here, update the [`World`] (pods, leadership, what is listed) and
//! go to every [`Feature`] (`nudge`, `env`…), which decide and hand their writes to the
//! executor; their timers and results wake them through [`Feature::wake`]. Single task.
//!
//! Every call into a feature is contained (`crate::contain`): a panic in one feature's
//! handling of one input is caught, logged, counted (`reloadlet_handler_panics_total`) and
//! the input quarantined — a pod is taken out of the [`World`] (every feature told it was
//! removed, so none keeps half of it) and a Warning `InternalError` Event is published on it;
//! a ConfigMap/Secret is skipped at that resourceVersion (log and metric only: reloadlet
//! publishes no Events on them) — until it changes or is deleted. The loop and `/readyz` go
//! on as before; a panic in the router's own code still ends the process.

use super::feature::{Feature, Routed, World};
use super::metrics::{ControllerMetrics, WatchLabels};
use crate::contain::{Caught, Contained, Quarantine, Stage, QUARANTINE_CAP};
use crate::core::filters::NamespaceFilter;
use crate::core::model::{PodInfo, SourceKind};
use crate::core::outcome::{ActionKind, Outcome};
use crate::execute::report::Reporter;
use crate::ports::PodRef;
use crate::ports::{Input, ObjectKey};
use crate::serve::health::Health;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub struct Controller {
    world: World,
    features: Vec<Box<dyn Feature>>,
    filter: NamespaceFilter,
    /// Kinds whose first list must complete before /readyz (those the features follow).
    kinds: BTreeSet<SourceKind>,
    listed_kinds: BTreeSet<SourceKind>,
    /// Object inputs that arrived before the first pod list: replayed after it, so a change
    /// seen meanwhile still finds its pods.
    held: Vec<Input>,
    metrics: ControllerMetrics,
    health: Arc<Health>,
    /// Where a caught panic is counted and a pod's Warning `InternalError` published
    /// ([`Self::reporting`]; without it, caught panics are only logged).
    reporter: Option<Reporter>,
    /// Pods whose handling panicked, as they were: out of the [`World`] while they come
    /// again unchanged (a relist sends them again), released when they change or go.
    poisoned_pods: Quarantine<String, PodInfo>,
    /// ConfigMaps/Secrets whose handling panicked, with that resourceVersion.
    poisoned_objects: Quarantine<ObjectKey, String>,
}

impl Controller {
    /// `leader`: the replica starts as leader only without leader election.
    pub fn new(
        filter: NamespaceFilter,
        leader: bool,
        metrics: ControllerMetrics,
        health: Arc<Health>,
    ) -> Self {
        metrics.leader.set(i64::from(leader));
        Self {
            world: World::new(leader),
            features: Vec::new(),
            filter,
            kinds: BTreeSet::new(),
            listed_kinds: BTreeSet::new(),
            held: Vec::new(),
            metrics,
            health,
            reporter: None,
            poisoned_pods: Quarantine::new(QUARANTINE_CAP),
            poisoned_objects: Quarantine::new(QUARANTINE_CAP),
        }
    }

    /// Caught panics are counted through `reporter`'s metrics, and a pod's is told as a
    /// Warning `InternalError` Event on it.
    pub fn reporting(mut self, reporter: Reporter) -> Self {
        crate::contain::precreate(reporter.metrics(), &Stage::CONTROLLER);
        self.reporter = Some(reporter);
        self
    }

    /// Adds a feature: it hears every routed input from now on.
    pub fn with(mut self, feature: Box<dyn Feature>) -> Self {
        self.kinds.extend(feature.kinds());
        self.features.push(feature);
        self
    }

    pub async fn run(mut self, mut inputs: mpsc::Receiver<Input>, shutdown: CancellationToken) {
        let mut heartbeat = tokio::time::interval(Duration::from_secs(5));
        loop {
            self.health.beat();
            // An input to route, or `None` when a feature woke (or the heartbeat); and the
            // feature whose wake panicked, if one did.
            let (input, woke_failed) = {
                let world = &self.world;
                let woken: Vec<_> = self
                    .features
                    .iter_mut()
                    .map(|f| Contained::new(f.wake(world)))
                    .collect();
                let any_woke = async move {
                    if woken.is_empty() {
                        std::future::pending::<()>().await;
                    }
                    let (woke, index, _) = futures::future::select_all(woken).await;
                    woke.err().map(|caught| (index, caught))
                };
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    input = inputs.recv() => match input {
                        Some(input) => (Some(input), None),
                        None => return,
                    },
                    failed = any_woke => (None, failed),
                    _ = heartbeat.tick() => (None, None),
                }
            };
            if let Some((index, caught)) = woke_failed {
                let name = self.features[index].name();
                self.panicked(name, Stage::Wake, "its timers and results", &caught);
            }
            if let Some(input) = input {
                self.handle(input);
            }
            for index in 0..self.features.len() {
                let feature = &mut self.features[index];
                let world = &self.world;
                if let Err(caught) = crate::contain::catch(|| feature.settle(world)) {
                    let name = self.features[index].name();
                    self.panicked(name, Stage::Settle, "its work after a turn", &caught);
                }
            }
        }
    }

    /// Routes `event` to every feature; `false` when one of them panicked (logged and
    /// counted here).
    fn route(&mut self, event: Routed<'_>) -> bool {
        let failed = route(&mut self.features, &self.world, event);
        for (feature, caught) in &failed {
            self.panicked(feature, Stage::Route, &about(&event), caught);
        }
        failed.is_empty()
    }

    /// One caught panic: one log line, one count.
    fn panicked(&self, feature: &str, stage: Stage, object: &str, caught: &Caught) {
        tracing::error!(
            feature,
            stage = stage.as_str(),
            object,
            panic = %caught.message,
            at = caught.location.as_deref().unwrap_or("?"),
            "panic in a controller feature; skipped until it changes, the loop goes on"
        );
        if let Some(reporter) = &self.reporter {
            crate::contain::count(reporter.metrics(), stage);
        }
    }

    /// A feature panicked on pod `uid` (`caught`): the pod leaves the [`World`] — every
    /// feature hears it removed, dropping what it half made — and stays out while it comes
    /// again unchanged; the leader publishes a Warning `InternalError` on it (a standby
    /// keeps quiet, as it does for every Event).
    fn quarantine_pod(&mut self, uid: &str, caught: &Caught) {
        let Some(pod) = self.world.remove(uid) else {
            return;
        };
        let forgot = route(&mut self.features, &self.world, Routed::PodRemoved(&pod));
        for (feature, caught) in &forgot {
            self.panicked(
                feature,
                Stage::Route,
                &about(&Routed::PodRemoved(&pod)),
                caught,
            );
        }
        self.poisoned_pods.hold(pod.uid.clone(), pod.clone());
        let Some(reporter) = self.reporter.as_ref().filter(|_| self.world.leader) else {
            return;
        };
        let note = caught.pod_note();
        let pod_ref = PodRef::from(&pod);
        let reported = crate::contain::catch(|| {
            reporter.record(
                &pod_ref,
                ActionKind::None,
                Outcome::InternalError,
                note,
                &[],
            )
        });
        if let Err(again) = reported {
            tracing::error!(pod = %pod.full_name(), panic = %again.message, "panic while reporting a caught panic; no Event");
        }
    }

    fn admitted(&self, namespace: &str) -> bool {
        self.filter.check(namespace).is_none()
    }

    fn handle(&mut self, input: Input) {
        let object_input = matches!(
            input,
            Input::Object { .. } | Input::ObjectDeleted(_) | Input::ObjectsListed { .. }
        );
        if object_input && !self.world.pods_listed {
            self.held.push(input);
            return;
        }
        match input {
            Input::Object {
                key,
                resource_version,
            } => {
                if self.admitted(&key.namespace) {
                    if self.poisoned_objects.holds(&key, &resource_version) {
                        tracing::debug!(object = %about_key(&key), "quarantined after a panic until it changes; skipped");
                    } else if !self.route(Routed::Object {
                        key: &key,
                        resource_version: Some(&resource_version),
                    }) {
                        self.poisoned_objects.hold(key, resource_version);
                    }
                }
            }
            Input::ObjectDeleted(key) => {
                self.poisoned_objects.release(&key);
                if self.admitted(&key.namespace) {
                    self.route(Routed::Object {
                        key: &key,
                        resource_version: None,
                    });
                }
            }
            Input::ObjectsListed { kind, mut objects } => {
                objects.retain(|(key, _)| self.admitted(&key.namespace));
                self.route(Routed::Listed {
                    kind,
                    objects: &objects,
                });
                self.listed_kinds.insert(kind);
                self.update_ready();
            }
            Input::PodApplied(pod) => self.put_pod(pod),
            Input::PodDeleted { uid } => self.remove_pod(&uid),
            Input::PodsListed(pods) => {
                let keep: BTreeSet<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
                self.poisoned_pods.retain(|uid| keep.contains(uid.as_str()));
                for uid in self.world.others(&keep) {
                    self.remove_pod(&uid);
                }
                for pod in pods {
                    self.put_pod(pod);
                }
                self.world.pods_listed = true;
                for held in std::mem::take(&mut self.held) {
                    self.handle(held);
                }
                self.route(Routed::PodsListed);
                // Decoding a full pod list is the largest allocation: hand it back.
                crate::host::memory::release_free_heap();
                self.update_ready();
            }
            Input::Leader(leader) => {
                if leader != self.world.leader {
                    self.world.leader = leader;
                    self.metrics.leader.set(i64::from(leader));
                    self.route(Routed::Leader(leader));
                }
            }
            Input::Workload(change) => {
                let change = match change {
                    crate::ports::WorkloadChange::Listed(kind, mut all) => {
                        all.retain(|w| self.admitted(&w.workload.namespace));
                        crate::ports::WorkloadChange::Listed(kind, all)
                    }
                    crate::ports::WorkloadChange::Applied(w)
                        if !self.admitted(&w.workload.namespace) =>
                    {
                        return;
                    }
                    other => other,
                };
                self.route(Routed::Workload(&change));
            }
            Input::WatchError { what, error } => {
                tracing::warn!(watch = what, %error, "watch failed; retrying with backoff");
                self.metrics
                    .watch_errors
                    .get_or_create(&WatchLabels { resource: what })
                    .inc();
            }
        }
        self.metrics.watched_pods.set(self.world.len() as i64);
    }

    fn update_ready(&self) {
        let ready =
            self.world.pods_listed && self.kinds.iter().all(|k| self.listed_kinds.contains(k));
        self.health.set_ready(ready);
    }

    fn put_pod(&mut self, pod: PodInfo) {
        if !self.admitted(&pod.namespace) {
            self.remove_pod(&pod.uid);
            return;
        }
        if self.poisoned_pods.holds(pod.uid.as_str(), &pod) {
            tracing::debug!(pod = %pod.full_name(), "quarantined after a panic until it changes; skipped");
            return;
        }
        let uid = pod.uid.clone();
        self.world.put(pod);
        let failed = match self.world.get(&uid) {
            Some(pod) => route(&mut self.features, &self.world, Routed::PodPut(pod)),
            None => Vec::new(),
        };
        if failed.is_empty() {
            return;
        }
        if let Some(pod) = self.world.get(&uid) {
            let object = about(&Routed::PodPut(pod));
            for (feature, caught) in &failed {
                self.panicked(feature, Stage::Route, &object, caught);
            }
        }
        self.quarantine_pod(&uid, &failed[0].1);
    }

    fn remove_pod(&mut self, uid: &str) {
        self.poisoned_pods.release(uid);
        if let Some(pod) = self.world.remove(uid) {
            self.route(Routed::PodRemoved(&pod));
        }
    }
}

/// Routes `event` to each feature, each call contained: the features that panicked, with
/// what was caught (the others heard it as usual).
fn route(
    features: &mut [Box<dyn Feature>],
    world: &World,
    event: Routed<'_>,
) -> Vec<(&'static str, Caught)> {
    let mut failed = Vec::new();
    for feature in features {
        if let Err(caught) = crate::contain::catch(|| feature.route(event, world)) {
            failed.push((feature.name(), caught));
        }
    }
    failed
}

/// What an input is about, for a log line.
fn about(event: &Routed<'_>) -> String {
    match event {
        Routed::Object {
            key,
            resource_version,
        } => format!(
            "{} (resourceVersion {})",
            about_key(key),
            resource_version.unwrap_or("deleted")
        ),
        Routed::Listed { kind, objects } => {
            format!("the list of {} {}s", objects.len(), kind.as_str())
        }
        Routed::PodPut(pod) | Routed::PodRemoved(pod) => {
            format!("pod {} (uid {})", pod.full_name(), pod.uid)
        }
        Routed::PodsListed => "the pod list".into(),
        Routed::Leader(leader) => format!("leadership ({leader})"),
        Routed::Workload(_) => "a workload's metadata".into(),
    }
}

fn about_key(key: &ObjectKey) -> String {
    format!("{} {}/{}", key.kind.as_str(), key.namespace, key.name)
}

#[cfg(test)]
mod contain_tests;
#[cfg(test)]
mod tests;
