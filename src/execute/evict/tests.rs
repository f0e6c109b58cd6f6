use super::*;
use crate::core::disruption_budgets::Budget;
use crate::core::label_selector::LabelSelector;
use crate::core::model::PodInfo;
use crate::ports::fake;
use crate::serve::metrics::Metrics;

/// Pod `ns/web` (`u1`), the only pod of the index the evictions read.
fn web() -> (PodInfo, Arc<RwLock<PodIndex>>) {
    let pod = PodInfo {
        uid: "u1".into(),
        namespace: "ns".into(),
        name: "web".into(),
        ..Default::default()
    };
    let mut index = PodIndex::default();
    index.apply(pod.clone());
    (pod, Arc::new(RwLock::new(index)))
}

/// Evictions of `web()` through `evictor`, reported to `events` and `metrics`.
fn evictions_of_web(
    settings: EvictionSettings,
    evictor: Arc<fake::Evictor>,
    events: Arc<fake::Events>,
    metrics: Metrics,
    dry_run: bool,
) -> Evictions {
    let notifier = crate::outbound::notify::Notifier::disabled();
    let reporter = Reporter::new(events, notifier, metrics, dry_run, "node-1".into());
    Evictions::new(
        settings,
        evictor,
        reporter,
        web().1,
        CancellationToken::new(),
    )
}

/// The eviction of `web()` for a change of ConfigMap `app`.
fn web_job() -> EvictJob {
    EvictJob {
        seen: Default::default(),
        pod: PodRef::from(&web().0),
        cause: "configmap app changed".into(),
        first_seen: None,
        sources: vec![],
    }
}

/// One eviction of `web()` for a change of ConfigMap `app`, waited for until it is no longer
/// pending (an hour at most, in `step`s).
async fn evict_web(evictions: &Evictions, step: Duration) {
    evictions.request(web_job());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3600);
    while evictions.is_pending("u1") && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(step).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_that_never_answers_times_out_frees_its_permit_and_is_retried() {
    // The first call never answers; the next evicts.
    let evictor = Arc::new(fake::Evictor::answering([None]));
    let events = Arc::new(fake::Events::default());
    let metrics = Metrics::new(&mut prometheus_client::registry::Registry::default());
    let settings = EvictionSettings {
        max_in_flight: 1,
        ..EvictionSettings::default()
    };
    let evictions = evictions_of_web(settings, evictor.clone(), events.clone(), metrics, false);
    evict_web(&evictions, Duration::from_secs(1)).await;
    assert!(
        !evictions.is_pending("u1"),
        "the hung call was never given up"
    );
    assert_eq!(evictor.calls(), 2);
    assert_eq!(events.reasons(), ["EvictionFailed", "EvictionRequested"]);
}

/// An error that is not a refusal (a 500) will not pass soon: the next call comes after the
/// cap (120 s, ±20 %), and so does every later one, a refusal's included; before it, a
/// refusal is asked again after the first delay (5 s, ±20 %).
#[tokio::test(start_paused = true)]
async fn a_failure_that_is_not_a_refusal_moves_the_retries_to_the_cap_and_keeps_them_there() {
    let refused = || {
        Some(EvictOutcome::Blocked {
            cause: "The disruption budget web needs 2 healthy pods and has 2 currently".into(),
            retry_after: None,
        })
    };
    let failed = Some(EvictOutcome::Failed {
        code: Some(500),
        message: "etcdserver: request timed out".into(),
    });
    let evictor = Arc::new(fake::Evictor::answering([refused(), failed, refused()]));
    let events = Arc::new(fake::Events::default());
    let metrics = Metrics::new(&mut prometheus_client::registry::Registry::default());
    let settings = EvictionSettings::default();
    let evictions = evictions_of_web(settings, evictor.clone(), events, metrics, false);
    let start = tokio::time::Instant::now();
    evictions.request(web_job());
    // When each call came, to the second of the paused clock.
    let mut at = Vec::new();
    loop {
        if evictor.calls() > at.len() {
            at.push(start.elapsed().as_secs());
        }
        if !evictions.is_pending("u1") || start.elapsed() > Duration::from_secs(3600) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(!evictions.is_pending("u1"), "calls at {at:?}");
    assert_eq!(evictor.calls(), 4, "calls at {at:?}");
    let gaps: Vec<u64> = at.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        (4..=7).contains(&gaps[0]),
        "the refusal's first delay: {gaps:?}"
    );
    assert!(gaps[1] >= 95, "after the failure, the cap: {gaps:?}");
    assert!(
        gaps[2] >= 95,
        "after it, a refusal stays at the cap: {gaps:?}"
    );
}

