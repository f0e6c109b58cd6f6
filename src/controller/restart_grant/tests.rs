//! The grant feature in the real controller loop, over the fake pod edge and a paused clock:
//! which pods were granted, when, and the Warnings — as the agents would see them on the pods.

use super::*;
use crate::controller::fake::FakePatcher;
use crate::core::disruption_budgets::{Budget, BudgetStatus};
use crate::core::label_selector::LabelSelector;
use crate::core::rollout::OwnerRef;
use crate::execute::patch::PatchSettings;
use crate::outbound::notify::Notifier;
use crate::ports::{fake, Input};
use tokio_util::sync::CancellationToken;

const NS: &str = "shop";

/// A Ready `action: restart` pod of Deployment `web` (through its ReplicaSet), labelled
/// `app: web`.
fn pod(name: &str) -> PodInfo {
    PodInfo {
        uid: format!("uid-{name}"),
        namespace: NS.into(),
        name: name.into(),
        annotations: [("reloadlet.io/action".to_string(), "restart".to_string())].into(),
        labels: [("app".to_string(), "web".to_string())].into(),
        has_controller: true,
        controller: Some(Box::new(OwnerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "web-5d4f".into(),
            uid: "rs-uid".into(),
        })),
        phase: "Running".into(),
        ready: true,
        ..PodInfo::default()
    }
}

fn with(mut p: PodInfo, pairs: &[(&str, &str)]) -> PodInfo {
    for (k, v) in pairs {
        p.annotations.insert((*k).into(), (*v).into());
    }
    p
}

fn budgets(allowed: Option<i32>) -> Arc<RwLock<BudgetIndex>> {
    let mut index = BudgetIndex::default();
    let list = match allowed {
        None => vec![],
        Some(a) => vec![(NS.into(), "web".into(), budget(a))],
    };
    index.reset(list);
    Arc::new(RwLock::new(index))
}

fn budget(allowed: i32) -> Budget {
    Budget::new(
        LabelSelector::parse("app=web").ok(),
        Some(BudgetStatus {
            expected_pods: 3,
            desired_healthy: 2,
            current_healthy: 2 + allowed,
            disruptions_allowed: allowed,
        }),
    )
}

