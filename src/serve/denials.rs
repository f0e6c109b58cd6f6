//! A missing permission is never silent: every refused API request (401/403) the kube edges
//! report is counted (`reloadlet_forbidden_total{verb,resource}`), and while it stands it
//! makes `/readyz` fail naming the feature and the rule to add. A refusal that is new gets
//! one `error!` with that rule and one Warning Event `Forbidden` on reloadlet's own pod; the
//! retries that follow are counted and logged at debug only. The other features keep working:
//! nothing here stops anything.

use crate::core::permission::{Book, Denied, Feature, Request};
use crate::ports::{EventSink, ObjectRef, PodEvent};
use crate::serve::health::Health;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForbiddenLabels {
    pub verb: String,
    /// `deployments.apps`, `pods/eviction`.
    pub resource: String,
}

/// The Event reason of a refusal.
pub const REASON: &str = "Forbidden";

/// Where refusals are reported; cheap to clone (one per edge).
#[derive(Clone)]
pub struct Denials {
    inner: Arc<Inner>,
}

struct Inner {
    book: Mutex<Book>,
    health: Arc<Health>,
    forbidden: Family<ForbiddenLabels, Counter>,
    /// The Event sink and reloadlet's own pod, once both exist.
    events: OnceLock<(Arc<dyn EventSink>, ObjectRef)>,
    /// Logs refusals (not for a command such as `explain`, which prints them itself).
    logs: bool,
}

impl Denials {
    pub fn new(registry: &mut Registry, health: Arc<Health>) -> Self {
        let forbidden = Family::<ForbiddenLabels, Counter>::default();
        registry.register(
            "forbidden",
            "API requests refused with HTTP 401/403, by verb and resource (each names a missing RBAC rule: see /readyz and the log)",
            forbidden.clone(),
        );
        Self::with(forbidden, health, true)
    }

    fn with(forbidden: Family<ForbiddenLabels, Counter>, health: Arc<Health>, logs: bool) -> Self {
        Self {
            inner: Arc::new(Inner {
                book: Mutex::new(Book::default()),
                health,
                forbidden,
                events: OnceLock::new(),
                logs,
            }),
        }
    }

    /// For a command that does not serve `/metrics` and says what was refused itself
    /// ([`Self::standing`]): nothing is logged.
    pub fn detached() -> Self {
        Self::with(Family::default(), Arc::new(Health::default()), false)
    }

    /// The refusals that stand.
    pub fn standing(&self) -> Vec<Denied> {
        self.book().standing()
    }

    /// From now on a new refusal is also a Warning Event regarding `own_pod` (reloadlet's pod,
    /// from the downward API); the refusals that already stand are published now.
    pub fn publish_to(&self, sink: Arc<dyn EventSink>, own_pod: ObjectRef) {
        if self.inner.events.set((sink, own_pod)).is_err() {
            return;
        }
        let (standing, summary) = {
            let book = self.book();
            (book.standing(), book.summary())
        };
        for d in &standing {
            self.publish(action_of(d), summary.clone());
        }
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.inner.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request was refused with `d.code` (401 or 403).
    pub fn denied(&self, d: Denied) {
        self.inner
            .forbidden
            .get_or_create(&ForbiddenLabels {
                verb: d.verb.into(),
                resource: d.resource_name(),
            })
            .inc();
        let (new, readiness, summary) = {
            let mut book = self.book();
            let new = book.denied(d.clone());
            (new, book.readiness(), book.summary())
        };
        if !new || !self.inner.logs {
            tracing::debug!(feature = d.feature.name(), verb = d.verb, resource = %d.resource_name(), "still refused");
            return;
        }
        tracing::error!(
            feature = d.feature.name(),
            verb = d.verb,
            resource = %d.resource_name(),
            namespace = d.namespace.as_deref().unwrap_or(""),
            code = d.code,
            "{}",
            d.explanation()
        );
        self.inner.health.set_denied(readiness);
        self.publish(action_of(&d), summary);
    }

    /// The request succeeded: a refusal of it no longer stands.
    pub fn allowed(
        &self,
        feature: Feature,
        verb: &'static str,
        group: &'static str,
        resource: &'static str,
    ) {
        let (cleared, readiness) = {
            let mut book = self.book();
            if book.is_empty() {
                return;
            }
            (
                book.allowed(feature, verb, group, resource),
                book.readiness(),
            )
        };
        if cleared {
            tracing::info!(
                feature = feature.name(),
                verb,
                resource = %crate::core::permission::resource_name(group, resource),
                "permission granted now; the refusal no longer stands"
            );
            self.inner.health.set_denied(readiness);
        }
    }

    /// Reports the outcome of one request: a 401/403 as a refusal, a success as allowed,
    /// anything else not at all.
    pub fn outcome(
        &self,
        request: Request,
        namespace: Option<&str>,
        result: Result<(), (u16, &str)>,
    ) {
        match result {
            Ok(()) => self.allowed(
                request.feature,
                request.verb,
                request.group,
                request.resource,
            ),
            Err((code @ (401 | 403), message)) => {
                self.denied(request.denied(namespace, code, message))
            }
            Err(_) => {}
        }
    }

    fn publish(&self, action: String, note: String) {
        if let Some((sink, own_pod)) = self.inner.events.get() {
            sink.publish_about(
                own_pod,
                PodEvent {
                    warning: true,
                    reason: REASON,
                    action: action.into(),
                    note,
                },
            );
        }
    }
}

impl crate::ports::Refusals for Denials {
    fn allowed(
        &self,
        feature: Feature,
        verb: &'static str,
        group: &'static str,
        resource: &'static str,
    ) {
        Denials::allowed(self, feature, verb, group, resource);
    }

