//! A stateful Kubernetes API server on loopback that the real kube client talks to:
//! pods (list/watch/get/patch/delete), the eviction subresource with
//! PodDisruptionBudgets (list/watch across namespaces), Events of both APIs, ConfigMaps, Secrets and
//! coordination.k8s.io Leases and `apps/v1` Deployments, StatefulSets, DaemonSets
//! (list/watch/get/create/update/patch/delete), whole or as `PartialObjectMetadata`, with
//! controllers after kube-controller-manager's (`deployment.rs`, `statefulset.rs`,
//! `daemonset.rs`, ReplicaSet emulation) and optionally Argo Rollouts (`argo.rs`); a
//! workload's readiness at every change ([`ApiServer::track_readiness`]); fault injection
//! and logs of what was asked (see `shared/reference/eviction-facts.md`).
//!
//! Tests and the simulated kubelet drive it in-process through [`ApiServer`]; reloadlet
//! reaches it over HTTP through the kubeconfig from [`ApiServer::write_kubeconfig`].

mod access;
mod argo;
mod argo_rollout;
mod behaviour_api;
mod daemonset;
mod deployment;
mod disruption;
mod events;
mod eviction;
mod http_objects;
mod identity_api;
mod managed_fields;
mod model;
mod objects;
mod objects_api;
mod pdb_store;
mod pdb_watch;
mod pod_status;
pub mod rbac;
pub mod rbac_chart;
mod readiness;
mod readiness_log;
mod records;
mod records_api;
mod render;
mod replicaset;
#[cfg(test)]
mod request_log_tests;
mod secure;
pub mod selectors;
mod server;
mod shared;
mod statefulset;
mod status;
mod store;
mod watch;
mod workloads;
mod workloads_api;

pub use access::{ExpectedForbidden, ForbiddenRecord, UsedRule};
pub use argo::{Rollout, RolloutSpec};
pub use disruption::{compute_status, expected_and_desired, scaled_value, BudgetError};
pub use events::merge_patch;
pub use model::ApiChange;
pub use readiness::{ReadinessLog, ReadinessWatch, ReadySample, WorkloadKind};
pub use records::{EvictionRecord, InvariantRecord, RecordedEvent, RequestRecord};
pub use status::ApiStatus;

use crate::volumes::projection::SourceLookup;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use shared::Shared;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store::{Key, State};
use tokio::sync::{broadcast, watch as tokio_watch};
use tokio::task::JoinHandle;

/// How the server behaves; `Default` is what [`ApiServer::start`] uses.
#[derive(Clone, Debug)]
pub struct ApiServerOptions {
    /// Pod changes retained for watches; watching from before them answers 410.
    pub history_len: usize,
    /// Interval of BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
    /// How long the disruption controller takes to observe a new PDB generation.
    pub controller_lag: Duration,
    /// Remove gracefully deleted pods at once instead of waiting for `finalize_pod`.
    pub auto_finalize: bool,
    /// Delay before every HTTP response.
    pub response_delay: Option<Duration>,
    /// Lifetime of a watch whose client sends no `timeoutSeconds`.
    pub default_watch_timeout: Duration,
    /// Serve HTTPS with a certificate from the server's own CA ([`ApiServer::ca_pem`]),
    /// as a pod reaches its cluster's API server.
    pub tls: bool,
    /// `Some`: every request needs `Authorization: Bearer <one of these>` or a minted
    /// token ([`ApiServer::mint_token`]; `Some(vec![])`: only those), else 401 (changed
    /// later by [`ApiServer::set_tokens`]). `None`: no authentication.
    pub bearer_tokens: Option<Vec<String>>,
    /// Serve Argo Rollouts' `argoproj.io/v1alpha1` `Rollout` (as a cluster with its CRD
    /// installed); off: that group answers 404.
    pub argo_rollouts: bool,
    /// Streaming lists (`watch=true&sendInitialEvents=true`): the `WatchList` feature gate,
    /// on by default from Kubernetes 1.32. Off: such a watch is refused with 422 Invalid, as
    /// a server with the gate off refuses it (changed later by [`ApiServer::set_watch_list`]).
    pub watch_list: bool,
}

impl Default for ApiServerOptions {
    fn default() -> Self {
        Self {
            history_len: 1000,
            bookmark_interval: Duration::from_secs(60),
            controller_lag: Duration::ZERO,
            auto_finalize: false,
            response_delay: None,
            default_watch_timeout: Duration::from_secs(1800),
            tls: false,
            bearer_tokens: None,
            argo_rollouts: false,
            watch_list: true,
        }
    }
}

