//! The rollout feature in the real controller loop, with fakes of every edge and a paused
//! clock: what a user would see — which workloads were patched (and how often), the Events,
//! and the baselines that keep a restarted controller from rolling again.

use super::*;
use crate::controller::fake::{FakeEnvApi, FakePatcher, FakeWorkloads};
use crate::core::model::{ContainerInfo, ContainerKind, EnvKeys, EnvRef, VolumeMount, VolumeSpec};
use crate::core::rollout::{IntOrPercent, Strategy, RESTARTED_AT, RESTARTED_FOR};
use crate::execute::patch::PatchSettings;
use crate::outbound::notify::Notifier;
use crate::ports::fake;
use crate::ports::Input;
use crate::ports::ObjectData;
use crate::ports::ObjectKey;
use crate::ports::PatchError;
use serde_json::json;

const NS: &str = "ns";
const NOW: &str = "2026-11-26T12:00:00Z";

fn cm(name: &str) -> ObjectKey {
    ObjectKey {
        kind: SourceKind::ConfigMap,
        namespace: NS.into(),
        name: name.into(),
    }
}

fn source(name: &str) -> SourceRef {
    SourceRef {
        kind: SourceKind::ConfigMap,
        name: name.into(),
    }
}

/// A running `action: rollout` pod mounting configMap `cfg` and reading key `LOG` of
/// `app-env` through env.
fn pod(name: &str) -> PodInfo {
    PodInfo {
        uid: format!("uid-{name}"),
        namespace: NS.into(),
        name: name.into(),
        annotations: [("reloadlet.io/action".to_string(), "rollout".to_string())].into(),
        volumes: vec![VolumeSpec {
            name: "v".into(),
            sources: vec![source("cfg")],
            ..VolumeSpec::default()
        }],
        containers: vec![ContainerInfo {
            name: "app".into(),
            kind: ContainerKind::Regular,
            mounts: vec![VolumeMount {
                volume: "v".into(),
                sub_path: false,
            }],
            container_id: None,
            running: true,
            ports: Vec::new(),
        }],
        env: vec![EnvRef {
            source: source("app-env"),
            keys: EnvKeys::Key("LOG".into()),
            optional: false,
            container: "app".into(),
        }],
        has_controller: true,
        phase: "Running".into(),
        ..PodInfo::default()
    }
}

fn with(mut p: PodInfo, key: &str, value: &str) -> PodInfo {
    p.annotations.insert(key.into(), value.into());
    p
}

fn data(pairs: &[(&str, &str)]) -> ObjectData {
    ObjectData::of(pairs, &[])
}

fn deployment(name: &str) -> WorkloadRef {
    WorkloadRef {
        kind: WorkloadKind::Deployment,
        namespace: NS.into(),
        name: name.into(),
    }
}

struct Harness {
    tx: mpsc::Sender<Input>,
    patcher: FakePatcher,
    api: Arc<FakeEnvApi>,
    workloads: Arc<FakeWorkloads>,
    events: Arc<fake::Events>,
    /// The data versions the feature records with (none published unless a test sets one).
    versions: PublishedVersions,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

fn now() -> String {
    NOW.into()
}

/// The rollout feature alone in the loop, leader, over the fakes. `api` holds `cfg` and
/// `app-env`.
fn start(
    api: Arc<FakeEnvApi>,
    workloads: Arc<FakeWorkloads>,
    patcher: FakePatcher,
    dry_run: bool,
) -> Harness {
    start_with(api, workloads, patcher, dry_run, |f| f)
}

/// [`start`], the feature configured by `configure` (budgets, pacing).
fn start_with(
    api: Arc<FakeEnvApi>,
    workloads: Arc<FakeWorkloads>,
    patcher: FakePatcher,
    dry_run: bool,
    configure: impl FnOnce(RolloutFeature) -> RolloutFeature,
) -> Harness {
    let events = Arc::new(fake::Events::default());
    // What becomes of a rollout is recorded on the asking pods (`reloadlet.io/applied`).
    let recorder = crate::execute::applied::AppliedRecorder::controller(Arc::new(patcher.clone()));
    let report = crate::controller::fake::reporter(events.clone(), Notifier::disabled(), dry_run)
        .with_applied(Some(recorder));
    let stop = CancellationToken::new();
    let versions = PublishedVersions::default();
    let feature = RolloutFeature::new(RolloutDeps {
        api: api.clone(),
        workloads: workloads.clone(),
        rollouts: Rollouts::new(
            workloads.clone(),
            report.clone(),
            Duration::from_secs(10),
            stop.clone(),
        ),
        baselines: Patches::new(
            PatchSettings::baselines(),
            Arc::new(patcher.clone()),
            report,
            stop.clone(),
        ),
        secrets: false,
        argo: false,
        reloader_compat: false,
        now,
        stop: stop.clone(),
        key: crate::core::volume_digest::HashKey::from_bytes([7; 32]),
        versions: versions.clone(),
    });
    let feature = configure(feature);
    let (tx, task) = crate::controller::fake::run_alone(Box::new(feature), &stop);
    Harness {
        tx,
        patcher,
        api,
        workloads,
        events,
        versions,
        stop,
        task,
    }
}

impl Harness {
    async fn list(&self, pods: Vec<PodInfo>) {
        self.workloads.templates_from(&pods);
        for p in &pods {
            self.patcher.put(p.clone());
        }
        self.tx.send(Input::PodsListed(pods)).await.unwrap();
        self.tx
            .send(Input::ObjectsListed {
                kind: SourceKind::ConfigMap,
                objects: vec![(cm("cfg"), "1".into()), (cm("app-env"), "1".into())],
            })
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
    }

