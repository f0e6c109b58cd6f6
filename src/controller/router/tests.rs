//! The controller loop (the real `run`, its features and the executor) with fakes of every
//! edge and a paused clock.

use super::*;
use crate::controller::env::{EnvConsumers, EnvDeps};
use crate::controller::fake::FakePatcher;
use crate::controller::nudge::Nudges;
use crate::core::model::{ContainerInfo, ContainerKind, SourceRef, VolumeMount, VolumeSpec};
use crate::core::outcome::Outcome;
use crate::core::pod_index::PodIndex;
use crate::execute::evict::Evictions;
use crate::execute::patch::{PatchSettings, Patches};
use crate::execute::report::Reporter;
use crate::outbound::notify::Notifier;
use crate::ports::fake;
use crate::ports::ObjectData;
use crate::ports::ObjectKey;
use crate::ports::PatchError;
use prometheus_client::registry::Registry;
use std::sync::RwLock;

const NS: &str = "ns";

pub(super) fn cm_key(name: &str) -> ObjectKey {
    ObjectKey {
        kind: SourceKind::ConfigMap,
        namespace: NS.into(),
        name: name.into(),
    }
}

/// An opted-in running pod mounting configMap `cfg` in volume `v` (through subPath if asked).
pub(super) fn pod(name: &str, sub_path: bool) -> PodInfo {
    PodInfo {
        uid: format!("uid-{name}"),
        namespace: NS.into(),
        name: name.into(),
        annotations: [("reloadlet.io/action".to_string(), "signal".to_string())].into(),
        volumes: vec![VolumeSpec {
            name: "v".into(),
            sources: vec![SourceRef {
                kind: SourceKind::ConfigMap,
                name: "cfg".into(),
            }],
            service_account_token: false,
            source_paths: Vec::new(),
            source_keys: Vec::new(),
            source_items: Vec::new(),
            other_paths: Vec::new(),
            csi: None,
        }],
        containers: vec![ContainerInfo {
            name: "app".into(),
            kind: ContainerKind::Regular,
            mounts: vec![VolumeMount {
                volume: "v".into(),
                sub_path,
            }],
            container_id: None,
            running: true,
            ports: Vec::new(),
        }],
        phase: "Running".into(),
        ..PodInfo::default()
    }
}

/// A pod that uses `cfg` only through env (no volume).
fn env_only_pod(name: &str) -> PodInfo {
    PodInfo {
        volumes: vec![],
        containers: vec![ContainerInfo {
            mounts: vec![],
            ..pod(name, false).containers[0].clone()
        }],
        ..pod(name, false)
    }
}

