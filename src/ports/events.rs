//! The Events edge: what the agent and the controller tell `k8s::events::QueuedRecorder`.

use crate::core::model::PodInfo;

/// The pod an event or an eviction is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

impl PodRef {
    /// `namespace/name`.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

impl From<&PodInfo> for PodRef {
    fn from(p: &PodInfo) -> Self {
        Self {
            uid: p.uid.clone(),
            namespace: p.namespace.clone(),
            name: p.name.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEvent {
    pub warning: bool,
    /// `Signaled`, `SignalNotHandled`, `InvalidAnnotation`, `SubPathNotUpdated`, `SignalFailed`,
    /// `EvictionRequested`, … (from [`crate::core::outcome::Outcome::event`]).
    pub reason: &'static str,
    /// Short PascalCase verb: `Signal`, `Evict`, `Validate`; for a refused API request the
    /// request (`ListDeployments`), so that kube's recorder folds only repeats of one refusal.
    pub action: std::borrow::Cow<'static, str>,
    pub note: String,
}

/// An object an Event is about other than a pod (a rolled workload): its `regarding`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

impl From<&PodRef> for ObjectRef {
    fn from(p: &PodRef) -> Self {
        Self {
            api_version: "v1".into(),
            kind: "Pod".into(),
            uid: p.uid.clone(),
            namespace: p.namespace.clone(),
            name: p.name.clone(),
        }
    }
}

/// Where the agent sends Kubernetes Events (`k8s::events::QueuedRecorder`).
pub trait EventSink: Send + Sync {
    fn publish(&self, pod: &PodRef, event: PodEvent) {
        self.publish_about(&ObjectRef::from(pod), event);
    }
    /// An Event regarding `object`.
    fn publish_about(&self, object: &ObjectRef, event: PodEvent);
    /// Events dropped so far because the queue was full.
    fn dropped(&self) -> u64 {
        0
    }
}
