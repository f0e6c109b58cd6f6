//! What the server records for tests to inspect: requests, evictions, events, invariants.

use std::time::Instant;

/// One HTTP request the server answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    /// `GET`, `POST`, …
    pub method: String,
    /// The URL path, e.g. `/api/v1/namespaces/default/pods/web-1/eviction`.
    pub path: String,
    /// The raw query string ("" when none).
    pub query: String,
    /// The HTTP status answered (for a watch: the status of the stream's start).
    pub status: u16,
    /// When the request arrived.
    pub at: Instant,
    /// For eviction requests: how many were being served when this one arrived, itself
    /// included (0 for other requests).
    pub in_flight: usize,
    /// The `Accept` header ("" when none), e.g. `…;as=PartialObjectMetadataList;…`.
    pub accept: String,
    /// The `Content-Type` header ("" when none), e.g. `application/merge-patch+json`.
    pub content_type: String,
    /// The body of a POST, PUT or PATCH ("" for other methods).
    pub body: String,
    /// The bearer token the request carried ("" when none).
    pub token: String,
}

impl RequestRecord {
    /// Whether this was a watch (`watch=true` or `watch=1`).
    pub fn is_watch(&self) -> bool {
        self.query
            .split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1")
    }
}

/// One eviction request and its answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvictionRecord {
    /// Namespace of the pod.
    pub namespace: String,
    /// Name of the pod (from the URL).
    pub pod: String,
    /// UID of the pod when it existed.
    pub uid: Option<String>,
    /// HTTP status answered (201, 429, 404, …).
    pub code: u16,
    /// Whether `dryRun=All` was asked.
    pub dry_run: bool,
    /// When it was answered.
    pub at: Instant,
}

/// An Event as a user sees it in `kubectl describe`, from either events API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedEvent {
    /// Namespace of the Event object.
    pub namespace: String,
    /// Name of the Event object.
    pub name: String,
    /// Kind of the object the event is about (`regarding` / `involvedObject`).
    pub regarding_kind: String,
    /// Name of that object.
    pub regarding_name: String,
    /// UID of that object.
    pub regarding_uid: String,
    /// `Normal` or `Warning`.
    pub type_: String,
    /// Short PascalCase reason.
    pub reason: String,
    /// `note` (events.k8s.io/v1) or `message` (v1).
    pub note: String,
    /// `series.count` (or v1 `count`), 1 for a single occurrence.
    pub count: i32,
    /// `events.k8s.io/v1` or `v1`.
    pub api: String,
    /// `reportingController` (events.k8s.io/v1) or `reportingComponent`/`source.component`.
    pub reporting_controller: String,
}

/// An eviction that deleted a pod covered by a PodDisruptionBudget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvariantRecord {
    /// `namespace/name` of the PDB.
    pub pdb: String,
    /// `namespace/name` of the evicted pod.
    pub pod: String,
    /// Ready, non-terminating pods the PDB selected just before the eviction.
    pub healthy_before: i32,
    /// Ready, non-terminating pods it selected just after.
    pub healthy_after: i32,
    /// The PDB's desiredHealthy at that moment.
    pub desired_healthy: i32,
}

impl InvariantRecord {
    /// Whether this eviction brought the healthy count below what the budget demands.
    pub fn is_violation(&self) -> bool {
        self.healthy_after < self.healthy_before && self.healthy_after < self.desired_healthy
    }
}

#[cfg(test)]
mod tests {
    use super::InvariantRecord;

    #[test]
    fn violation_only_when_an_eviction_drops_below_desired() {
        let r = |before, after, desired| InvariantRecord {
            pdb: "ns/pdb".into(),
            pod: "ns/pod".into(),
            healthy_before: before,
            healthy_after: after,
            desired_healthy: desired,
        };
        assert!(!r(3, 2, 2).is_violation());
        assert!(r(2, 1, 2).is_violation());
        assert!(
            !r(1, 1, 2).is_violation(),
            "an unready pod's eviction lowers nothing"
        );
        assert!(!r(1, 0, 0).is_violation());
    }
}
