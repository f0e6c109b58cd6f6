//! Kubernetes Events on pods (and on the workloads a rollout patches), published through kube's event recorder (events.k8s.io/v1)
//! from a bounded queue: publishing never blocks an action; when the API is down and the
//! queue is full, events are dropped and counted.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

pub use crate::ports::{EventSink, ObjectRef, PodEvent, PodRef};

pub struct QueuedRecorder {
    tx: mpsc::Sender<(ObjectRef, PodEvent)>,
    dropped: Arc<AtomicU64>,
}

impl QueuedRecorder {
    pub const QUEUE: usize = 1024;

    /// Starts the publishing task. `instance` names this agent (e.g. `reloadlet-<node>`).
    pub fn spawn(client: Client, instance: String) -> Self {
        let (tx, mut rx) = mpsc::channel::<(ObjectRef, PodEvent)>(Self::QUEUE);
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: "reloadlet".into(),
                instance: Some(instance),
            },
        );
        tokio::spawn(async move {
            while let Some((object, ev)) = rx.recv().await {
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
                    action: ev.action.into(),
                    secondary: None,
                };
                if let Err(e) = recorder.publish(&event, &reference).await {
                    tracing::warn!(regarding = %format!("{} {}/{}", object.kind, object.namespace, object.name), reason = ev.reason, error = %e, "could not publish event");
                }
            }
        });
        Self {
            tx,
            dropped: Arc::default(),
        }
    }
}

impl EventSink for QueuedRecorder {
    fn publish_about(&self, object: &ObjectRef, event: PodEvent) {
        if self.tx.try_send((object.clone(), event)).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(regarding = %format!("{} {}/{}", object.kind, object.namespace, object.name), "event queue full; event dropped");
        }
    }

    fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}
