//! The drain readiness gate around a restart (`super::super::drain`), on the executor with
//! fakes and tokio's paused clock.

use super::*;
use crate::core::model::ContainerId;
use crate::ports::PatchError;

fn gated(w: &World, gate: Arc<fake::Gate>) -> Executor {
    gated_as(w, gate, false)
}

/// [`gated`], `dry_run` as given.
fn gated_as(w: &World, gate: Arc<fake::Gate>, dry_run: bool) -> Executor {
    let mut index = PodIndex::default();
    let mut p = pod();
    p.restart.drain_gate = true;
    p.restart.drain_condition = Some(true);
    p.restart.containers_ready = true;
    index.apply(p);
    let mut registry = prometheus_client::registry::Registry::with_prefix("reloadlet");
    let deps = Deps {
        events: w.events.clone(),
        processes: w.processes.clone(),
        evictor: Arc::new(fake::Evictor::default()),
        http: Arc::new(fake::Http::default()),
        notifier: Notifier::disabled(),
        record: None,
        gate: None,
    };
    Executor::new(
        "node-1",
        dry_run,
        EvictionSettings::default(),
        &deps,
        Metrics::new(&mut registry),
        Arc::new(RwLock::new(index)),
        w.stop.clone(),
    )
    .with_restart_without_grant(true)
    .with_drain_gate(gate)
}

fn drained_job(drain: Duration) -> RestartJob {
    let mut job = restart_job("app");
    job.stop.drain = Some(drain);
    job.stop.timeout = Duration::from_secs(60);
    job
}

/// The kubelet started the container again and it is ready.
fn restarted(exec: &Executor) {
    let mut p = pod();
    p.restart.drain_gate = true;
    p.restart.drain_condition = Some(false);
    p.restart.containers_ready = true;
    p.containers[0].container_id = ContainerId::parse("containerd://new");
    exec.inner.index.write().unwrap().apply(p);
}

#[tokio::test(start_paused = true)]
async fn a_gated_pod_is_drained_before_the_stop_and_put_back_once_ready() {
    let w = world(false, 0);
    let gate = Arc::new(fake::Gate::default());
    let exec = gated(&w, gate.clone());
    exec.restart(drained_job(Duration::from_secs(5)));
    tokio::time::sleep(Duration::from_secs(4)).await;
    // out of service, not stopped yet
    assert_eq!(gate.statuses("web"), [false]);
    assert_eq!(
        w.processes.sent(),
        0,
        "the drain is waited before the stop signal"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    while w.processes.sent() == 0 {
        tokio::task::yield_now().await;
    }
    // stopped; the old container still shows: the gate stays False
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(gate.statuses("web"), [false]);
    restarted(&exec);
    exec.drain(Instant::now() + Duration::from_secs(3600)).await;
    assert_eq!(gate.statuses("web"), [false, true]);
    let events = w.events.0.lock().unwrap();
    let (_, ev) = events.last().unwrap();
    assert_eq!(ev.reason, "Restarted");
    assert!(
        ev.note.contains("traffic was drained for 5s first"),
        "{}",
        ev.note
    );
}

#[tokio::test(start_paused = true)]
async fn a_container_never_ready_again_does_not_keep_the_gate_false() {
    let w = world(false, 0);
    let gate = Arc::new(fake::Gate::default());
    let exec = gated(&w, gate.clone());
    exec.restart(drained_job(Duration::from_secs(1)));
    exec.drain(Instant::now() + Duration::from_secs(3600)).await;
    // set True at restart-timeout (60 s) though the container never showed again
    assert_eq!(gate.statuses("web"), [false, true]);
}

#[tokio::test(start_paused = true)]
async fn a_failed_drain_restarts_undrained_and_says_so() {
    let w = world(false, 0);
    let gate = Arc::new(fake::Gate::default());
    gate.fail
        .lock()
        .unwrap()
        .push_back(PatchError::Forbidden("no".into()));
    let exec = gated(&w, gate.clone());
    exec.restart(drained_job(Duration::from_secs(5)));
    exec.drain(Instant::now() + Duration::from_secs(3600)).await;
    assert!(gate.statuses("web").is_empty(), "nothing to put back");
    assert!(w.processes.sent() > 0);
    let events = w.events.0.lock().unwrap();
    assert!(events[0].1.note.contains("traffic was not drained first: the readiness gate reloadlet.io/restart-drain could not be set False (forbidden: no)"), "{}", events[0].1.note);
}

#[tokio::test(start_paused = true)]
async fn a_pod_without_the_gate_gets_no_write_and_dry_run_writes_nothing() {
    // positive control: the same executor with the gate writer, a job without the gate
    let w = world(false, 0);
    let gate = Arc::new(fake::Gate::default());
    let exec = gated(&w, gate.clone());
    exec.restart(restart_job("app"));
    exec.drain(Instant::now() + Duration::from_secs(3600)).await;
    assert!(w.processes.sent() > 0);
    assert!(gate.writes.lock().unwrap().is_empty());

    // Under --dry-run, a gated pod without its condition (opened on sight for real:
    // `a_gate_without_its_condition_is_opened_once`) and a drained restart write nothing.
    let dry = world(true, 0);
    let gate = Arc::new(fake::Gate::default());
    let exec = gated_as(&dry, gate.clone(), true);
    let mut p = pod();
    p.restart.drain_gate = true;
    exec.pod_updated(&p);
    exec.restart(drained_job(Duration::from_secs(5)));
    exec.drain(Instant::now() + Duration::from_secs(3600)).await;
    assert!(gate.writes.lock().unwrap().is_empty());
    assert_eq!(dry.processes.sent(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_gate_without_its_condition_is_opened_once() {
    let w = world(false, 0);
    let gate = Arc::new(fake::Gate::default());
    let exec = gated(&w, gate.clone());
    let mut p = pod();
    p.restart.drain_gate = true;
    exec.pod_updated(&p);
    exec.pod_updated(&p);
    let mut other = pod();
    other.name = "plain".into();
    other.uid = "u2".into();
    exec.pod_updated(&other);
    exec.drain(Instant::now() + Duration::from_secs(3600)).await;
    assert_eq!(gate.statuses("web"), [true]);
    assert!(gate.statuses("plain").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_gate_left_false_is_opened_unless_a_drain_is_held_here() {
    let w = world(false, 0);
    let gate = Arc::new(fake::Gate::default());
    let exec = gated(&w, gate.clone());
    let mut left = pod();
    left.restart.drain_gate = true;
    left.restart.drain_condition = Some(false);
    // an agent stopped during a drain: nobody would set it back
    exec.pod_updated(&left);
    exec.drain(Instant::now() + Duration::from_secs(3600)).await;
    assert_eq!(gate.statuses("web"), [true]);

    // this agent's own drain: the update showing False is left alone
    let w = world(false, 0);
    let gate = Arc::new(fake::Gate::default());
    let exec = gated(&w, gate.clone());
    exec.restart(drained_job(Duration::from_secs(5)));
    tokio::time::sleep(Duration::from_secs(1)).await;
    exec.pod_updated(&left);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(gate.statuses("web"), [false], "no True while drained");
    restarted(&exec);
    exec.drain(Instant::now() + Duration::from_secs(3600)).await;
    assert_eq!(gate.statuses("web"), [false, true]);
}
