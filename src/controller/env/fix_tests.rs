//! An env eviction refused for an invalid pacing annotation is acted on as soon as the
//! annotation is fixed (issue #28: "no action on that pod until it is fixed"), in the real
//! controller loop with fakes of every edge and a paused clock.

use super::*;
use crate::controller::api::Input;
use crate::controller::fake::{FakeEnvApi, FakePatcher};
use crate::controller::metrics::ControllerMetrics;
use crate::controller::router::Controller;
use crate::core::annotations::ENV_BASELINE;
use crate::core::filters::NamespaceFilter;
use crate::core::model::{ContainerInfo, ContainerKind, EnvKeys, EnvRef, SourceRef};
use crate::execute::evict::EvictionSettings;
use crate::execute::patch::PatchSettings;
use crate::outbound::notify::Notifier;
use crate::ports::fake;
use crate::serve::health::Health;
use prometheus_client::registry::Registry;

const NS: &str = "ns";

fn key() -> ObjectKey {
    ObjectKey {
        kind: SourceKind::ConfigMap,
        namespace: NS.into(),
        name: "app-env".into(),
    }
}

fn data(log: &str) -> ObjectData {
    ObjectData {
        text: [("LOG".to_string(), log.to_string())].into(),
        ..ObjectData::default()
    }
}