    /// `name` now holds `pairs` (resourceVersion `rv`); waits past the coalescing window.
    async fn change(&self, name: &str, rv: &str, pairs: &[(&str, &str)]) {
        self.api
            .objects
            .lock()
            .unwrap()
            .insert(cm(name), data(pairs));
        self.tx
            .send(Input::Object {
                key: cm(name),
                resource_version: rv.into(),
            })
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
    }

    /// (regarding: the pod's name, or `<Kind> <name>` of another object; reason; note).
    fn events(&self) -> Vec<(String, &'static str, String)> {
        let mut out: Vec<_> = self
            .events
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|(p, e)| (p.name.clone(), e.reason, e.note.clone()))
            .collect();
        out.extend(
            self.events
                .1
                .lock()
                .unwrap()
                .iter()
                .map(|(o, e)| (format!("{} {}", o.kind, o.name), e.reason, e.note.clone())),
        );
        out
    }

    /// The pods as the fake API holds them now (baselines written).
    fn stored(&self, names: &[&str]) -> Vec<PodInfo> {
        names
            .iter()
            .map(|n| {
                let mut p = pod(n);
                p.annotations = self.patcher_pod(n).annotations;
                p
            })
            .collect()
    }

    fn patcher_pod(&self, name: &str) -> PodInfo {
        let written = self.patcher.rollout_baselines();
        let mut p = pod(name);
        if let Some((_, _, v)) = written.iter().rev().find(|(_, n, _)| n == name) {
            p.annotations.insert(ROLLOUT_BASELINE.into(), v.clone());
        }
        p
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap();
    }
}

fn objects() -> Arc<FakeEnvApi> {
    let api = Arc::new(FakeEnvApi::default());
    api.objects
        .lock()
        .unwrap()
        .insert(cm("cfg"), data(&[("app.conf", "v1")]));
    api.objects
        .lock()
        .unwrap()
        .insert(cm("app-env"), data(&[("LOG", "info"), ("PORT", "80")]));
    api
}

fn three_pods_of_web() -> (Vec<PodInfo>, Arc<FakeWorkloads>) {
    let workloads = Arc::new(FakeWorkloads::default());
    // One Deployment whose pods run on three nodes (the controller sees them all).
    let pods: Vec<PodInfo> = ["web-a", "web-b", "web-c"].iter().map(|n| pod(n)).collect();
    for p in &pods {
        workloads.deployment_pod(NS, &p.name, "web", Strategy::deployment_default(3));
    }
    (pods, workloads)
}

