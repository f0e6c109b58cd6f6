//! The controller loop: it only routes. Inputs from the watches and the election pass the
//! namespace filter once, here, update the [`World`] (pods, leadership, what is listed) and
//! go to every [`Feature`] (`nudge`, `env`…), which decide and hand their writes to the
//! executor; their timers and results wake them through [`Feature::wake`]. Single task.

use super::api::Input;
use super::feature::{Feature, Routed, World};
use super::metrics::{ControllerMetrics, WatchLabels};
use crate::core::filters::NamespaceFilter;
use crate::core::model::{PodInfo, SourceKind};
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
        }
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
            // An input to route, or `None` when a feature woke (or the heartbeat).
            let input = {
                let world = &self.world;
                let woken: Vec<_> = self.features.iter_mut().map(|f| f.wake(world)).collect();
                let any_woke = async move {
                    if woken.is_empty() {
                        std::future::pending::<()>().await;
                    }
                    futures::future::select_all(woken).await;
                };
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    input = inputs.recv() => match input {
                        Some(input) => Some(input),
                        None => return,
                    },
                    _ = any_woke => None,
                    _ = heartbeat.tick() => None,
                }
            };
            if let Some(input) = input {
                self.handle(input);
            }
            for feature in &mut self.features {
                feature.settle(&self.world);
            }
        }
    }

    fn route(&mut self, event: Routed<'_>) {
        route(&mut self.features, &self.world, event);
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
                    self.route(Routed::Object {
                        key: &key,
                        resource_version: Some(&resource_version),
                    });
                }
            }
            Input::ObjectDeleted(key) => {
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
                    super::api::WorkloadChange::Listed(kind, mut all) => {
                        all.retain(|w| self.admitted(&w.workload.namespace));
                        super::api::WorkloadChange::Listed(kind, all)
                    }
                    super::api::WorkloadChange::Applied(w)
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
        let uid = pod.uid.clone();
        self.world.put(pod);
        if let Some(pod) = self.world.get(&uid) {
            route(&mut self.features, &self.world, Routed::PodPut(pod));
        }
    }

    fn remove_pod(&mut self, uid: &str) {
        if let Some(pod) = self.world.remove(uid) {
            self.route(Routed::PodRemoved(&pod));
        }
    }
}

fn route(features: &mut [Box<dyn Feature>], world: &World, event: Routed<'_>) {
    for feature in features {
        feature.route(event, world);
    }
}

#[cfg(test)]
#[path = "router_tests.rs"]
mod tests;