struct Harness {
    tx: mpsc::Sender<Input>,
    patcher: FakePatcher,
    events: Arc<fake::Events>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

fn start(patcher: FakePatcher, budgets: Arc<RwLock<BudgetIndex>>, dry_run: bool) -> Harness {
    start_with(patcher, budgets, dry_run, true)
}

/// [`start`]; `rolls`: the rollout feature runs.
fn start_with(
    patcher: FakePatcher,
    budgets: Arc<RwLock<BudgetIndex>>,
    dry_run: bool,
    rolls: bool,
) -> Harness {
    let events = Arc::new(fake::Events::default());
    let reporter = crate::controller::fake::reporter(events.clone(), Notifier::disabled(), dry_run);
    let stop = CancellationToken::new();
    let feature = RestartGrants::new(GrantDeps {
        patches: Patches::new(
            PatchSettings::baselines(),
            Arc::new(patcher.clone()),
            reporter.clone(),
            stop.clone(),
        ),
        reporter,
        budgets: Some(budgets),
        rolls,
    });
    let (tx, task) = crate::controller::fake::run_alone(Box::new(feature), &stop);
    Harness {
        tx,
        patcher,
        events,
        stop,
        task,
    }
}

impl Harness {
    async fn list(&self, pods: Vec<PodInfo>) {
        for p in &pods {
            self.patcher.put(p.clone());
        }
        self.tx.send(Input::PodsListed(pods)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    /// The pod changed on the API (by an agent, the kubelet): stored and watched.
    async fn apply(&self, pod: PodInfo) {
        self.patcher.put(pod.clone());
        self.tx.send(Input::PodApplied(pod)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    /// The watch brings the pod as the API holds it now (the controller's own grant).
    async fn echo(&self, name: &str) -> PodInfo {
        let p = self.patcher.stored(NS, name).unwrap();
        self.apply(p.clone()).await;
        p
    }

    fn granted(&self) -> Vec<(String, String)> {
        self.patcher
            .restart_grants()
            .into_iter()
            .map(|(_, n, v)| (n, v))
            .collect()
    }

    fn events(&self) -> Vec<(String, &'static str, bool, String)> {
        self.events
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|(p, e)| (p.name.clone(), e.reason, e.warning, e.note.clone()))
            .collect()
    }

    /// The agent of the pod's node restarted it for its grant: `restarted`, not Ready.
    async fn restarted(&self, name: &str) {
        let mut p = self.patcher.stored(NS, name).unwrap();
        let grant = p.annotations[GRANT].clone();
        p.annotations.insert(RESTARTED.into(), grant);
        p.ready = false;
        self.apply(p).await;
    }

    /// Stopped for its grant, and its container never runs again: unready, no `restarted`.
    async fn stopped(&self, name: &str) {
        let mut p = self.patcher.stored(NS, name).unwrap();
        p.ready = false;
        self.apply(p).await;
    }

    async fn ready(&self, name: &str) {
        let mut p = self.patcher.stored(NS, name).unwrap();
        p.ready = true;
        self.apply(p).await;
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap();
    }
}

fn requesting(name: &str, id: &str) -> PodInfo {
    with(pod(name), &[(REQUEST, id)])
}

#[tokio::test(start_paused = true)]
async fn without_a_budget_one_pod_at_a_time_the_next_once_the_restarted_one_is_ready() {
    let h = start(FakePatcher::default(), budgets(None), false);
    h.list(vec![
        requesting("web-2", "c2"),
        requesting("web-0", "c0"),
        requesting("web-1", "c1"),
        pod("api-0"),
    ])
    .await;
    assert_eq!(h.granted(), [("web-0".to_owned(), "c0".to_owned())]);
    // its echo, then the agent's restart: still one in flight
    h.echo("web-0").await;
    h.restarted("web-0").await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(h.granted().len(), 1, "web-0 is not Ready yet");
    h.ready("web-0").await;
    assert_eq!(h.granted()[1..], [("web-1".to_owned(), "c1".to_owned())]);
    h.echo("web-1").await;
    h.restarted("web-1").await;
    h.ready("web-1").await;
    h.echo("web-2").await;
    assert_eq!(h.granted().len(), 3);
    assert_eq!(h.granted()[2], ("web-2".to_owned(), "c2".to_owned()));
    assert!(h.events().is_empty(), "{:?}", h.events());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_budget_that_allows_two_grants_two_and_one_that_allows_none_grants_nothing() {
    let index = budgets(Some(0));
    let h = start(FakePatcher::default(), index.clone(), false);
    h.list(vec![
        requesting("web-0", "c0"),
        requesting("web-1", "c1"),
        requesting("web-2", "c2"),
    ])
    .await;
    assert!(h.granted().is_empty());
    let events = h.events();
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(
        events.iter().all(|e| e.1 == "RestartBlocked" && e.2),
        "{events:?}"
    );
    assert!(
        events[0].3.contains("allows no disruption"),
        "{}",
        events[0].3
    );
    // the budget's status is re-read when it changes: two now
    index.write().unwrap().apply(NS, "web", budget(2));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        h.granted(),
        [
            ("web-0".to_owned(), "c0".to_owned()),
            ("web-1".to_owned(), "c1".to_owned())
        ]
    );
    assert_eq!(h.events().len(), 3, "the Warning is given once per request");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_pod_not_ready_within_its_timeout_stops_the_owners_sequence_until_it_is() {
    let h = start(FakePatcher::default(), budgets(Some(1)), false);
    let first = with(
        requesting("web-0", "c0"),
        &[("reloadlet.io/restart-timeout", "1m")],
    );
    h.list(vec![first, requesting("web-1", "c1")]).await;
    h.echo("web-0").await;
    h.restarted("web-0").await;
    tokio::time::sleep(Duration::from_secs(61)).await;
    let events = h.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0].0.as_str(), events[0].1, events[0].2),
        ("web-0", "RestartStuck", true)
    );
    assert!(
        events[0]
            .3
            .contains("not Ready within reloadlet.io/restart-timeout 1m"),
        "{}",
        events[0].3
    );
    // the budget would allow one more (the disruption controller recounted): still nothing
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(h.granted().len(), 1);
    h.ready("web-0").await;
    assert_eq!(h.granted()[1], ("web-1".to_owned(), "c1".to_owned()));
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_new_controller_reads_the_pods_and_grants_nothing_twice() {
    // As a previous leader left them: web-0 done, web-1 granted and not restarted yet,
    // web-2 waiting.
    let pods = vec![
        with(
            pod("web-0"),
            &[(REQUEST, "c0"), (GRANT, "c0"), (RESTARTED, "c0")],
        ),
        with(pod("web-1"), &[(REQUEST, "c1"), (GRANT, "c1")]),
        requesting("web-2", "c2"),
    ];
    let h = start(FakePatcher::default(), budgets(Some(1)), false);
    h.list(pods).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(h.granted().is_empty(), "{:?}", h.granted());
    h.restarted("web-1").await;
    h.ready("web-1").await;
    assert_eq!(h.granted(), [("web-2".to_owned(), "c2".to_owned())]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_newer_request_of_a_restarted_pod_is_granted_again() {
    let h = start(FakePatcher::default(), budgets(None), false);
    h.list(vec![with(
        pod("web-0"),
        &[(REQUEST, "c1"), (GRANT, "c0"), (RESTARTED, "c0")],
    )])
    .await;
    assert_eq!(h.granted(), [("web-0".to_owned(), "c1".to_owned())]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_follower_and_a_dry_run_write_nothing() {
    let patcher = FakePatcher::default();
    let h = start(patcher.clone(), budgets(None), true);
    h.list(vec![requesting("web-0", "c0"), requesting("web-1", "c1")])
        .await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    // asked once (dry-run: the executor logs it), never written, never asked again
    assert!(h.granted().is_empty());
    assert!(!patcher
        .stored(NS, "web-0")
        .unwrap()
        .annotations
        .contains_key(GRANT));
    h.stop().await;

    let h = start(FakePatcher::default(), budgets(None), false);
    h.tx.send(Input::Leader(false)).await.unwrap();
    h.list(vec![requesting("web-0", "c0")]).await;
    assert!(h.granted().is_empty(), "a follower grants nothing");
    h.tx.send(Input::Leader(true)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.granted(), [("web-0".to_owned(), "c0".to_owned())]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_grant_is_tried_again_and_hostile_values_are_ignored() {
    let patcher = FakePatcher::default();
    patcher.fail_next([crate::ports::PatchError::Other(
        crate::ports::ApiError::other("boom"),
    )]);
    let h = start(patcher, budgets(None), false);
    let long = "a".repeat(65);
    h.list(vec![
        requesting("web-0", "c0"),
        // not ids: no request at all
        requesting("web-1", "C1/../x"),
        requesting("web-2", &long),
    ])
    .await;
    assert_eq!(h.granted().len(), 1, "the failed write");
    tokio::time::sleep(RETRY + Duration::from_secs(1)).await;
    assert_eq!(
        h.granted(),
        [
            ("web-0".to_owned(), "c0".to_owned()),
            ("web-0".to_owned(), "c0".to_owned())
        ]
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_granted_pod_whose_container_never_runs_again_is_stuck_too() {
    let h = start(FakePatcher::default(), budgets(Some(1)), false);
    let first = with(
        requesting("web-0", "c0"),
        &[("reloadlet.io/restart-timeout", "1m")],
    );
    h.list(vec![first, requesting("web-1", "c1")]).await;
    h.echo("web-0").await;
    h.stopped("web-0").await;
    tokio::time::sleep(Duration::from_secs(59)).await;
    assert!(h.events().is_empty(), "not yet: {:?}", h.events());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let events = h.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0].0.as_str(), events[0].1, events[0].2),
        ("web-0", "RestartStuck", true)
    );
    assert!(
        events[0]
            .3
            .starts_with("stopped (its container has not run again) for grant c0"),
        "{}",
        events[0].3
    );
    assert_eq!(h.granted().len(), 1, "web-1 is not granted");
    h.stop().await;
}

/// The admission policy admits a grant only equal to the pod's request (docs/restart.md,
/// "RBAC and admission"): the controller writes nothing else, even when the agent replaces
/// the request while the grant is in flight.
#[tokio::test(start_paused = true)]
async fn every_grant_written_is_the_pods_request_as_it_stands() {
    let h = start(FakePatcher::default(), budgets(None), false);
    h.list(vec![requesting("web-0", "c0")]).await;
    assert_eq!(h.granted(), [("web-0".to_owned(), "c0".to_owned())]);
    // a newer change: the agent replaces its request before it restarted for the grant
    let mut p = h.echo("web-0").await;
    p.annotations.insert(REQUEST.into(), "c0b".into());
    h.apply(p).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(h.granted().len(), 1, "in flight: nothing written meanwhile");
    h.restarted("web-0").await;
    h.ready("web-0").await;
    assert_eq!(
        h.granted(),
        [
            ("web-0".to_owned(), "c0".to_owned()),
            ("web-0".to_owned(), "c0b".to_owned())
        ]
    );
    let stored = h.patcher.stored(NS, "web-0").unwrap();
    assert_eq!(stored.annotations[GRANT], stored.annotations[REQUEST]);
    h.stop().await;
}

/// A controller started while a granted pod is unready (a restart or a new leader) counts
/// from the pod's `Ready` condition's `lastTransitionTime`, not from when it first saw it.
#[tokio::test(start_paused = true)]
async fn a_new_controller_counts_the_unready_time_from_the_ready_condition() {
    let h = start(FakePatcher::default(), budgets(Some(1)), false);
    let unready = |name: &str, id: &str, for_secs: i64| {
        let mut p = with(
            pod(name),
            &[
                (REQUEST, id),
                (GRANT, id),
                (RESTARTED, id),
                ("reloadlet.io/restart-timeout", "1m"),
            ],
        );
        p.ready = false;
        p.restart.unready_since =
            Some(jiff::Timestamp::now() - jiff::SignedDuration::from_secs(for_secs));
        p
    };
    // web-0: unready for 61 s by its condition, past its minute; web-1 for 30 s, inside it
    h.list(vec![
        unready("web-0", "c0", 61),
        unready("web-1", "c1", 30),
        requesting("web-2", "c2"),
    ])
    .await;
    let events = h.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0].0.as_str(), events[0].1),
        ("web-0", "RestartStuck")
    );
    assert!(h.granted().is_empty(), "nothing granted while one is stuck");
    h.stop().await;
}

/// The only pod of its owner asking `on-blocked: rollout` is handed to the rollout feature
/// (Normal `RestartHandedOff`, no grant); with the rollout feature off nothing would roll
/// it, so its request is granted as any other (the change is not lost). A pod with a
/// sibling is granted either way.
#[tokio::test(start_paused = true)]
async fn the_only_pod_asking_on_blocked_rollout_is_handed_off_only_where_the_rollout_runs() {
    let only = || {
        with(
            requesting("web-0", "c0"),
            &[("reloadlet.io/on-blocked", "rollout")],
        )
    };
    let h = start(FakePatcher::default(), budgets(None), false);
    h.list(vec![only()]).await;
    assert!(h.granted().is_empty(), "{:?}", h.granted());
    let events = h.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].1, "RestartHandedOff");
    assert!(
        events[0].3.contains("the only pod of ReplicaSet web-5d4f"),
        "{events:?}"
    );
    h.stop().await;

    let h = start_with(FakePatcher::default(), budgets(None), false, false);
    h.list(vec![only()]).await;
    assert_eq!(h.granted(), [("web-0".to_owned(), "c0".to_owned())]);
    assert!(h.events().is_empty(), "{:?}", h.events());
    h.stop().await;

    let h = start(FakePatcher::default(), budgets(None), false);
    h.list(vec![only(), pod("web-1")]).await;
    assert_eq!(h.granted(), [("web-0".to_owned(), "c0".to_owned())]);
    h.stop().await;
}
