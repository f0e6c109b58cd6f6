//! In-memory fakes of the controller's edges that record what was asked of them (tests only).

use crate::core::annotations::{ENV_BASELINE, PROJECTION_NUDGE};
use crate::core::model::PodInfo;
use crate::core::owner_chain::{Link, PodLink, WorkloadFacts};
use crate::core::pacing::ROLLOUT_PACING;
use crate::core::rollout::{OwnerRef, Strategy, WorkloadKind, WorkloadRef};
use crate::ports::{
    ApiError, EnvApi, LeaseError, LeaseRecord, LeaseStore, ObjectData, ObjectKey, PatchError,
    PatchRequest, PatchTarget, Patcher, PodMeta, RolloutHistory, WorkloadApi, WorkloadPatcher,
};
use futures::future::BoxFuture;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};

/// Objects by key; records reads.
#[derive(Default)]
pub struct FakeEnvApi {
    pub objects: Mutex<HashMap<ObjectKey, ObjectData>>,
    pub reads: Mutex<Vec<ObjectKey>>,
    /// Objects whose every read is refused (403).
    pub forbidden: Mutex<std::collections::HashSet<ObjectKey>>,
}

impl EnvApi for FakeEnvApi {
    fn read(&self, key: &ObjectKey) -> BoxFuture<'_, Result<Option<ObjectData>, ApiError>> {
        self.reads.lock().unwrap().push(key.clone());
        if self.forbidden.lock().unwrap().contains(key) {
            let refused = ApiError::status(403, "forbidden");
            return Box::pin(std::future::ready(Err(refused)));
        }
        let found = self.objects.lock().unwrap().get(key).cloned();
        Box::pin(std::future::ready(Ok(found)))
    }
}

/// A write of the stored pod by someone else.
type PodWrite = Box<dyn FnOnce(&mut PodInfo) + Send>;

