//! Kubernetes Events on pods (and on the workloads a rollout patches), published through
//! kube's event recorder (events.k8s.io/v1) from a bounded queue shared fairly between
//! namespaces (`core::fair_queue`): publishing never blocks an action; the namespaces' Events
//! are published in turn; when the API is down and the queue is full, the oldest Event of
//! the namespace holding the most is dropped and counted — one namespace's flood of Warnings
//! never pushes out another namespace's Events.

use crate::core::fair_queue::FairQueue;
use crate::core::permission::Feature;
use crate::core::permission::Request;
use crate::ports::RefusalSink;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

pub use crate::ports::{EventSink, ObjectRef, PodEvent, PodRef};

/// What publishing an Event asks the API server for.
const PUBLISH: Request = Request::new(Feature::Events, "create", "events.k8s.io", "events");

pub struct QueuedRecorder {
    queue: Arc<Queue>,
    dropped: Arc<AtomicU64>,
}

struct Queue {
    items: Mutex<FairQueue<(ObjectRef, PodEvent)>>,
    wake: Notify,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, FairQueue<(ObjectRef, PodEvent)>> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl QueuedRecorder {
    pub const QUEUE: usize = 1024;

    /// Starts the publishing task. `instance` names this agent (e.g. `reloadlet-<node>`);
    /// `denials`: where a refused publish is reported (`crate::serve::denials`).
    pub fn spawn(client: Client, instance: String, denials: RefusalSink) -> Self {
        let queue = Arc::new(Queue {
            items: Mutex::new(FairQueue::new(Self::QUEUE)),
            wake: Notify::new(),
        });
        let rx = queue.clone();
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: "reloadlet".into(),
                instance: Some(instance),
            },
        );
        tokio::spawn(async move {
            loop {
                let next = rx.lock().pop();
                let Some((_, (object, ev))) = next else {
                    rx.wake.notified().await;
                    continue;
                };
                let reference = ObjectReference {
                    api_version: Some(object.api_version.clone()),
                    kind: Some(object.kind.clone()),
                    name: Some(object.name.clone()),
                    namespace: Some(object.namespace.clone()),
                    uid: Some(object.uid.clone()).filter(|u| !u.is_empty()),
                    ..Default::default()
                };
                let event = Event {
                    type_: if ev.warning {
                        EventType::Warning
                    } else {
                        EventType::Normal
                    },
                    reason: ev.reason.into(),
                    note: Some(ev.note.chars().take(1000).collect()),
                    action: ev.action.clone().into_owned(),
                    secondary: None,
                };
                let result = recorder.publish(&event, &reference).await;
                // kube's recorder creates the Event, or patches its series when it repeats.
                super::refusals::report(&denials, PUBLISH, Some(&object.namespace), &result);
                if let Err(e) = result {
                    tracing::warn!(regarding = %format!("{} {}/{}", object.kind, object.namespace, object.name), reason = ev.reason, error = %e, "could not publish event");
                }
            }
        });
        Self {
            queue,
            dropped: Arc::default(),
        }
    }
}

impl EventSink for QueuedRecorder {
    fn publish_about(&self, object: &ObjectRef, event: PodEvent) {
        let dropped = self
            .queue
            .lock()
            .push(&object.namespace, (object.clone(), event));
        self.queue.wake.notify_one();
        if let Some((namespace, (gone, ev))) = dropped {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(regarding = %format!("{} {namespace}/{}", gone.kind, gone.name), reason = ev.reason, "event queue full; dropped the oldest Event of the namespace holding the most");
        }
    }

    fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}
