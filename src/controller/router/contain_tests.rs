//! Failure containment in the controller's loop (`crate::contain`, issue #43 §1): a feature
//! that panics on one pod, one ConfigMap or in its own wake (a fault injected through a test
//! feature) beside the real nudge feature, under a paused clock. The other pod is still
//! nudged, each panic is counted, a pod's is told as a Warning `InternalError`, the loop and
//! `/readyz` go on, and the same input is not handled again until it changes.

use super::tests::{cm_key, nudges, pod};
use super::*;
use crate::controller::fake::{reporter, FakePatcher};
use crate::outbound::notify::Notifier;
use crate::ports::fake;
use futures::future::BoxFuture;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// What the faulty feature heard, and its faults: it panics on pod `poison` (unless the pod
/// has the label `fixed`), on ConfigMap `bad`, and in `wake` once when asked.
#[derive(Clone, Default)]
struct Faults {
    pods_put: Arc<Mutex<Vec<String>>>,
    objects: Arc<Mutex<Vec<String>>>,
    panic_in_wake: Arc<AtomicBool>,
}

struct Faulty(Faults);

impl Feature for Faulty {
    fn name(&self) -> &'static str {
        "faulty"
    }
    fn kinds(&self) -> Vec<SourceKind> {
        Vec::new()
    }
    fn route(&mut self, event: Routed<'_>, _world: &World) {
        match event {
            Routed::PodPut(p) => {
                self.0.pods_put.lock().unwrap().push(p.name.clone());
                if p.name == "poison" && !p.labels.contains_key("fixed") {
                    panic!("injected: cannot handle pod {}", p.name);
                }
            }
            Routed::Object {
                key,
                resource_version: Some(rv),
            } => {
                self.0
                    .objects
                    .lock()
                    .unwrap()
                    .push(format!("{}@{rv}", key.name));
                if key.name == "bad" {
                    panic!("injected: cannot handle configmap {}", key.name);
                }
            }
            _ => {}
        }
    }
    fn wake<'a>(&'a mut self, _world: &'a World) -> BoxFuture<'a, ()> {
        let fault = self.0.panic_in_wake.clone();
        Box::pin(async move {
            if fault.swap(false, Ordering::Relaxed) {
                panic!("injected: in wake");
            }
            std::future::pending().await
        })
    }
    fn settle(&mut self, _world: &World) {}
}

#[tokio::test(start_paused = true)]
async fn a_panicking_feature_leaves_the_other_pods_and_the_loop_alone() {
    crate::contain::install_panic_hook();
    let patcher = FakePatcher::default();
    let pods = vec![pod("web", false), pod("poison", false)];
    for p in &pods {
        patcher.put(p.clone());
    }
    let events = Arc::new(fake::Events::default());
    let report = reporter(events.clone(), Notifier::disabled(), false);
    let metrics = ControllerMetrics::new(&mut Registry::default());
    let health = Arc::new(Health::default());
    let faults = Faults::default();
    let controller = Controller::new(
        NamespaceFilter::default(),
        true,
        metrics.clone(),
        health.clone(),
    )
    .reporting(report.clone())
    .with(Box::new(nudges(&patcher, &report, &metrics)))
    .with(Box::new(Faulty(faults.clone())));
    let (tx, rx) = mpsc::channel(64);
    let stop = CancellationToken::new();
    let task = tokio::spawn(controller.run(rx, stop.clone()));
    let send = |input| {
        let tx = tx.clone();
        async move { tx.send(input).await.unwrap() }
    };
    let run_for = |d| tokio::time::sleep(d);
    let panics = |stage| {
        report
            .metrics()
            .handler_panics_series("controller", stage)
            .get()
    };
    let nudged = || {
        patcher
            .patches()
            .into_iter()
            .map(|(_, n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
    };
    let update = |name: &str, rv: &str| Input::Object {
        key: cm_key(name),
        resource_version: rv.into(),
    };
    let internal = || {
        let events = events.0.lock().unwrap();
        events
            .iter()
            .filter(|(_, e)| e.reason == "InternalError")
            .map(|(p, e)| (p.name.clone(), e.note.clone(), e.warning))
            .collect::<Vec<_>>()
    };

    send(Input::PodsListed(pods.clone())).await;
    send(Input::ObjectsListed {
        kind: SourceKind::ConfigMap,
        objects: vec![(cm_key("cfg"), "10".into())],
    })
    .await;
    run_for(Duration::from_secs(1)).await;
    assert!(health.is_ready(), "readiness is the loop's, unchanged");
    assert_eq!(panics("route"), 1);
    assert_eq!(
        internal(),
        [(
            "poison".to_string(),
            "reloadlet could not handle this pod: injected: cannot handle pod poison; \
             it is skipped until it changes"
                .to_string(),
            true
        )]
    );

    // The other pod is nudged; the poisoned one is out of the world for every feature.
    send(update("cfg", "11")).await;
    run_for(Duration::from_millis(10)).await;
    assert_eq!(nudged(), ["web=configmap/cfg@11"]);

    // The same pod again, alone or in a relist: not handed to the features again.
    send(Input::PodApplied(pod("poison", false))).await;
    send(Input::PodsListed(pods.clone())).await;
    run_for(Duration::from_secs(1)).await;
    let puts = |name: &str| {
        let puts = faults.pods_put.lock().unwrap();
        puts.iter().filter(|n| *n == name).count()
    };
    assert_eq!(puts("poison"), 1, "not retried");
    assert_eq!(puts("web"), 2, "the relist reached the other pod");
    assert_eq!(panics("route"), 1);

    // A ConfigMap whose handling panics: counted, no Event, skipped at that version only.
    send(update("bad", "1")).await;
    send(update("bad", "1")).await;
    run_for(Duration::from_secs(1)).await;
    assert_eq!(panics("route"), 2);
    send(update("bad", "2")).await;
    run_for(Duration::from_secs(1)).await;
    assert_eq!(
        *faults.objects.lock().unwrap(),
        ["cfg@11", "bad@1", "bad@2"],
        "retried only once it changed"
    );
    assert_eq!(panics("route"), 3);
    assert_eq!(internal().len(), 1, "no Event for a ConfigMap");

    // A panic in a feature's wake: the loop goes on.
    faults.panic_in_wake.store(true, Ordering::Relaxed);
    run_for(Duration::from_secs(6)).await;
    assert_eq!(panics("wake"), 1);
    assert_eq!(panics("settle"), 0);

    // The pod changes: handled again, nudged with the others.
    let mut fixed = pod("poison", false);
    fixed.labels.insert("fixed".into(), "yes".into());
    send(Input::PodApplied(fixed)).await;
    send(update("cfg", "12")).await;
    run_for(Duration::from_millis(10)).await;
    let mut latest = nudged().split_off(3);
    latest.sort();
    assert_eq!(latest, ["poison=configmap/cfg@12", "web=configmap/cfg@12"]);
    assert!(health.is_ready());

    stop.cancel();
    task.await
        .expect("the loop ended on its own, not by a panic");
}