#[derive(Default)]
struct PatcherState {
    pods: HashMap<(String, String), PodInfo>,
    /// Each stored pod's resourceVersion: bumped by every write (`put`, a patch that changes it).
    versions: HashMap<(String, String), u64>,
    /// The next `meta` reads: after each, this writes the stored pod (another writer between
    /// the read and the write).
    after_read: VecDeque<PodWrite>,
    /// (annotation, namespace, name, value) of every patch request, in order.
    patches: Vec<(&'static str, String, String, String)>,
    gets: usize,
    meta_reads: usize,
    scripted: VecDeque<PatchError>,
    always: Option<PatchError>,
    hang: bool,
}

/// Pods by namespace/name; every patch is recorded (and applied to the stored pod).
#[derive(Clone, Default)]
pub struct FakePatcher {
    state: Arc<Mutex<PatcherState>>,
}

impl FakePatcher {
    pub fn put(&self, pod: PodInfo) {
        let mut s = self.state.lock().unwrap();
        let key = (pod.namespace.clone(), pod.name.clone());
        *s.versions.entry(key.clone()).or_default() += 1;
        s.pods.insert(key, pod);
    }
    /// Right after the next `meta` read of a pod, `write` changes the stored pod (a new
    /// resourceVersion): a write of someone else between a read and the patch built on it.
    pub fn after_next_read(&self, write: impl FnOnce(&mut PodInfo) + Send + 'static) {
        self.state
            .lock()
            .unwrap()
            .after_read
            .push_back(Box::new(write));
    }
    pub fn remove(&self, namespace: &str, name: &str) {
        let mut s = self.state.lock().unwrap();
        s.pods.remove(&(namespace.to_owned(), name.to_owned()));
    }
    /// The next patches fail with these errors, in order.
    pub fn fail_next(&self, errors: impl IntoIterator<Item = PatchError>) {
        self.state.lock().unwrap().scripted.extend(errors);
    }
    /// Every patch fails with this error.
    pub fn fail_always(&self, error: PatchError) {
        self.state.lock().unwrap().always = Some(error);
    }
    /// Patches never answer (while `true`).
    pub fn hang(&self, hang: bool) {
        self.state.lock().unwrap().hang = hang;
    }
    /// `(namespace, name, value)` of every nudge patch request, in order.
    pub fn patches(&self) -> Vec<(String, String, String)> {
        self.written(PROJECTION_NUDGE)
    }
    /// `(namespace, name, value)` of every rollout baseline write, in order.
    pub fn rollout_baselines(&self) -> Vec<(String, String, String)> {
        self.written(crate::core::annotations::ROLLOUT_BASELINE)
    }
    /// `(namespace, name, value)` of every env baseline write, in order.
    pub fn baseline_writes(&self) -> Vec<(String, String, String)> {
        self.written(ENV_BASELINE)
    }
    /// `(namespace, name, value)` of every env pacing record write, in order (empty: removed).
    pub fn env_pacing_writes(&self) -> Vec<(String, String, String)> {
        self.written(crate::core::pacing::ENV_PACING)
    }
    /// `(namespace, name, value)` of every data version write (on ConfigMaps/Secrets), in order.
    pub fn data_version_writes(&self) -> Vec<(String, String, String)> {
        self.written(crate::core::status::data_version::ANNOTATION)
    }
    /// `(namespace, name, value)` of every status record write (`reloadlet.io/applied`).
    pub fn applied_writes(&self) -> Vec<(String, String, String)> {
        self.written(crate::core::status::applied::ANNOTATION)
    }
    /// `(namespace, name, value)` of every write of `annotation`, in order.
    pub fn written_values(&self, annotation: &str) -> Vec<(String, String, String)> {
        self.written(annotation)
    }
    fn written(&self, annotation: &str) -> Vec<(String, String, String)> {
        let s = self.state.lock().unwrap();
        s.patches
            .iter()
            .filter(|(a, ..)| *a == annotation)
            .map(|(_, ns, name, value)| (ns.clone(), name.clone(), value.clone()))
            .collect()
    }
    /// `(namespace, name, value)` of every restart grant write, in order.
    pub fn restart_grants(&self) -> Vec<(String, String, String)> {
        self.written(crate::core::restart_grant::GRANT)
    }
    /// The pod as stored now (patches applied).
    pub fn stored(&self, namespace: &str, name: &str) -> Option<PodInfo> {
        let s = self.state.lock().unwrap();
        s.pods
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }
    pub fn gets(&self) -> usize {
        self.state.lock().unwrap().gets
    }
    /// How many `meta` reads (the status record's, before each conditional write).
    pub fn meta_reads(&self) -> usize {
        self.state.lock().unwrap().meta_reads
    }
}

impl Patcher for FakePatcher {
    fn patch<'a>(&'a self, req: &'a PatchRequest) -> BoxFuture<'a, Result<(), PatchError>> {
        let mut s = self.state.lock().unwrap();
        s.patches.push((
            req.annotation,
            req.namespace.clone(),
            req.name.clone(),
            // A removal is recorded as an empty value.
            req.value.clone().unwrap_or_default(),
        ));
        if s.hang {
            return Box::pin(std::future::pending());
        }
        let result = if let Some(e) = s.always.clone() {
            Err(e)
        } else if let Some(e) = s.scripted.pop_front() {
            Err(e)
        } else {
            let key = (req.namespace.clone(), req.name.clone());
            let stored = s.versions.get(&key).copied().unwrap_or_default();
            let stale = match &req.target {
                PatchTarget::PodAt { resource_version } => *resource_version != stored.to_string(),
                _ => false,
            };
            match s.pods.get_mut(&key) {
                // As the API server does: the resourceVersion first (409), then the UID.
                Some(_) if stale => Err(PatchError::Conflict(
                    "the object has been modified; please apply your changes to the latest version and try again".into(),
                )),
                Some(p) if req.uid.as_ref().is_none_or(|uid| *uid == p.uid) => {
                    let before = p.annotations.get(req.annotation).cloned();
                    match &req.value {
                        Some(v) => p.annotations.insert(req.annotation.to_owned(), v.clone()),
                        None => p.annotations.remove(req.annotation),
                    };
                    if before != req.value {
                        *s.versions.entry(key).or_default() += 1;
                    }
                    Ok(())
                }
                _ => Err(PatchError::NotFound),
            }
        };
        Box::pin(std::future::ready(result))
    }

    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodInfo>, PatchError>> {
        let mut s = self.state.lock().unwrap();
        s.gets += 1;
        let pod = s
            .pods
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned();
        Box::pin(std::future::ready(Ok(pod)))
    }