/// The server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ApiServerError {
    /// Binding 127.0.0.1:0 failed.
    #[error("cannot bind the simulated API server on 127.0.0.1: {0}")]
    Bind(#[source] std::io::Error),
    /// Making the CA, the serving certificate or the TLS configuration failed.
    #[error("cannot set up the simulated API server's TLS: {0}")]
    Tls(String),
}

struct Handle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    ca_pem: Option<String>,
    change_tx: broadcast::Sender<ApiChange>,
    shutdown_tx: tokio_watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shutdown_tx.send_replace(true);
    }
}

/// A handle on the running server; clones share it. Dropping the last clone (or
/// [`ApiServer::shutdown`]) stops the server.
#[derive(Clone)]
pub struct ApiServer {
    inner: Arc<Handle>,
}

fn key(namespace: &str, name: &str) -> Key {
    (namespace.to_string(), name.to_string())
}

impl ApiServer {
    /// Binds 127.0.0.1:0 with default options and serves until dropped/shut down.
    pub async fn start() -> anyhow::Result<ApiServer> {
        Ok(Self::start_with(ApiServerOptions::default()).await?)
    }
    /// Binds 127.0.0.1:0 with these options.
    pub async fn start_with(opts: ApiServerOptions) -> Result<ApiServer, ApiServerError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(ApiServerError::Bind)?;
        let addr = listener.local_addr().map_err(ApiServerError::Bind)?;
        let (watch_tx, _) = broadcast::channel(4096);
        let (change_tx, _) = broadcast::channel(4096);
        let (shutdown_tx, shutdown_rx) = tokio_watch::channel(false);
        let state = State::new(
            opts.history_len,
            opts.auto_finalize,
            opts.controller_lag,
            watch_tx.clone(),
            change_tx.clone(),
        );
        let shared = Arc::new(Shared::new(
            state,
            watch_tx,
            shutdown_rx.clone(),
            opts.bookmark_interval,
            opts.default_watch_timeout,
            opts.response_delay,
        ));
        shared.set_tokens(opts.bearer_tokens.clone());
        shared.set_watch_list(opts.watch_list);
        let pki = if opts.tls {
            Some(secure::Pki::generate().map_err(|e| ApiServerError::Tls(format!("{e:#}")))?)
        } else {
            None
        };
        let ca_pem = pki.as_ref().map(|p| p.ca_pem.clone());
        let app = server::router(shared.clone(), opts.argo_rollouts);
        let mut stop = shutdown_rx;
        let task = tokio::spawn(async move {
            let stopped = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            let served = match pki {
                Some(pki) => {
                    let tls = secure::TlsListener {
                        tcp: listener,
                        acceptor: pki.acceptor,
                    };
                    axum::serve(tls, app).with_graceful_shutdown(stopped).await
                }
                None => {
                    axum::serve(listener, app)
                        .with_graceful_shutdown(stopped)
                        .await
                }
            };
            if let Err(e) = served {
                tracing::warn!("simulated API server stopped: {e}");
            }
        });
        Ok(ApiServer {
            inner: Arc::new(Handle {
                shared,
                addr,
                ca_pem,
                change_tx,
                shutdown_tx,
                task: Mutex::new(Some(task)),
            }),
        })
    }
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.shared.lock()
    }
    /// `http://127.0.0.1:<port>`, or `https://` with [`ApiServerOptions::tls`].
    pub fn url(&self) -> String {
        let scheme = if self.inner.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.inner.addr)
    }
    /// The address the server listens on (127.0.0.1 and a free port).
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }
    /// With [`ApiServerOptions::tls`]: the PEM of the CA that signed the serving certificate
    /// (valid for 127.0.0.1, `localhost` and `kubernetes.default.svc`), what a service
    /// account's `ca.crt` holds.
    pub fn ca_pem(&self) -> Option<&str> {
        self.inner.ca_pem.as_deref()
    }
    /// Stops the server and ends every open watch; later requests are refused.
    pub async fn shutdown(&self) {
        self.inner.shutdown_tx.send_replace(true);
        let task = self
            .inner
            .task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(task) = task {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }
    /// Follows pod, ConfigMap and Secret changes.
    pub fn subscribe(&self) -> broadcast::Receiver<ApiChange> {
        self.inner.change_tx.subscribe()
    }
}

impl SourceLookup for ApiServer {
    fn configmap(&self, namespace: &str, name: &str) -> Option<ConfigMap> {
        self.get_configmap(namespace, name)
    }
    fn secret(&self, namespace: &str, name: &str) -> Option<Secret> {
        self.get_secret(namespace, name)
    }
}