    fn outcome(&self, request: Request, namespace: Option<&str>, result: Result<(), (u16, &str)>) {
        Denials::outcome(self, request, namespace, result);
    }
}

/// The Event's action for a refusal: the request, PascalCase (`ListDeployments`,
/// `CreatePodsEviction`). kube's recorder folds Events of one pod, reason and action into a
/// series (`EventKey` in kube-runtime's src/events.rs), so each refused rule is an Event of its
/// own and only its repeats are folded.
fn action_of(d: &Denied) -> String {
    let pascal = |s: &str| {
        s.split(['/', '.', '-'])
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_uppercase().chain(c).collect::<String>())
                    .unwrap_or_default()
            })
            .collect::<String>()
    };
    format!("{}{}", pascal(d.verb), pascal(d.resource))
}

/// reloadlet's own pod as an Event's `regarding`, from the downward API's (namespace, name).
pub fn own_pod_ref(own_pod: Option<&(String, String)>) -> Option<ObjectRef> {
    let (namespace, name) = own_pod?;
    Some(ObjectRef {
        api_version: "v1".into(),
        kind: "Pod".into(),
        uid: String::new(),
        namespace: namespace.clone(),
        name: name.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Sink(Mutex<Vec<(ObjectRef, PodEvent)>>);
    impl EventSink for Sink {
        fn publish_about(&self, object: &ObjectRef, event: PodEvent) {
            self.0.lock().unwrap().push((object.clone(), event));
        }
    }

    const LIST_DEPLOYMENTS: Request =
        Request::new(Feature::ReloaderCompat, "list", "apps", "deployments");

    fn own_pod() -> ObjectRef {
        ObjectRef {
            api_version: "v1".into(),
            kind: "Pod".into(),
            uid: String::new(),
            namespace: "reloadlet-system".into(),
            name: "reloadlet-controller-abc".into(),
        }
    }

    #[test]
    fn a_refusal_makes_readyz_fail_counts_every_retry_and_tells_once() {
        let mut registry = Registry::default();
        let health = Arc::new(Health::default());
        health.set_ready(true);
        let denials = Denials::new(&mut registry, health.clone());
        // Refused before the Event sink exists: published once it does.
        denials.outcome(LIST_DEPLOYMENTS, None, Err((403, "cannot list")));
        let reason = health.readiness().unwrap_err();
        assert!(reason.as_str().contains("reloader-compat"), "{reason}");
        assert!(
            reason.as_str().contains("verbs: [\"list\", \"watch\"]"),
            "{reason}"
        );
        let sink = Arc::new(Sink::default());
        denials.publish_to(sink.clone(), own_pod());
        for _ in 0..5 {
            denials.outcome(LIST_DEPLOYMENTS, None, Err((403, "cannot list")));
        }
        let events = sink.0.lock().unwrap().clone();
        assert_eq!(events.len(), 1, "one Event, not one per retry");
        assert_eq!(events[0].0, own_pod());
        assert!(events[0].1.warning);
        assert_eq!(events[0].1.reason, "Forbidden");
        assert_eq!(events[0].1.action, "ListDeployments");
        let count = denials
            .inner
            .forbidden
            .get_or_create(&ForbiddenLabels {
                verb: "list".into(),
                resource: "deployments.apps".into(),
            })
            .get();
        assert_eq!(count, 6, "every refusal counted");
        // Other failures and other requests' successes change nothing.
        denials.outcome(LIST_DEPLOYMENTS, None, Err((500, "overloaded")));
        denials.outcome(
            Request::new(Feature::Pods, "list", "", "pods"),
            None,
            Ok(()),
        );
        assert!(health.readiness().is_err());
        // The list works now: ready again.
        denials.outcome(LIST_DEPLOYMENTS, None, Ok(()));
        assert_eq!(health.readiness(), Ok(()));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("forbidden_total{verb=\"list\",resource=\"deployments.apps\"} 6"),
            "{text}"
        );
    }
}