    fn meta<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodMeta>, PatchError>> {
        let mut s = self.state.lock().unwrap();
        s.meta_reads += 1;
        let key = (namespace.to_owned(), name.to_owned());
        let read = s.pods.get(&key).map(|p| PodMeta {
            uid: p.uid.clone(),
            resource_version: s
                .versions
                .get(&key)
                .copied()
                .unwrap_or_default()
                .to_string(),
            annotations: (*p.annotations).clone(),
        });
        if read.is_some() {
            if let Some(write) = s.after_read.pop_front() {
                if let Some(p) = s.pods.get_mut(&key) {
                    write(p);
                }
                *s.versions.entry(key).or_default() += 1;
            }
        }
        Box::pin(std::future::ready(Ok(read)))
    }
}

#[derive(Default)]
struct LeaseState {
    record: Option<(LeaseRecord, u64)>,
    writes: usize,
    down: bool,
}

/// One Lease shared by every clone (two candidates can share one store).
#[derive(Clone, Default)]
pub struct FakeLeaseStore {
    state: Arc<Mutex<LeaseState>>,
}

impl FakeLeaseStore {
    pub fn holder(&self) -> Option<String> {
        let s = self.state.lock().unwrap();
        s.record.as_ref().and_then(|(r, _)| r.holder.clone())
    }
    pub fn record(&self) -> Option<LeaseRecord> {
        self.state
            .lock()
            .unwrap()
            .record
            .as_ref()
            .map(|(r, _)| r.clone())
    }
    /// Every request fails while down.
    pub fn set_down(&self, down: bool) {
        self.state.lock().unwrap().down = down;
    }
    pub fn writes(&self) -> usize {
        self.state.lock().unwrap().writes
    }
}

impl LeaseStore for FakeLeaseStore {
    fn get(
        &self,
    ) -> impl Future<Output = Result<Option<(LeaseRecord, String)>, LeaseError>> + Send {
        let s = self.state.lock().unwrap();
        let r = if s.down {
            Err(LeaseError::Other(ApiError::status(503, "API unavailable")))
        } else {
            Ok(s.record.as_ref().map(|(r, v)| (r.clone(), v.to_string())))
        };
        std::future::ready(r)
    }
    fn create(&self, record: &LeaseRecord) -> impl Future<Output = Result<(), LeaseError>> + Send {
        let mut s = self.state.lock().unwrap();
        let r = if s.down {
            Err(LeaseError::Other(ApiError::status(503, "API unavailable")))
        } else if s.record.is_some() {
            Err(LeaseError::Conflict)
        } else {
            s.writes += 1;
            s.record = Some((record.clone(), 1));
            Ok(())
        };
        std::future::ready(r)
    }
    fn replace(
        &self,
        record: &LeaseRecord,
        resource_version: &str,
    ) -> impl Future<Output = Result<(), LeaseError>> + Send {
        let mut s = self.state.lock().unwrap();
        let r = if s.down {
            Err(LeaseError::Other(ApiError::status(503, "API unavailable")))
        } else {
            match &s.record {
                Some((_, v)) if v.to_string() == resource_version => {
                    let next = v + 1;
                    s.writes += 1;
                    s.record = Some((record.clone(), next));
                    Ok(())
                }
                _ => Err(LeaseError::Conflict),
            }
        };
        std::future::ready(r)
    }
}

/// Owners of pods and ReplicaSets, workload strategies; every workload patch is recorded.
#[derive(Default)]
pub struct FakeWorkloads {
    /// `(namespace, pod)` → its controlling owner.
    pub pod_owners: Mutex<HashMap<(String, String), OwnerRef>>,
    /// `(namespace, replica set)` → its controlling owner.
    pub rs_owners: Mutex<HashMap<(String, String), OwnerRef>>,
    pub strategies: Mutex<HashMap<WorkloadRef, Strategy>>,
    /// Workloads' own annotations (a workload with a strategy and none here has none).
    pub annotations: Mutex<HashMap<WorkloadRef, std::collections::BTreeMap<String, String>>>,
    /// Workloads' pod template annotations ([`Self::templates_from`]; none: the template has
    /// none, so it grants nothing).
    /// The pods as created ([`Self::templates_from`]): what a metadata GET of one shows.
    pub pods: Mutex<HashMap<(String, String), PodInfo>>,
    pub templates: Mutex<HashMap<WorkloadRef, std::collections::BTreeMap<String, String>>>,
    pub patches: Mutex<Vec<(WorkloadRef, serde_json::Value)>>,
    /// The next patches fail with these errors.
    pub fail: Mutex<VecDeque<PatchError>>,
}

impl FakeWorkloads {
    /// `pod` is owned by ReplicaSet `<deployment>-rs` of Deployment `deployment`.
    pub fn deployment_pod(&self, namespace: &str, pod: &str, deployment: &str, strategy: Strategy) {
        let rs = format!("{deployment}-rs");
        self.pod_owners.lock().unwrap().insert(
            (namespace.into(), pod.into()),
            OwnerRef {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: rs.clone(),
                uid: format!("uid-{rs}"),
            },
        );
        self.rs_owners.lock().unwrap().insert(
            (namespace.into(), rs),
            OwnerRef {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: deployment.into(),
                uid: format!("uid-{deployment}"),
            },
        );
        self.strategies.lock().unwrap().insert(
            WorkloadRef {
                kind: WorkloadKind::Deployment,
                namespace: namespace.into(),
                name: deployment.into(),
            },
            strategy,
        );
    }