#[tokio::test(start_paused = true)]
async fn one_patch_per_workload_and_change_only_for_data_the_pods_consume() {
    let (mut pods, workloads) = three_pods_of_web();
    // Not opted in to rollout: never rolled.
    let signal = with(pod("other"), "reloadlet.io/action", "signal");
    workloads.deployment_pod(NS, "other", "other", Strategy::deployment_default(1));
    pods.push(signal);
    let h = start(objects(), workloads, FakePatcher::default(), false);
    h.list(pods).await;
    // First sight: a baseline per rollout pod (both objects it reads), nothing rolled.
    for name in ["web-a", "web-b", "web-c"] {
        let b = &h.patcher_pod(name).annotations[ROLLOUT_BASELINE];
        assert!(
            b.contains("configmap/app-env=") && b.contains("configmap/cfg="),
            "{b}"
        );
    }
    assert!(!h
        .patcher_pod("other")
        .annotations
        .contains_key(ROLLOUT_BASELINE));
    assert!(h.workloads.patched().is_empty());
    let first = h.patcher.rollout_baselines().len();

    // Labels or annotations only (a new resourceVersion, the same data): nothing.
    h.change("cfg", "2", &[("app.conf", "v1")]).await;
    // A key of app-env the pods do not read: nothing.
    h.change("app-env", "2", &[("LOG", "info"), ("PORT", "81")])
        .await;
    assert!(h.workloads.patched().is_empty());
    assert!(h.events().is_empty());

    // The mounted ConfigMap's data: one patch of the Deployment, for three pods.
    h.change("cfg", "3", &[("app.conf", "v2")]).await;
    let patched = h.workloads.patched();
    assert_eq!(patched.len(), 1, "{patched:?}");
    assert_eq!(patched[0].0, deployment("web"));
    assert_eq!(
        patched[0].1["spec"],
        json!({"template": {"metadata": {"annotations": {
            RESTARTED_AT: NOW, RESTARTED_FOR: "configmap/cfg"}}}})
    );
    // The same request records the workload's rollout pacing on its own metadata.
    let keys: Vec<&String> = patched[0].1["metadata"]["annotations"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(keys, ["reloadlet.io/rollout-pacing"]);
    let events = h.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].1, "RolloutRequested");
    assert!(
        events[0].2.contains("Deployment ns/web") && events[0].2.contains("3 of its pods"),
        "{}",
        events[0].2
    );
    // The baselines moved on: the same data read again rolls nothing.
    assert_eq!(h.patcher.rollout_baselines().len(), first + 3);
    h.change("cfg", "4", &[("app.conf", "v2")]).await;
    // The key the pods read through env: rolled once more.
    h.change("app-env", "3", &[("LOG", "debug"), ("PORT", "81")])
        .await;
    let patched = h.workloads.patched();
    assert_eq!(patched.len(), 2, "{patched:?}");
    assert_eq!(
        patched[1].1["spec"]["template"]["metadata"]["annotations"][RESTARTED_FOR],
        "configmap/app-env"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn changes_within_a_second_are_one_patch() {
    let (pods, workloads) = three_pods_of_web();
    let h = start(objects(), workloads, FakePatcher::default(), false);
    h.list(pods).await;
    h.api
        .objects
        .lock()
        .unwrap()
        .insert(cm("cfg"), data(&[("app.conf", "v2")]));
    h.api
        .objects
        .lock()
        .unwrap()
        .insert(cm("app-env"), data(&[("LOG", "debug")]));
    for (name, rv) in [("cfg", "2"), ("app-env", "2")] {
        h.tx.send(Input::Object {
            key: cm(name),
            resource_version: rv.into(),
        })
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let patched = h.workloads.patched();
    assert_eq!(patched.len(), 1, "{patched:?}");
    assert_eq!(
        patched[0].1["spec"]["template"]["metadata"]["annotations"][RESTARTED_FOR],
        "configmap/app-env,configmap/cfg"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_restarted_controller_never_rolls_twice_and_rolls_a_change_made_while_down_once() {
    let (pods, workloads) = three_pods_of_web();
    let api = objects();
    let h = start(
        api.clone(),
        workloads.clone(),
        FakePatcher::default(),
        false,
    );
    h.list(pods).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    assert_eq!(h.workloads.patched().len(), 1);
    let names = ["web-a", "web-b", "web-c"];
    let survivors = h.stored(&names);
    h.stop().await;

    // A new leader with the pods as they are (baselines on them): no second patch.
    let h = start(
        api.clone(),
        workloads.clone(),
        FakePatcher::default(),
        false,
    );
    h.list(survivors.clone()).await;
    assert_eq!(
        workloads.patched().len(),
        1,
        "no second patch after a restart"
    );
    h.stop().await;

    // Changed while no controller ran: rolled once when one is back.
    api.objects
        .lock()
        .unwrap()
        .insert(cm("cfg"), data(&[("app.conf", "v3")]));
    let h = start(
        api.clone(),
        workloads.clone(),
        FakePatcher::default(),
        false,
    );
    h.list(survivors).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(workloads.patched().len(), 2);
    assert_eq!(h.events().len(), 1);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn unsupported_owners_and_strategies_get_a_warning_and_nothing_is_written() {
    let workloads = Arc::new(FakeWorkloads::default());
    workloads.owned_pod(NS, "job-pod", "Job", "nightly");
    // "bare": no owner at all.
    workloads.owned_pod(NS, "db-0", "StatefulSet", "db");
    workloads.strategies.lock().unwrap().insert(
        WorkloadRef {
            kind: WorkloadKind::StatefulSet,
            namespace: NS.into(),
            name: "db".into(),
        },
        Strategy::OnDelete,
    );
    workloads.pod_owners.lock().unwrap().insert(
        (NS.into(), "rs-pod".into()),
        crate::core::rollout::OwnerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "lonely".into(),
            uid: String::new(),
        },
    );
    let pods = ["job-pod", "bare", "db-0", "rs-pod"]
        .iter()
        .map(|n| pod(n))
        .collect();
    let h = start(objects(), workloads, FakePatcher::default(), false);
    h.list(pods).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    assert!(h.workloads.patched().is_empty());
    let mut events = h.events();
    events.sort();
    let got: Vec<(&str, &str)> = events.iter().map(|(p, r, _)| (p.as_str(), *r)).collect();
    assert_eq!(
        got,
        [
            ("bare", "RolloutUnsupported"),
            ("db-0", "RolloutUnsupported"),
            ("job-pod", "RolloutUnsupported"),
            ("rs-pod", "RolloutUnsupported"),
        ]
    );
    assert!(
        events[0].2.contains("no controlling owner"),
        "{}",
        events[0].2
    );
    assert!(
        events[1]
            .2
            .contains("StatefulSet db uses updateStrategy OnDelete"),
        "{}",
        events[1].2
    );
    assert!(events[2].2.contains("Job nightly"), "{}", events[2].2);
    assert!(events[3].2.contains("ReplicaSet lonely"), "{}", events[3].2);
    assert!(events.iter().all(|e| e.2.contains("configmap cfg")));
    // Reported once: the same data again says nothing more.
    h.change("cfg", "3", &[("app.conf", "v2")]).await;
    assert_eq!(h.events().len(), 4);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn strategies_are_reported_in_the_event() {
    let workloads = Arc::new(FakeWorkloads::default());
    workloads.deployment_pod(NS, "recreate", "batch", Strategy::Recreate);
    workloads.owned_pod(NS, "db-0", "StatefulSet", "db");
    workloads.owned_pod(NS, "agent-x", "DaemonSet", "agent");
    for (w, s) in [
        (
            WorkloadRef {
                kind: WorkloadKind::StatefulSet,
                namespace: NS.into(),
                name: "db".into(),
            },
            Strategy::OrderedRolling,
        ),
        (
            WorkloadRef {
                kind: WorkloadKind::DaemonSet,
                namespace: NS.into(),
                name: "agent".into(),
            },
            Strategy::DaemonSetRolling {
                max_surge: IntOrPercent::Int(0),
            },
        ),
    ] {
        workloads.strategies.lock().unwrap().insert(w, s);
    }
    let pods = ["recreate", "db-0", "agent-x"]
        .iter()
        .map(|n| pod(n))
        .collect();
    let h = start(objects(), workloads, FakePatcher::default(), false);
    h.list(pods).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    let kinds: BTreeSet<WorkloadKind> = h.workloads.patched().iter().map(|(w, _)| w.kind).collect();
    assert_eq!(
        kinds,
        [
            WorkloadKind::Deployment,
            WorkloadKind::StatefulSet,
            WorkloadKind::DaemonSet
        ]
        .into()
    );
    let notes: Vec<String> = h.events().into_iter().map(|e| e.2).collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("Deployment ns/batch") && n.contains("downtime")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("StatefulSet ns/db") && n.contains("one pod at a time")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("DaemonSet ns/agent") && n.contains("no surge")),
        "{notes:?}"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn narrowing_the_root_ca_and_other_actions_roll_nothing() {
    let workloads = Arc::new(FakeWorkloads::default());
    let narrowed = with(pod("narrowed"), "reloadlet.io/configmaps", "other");
    let mut root_ca = pod("root-ca");
    root_ca.volumes[0].sources = vec![source("kube-root-ca.crt")];
    root_ca.env.clear();
    for (p, d) in [("narrowed", "a"), ("root-ca", "b")] {
        workloads.deployment_pod(NS, p, d, Strategy::deployment_default(1));
    }
    let api = objects();
    api.objects
        .lock()
        .unwrap()
        .insert(cm("kube-root-ca.crt"), data(&[("ca.crt", "1")]));
    let h = start(api, workloads, FakePatcher::default(), false);
    h.list(vec![narrowed, root_ca]).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    h.change("app-env", "2", &[("LOG", "debug")]).await;
    h.change("kube-root-ca.crt", "2", &[("ca.crt", "2")]).await;
    assert!(h.workloads.patched().is_empty());
    assert!(h.events().is_empty());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn dry_run_logs_the_patch_and_sends_nothing() {
    let (pods, workloads) = three_pods_of_web();
    let h = start(objects(), workloads, FakePatcher::default(), true);
    h.list(pods).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    assert!(h.workloads.patched().is_empty());
    assert!(h.events().is_empty());
    assert!(h.patcher.rollout_baselines().is_empty());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_patch_is_retried_then_warned_about() {
    let (pods, workloads) = three_pods_of_web();
    workloads.fail.lock().unwrap().extend([
        PatchError::Other("etcd timeout".into()),
        PatchError::Forbidden("denied by ValidatingAdmissionPolicy".into()),
    ]);
    let h = start(objects(), workloads, FakePatcher::default(), false);
    h.list(pods).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    // One retry after the 5xx-like error, none after the 403.
    assert_eq!(h.workloads.patched().len(), 2);
    let events = h.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].1, "RolloutFailed");
    assert!(events[0].2.contains("denied by ValidatingAdmissionPolicy"));
    h.stop().await;
}

/// An `action: evict` pod of Deployment `name` with `on-blocked: rollout` after `timeout`.
fn blocked_pod(name: &str, timeout: Option<&str>) -> PodInfo {
    let mut p = with(pod(name), "reloadlet.io/action", "evict");
    p.annotations
        .insert("reloadlet.io/on-blocked".into(), "rollout".into());
    if let Some(t) = timeout {
        p.annotations
            .insert("reloadlet.io/blocked-timeout".into(), t.into());
    }
    p
}

#[tokio::test(start_paused = true)]
async fn on_blocked_rollout_rolls_the_owner_only_when_the_pod_outlives_its_timeout() {
    let workloads = Arc::new(FakeWorkloads::default());
    for (p, d) in [
        ("stuck", "a"),
        ("evicted", "b"),
        ("plain", "c"),
        ("bad", "d"),
    ] {
        workloads.deployment_pod(NS, p, d, Strategy::deployment_default(1));
    }
    let stuck = blocked_pod("stuck", Some("1m"));
    let evicted = blocked_pod("evicted", None);
    // action evict without on-blocked, and with an unknown value: never rolled.
    let plain = with(pod("plain"), "reloadlet.io/action", "evict");
    let bad = with(
        blocked_pod("bad", None),
        "reloadlet.io/on-blocked",
        "escalate",
    );
    let h = start(objects(), workloads, FakePatcher::default(), false);
    h.list(vec![stuck, evicted.clone(), plain, bad]).await;
    h.change("cfg", "2", &[("app.conf", "v2")]).await;
    // The agent's eviction of "evicted" succeeded: the pod is gone.
    h.tx.send(Input::PodDeleted {
        uid: evicted.uid.clone(),
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(50)).await;
    assert!(h.workloads.patched().is_empty(), "not before the timeout");
    tokio::time::sleep(Duration::from_secs(15)).await;
    let patched = h.workloads.patched();
    assert_eq!(patched.len(), 1, "{patched:?}");
    assert_eq!(patched[0].0, deployment("a"));
    // The default timeout (10 m) of the evicted pod passes: nothing more (it is gone).
    tokio::time::sleep(Duration::from_secs(11 * 60)).await;
    assert_eq!(h.workloads.patched().len(), 1);
    let events = h.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0].0.as_str(), events[0].1),
        ("Deployment a", "RolloutRequested")
    );
    // Regarding the workload, with its apiVersion and UID.
    let about = h.events.1.lock().unwrap()[0].0.clone();
    assert_eq!(
        (
            about.api_version.as_str(),
            about.uid.as_str(),
            about.namespace.as_str()
        ),
        ("apps/v1", "uid-a", NS)
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_secret_rolls_nothing_without_secrets() {
    let workloads = Arc::new(FakeWorkloads::default());
    workloads.deployment_pod(NS, "web", "web", Strategy::deployment_default(1));
    let mut p = pod("web");
    p.env.clear();
    p.volumes[0].sources = vec![SourceRef {
        kind: SourceKind::Secret,
        name: "creds".into(),
    }];
    let secret = ObjectKey {
        kind: SourceKind::Secret,
        namespace: NS.into(),
        name: "creds".into(),
    };
    let api = objects();
    api.objects
        .lock()
        .unwrap()
        .insert(secret.clone(), data(&[("password", "a")]));
    // `start` runs the feature without --secrets.
    let h = start(api, workloads, FakePatcher::default(), false);
    h.list(vec![p]).await;
    h.api
        .objects
        .lock()
        .unwrap()
        .insert(secret.clone(), data(&[("password", "b")]));
    h.tx.send(Input::Object {
        key: secret.clone(),
        resource_version: "2".into(),
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(h.workloads.patched().is_empty());
    assert!(
        h.api
            .reads
            .lock()
            .unwrap()
            .iter()
            .all(|k| k.kind != SourceKind::Secret),
        "a Secret was read without --secrets"
    );
    h.stop().await;
}

mod blocked;
mod pacing;
mod recorded;

/// Issue #43 §2, a tenant who can patch pods but not Deployments: `action: rollout` written
/// on running pods of a Deployment whose template never asked, and a bare pod whose owner
/// reference names another Deployment's ReplicaSet with a made-up UID. Neither Deployment is
/// patched; each pod gets a Warning `RolloutNotGranted` saying why. Positive control: a
/// Deployment whose template asks is rolled by the same change.
#[tokio::test(start_paused = true)]
async fn a_pod_cannot_grant_itself_a_rollout_of_its_workload() {
    let workloads = Arc::new(FakeWorkloads::default());
    let asked = ["api-a"].map(pod);
    let edited = ["web-a", "web-b"].map(pod);
    workloads.deployment_pod(NS, "api-a", "api", Strategy::deployment_default(1));
    for p in &edited {
        workloads.deployment_pod(NS, &p.name, "web", Strategy::deployment_default(2));
    }
    // The forger: a bare pod claiming web's ReplicaSet, UID made up.
    let forger = pod("forger");
    workloads.pod_owners.lock().unwrap().insert(
        (NS.into(), "forger".into()),
        crate::core::rollout::OwnerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "web-rs".into(),
            uid: "made-up".into(),
        },
    );
    let h = start(objects(), workloads, FakePatcher::default(), false);
    let mut pods: Vec<PodInfo> = asked.into_iter().chain(edited).collect();
    pods.push(forger);
    h.list(pods).await;
    // web's template never asked: the pods' annotation was written on the pods alone.
    h.workloads
        .templates
        .lock()
        .unwrap()
        .insert(deployment("web"), Default::default());

    h.change("cfg", "3", &[("app.conf", "v2")]).await;
    let patched: Vec<WorkloadRef> = h.workloads.patched().into_iter().map(|(w, _)| w).collect();
    assert_eq!(
        patched,
        [deployment("api")],
        "only the Deployment that asked"
    );
    let events = h.events();
    let refused = |name: &str| {
        events
            .iter()
            .find(|(n, reason, _)| n == name && *reason == "RolloutNotGranted")
            .map(|(_, _, note)| note.clone())
            .unwrap_or_else(|| panic!("no RolloutNotGranted on {name}: {events:?}"))
    };
    for name in ["web-a", "web-b"] {
        assert!(
            refused(name).contains("reloadlet.io/action is \"rollout\" on the pod but absent in Deployment web's pod template"),
            "{}",
            refused(name)
        );
    }
    assert!(
        refused("forger").contains("names ReplicaSet web-rs with UID \"made-up\""),
        "{}",
        refused("forger")
    );
    // Each refused pod's record says so (`reloadlet status`: failed, with the reason); the pod
    // of the Deployment that asked reads the rollout in progress.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let records = recorded::last_entries(&h);
    for name in ["web-a", "web-b", "forger"] {
        let e = &records[name];
        assert_eq!(
            e.result,
            crate::core::status::applied::Recorded::Failed,
            "{e:?}"
        );
        assert!(
            e.error
                .as_deref()
                .is_some_and(|m| m.contains("nothing rolled")),
            "{e:?}"
        );
    }
    assert_eq!(
        records["api-a"].result,
        crate::core::status::applied::Recorded::RolloutRequested
    );
    // Told once: the change is done with for the refused pods, not retried.
    h.change("app-env", "3", &[("LOG", "info"), ("PORT", "81")])
        .await;
    assert_eq!(h.workloads.patched().len(), 1);
    h.stop().await;
}