/// A running `action: evict` pod reading key `LOG` of `app-env` through env, with the pacing
/// annotation `reloadlet.io/min-interval: <min_interval>`.
fn env_pod(name: &str, min_interval: &str) -> PodInfo {
    PodInfo {
        uid: format!("uid-{name}"),
        namespace: NS.into(),
        name: name.into(),
        annotations: [
            ("reloadlet.io/action".to_string(), "evict".to_string()),
            ("reloadlet.io/min-interval".to_string(), min_interval.into()),
        ]
        .into(),
        containers: vec![ContainerInfo {
            name: "app".into(),
            kind: ContainerKind::Regular,
            mounts: Vec::new(),
            container_id: None,
            running: true,
            ports: Vec::new(),
        }],
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
        phase: "Running".into(),
        ..PodInfo::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_env_eviction_runs_once_when_the_pacing_annotation_is_fixed() {
    let patcher = FakePatcher::default();
    let api = Arc::new(FakeEnvApi::default());
    api.objects.lock().unwrap().insert(key(), data("info"));
    let events = Arc::new(fake::Events::default());
    let evictor = Arc::new(fake::Evictor::default());
    let metrics = crate::serve::metrics::Metrics::new(&mut Registry::default());
    let reporter = Reporter::new(
        events.clone(),
        Notifier::disabled(),
        metrics,
        false,
        "controller-0".into(),
    );
    let stop = CancellationToken::new();
    let index = Arc::new(RwLock::new(PodIndex::default()));
    let feature = EnvConsumers::new(EnvDeps {
        api: api.clone(),
        evictions: Evictions::new(
            EvictionSettings::default(),
            evictor.clone(),
            reporter.clone(),
            index.clone(),
            stop.clone(),
        ),
        index,
        baselines: Patches::new(
            PatchSettings::baselines(),
            Arc::new(patcher.clone()),
            reporter.clone(),
            stop.clone(),
        ),
        reporter,
        configmaps: true,
        secrets: false,
        stop: stop.clone(),
        pacing: Default::default(),
    });
    let controller = Controller::new(
        NamespaceFilter::default(),
        true,
        ControllerMetrics::new(&mut Registry::default()),
        Arc::new(Health::default()),
    )
    .with(Box::new(feature));
    let (tx, rx) = mpsc::channel(64);
    let task = tokio::spawn(controller.run(rx, stop.clone()));

    // Two pods reading the same key: one with a bad annotation, one without trouble.
    let bad = env_pod("bad", "banana");
    let good = env_pod("good", "0s");
    for p in [&bad, &good] {
        patcher.put(p.clone());
    }
    tx.send(Input::PodsListed(vec![bad.clone(), good.clone()]))
        .await
        .unwrap();
    tx.send(Input::ObjectsListed {
        kind: SourceKind::ConfigMap,
        objects: vec![(key(), "1".into())],
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(events.reasons(), ["InvalidAnnotation"]);

    // The key changes: the good pod is evicted, the bad one refused.
    api.objects.lock().unwrap().insert(key(), data("debug"));
    tx.send(Input::Object {
        key: key(),
        resource_version: "2".into(),
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let evicted = |e: &fake::Evictor| -> Vec<String> {
        e.calls
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.name.clone())
            .collect()
    };
    assert_eq!(evicted(&evictor), ["good"]);
    let reads = api.reads.lock().unwrap().len();

    // The annotation is fixed (as the API holds the pod now: its baseline never moved): the
    // change is found again and the pod evicted once; the other pod is not evicted again.
    let mut fixed = bad.clone();
    fixed
        .annotations
        .insert("reloadlet.io/min-interval".into(), "1m".into());
    let written = patcher.baseline_writes();
    let (_, _, baseline) = written.iter().rev().find(|(_, n, _)| n == "bad").unwrap();
    fixed
        .annotations
        .insert(ENV_BASELINE.into(), baseline.clone());
    tx.send(Input::PodApplied(fixed.clone())).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(evicted(&evictor), ["good", "bad"]);
    assert_eq!(api.reads.lock().unwrap().len(), reads + 1, "one GET");
    // Seen again unchanged: nothing more.
    tx.send(Input::PodApplied(fixed)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(evicted(&evictor), ["good", "bad"]);
    assert_eq!(
        events.reasons(),
        [
            "InvalidAnnotation",
            "EvictionRequested",
            "EvictionRequested"
        ]
    );
    stop.cancel();
    task.await.unwrap();
}

/// A held env eviction is found again when the replica that held it loses and regains the
/// leadership (its baseline never moved; the tracker forgets it had asked for it).
#[tokio::test(start_paused = true)]
async fn a_held_env_eviction_is_found_again_after_leadership_is_lost_and_regained() {
    let patcher = FakePatcher::default();
    let api = Arc::new(FakeEnvApi::default());
    api.objects.lock().unwrap().insert(key(), data("info"));
    let events = Arc::new(fake::Events::default());
    let evictor = Arc::new(fake::Evictor::default());
    let metrics = crate::serve::metrics::Metrics::new(&mut Registry::default());
    let reporter = Reporter::new(
        events.clone(),
        Notifier::disabled(),
        metrics,
        false,
        "controller-0".into(),
    );
    let stop = CancellationToken::new();
    let index = Arc::new(RwLock::new(PodIndex::default()));
    let feature = EnvConsumers::new(EnvDeps {
        api: api.clone(),
        evictions: Evictions::new(
            EvictionSettings::default(),
            evictor.clone(),
            reporter.clone(),
            index.clone(),
            stop.clone(),
        ),
        index,
        baselines: Patches::new(
            PatchSettings::baselines(),
            Arc::new(patcher.clone()),
            reporter.clone(),
            stop.clone(),
        ),
        reporter,
        configmaps: true,
        secrets: false,
        stop: stop.clone(),
        pacing: Default::default(),
    });
    let controller = Controller::new(
        NamespaceFilter::default(),
        true,
        ControllerMetrics::new(&mut Registry::default()),
        Arc::new(Health::default()),
    )
    .with(Box::new(feature));
    let (tx, rx) = mpsc::channel(64);
    let task = tokio::spawn(controller.run(rx, stop.clone()));

    // A maintenance window at 03:00 for one hour: the eviction waits for it.
    let mut held = env_pod("held", "0s");
    held.annotations
        .insert("reloadlet.io/window".into(), "0 3 * * *".into());
    held.annotations
        .insert("reloadlet.io/window-duration".into(), "1m".into());
    patcher.put(held.clone());
    tx.send(Input::PodsListed(vec![held.clone()]))
        .await
        .unwrap();
    tx.send(Input::ObjectsListed {
        kind: SourceKind::ConfigMap,
        objects: vec![(key(), "1".into())],
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    api.objects.lock().unwrap().insert(key(), data("debug"));
    tx.send(Input::Object {
        key: key(),
        resource_version: "2".into(),
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(events.reasons(), ["ReloadDeferred"]);

    // Another replica leads for a while, then this one again: the change is held again and
    // the pod evicted once, when the window opens (within a day).
    tx.send(Input::Leader(false)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    tx.send(Input::Leader(true)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        evictor.calls.lock().unwrap().is_empty(),
        "nothing evicted outside the window"
    );
    tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
    let evicted: Vec<String> = evictor
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.name.clone())
        .collect();
    assert_eq!(evicted, ["held"], "evicted once, in the window");
    stop.cancel();
    task.await.unwrap();
}