/// Answers as the eviction subresource does from the budget's status (allowed while
/// `disruptionsAllowed > 0`, else 429), and records when each call came.
struct BudgetAnswers {
    budgets: Arc<RwLock<BudgetIndex>>,
    calls: Mutex<Vec<tokio::time::Instant>>,
}

impl BudgetAnswers {
    fn calls(&self) -> Vec<tokio::time::Instant> {
        self.calls.lock().unwrap().clone()
    }
}

impl crate::ports::Evictor for BudgetAnswers {
    fn evict(&self, _req: &EvictRequest) -> futures::future::BoxFuture<'_, EvictOutcome> {
        self.calls.lock().unwrap().push(tokio::time::Instant::now());
        let labels = [("app".to_string(), "web".to_string())].into();
        let allowed = match self.budgets.read().unwrap().coverage("ns", &labels) {
            Coverage::One {
                status: Some(s), ..
            } => s.disruptions_allowed > 0,
            _ => false,
        };
        Box::pin(async move {
            if allowed {
                EvictOutcome::Evicted
            } else {
                EvictOutcome::Blocked {
                    cause: "The disruption budget web needs 2 healthy pods and has 2 currently"
                        .into(),
                    retry_after: None,
                }
            }
        })
    }
}

fn status(expected: i32, desired: i32, current: i32, allowed: i32) -> BudgetStatus {
    BudgetStatus {
        expected_pods: expected,
        desired_healthy: desired,
        current_healthy: current,
        disruptions_allowed: allowed,
    }
}

struct Setup {
    evictions: Evictions,
    budgets: Arc<RwLock<BudgetIndex>>,
    api: Arc<BudgetAnswers>,
    events: Arc<fake::Events>,
}

impl Setup {
    /// A pod `app=web` with `on_blocked` (if any), one budget with `status` selecting it.
    fn new(on_blocked: Option<&str>, budget: BudgetStatus) -> Self {
        let pod = PodInfo {
            uid: "u1".into(),
            namespace: "ns".into(),
            name: "web".into(),
            labels: [("app".to_string(), "web".to_string())].into(),
            annotations: on_blocked
                .map(|v| (rollout::ON_BLOCKED.to_string(), v.to_string()))
                .into_iter()
                .collect(),
            ..Default::default()
        };
        let mut index = PodIndex::default();
        index.apply(pod);
        let budgets = Arc::new(RwLock::new(BudgetIndex::default()));
        budgets.write().unwrap().reset(vec![(
            "ns".into(),
            "web".into(),
            Budget::new(LabelSelector::parse("app=web").ok(), Some(budget)),
        )]);
        let api = Arc::new(BudgetAnswers {
            budgets: budgets.clone(),
            calls: Mutex::default(),
        });
        let events = Arc::new(fake::Events::default());
        let metrics = Metrics::new(&mut prometheus_client::registry::Registry::default());
        let evictions = Evictions::new(
            EvictionSettings::default(),
            api.clone(),
            Reporter::new(
                events.clone(),
                crate::outbound::notify::Notifier::disabled(),
                metrics,
                false,
                "node-1".into(),
            ),
            Arc::new(RwLock::new(index)),
            CancellationToken::new(),
        );
        evictions.use_budgets(budgets.clone());
        evictions.request(EvictJob {
            seen: Default::default(),
            pod: PodRef {
                uid: "u1".into(),
                namespace: "ns".into(),
                name: "web".into(),
            },
            cause: "configmap app changed".into(),
            first_seen: None,
            sources: vec![],
        });
        Self {
            evictions,
            budgets,
            api,
            events,
        }
    }

