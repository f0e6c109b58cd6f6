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
mod daemonset;
mod deployment;
mod disruption;
mod events;
mod eviction;
mod http_objects;
mod managed_fields;
mod model;
mod objects;
mod pdb_store;
mod pdb_watch;
mod pod_status;
pub mod rbac;
pub mod rbac_chart;
mod readiness;
mod readiness_log;
mod records;
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
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodStatus, PodTemplateSpec, Secret};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use shared::Shared;
use std::net::SocketAddr;
use std::path::Path;
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

/// How long a read of the request log waits for the requests being answered
/// ([`ApiServer::settled`]): a held or delayed handler is not waited for past it.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

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

    /// The state once every request that had arrived when this was called is answered and
    /// logged (a handler's store change and its log line are two steps): at most
    /// [`SETTLE_WAIT`], then as it is. Waits on a blocking-capable thread only: from a
    /// current-thread runtime (where waiting would stop the server answering) it does not
    /// wait.
    fn settled(&self) -> std::sync::MutexGuard<'_, State> {
        let upto = self.state().records.next_request;
        let deadline = std::time::Instant::now() + SETTLE_WAIT;
        let wait = || loop {
            let state = self.state();
            let done = state.records.answering.range(..upto).next().is_none();
            if done || std::time::Instant::now() >= deadline {
                return;
            }
            drop(state);
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(wait),
            Ok(_) => {}
            Err(_) => wait(),
        }
        self.state()
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

    /// Replaces the bearer tokens the server accepts (`None`: no authentication), e.g. to
    /// retire a rotated service account token. Requests already being served are unaffected.
    pub fn set_tokens(&self, tokens: Option<Vec<String>>) {
        self.inner.shared.set_tokens(tokens);
    }

    /// A kubeconfig whose current context points at this server (no auth, i.e. the admin;
    /// with TLS, it trusts the server's CA).
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        self.write_kubeconfig_with_token(path, None)
    }

    /// A kubeconfig as [`ApiServer::write_kubeconfig`] whose user presents `token`
    /// (e.g. one from [`ApiServer::mint_token`]).
    pub fn write_kubeconfig_with_token(
        &self,
        path: &Path,
        token: Option<&str>,
    ) -> std::io::Result<()> {
        let ca = match self.ca_pem() {
            Some(pem) => {
                let ca_path = path.with_extension("ca.crt");
                std::fs::write(&ca_path, pem)?;
                format!("\n    certificate-authority: {}", ca_path.display())
            }
            None => String::new(),
        };
        let user = match token {
            Some(t) => format!("\n    token: {t}"),
            None => " {}".to_string(),
        };
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: nodesim\n  cluster:\n    server: {}{ca}\n\
             contexts:\n- name: nodesim\n  context:\n    cluster: nodesim\n    user: nodesim\n    namespace: default\n\
             current-context: nodesim\nusers:\n- name: nodesim\n  user:{user}\npreferences: {{}}\n",
            self.url()
        );
        std::fs::write(path, text)
    }

    // ---- identities and RBAC ----

    /// A new bearer token that authenticates as `user` (e.g.
    /// [`rbac::User::service_account`]): its requests are authorized by the RBAC objects of
    /// [`ApiServer::set_rbac`]. Requests with no token or another are the admin's, allowed
    /// everything.
    pub fn mint_token(&self, user: rbac::User) -> String {
        self.inner.shared.access().mint(user)
    }

    /// A new token of the same user as `token`, a minted one (panics for another): a
    /// projected service account token rotated by the kubelet, authorized by the same RBAC
    /// bindings (see `Access::rotate`). The old token stays valid until
    /// [`ApiServer::revoke_token`].
    pub fn rotate_token(&self, token: &str) -> String {
        self.inner
            .shared
            .access()
            .rotate(token)
            .unwrap_or_else(|| panic!("rotate_token: {token:?} was not minted"))
    }

    /// Stops accepting a minted token: its requests get 401 `Unauthorized`, as an expired
    /// service account token's do.
    pub fn revoke_token(&self, token: &str) {
        self.inner.shared.access().revoke(token);
    }

    /// The user a request bearing `token` is authenticated as: a minted token's (revoked or
    /// not), `admin` for any other.
    pub fn user_of(&self, token: &str) -> String {
        self.inner.shared.access().user_name(token)
    }

    /// Replaces the RBAC objects (Roles, ClusterRoles and their bindings) that authorize
    /// minted tokens' requests.
    pub fn set_rbac(&self, policy: rbac::Policy) {
        self.inner.shared.access().set_policy(policy);
    }

    /// Every 403 answered so far: denied by RBAC, or injected ([`ApiServer::set_outage`]).
    pub fn forbidden(&self) -> Vec<ForbiddenRecord> {
        self.inner.shared.access().forbidden()
    }

    /// Declares 403s the test expects: `verb`, API `group` and `resource`
    /// (`resource/subresource`), each `*` for any.
    pub fn expect_forbidden(&self, verb: &str, group: &str, resource: &str) {
        self.inner.shared.access().expect(ExpectedForbidden {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
        });
    }

    /// The 403s answered that no [`ApiServer::expect_forbidden`] declared.
    pub fn unexpected_forbidden(&self) -> Vec<ForbiddenRecord> {
        self.inner.shared.access().unexpected()
    }

    /// Every rule entry that allowed a minted token's request, with its role and user.
    pub fn used_rules(&self) -> Vec<UsedRule> {
        self.inner.shared.access().used()
    }

    /// Turns the `WatchList` feature gate on or off for the watches started from now on.
    pub fn set_watch_list(&self, on: bool) {
        self.inner.shared.set_watch_list(on);
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

    // ---- pods ----

    /// Assigns uid, resourceVersion, creationTimestamp, generation when missing; a pod
    /// without status starts `Pending`. An existing pod of that name is replaced.
    pub fn create_pod(&self, pod: Pod) -> Pod {
        self.state().create_pod(pod)
    }
    /// Replaces metadata/spec (annotations changes are visible to watchers); keeps status.
    pub fn replace_pod(&self, pod: Pod) -> Pod {
        self.state().replace_pod(pod)
    }
    /// What the kubelet reports: containerStatuses, phase, conditions (Ready).
    pub fn set_pod_status(&self, namespace: &str, name: &str, status: PodStatus) {
        self.state().set_pod_status(&key(namespace, name), status);
    }
    /// Removes the pod now (a DELETED watch event).
    pub fn delete_pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        self.state().delete_pod_now(&key(namespace, name))
    }
    /// The kubelet confirms a terminating pod is gone: removes it (DELETED).
    pub fn finalize_pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        self.state().delete_pod_now(&key(namespace, name))
    }
    /// One pod.
    pub fn get_pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        self.state().pods.get(&key(namespace, name)).cloned()
    }
    /// All pods, ordered by namespace and name.
    pub fn list_pods(&self) -> Vec<Pod> {
        self.state().pods.values().cloned().collect()
    }
    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.state().rv
    }
    /// Drops the retained history: watches from an older version get 410, and open
    /// watches end with a 410 ERROR event (their watcher relists).
    pub fn compact(&self) {
        self.state().compact();
    }

    // ---- configmaps, secrets ----

    /// Creates or replaces a ConfigMap as `kubectl apply` would, through the same path as
    /// HTTP writes: a new resourceVersion and a watch event, unless nothing changed
    /// (then neither, as the real server). Returns the stored object.
    pub fn apply_configmap(&self, cm: ConfigMap) -> ConfigMap {
        self.state().apply_object(cm)
    }
    /// One ConfigMap.
    pub fn get_configmap(&self, namespace: &str, name: &str) -> Option<ConfigMap> {
        self.state().configmaps.get(&key(namespace, name)).cloned()
    }
    /// Creates or replaces a Secret (as [`ApiServer::apply_configmap`]).
    pub fn apply_secret(&self, secret: Secret) -> Secret {
        self.state().apply_object(secret)
    }
    /// One Secret.
    pub fn get_secret(&self, namespace: &str, name: &str) -> Option<Secret> {
        self.state().secrets.get(&key(namespace, name)).cloned()
    }

    /// Removes a ConfigMap (a DELETED watch event).
    pub fn delete_configmap(&self, namespace: &str, name: &str) -> Option<ConfigMap> {
        self.state().delete_object(&key(namespace, name)).ok()
    }

    // ---- leases ----

    /// Creates or replaces a Lease (as [`ApiServer::apply_configmap`]).
    pub fn apply_lease(&self, lease: Lease) -> Lease {
        self.state().apply_object(lease)
    }
    /// One Lease.
    pub fn get_lease(&self, namespace: &str, name: &str) -> Option<Lease> {
        self.state().leases.get(&key(namespace, name)).cloned()
    }

    // ---- writes as a client makes them ----

    /// A JSON merge patch of a pod, exactly as `PATCH` with
    /// `application/merge-patch+json` does it (a no-op when nothing changes; 409 on a
    /// stale `metadata.resourceVersion`; 404 when missing).
    pub fn merge_patch_pod(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Pod, ApiStatus> {
        let body = serde_json::to_vec(patch).unwrap_or_default();
        self.state()
            .patch_pod(&key(namespace, name), objects::PatchType::Merge, &body)
    }
    /// A JSON merge patch of a ConfigMap, as `PATCH` does it.
    pub fn merge_patch_configmap(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<ConfigMap, ApiStatus> {
        let body = serde_json::to_vec(patch).unwrap_or_default();
        self.state().patch_object(
            &key(namespace, name),
            objects::PatchType::Merge,
            &body,
            "kubectl-patch",
            false,
        )
    }

    // ---- ReplicaSets ----

    /// Creates `replicas` pods `<name>-<5 random>` owned by a ReplicaSet that keeps that
    /// many non-terminating pods on `node_name`. Returns the ReplicaSet's UID.
    pub fn create_replicaset(
        &self,
        namespace: &str,
        name: &str,
        replicas: i32,
        template: PodTemplateSpec,
        node_name: &str,
    ) -> String {
        self.state()
            .create_replicaset(namespace, name, replicas, template, node_name)
    }
    /// Changes a ReplicaSet's replica count; false when it does not exist.
    pub fn scale_replicaset(&self, namespace: &str, name: &str, replicas: i32) -> bool {
        self.state().scale_replicaset(namespace, name, replicas)
    }
    /// Pods whose controller is the named ReplicaSet (terminating ones included).
    pub fn pods_of_replicaset(&self, namespace: &str, name: &str) -> Vec<Pod> {
        let st = self.state();
        let Some(rs) = st.replicasets.get(&key(namespace, name)) else {
            return Vec::new();
        };
        st.pods.values().filter(|p| rs.owns(p)).cloned().collect()
    }

    // ---- PDBs ----

    /// Creates a PDB (generation 1); the controller computes its status (after the lag).
    pub fn create_pdb(&self, pdb: PodDisruptionBudget) -> PodDisruptionBudget {
        let out = self.state().create_pdb(pdb);
        self.after_pdb_change();
        out
    }
    /// Replaces a PDB's spec, bumping `metadata.generation`.
    pub fn update_pdb(&self, pdb: PodDisruptionBudget) -> PodDisruptionBudget {
        let out = self.state().update_pdb(pdb);
        self.after_pdb_change();
        out
    }
    /// Removes a PDB.
    pub fn delete_pdb(&self, namespace: &str, name: &str) -> Option<PodDisruptionBudget> {
        self.state().delete_pdb(&key(namespace, name))
    }
    /// A PDB with its current status.
    pub fn get_pdb(&self, namespace: &str, name: &str) -> Option<PodDisruptionBudget> {
        let mut st = self.state();
        st.recompute_pdbs();
        st.pdbs.get(&key(namespace, name)).map(|e| e.pdb.clone())
    }
    /// Pins a PDB's status as given (the disruption controller stops updating it; the
    /// eviction subresource still spends from it), to stage states such as a negative
    /// budget, an oversized `disruptedPods` map or a stale count. `None` unpins it.
    /// Returns false when there is no such PDB.
    pub fn pin_pdb_status(
        &self,
        namespace: &str,
        name: &str,
        status: Option<PodDisruptionBudgetStatus>,
    ) -> bool {
        self.state().pin_pdb_status(&key(namespace, name), status)
    }
    /// Changes the disruption controller's lag for later PDB changes.
    pub fn set_controller_lag(&self, lag: Duration) {
        self.state().behaviour.controller_lag = lag;
    }

    /// Once the lag is over, a controller pass observes the new generation.
    fn after_pdb_change(&self) {
        let lag = self.state().behaviour.controller_lag;
        if lag.is_zero() {
            return;
        }
        let shared = Arc::downgrade(&self.inner.shared);
        tokio::spawn(async move {
            tokio::time::sleep(lag + Duration::from_millis(1)).await;
            if let Some(s) = shared.upgrade() {
                s.lock().recompute_pdbs();
            }
        });
    }

    // ---- logs and fault injection ----

    /// Every Event of both APIs.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.state().recorded_events()
    }
    /// Every eviction request with its answer.
    pub fn evictions(&self) -> Vec<EvictionRecord> {
        self.state().records.evictions.clone()
    }
    /// Every eviction that deleted a PDB-covered pod.
    pub fn invariant_log(&self) -> Vec<InvariantRecord> {
        self.state().records.invariants.clone()
    }
    /// Evictions that brought a PDB's Ready, non-terminating pods below desiredHealthy.
    pub fn invariant_violations(&self) -> Vec<String> {
        self.state()
            .records
            .invariants
            .iter()
            .filter(|r| r.is_violation())
            .map(|r| {
                format!(
                    "evicting {} left {} healthy pods under {} (was {}, desiredHealthy {})",
                    r.pod, r.healthy_after, r.pdb, r.healthy_before, r.desired_healthy
                )
            })
            .collect()
    }
    /// Every HTTP request answered (method, path, query, `Accept`, `Content-Type` and
    /// the body of writes), e.g. to assert "no per-object GETs" or count patches. A request
    /// is logged once answered, after its handler changed the store; the log is read once
    /// every request that arrived before this call is answered ([`Self::settled`]), so a
    /// change read from the store (`get_pod`, …) before this call has its request here.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.settled().records.requests.clone()
    }
    /// The requests answered after the first `n` (cheap to poll on a long log).
    pub fn requests_since(&self, n: usize) -> Vec<RequestRecord> {
        self.settled()
            .records
            .requests
            .get(n..)
            .unwrap_or_default()
            .to_vec()
    }
    /// How many requests were answered so far.
    pub fn request_count(&self) -> usize {
        self.settled().records.requests.len()
    }
    /// Watch streams open right now per kind (`Pod`, `ConfigMap`, `Secret`, `Lease`), e.g. to
    /// assert "one watch per kind" (kinds with none open are left out).
    pub fn open_watches(&self) -> std::collections::BTreeMap<&'static str, usize> {
        self.inner
            .shared
            .open_watches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(r, n)| (render::kind_of(*r).0, *n))
            .collect()
    }
    /// `Some(code)`: every request answers that status and open watches break; `None`
    /// restores service.
    pub fn set_outage(&self, code: Option<u16>) {
        self.inner.shared.outage.send_replace(code);
    }
    /// Delays every response by `delay`.
    pub fn set_response_delay(&self, delay: Option<Duration>) {
        *self
            .inner
            .shared
            .delay
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = delay;
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
