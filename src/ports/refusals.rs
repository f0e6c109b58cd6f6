//! Where the kube edges report what the API server refused (401/403) and what it allowed
//! again (`serve::denials::Denials`), and where the pod watch reports a standing problem
//! (`serve::health::Health`).

use crate::core::permission::{Feature, Request};
use std::sync::Arc;

/// The refusals the kube edges report.
pub trait Refusals: Send + Sync {
    /// The request succeeded: a refusal of it no longer stands.
    fn allowed(
        &self,
        feature: Feature,
        verb: &'static str,
        group: &'static str,
        resource: &'static str,
    );
    /// The outcome of one request: a 401/403 as a refusal, a success as allowed, anything
    /// else not at all.
    fn outcome(&self, request: Request, namespace: Option<&str>, result: Result<(), (u16, &str)>);
}

/// What each kube edge holds (cheap to clone).
pub type RefusalSink = Arc<dyn Refusals>;

/// Where the pod watch says that it cannot follow the node's pods (`/readyz`).
pub trait Problems: Send + Sync {
    /// `Some(reason)`: a problem stands; `None` clears it.
    fn set_problem(&self, problem: Option<String>);
}