    fn set_budget(&self, s: BudgetStatus) {
        self.budgets.write().unwrap().apply(
            "ns",
            "web",
            Budget::new(LabelSelector::parse("app=web").ok(), Some(s)),
        );
    }

    /// Lets (paused) time pass while the eviction is pending, for at most `limit`.
    async fn run_for(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.evictions.is_pending("u1") && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    fn notes(&self) -> Vec<(&'static str, String)> {
        self.events
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|(_, e)| (e.reason, e.note.clone()))
            .collect()
    }
}

const PLAIN_WORDS: &str = "PodDisruptionBudget web needs 2 of 2 pods healthy: no eviction can \
                           succeed while the workload keeps its size; see reloadlet.io/on-blocked";

#[tokio::test(start_paused = true)]
async fn wait_on_a_structural_block_warns_at_once_then_asks_at_most_every_five_minutes() {
    let s = Setup::new(None, status(2, 2, 2, 0));
    s.run_for(Duration::from_secs(1)).await;
    let notes = s.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0].0, "EvictionBlocked");
    assert!(notes[0].1.starts_with(PLAIN_WORDS), "{}", notes[0].1);
    assert!(notes[0].1.contains("will retry every 5m"), "{}", notes[0].1);
    s.run_for(Duration::from_secs(3600)).await;
    assert!(s.evictions.is_pending("u1"), "never evicted, still pending");
    let calls = s.api.calls();
    assert!(
        calls.len() >= 2,
        "still asked now and then: {}",
        calls.len()
    );
    for pair in calls.windows(2) {
        assert!(
            pair[1] - pair[0] >= Duration::from_secs(300),
            "asked again after {:?}",
            pair[1] - pair[0]
        );
    }
    // One Warning per retry at most (warn_every is 5 minutes as well).
    assert!(s.notes().len() <= calls.len());
}

#[tokio::test(start_paused = true)]
async fn a_transient_block_is_retried_at_the_usual_pace_and_evicted_once_it_allows() {
    // Three expected, two needed, one still starting: not structural.
    let s = Setup::new(None, status(3, 2, 2, 0));
    s.run_for(Duration::from_secs(60)).await;
    let early = s.api.calls().len();
    assert!(early >= 3, "paced retries of a transient block: {early}");
    let notes = s.notes();
    assert_eq!(notes[0].0, "EvictionBlocked");
    assert!(notes[0].1.starts_with("eviction refused, will retry"));
    s.set_budget(status(3, 2, 3, 1));
    s.run_for(Duration::from_secs(600)).await;
    assert!(!s.evictions.is_pending("u1"));
    assert_eq!(s.notes().last().unwrap().0, "EvictionRequested");
}

/// The Warning of a refused eviction is repeated once per `warn_every` (5 minutes) of the
/// runtime's clock: under a paused clock an hour of refusals passes in no real time at all,
/// and still warns about twelve times, not once.
#[tokio::test(start_paused = true)]
async fn a_refusal_that_lasts_warns_again_every_five_minutes_of_the_paused_clock() {
    // Three expected, two needed, one still starting: transient, retried at the usual pace.
    let s = Setup::new(None, status(3, 2, 2, 0));
    let blocked = |s: &Setup| {
        s.notes()
            .iter()
            .filter(|(reason, _)| *reason == "EvictionBlocked")
            .count()
    };
    s.run_for(Duration::from_secs(60)).await;
    assert_eq!(blocked(&s), 1, "one Warning in the first minute");
    s.run_for(Duration::from_secs(3600)).await;
    assert!(s.evictions.is_pending("u1"), "still refused, still pending");
    let warned = blocked(&s);
    assert!(
        (10..=13).contains(&warned),
        "an hour of refusals warns about every 5 minutes: {warned} Warnings"
    );
}