    /// `pod` is owned directly by `kind` `name` (StatefulSet, DaemonSet, Job …).
    pub fn owned_pod(&self, namespace: &str, pod: &str, kind: &str, name: &str) {
        let api_version = if kind == "Job" { "batch/v1" } else { "apps/v1" };
        self.pod_owners.lock().unwrap().insert(
            (namespace.into(), pod.into()),
            OwnerRef {
                api_version: api_version.into(),
                kind: kind.into(),
                name: name.into(),
                uid: format!("uid-{name}"),
            },
        );
    }

    /// Each pod's workload has the pod's annotations as its pod template's: what a pod
    /// created from its template carries (an operator's edit of the template, seen on the
    /// pod). A test of a pod edited alone sets [`Self::templates`] after this.
    pub fn templates_from(&self, pods: &[PodInfo]) {
        for pod in pods {
            self.pods
                .lock()
                .unwrap()
                .insert((pod.namespace.clone(), pod.name.clone()), pod.clone());
            let owner = self
                .pod_owners
                .lock()
                .unwrap()
                .get(&(pod.namespace.clone(), pod.name.clone()))
                .cloned();
            let Some(owner) = owner else { continue };
            let rs_owner = self
                .rs_owners
                .lock()
                .unwrap()
                .get(&(pod.namespace.clone(), owner.name.clone()))
                .cloned();
            let Ok(w) =
                crate::core::rollout::workload_of(&pod.namespace, Some(&owner), |_| rs_owner)
            else {
                continue;
            };
            self.templates
                .lock()
                .unwrap()
                .insert(w, (*pod.annotations).clone());
        }
    }

    /// The rollouts: every patch of a pod template or an Argo Rollout's `spec.restartAt`.
    pub fn patched(&self) -> Vec<(WorkloadRef, serde_json::Value)> {
        let patches = self.patches.lock().unwrap();
        patches
            .iter()
            .filter(|(_, p)| p.get("spec").is_some())
            .cloned()
            .collect()
    }

    /// The metadata-only patches (a pacing record written when a hold begins), in order:
    /// the workload and the `reloadlet.io/rollout-pacing` value.
    pub fn annotated(&self) -> Vec<(WorkloadRef, String)> {
        let patches = self.patches.lock().unwrap();
        patches
            .iter()
            .filter(|(_, p)| p.get("spec").is_none())
            .filter_map(|(w, p)| {
                let v = p["metadata"]["annotations"][ROLLOUT_PACING].as_str()?;
                Some((w.clone(), v.to_owned()))
            })
            .collect()
    }
}

impl WorkloadApi for FakeWorkloads {
    fn pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodLink>, ApiError>> {
        let key = (namespace.to_owned(), name.to_owned());
        let owner = self.pod_owners.lock().unwrap().get(&key).cloned();
        let created = self.pods.lock().unwrap().get(&key).cloned();
        let found = (owner.is_some() || created.is_some()).then(|| {
            let created = created.unwrap_or_default();
            PodLink {
                uid: if created.uid.is_empty() {
                    format!("uid-{name}")
                } else {
                    created.uid
                },
                labels: (*created.labels).clone(),
                annotations: (*created.annotations).clone(),
                owner,
            }
        });
        Box::pin(std::future::ready(Ok(found)))
    }

    fn replica_set<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Link>, ApiError>> {
        // A fake ReplicaSet's selector selects every pod (a real one is never empty).
        let found = self
            .rs_owners
            .lock()
            .unwrap()
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
            .map(|owner| Link {
                uid: format!("uid-{name}"),
                owner: Some(owner),
                selector: Some(Default::default()),
            });
        Box::pin(std::future::ready(Ok(found)))
    }