struct Harness {
    tx: mpsc::Sender<Input>,
    patcher: FakePatcher,
    metrics: ControllerMetrics,
    health: Arc<Health>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

use crate::controller::fake::reporter;

/// The nudge feature over `patcher`, through the executor.
pub(super) fn nudges(
    patcher: &FakePatcher,
    report: &Reporter,
    metrics: &ControllerMetrics,
) -> Nudges {
    let patches = Patches::new(
        PatchSettings::nudges(),
        Arc::new(patcher.clone()),
        report.clone(),
        CancellationToken::new(),
    );
    Nudges::new(false, 20, patches, metrics.clone())
}

fn start(leader: bool, pods: Vec<PodInfo>, patcher: FakePatcher) -> Harness {
    start_in(leader, pods, patcher, NamespaceFilter::default())
}

fn start_in(
    leader: bool,
    pods: Vec<PodInfo>,
    patcher: FakePatcher,
    filter: NamespaceFilter,
) -> Harness {
    for p in &pods {
        patcher.put(p.clone());
    }
    let metrics = ControllerMetrics::new(&mut Registry::default());
    let health = Arc::new(Health::default());
    let report = reporter(Arc::default(), Notifier::disabled(), false);
    let controller = Controller::new(filter, leader, metrics.clone(), health.clone())
        .with(Box::new(nudges(&patcher, &report, &metrics)));
    let (tx, rx) = mpsc::channel(64);
    let stop = CancellationToken::new();
    let task = tokio::spawn(controller.run(rx, stop.clone()));
    Harness {
        tx,
        patcher,
        metrics,
        health,
        stop,
        task,
    }
}

impl Harness {
    async fn send(&self, input: Input) {
        self.tx.send(input).await.unwrap();
    }
    async fn list(&self, pods: Vec<PodInfo>, cfg_rv: &str) {
        self.send(Input::PodsListed(pods)).await;
        self.send(Input::ObjectsListed {
            kind: SourceKind::ConfigMap,
            objects: vec![
                (cm_key("cfg"), cfg_rv.into()),
                (cm_key("other"), "1".into()),
            ],
        })
        .await;
    }
    async fn update(&self, name: &str, rv: &str) {
        self.send(Input::Object {
            key: cm_key(name),
            resource_version: rv.into(),
        })
        .await;
    }
    fn values(&self) -> Vec<String> {
        self.patcher
            .patches()
            .into_iter()
            .map(|(_, n, v)| format!("{n}={v}"))
            .collect()
    }
    /// Lets the loop run for `d` of virtual time.
    async fn run_for(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }
    async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_change_nudges_only_qualifying_pods_at_once_then_after_1s_and_3s() {
    let pods = vec![pod("web", false), pod("subpath", true), env_only_pod("env")];
    let h = start(true, pods.clone(), FakePatcher::default());
    h.list(pods, "10").await;
    h.run_for(Duration::from_secs(5)).await;
    assert!(h.health.is_ready());
    assert_eq!(
        h.values(),
        Vec::<String>::new(),
        "first sight is a baseline"
    );

    h.update("cfg", "11").await;
    h.run_for(Duration::from_millis(10)).await;
    assert_eq!(h.values(), ["web=configmap/cfg@11"]);
    h.run_for(Duration::from_secs(5)).await;
    assert_eq!(
        h.values(),
        [
            "web=configmap/cfg@11",
            "web=configmap/cfg@11#2",
            "web=configmap/cfg@11#3"
        ]
    );
    assert_eq!(h.metrics.get(SourceKind::ConfigMap, Outcome::Patched), 3);
    // The same version again (a resync) and an unrelated object: nothing.
    h.update("cfg", "11").await;
    h.update("unrelated", "5").await;
    h.run_for(Duration::from_secs(5)).await;
    assert_eq!(h.values().len(), 3);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn restart_and_failover_nudge_nothing_by_themselves() {
    let patcher = FakePatcher::default();
    // A follower sees a change: it only moves its baseline.
    let h = start(false, vec![pod("web", false)], patcher.clone());
    h.list(vec![pod("web", false)], "10").await;
    h.update("cfg", "11").await;
    h.run_for(Duration::from_secs(5)).await;
    // Becoming the leader does not replay it.
    h.send(Input::Leader(true)).await;
    h.run_for(Duration::from_secs(5)).await;
    assert_eq!(h.values(), Vec::<String>::new());
    assert_eq!(h.metrics.leader.get(), 1);
    // The next change is nudged.
    h.update("cfg", "12").await;
    h.run_for(Duration::from_millis(10)).await;
    assert_eq!(h.values(), ["web=configmap/cfg@12"]);
    // Losing leadership drops the pending re-nudges.
    h.send(Input::Leader(false)).await;
    h.run_for(Duration::from_secs(5)).await;
    assert_eq!(h.values(), ["web=configmap/cfg@12"]);
    h.stop().await;

    // A restarted controller lists a version it never saw: a baseline.
    let h = start(true, vec![pod("web", false)], patcher);
    h.list(vec![pod("web", false)], "13").await;
    h.run_for(Duration::from_secs(5)).await;
    assert_eq!(h.values(), ["web=configmap/cfg@12"]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn forbidden_is_one_request_per_pod_and_no_retries() {
    let patcher = FakePatcher::default();
    patcher.fail_always(PatchError::Forbidden("pods is forbidden".into()));
    let pods = vec![pod("a", false), pod("b", false)];
    let h = start(true, pods.clone(), patcher);
    h.list(pods, "1").await;
    h.update("cfg", "2").await;
    h.run_for(Duration::from_secs(30)).await;
    assert_eq!(h.patcher.patches().len(), 2, "{:?}", h.values());
    assert_eq!(h.patcher.gets(), 0);
    assert_eq!(
        h.metrics
            .get(SourceKind::ConfigMap, Outcome::PatchForbidden),
        2
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn not_found_and_conflict_are_re_read_and_retried_once() {
    let patcher = FakePatcher::default();
    let h = start(
        true,
        vec![pod("web", false), pod("gone", false)],
        patcher.clone(),
    );
    h.list(vec![pod("web", false), pod("gone", false)], "1")
        .await;
    h.run_for(Duration::from_millis(10)).await;
    // "gone" was deleted from the API before the watch said so; "web" conflicts once.
    patcher.remove(NS, "gone");
    patcher.fail_next([PatchError::NotFound, PatchError::Conflict("busy".into())]);
    h.update("cfg", "2").await;
    h.run_for(Duration::from_secs(10)).await;
    let gone: Vec<_> = h
        .values()
        .into_iter()
        .filter(|v| v.starts_with("gone="))
        .collect();
    let web: Vec<_> = h
        .values()
        .into_iter()
        .filter(|v| v.starts_with("web="))
        .collect();
    // "gone" (first in order) got the 404: re-read, absent, never tried again.
    assert_eq!(gone, ["gone=configmap/cfg@2"]);
    // "web" got the 409: re-read, retried at once, then its re-nudges.
    assert_eq!(
        web,
        [
            "web=configmap/cfg@2",
            "web=configmap/cfg@2",
            "web=configmap/cfg@2#2",
            "web=configmap/cfg@2#3"
        ]
    );
    assert_eq!(h.patcher.gets(), 2);
    assert_eq!(h.metrics.get(SourceKind::ConfigMap, Outcome::PodGone), 1);
    assert_eq!(h.metrics.get(SourceKind::ConfigMap, Outcome::Patched), 3);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_pod_that_stops_qualifying_loses_its_pending_nudges() {
    let h = start(true, vec![pod("web", false)], FakePatcher::default());
    h.list(vec![pod("web", false)], "1").await;
    h.update("cfg", "2").await;
    h.run_for(Duration::from_millis(10)).await;
    let mut terminating = pod("web", false);
    terminating.terminating = true;
    h.send(Input::PodApplied(terminating)).await;
    h.run_for(Duration::from_secs(5)).await;
    assert_eq!(h.values(), ["web=configmap/cfg@2"]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_change_seen_before_the_pod_list_still_finds_its_pods() {
    let h = start(true, vec![pod("web", false)], FakePatcher::default());
    // ConfigMaps list and change before the pods are listed.
    h.send(Input::ObjectsListed {
        kind: SourceKind::ConfigMap,
        objects: vec![(cm_key("cfg"), "1".into())],
    })
    .await;
    h.update("cfg", "2").await;
    h.run_for(Duration::from_millis(10)).await;
    assert!(!h.health.is_ready());
    h.send(Input::PodsListed(vec![pod("web", false)])).await;
    h.run_for(Duration::from_millis(10)).await;
    assert!(h.health.is_ready());
    assert_eq!(h.values(), ["web=configmap/cfg@2"]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_namespace_filter_keeps_pods_and_objects_out_where_they_enter() {
    let outside = PodInfo {
        uid: "uid-outside".into(),
        namespace: "other".into(),
        ..pod("outside", false)
    };
    let filter = crate::config::scope::namespace_filter(&[], &["other".to_string()]);
    let pods = vec![pod("web", false), outside.clone()];
    let h = start_in(true, pods.clone(), FakePatcher::default(), filter);
    h.send(Input::PodsListed(pods)).await;
    let other_cfg = ObjectKey {
        namespace: "other".into(),
        ..cm_key("cfg")
    };
    h.send(Input::ObjectsListed {
        kind: SourceKind::ConfigMap,
        objects: vec![(cm_key("cfg"), "1".into()), (other_cfg.clone(), "1".into())],
    })
    .await;
    h.run_for(Duration::from_millis(10)).await;
    assert_eq!(h.metrics.watched_pods.get(), 1);
    assert_eq!(h.metrics.watched_objects.get(), 1);
    // A change outside: nothing; the pod outside updated: still not followed.
    h.send(Input::Object {
        key: other_cfg,
        resource_version: "2".into(),
    })
    .await;
    h.send(Input::PodApplied(outside)).await;
    h.run_for(Duration::from_secs(5)).await;
    assert_eq!(h.values(), Vec::<String>::new());
    assert_eq!(h.metrics.watched_pods.get(), 1);
    h.update("cfg", "2").await;
    h.run_for(Duration::from_millis(10)).await;
    assert_eq!(h.values(), ["web=configmap/cfg@2"]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn under_dry_run_the_real_loop_counts_nudges_and_patches_nothing() {
    let patcher = FakePatcher::default();
    patcher.put(pod("web", false));
    let metrics = ControllerMetrics::new(&mut Registry::default());
    let report = reporter(Arc::default(), Notifier::disabled(), true);
    let controller = Controller::new(
        NamespaceFilter::default(),
        true,
        metrics.clone(),
        Arc::new(Health::default()),
    )
    .with(Box::new(nudges(&patcher, &report, &metrics)));
    let (tx, rx) = mpsc::channel(64);
    let stop = CancellationToken::new();
    let task = tokio::spawn(controller.run(rx, stop.clone()));
    tx.send(Input::PodsListed(vec![pod("web", false)]))
        .await
        .unwrap();
    tx.send(Input::ObjectsListed {
        kind: SourceKind::ConfigMap,
        objects: vec![(cm_key("cfg"), "1".into())],
    })
    .await
    .unwrap();
    tx.send(Input::Object {
        key: cm_key("cfg"),
        resource_version: "2".into(),
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(patcher.patches().is_empty());
    assert_eq!(patcher.gets(), 0);
    // The nudge and its two re-nudges, each a dry run.
    assert_eq!(metrics.get(SourceKind::ConfigMap, Outcome::DryRun), 3);
    assert_eq!(metrics.get(SourceKind::ConfigMap, Outcome::Patched), 0);
    stop.cancel();
    task.await.unwrap();
}

/// The env consumers and notifications in the loop, with fakes of every edge.
mod env_consumers {
    use super::*;
    use crate::controller::fake::FakeEnvApi;
    use crate::core::model::{EnvKeys, EnvRef};
    use crate::execute::evict::EvictionSettings;
    use crate::outbound::notify::{FakePoster, NotifySettings, SecretUrl};

    fn env_pod(name: &str, action: &str) -> PodInfo {
        PodInfo {
            env: vec![EnvRef {
                source: SourceRef {
                    kind: SourceKind::ConfigMap,
                    name: "app-env".into(),
                },
                keys: EnvKeys::Key("LOG".into()),
                optional: false,
                container: "app".into(),
            }],
            has_controller: true,
            annotations: [("reloadlet.io/action".to_string(), action.to_string())].into(),
            ..env_only_pod(name)
        }
    }

    fn data(log: &str) -> ObjectData {
        ObjectData::of(&[("LOG", log)], &[])
    }

    /// The nudge and env features over the fakes, through the executor.
    fn env_controller(
        patcher: &FakePatcher,
        api: &Arc<FakeEnvApi>,
        evictor: Arc<fake::Evictor>,
        reporter: Reporter,
        stop: &CancellationToken,
    ) -> Controller {
        let metrics = ControllerMetrics::new(&mut Registry::default());
        let index = Arc::new(RwLock::new(PodIndex::default()));
        let evictions = Evictions::new(
            EvictionSettings::default(),
            evictor,
            reporter.clone(),
            index.clone(),
            stop.clone(),
        );
        let baselines = Patches::new(
            PatchSettings::baselines(),
            Arc::new(patcher.clone()),
            reporter.clone(),
            stop.clone(),
        );
        let nudges = nudges(patcher, &reporter, &metrics);
        Controller::new(
            NamespaceFilter::default(),
            true,
            metrics,
            Arc::new(Health::default()),
        )
        .with(Box::new(nudges))
        .with(Box::new(EnvConsumers::new(EnvDeps {
            api: api.clone(),
            evictions,
            index,
            baselines,
            reporter,
            configmaps: true,
            secrets: false,
            stop: stop.clone(),
            pacing: Default::default(),
            key: crate::core::volume_digest::HashKey::from_bytes([7; 32]),
            versions: Default::default(),
        })))
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_key_change_evicts_the_evict_pod_warns_the_signal_pod_and_notifies() {
        let patcher = FakePatcher::default();
        let pods = vec![
            env_pod("evictme", "evict"),
            env_pod("warnme", "signal"),
            pod("web", false),
        ];
        for p in &pods {
            patcher.put(p.clone());
        }
        let api = Arc::new(FakeEnvApi::default());
        api.objects
            .lock()
            .unwrap()
            .insert(cm_key("app-env"), data("info"));
        let events = Arc::new(fake::Events::default());
        let evictor = Arc::new(fake::Evictor::default());
        let poster = FakePoster::default();
        let mut registry = Registry::default();
        let notifier = Notifier::start(
            &NotifySettings {
                urls: vec![SecretUrl::parse("https://hooks.example.com/x").unwrap()],
                ..Default::default()
            },
            poster.clone(),
            crate::outbound::notify::NotifyMetrics::new(&mut registry),
            CancellationToken::new(),
        );
        let reporter = reporter(events.clone(), notifier, false);
        let stop = CancellationToken::new();
        let controller = env_controller(&patcher, &api, evictor.clone(), reporter, &stop);
        let (tx, rx) = mpsc::channel(64);
        let task = tokio::spawn(controller.run(rx, stop.clone()));
        tx.send(Input::PodsListed(pods)).await.unwrap();
        tx.send(Input::ObjectsListed {
            kind: SourceKind::ConfigMap,
            objects: vec![(cm_key("app-env"), "1".into()), (cm_key("cfg"), "1".into())],
        })
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        // First sight: baselines written, nothing done; only the read object was read.
        assert_eq!(patcher.baseline_writes().len(), 2);
        assert!(api
            .reads
            .lock()
            .unwrap()
            .iter()
            .all(|k| k.name == "app-env"));
        assert_eq!(evictor.calls(), 0);
        assert!(events.reasons().is_empty());

        // A metadata-only edit: read again, nothing done.
        tx.send(Input::Object {
            key: cm_key("app-env"),
            resource_version: "2".into(),
        })
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(evictor.calls(), 0);

        api.objects
            .lock()
            .unwrap()
            .insert(cm_key("app-env"), data("debug"));
        tx.send(Input::Object {
            key: cm_key("app-env"),
            resource_version: "3".into(),
        })
        .await
        .unwrap();
        // And a nudge that fails.
        patcher.fail_always(PatchError::Other("API unavailable".into()));
        tx.send(Input::Object {
            key: cm_key("cfg"),
            resource_version: "2".into(),
        })
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let calls: Vec<String> = evictor
            .calls
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.name.clone())
            .collect();
        assert_eq!(calls, ["evictme"]);
        let recorded = events.0.lock().unwrap().clone();
        let by_pod: Vec<(String, &str)> = recorded
            .iter()
            .map(|(p, e)| (p.name.clone(), e.reason))
            .collect();
        assert_eq!(
            by_pod,
            [
                ("warnme".to_string(), "EnvNotReloaded"),
                ("evictme".to_string(), "EvictionRequested")
            ]
        );
        assert!(recorded[1]
            .1
            .note
            .contains("configmap app-env (env) changed"));
        // The acknowledged warning rewrote the signal pod's baseline (so it is not repeated).
        assert_eq!(patcher.baseline_writes().len(), 3);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while poster.requests().len() < 2 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let bodies: Vec<String> = poster
            .requests()
            .iter()
            .map(|r| format!("{:?}", r.payload))
            .collect();
        assert!(
            bodies
                .iter()
                .any(|b| b.contains("EnvNotReloaded") && b.contains("warnme")),
            "{bodies:?}"
        );
        assert!(
            bodies
                .iter()
                .any(|b| b.contains("NudgeFailed") && b.contains("web")),
            "{bodies:?}"
        );
        stop.cancel();
        task.await.unwrap();
    }
}