#[tokio::test(start_paused = true)]
async fn rollout_on_a_known_structural_block_sends_no_eviction_at_all() {
    let s = Setup::new(Some("rollout"), status(1, 1, 1, 0));
    s.run_for(Duration::from_secs(3600)).await;
    assert!(!s.evictions.is_pending("u1"), "handed off, not retried");
    assert!(s.api.calls().is_empty(), "no eviction request");
    let notes = s.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0].0, "EvictionHandedOff");
    assert!(notes[0].1.contains("no eviction sent"), "{}", notes[0].1);
    assert!(
        notes[0].1.contains("reloadlet controller"),
        "{}",
        notes[0].1
    );
}

#[tokio::test(start_paused = true)]
async fn rollout_keeps_evicting_through_a_transient_block_and_stops_once_it_is_structural() {
    let s = Setup::new(Some("rollout"), status(3, 2, 2, 0));
    s.run_for(Duration::from_secs(30)).await;
    let sent = s.api.calls().len();
    assert!(sent >= 2, "a transient block is retried as usual: {sent}");
    // The workload is scaled down to 2: now structural. Nothing more is sent.
    s.set_budget(status(2, 2, 2, 0));
    s.run_for(Duration::from_secs(3600)).await;
    assert!(!s.evictions.is_pending("u1"));
    assert_eq!(
        s.api.calls().len(),
        sent,
        "no eviction after the block became structural"
    );
    let last = s.notes().pop().unwrap();
    assert_eq!(last.0, "EvictionHandedOff");
    assert!(last
        .1
        .contains(&format!("no further eviction sent after {sent} refused")));
}

#[tokio::test(start_paused = true)]
async fn a_structural_budget_that_starts_to_allow_ends_the_wait_at_once() {
    let s = Setup::new(Some("wait"), status(2, 2, 2, 0));
    s.run_for(Duration::from_secs(60)).await;
    assert_eq!(s.api.calls().len(), 1, "one refusal, then the long wait");
    // Scaled up to 3: disruptions allowed again; the wait ends without waiting 5 minutes.
    s.set_budget(status(3, 2, 3, 1));
    s.run_for(Duration::from_secs(60)).await;
    assert!(
        !s.evictions.is_pending("u1"),
        "evicted once the budget allowed it"
    );
    assert_eq!(s.api.calls().len(), 2);
    assert_eq!(s.events.reasons(), ["EvictionBlocked", "EvictionRequested"]);
}

#[tokio::test(start_paused = true)]
async fn a_pod_deleted_during_a_structural_wait_ends_its_eviction_at_once() {
    let s = Setup::new(None, status(2, 2, 2, 0));
    s.run_for(Duration::from_secs(10)).await;
    assert!(s.evictions.is_pending("u1"));
    s.evictions.inner.index.write().unwrap().delete("u1");
    s.evictions.pod_gone("u1");
    s.run_for(Duration::from_secs(10)).await;
    assert!(
        !s.evictions.is_pending("u1"),
        "still waiting for a deleted pod"
    );
    assert_eq!(s.api.calls().len(), 1);
}

/// `--dry-run`: the eviction is asked with `dryRun=All` (the API server checks it, budgets
/// included, and evicts nothing) and counted `dry_run`; without it, the same job asks for
/// real and counts `evicted` (the control).
#[tokio::test(start_paused = true)]
async fn under_dry_run_the_api_server_only_checks_the_eviction() {
    for dry_run in [true, false] {
        let evictor = Arc::new(fake::Evictor::default());
        let events = Arc::new(fake::Events::default());
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::new(&mut registry);
        let settings = EvictionSettings::default();
        let evictions = evictions_of_web(settings, evictor.clone(), events, metrics, dry_run);
        evict_web(&evictions, Duration::from_millis(10)).await;
        assert!(!evictions.is_pending("u1"), "dry_run={dry_run}: never done");
        let sent: Vec<bool> = evictor
            .calls
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.dry_run)
            .collect();
        assert_eq!(sent, [dry_run], "one call, dryRun as the setting says");
        let text = crate::serve::metrics::encode(&registry);
        let counted = if dry_run { "dry_run" } else { "evicted" };
        let series = format!("actions_total{{action=\"evict\",outcome=\"{counted}\"}} 1");
        assert!(
            text.lines().any(|l| l == series),
            "dry_run={dry_run}: {series}"
        );
    }
}
