//! The leader election's edge: the Lease `reloadlet-controller` in the controller's namespace
//! (`k8s::controller::KubeLeaseStore`).

use super::ApiError;
use std::future::Future;

/// The Lease's spec, as far as the election reads and writes it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LeaseRecord {
    pub holder: Option<String>,
    pub lease_duration_seconds: i32,
    /// `renewTime` as RFC 3339 micro time (opaque here: only compared for change).
    pub renew_time: Option<String>,
    pub acquire_time: Option<String>,
    pub transitions: i32,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// Someone else wrote the Lease first (409 on update, 409 "already exists" on create).
    #[error("conflict")]
    Conflict,
    #[error("{0}")]
    Other(ApiError),
}

/// The Lease `reloadlet-controller` in the controller's namespace.
pub trait LeaseStore: Send + Sync + 'static {
    /// The record and its resourceVersion; `None` when there is no Lease.
    fn get(&self)
        -> impl Future<Output = Result<Option<(LeaseRecord, String)>, LeaseError>> + Send;
    fn create(&self, record: &LeaseRecord) -> impl Future<Output = Result<(), LeaseError>> + Send;
    /// An update conditional on `resource_version`.
    fn replace(
        &self,
        record: &LeaseRecord,
        resource_version: &str,
    ) -> impl Future<Output = Result<(), LeaseError>> + Send;
}

/// The controller's Lease as the agent reads it while a restart request waits
/// (`core::lease_holder`, docs/restart.md "Without a controller"): `get` only.
pub trait LeaseReader: Send + Sync + 'static {
    /// `namespace/name`, as the Warning names it.
    fn lease(&self) -> String;
    /// The record; `None` when there is no Lease. A 401/403 is also reported by the edge
    /// (`/readyz`).
    fn read(&self) -> futures::future::BoxFuture<'_, Result<Option<LeaseRecord>, LeaseError>>;
}