    fn workload<'a>(
        &'a self,
        workload: &'a WorkloadRef,
    ) -> BoxFuture<'a, Result<Option<WorkloadFacts>, ApiError>> {
        let strategy = self.strategies.lock().unwrap().get(workload).copied();
        let annotations = self.annotations.lock().unwrap().get(workload).cloned();
        let template = self.templates.lock().unwrap().get(workload).cloned();
        let found = strategy.map(|strategy| WorkloadFacts {
            strategy,
            link: Link {
                uid: format!("uid-{}", workload.name),
                owner: None,
                selector: Some(Default::default()),
            },
            annotations: annotations.unwrap_or_default(),
            template_annotations: template.unwrap_or_default(),
        });
        Box::pin(std::future::ready(Ok(found)))
    }

    fn annotations<'a>(
        &'a self,
        workload: &'a WorkloadRef,
    ) -> BoxFuture<'a, Result<Option<std::collections::BTreeMap<String, String>>, ApiError>> {
        let exists = self.strategies.lock().unwrap().contains_key(workload);
        let found = self.annotations.lock().unwrap().get(workload).cloned();
        let mut found = found.or_else(|| exists.then(Default::default));
        // The pacing record the controller's patches wrote.
        let patches = self.patches.lock().unwrap();
        let written = patches
            .iter()
            .rev()
            .filter(|(w, _)| w == workload)
            .find_map(|(_, p)| p["metadata"]["annotations"][ROLLOUT_PACING].as_str());
        if let (Some(own), Some(v)) = (found.as_mut(), written) {
            own.insert(ROLLOUT_PACING.to_owned(), v.to_owned());
        }
        Box::pin(std::future::ready(Ok(found)))
    }

    /// The `restartedAt` of the last rollout of the workload and its last pacing record, as
    /// the API server would keep them after the merge patches.
    fn rollout_history<'a>(
        &'a self,
        workload: &'a WorkloadRef,
    ) -> BoxFuture<'a, Result<Option<RolloutHistory>, ApiError>> {
        let patches = self.patches.lock().unwrap();
        let mine = || patches.iter().rev().filter(|(w, _)| w == workload);
        let restarted_at = mine().find_map(|(_, p)| {
            p["spec"]["template"]["metadata"]["annotations"][crate::core::rollout::RESTARTED_AT]
                .as_str()
                .map(str::to_owned)
        });
        let pacing = mine()
            .find_map(|(_, p)| p["metadata"]["annotations"][ROLLOUT_PACING].as_str())
            .map(str::to_owned)
            .or_else(|| {
                self.annotations
                    .lock()
                    .unwrap()
                    .get(workload)?
                    .get(ROLLOUT_PACING)
                    .cloned()
            });
        let history = RolloutHistory {
            restarted_at,
            pacing,
        };
        Box::pin(std::future::ready(Ok(Some(history))))
    }
}

impl WorkloadPatcher for FakeWorkloads {
    fn patch<'a>(
        &'a self,
        workload: &'a WorkloadRef,
        patch: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<(), PatchError>> {
        self.patches
            .lock()
            .unwrap()
            .push((workload.clone(), patch.clone()));
        let result = match self.fail.lock().unwrap().pop_front() {
            Some(e) => Err(e),
            None => Ok(()),
        };
        Box::pin(std::future::ready(result))
    }
}

/// A reporter whose Events go to `events` (tests).
pub fn reporter(
    events: Arc<crate::ports::fake::Events>,
    notifier: crate::outbound::notify::Notifier,
    dry_run: bool,
) -> crate::execute::report::Reporter {
    let metrics =
        crate::serve::metrics::Metrics::new(&mut prometheus_client::registry::Registry::default());
    crate::execute::report::Reporter::new(events, notifier, metrics, dry_run, "controller-0".into())
}

/// `feature` alone in the controller's loop, as the leader, until `stop` (tests): the loop's
/// input and its task.
pub fn run_alone(
    feature: Box<dyn super::feature::Feature>,
    stop: &tokio_util::sync::CancellationToken,
) -> (
    tokio::sync::mpsc::Sender<crate::ports::Input>,
    tokio::task::JoinHandle<()>,
) {
    let controller = super::router::Controller::new(
        crate::core::filters::NamespaceFilter::default(),
        true,
        super::metrics::ControllerMetrics::new(
            &mut prometheus_client::registry::Registry::default(),
        ),
        Arc::new(crate::serve::health::Health::default()),
    )
    .with(feature);
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    (tx, tokio::spawn(controller.run(rx, stop.clone())))
}
