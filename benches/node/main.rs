//! `cargo bench --bench node` (or `hack/bench.sh`): reloadlet against two references on one
//! simulated node, as root.
//!
//! 1. signal: pods running `examples/sigrecorder.rs`, each with `BENCH_VOLS_PER_POD`
//!    ConfigMap volumes (+ its kube-api-access token volume). At `BENCH_SMALL` (100) and then
//!    `BENCH_LARGE` (1,000) ConfigMap volumes, three approaches run on the same node and
//!    take the same swaps (kubelet AtomicWriter updates, open loop at `BENCH_RATE` 50/s,
//!    `BENCH_SWAPS` per approach and size, 2,000: a p99 of 400 samples is their 4th largest,
//!    which moves with every hiccup of a shared machine; of 2,000 it is the 20th):
//!    - floor: `examples/floor.rs`, one process blocked in `read(2)` on one inotify fd;
//!    - sidecar: an `inotifywait` + `kill` shell loop per volume (small size only: a fleet
//!      of 1,000 needs 1,000 inotify instances, over `fs.inotify.max_user_instances`);
//!    - reloadlet with `--debounce 0s`.
//!
//!    Every approach runs for the whole size, on its own copy of the pods' volumes
//!    ([`roots`]; an agent watches a whole kubelet root), and signals the same pods. The swaps
//!    go to the approaches in blocks of `BENCH_BLOCK` (200, 4 s), one approach after another,
//!    round after round, the order reversed every other round, so a stretch of the machine's
//!    noise lands on every approach alike (two 20-s turns each let one noisy turn decide a
//!    run: docs/architecture.md). An agent's first block begins once it has been still (no
//!    thread woken) for 1 s after its start, and the next approach's block once it has been
//!    still for 1 s after its own block. Latency = the target's
//!    CLOCK_MONOTONIC at SIGHUP receipt − the clock just before `rename(..data_tmp, ..data)`;
//!    a miss = no SIGHUP within `BENCH_DEADLINE_MS` (and before the pod's next swap). Memory
//!    is summed over every process of an approach, the most after any block. Each round
//!    prints each block's p99 and max beside what the machine did meanwhile ([`stalls`]: a
//!    sleeper's late wake-ups, steal time), so a
//!    tail that is the machine's, hitting whichever approach has the block, is told apart. Then reloadlet's wakeups over
//!    `BENCH_IDLE_SECS` with nothing happening. Ratios are printed next to issue 14's bar.
//!    Last, at the large size, each agent binary meets `BENCH_BURSTS` (8) bursts of every
//!    volume swapped at once, then `BENCH_HELD_BURSTS` (4) written while it is stopped
//!    ([`bursts`]): the last pod's signal, and the memory afterwards.
//! 2. evict: 100 annotated pods without a PDB swap at once; time from the last swap to the
//!    last eviction request, and the most requests in flight (the API answers in 20 ms).
//!
//! The machine is shared: compare figures within one run, never assert on them.

mod approaches;
mod bursts;
mod evict;
mod procs;
mod report;
mod roots;
mod stalls;
mod swaps;

use approaches::{Agent, Floor, Sidecars, Target};
use nodesim::node::SimNode;
use procs::Memory;
use report::{Row, Summary};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use swaps::Outcome;

pub const NODE: &str = "bench-node";

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The benchmark's knobs (environment variables).
#[derive(Clone, Debug)]
pub struct Knobs {
    pub small: usize,
    pub large: usize,
    pub vols_per_pod: usize,
    pub swaps: usize,
    pub rate: f64,
    pub deadline: Duration,
    pub idle: Duration,
    pub bursts: usize,
    pub held_bursts: usize,
    pub block: usize,
}

impl Knobs {
    fn from_env() -> Knobs {
        Knobs {
            small: env("BENCH_SMALL", 100),
            large: env("BENCH_LARGE", 1000),
            vols_per_pod: env("BENCH_VOLS_PER_POD", 4).max(1),
            swaps: env("BENCH_SWAPS", 2000).max(2),
            rate: env("BENCH_RATE", 50).max(1) as f64,
            deadline: Duration::from_millis(env("BENCH_DEADLINE_MS", 1000) as u64),
            idle: Duration::from_secs(env("BENCH_IDLE_SECS", 10) as u64),
            bursts: env("BENCH_BURSTS", 8),
            held_bursts: env("BENCH_HELD_BURSTS", 4),
            block: env("BENCH_BLOCK", 200),
        }
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let knobs = Knobs::from_env();
    // On Ctrl-C or SIGTERM the benchmark is dropped and its simulated nodes clean up.
    let done = rt.block_on(nodesim::interrupt::until_signalled(async {
        signal_bench(&knobs).await;
        evict::evict_bench(100).await;
    }));
    if let Err(e) = done {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

/// One pod of the signal benchmark.
struct BenchPod {
    pid: i32,
    volume_dirs: Vec<PathBuf>,
}

/// Creates pods `range` (each with `vols` ConfigMap volumes) and waits until they run.
fn add_pods(
    node: &SimNode,
    rec_dir: &std::path::Path,
    range: std::ops::Range<usize>,
    vols: usize,
) -> Vec<BenchPod> {
    let recorder = approaches::example("sigrecorder");
    let mut uids = Vec::new();
    let (first, end) = (range.start, range.end);
    for i in range {
        let mut volumes = Vec::new();
        let mut mounts = Vec::new();
        for j in 0..vols {
            let cm = format!("p{i}-c{j}");
            node.api.apply_configmap(
                serde_json::from_value(
                    json!({"metadata": {"name": cm, "namespace": "bench"}, "data": {"k": "v0"}}),
                )
                .unwrap(),
            );
            volumes.push(json!({"name": format!("conf{j}"), "configMap": {"name": cm}}));
            mounts.push(json!({"name": format!("conf{j}"), "mountPath": rec_dir.join(format!("mnt/conf{j}")).display().to_string()}));
        }
        let pod = json!({
            "metadata": {"name": format!("p{i}"), "namespace": "bench", "annotations": {"reloadlet.io/action": "signal"}},
            "spec": {"nodeName": NODE, "volumes": volumes, "containers": [{
                "name": "app", "image": "x",
                "command": [recorder.display().to_string(), rec_dir.join(format!("p{i}")).display().to_string()],
                "volumeMounts": mounts
            }]}
        });
        let created = node.api.create_pod(serde_json::from_value(pod).unwrap());
        uids.push(created.metadata.uid.unwrap());
    }
    // reloadlet maps a container to its process through the pod's status: wait until the
    // kubelet has reported every container running.
    let t0 = Instant::now();
    for i in first..end {
        while !node
            .api
            .get_pod("bench", &format!("p{i}"))
            .is_some_and(|p| {
                p.status
                    .and_then(|s| s.container_statuses)
                    .is_some_and(|cs| {
                        !cs.is_empty()
                            && cs.iter().all(|c| {
                                c.container_id.is_some()
                                    && c.state.as_ref().is_some_and(|s| s.running.is_some())
                            })
                    })
            })
        {
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "pod p{i} never reported running"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    uids.iter()
        .map(|uid| {
            let handles = node
                .kubelet
                .wait_for_pod(uid, Duration::from_secs(120))
                .expect("pod runs");
            let dir = node
                .kubelet_root()
                .join("pods")
                .join(uid)
                .join("volumes/kubernetes.io~configmap");
            BenchPod {
                pid: handles.container("app").expect("app container").main_pid,
                volume_dirs: (0..vols).map(|j| dir.join(format!("conf{j}"))).collect(),
            }
        })
        .collect()
}

/// The first `n` volumes, ordered so that consecutive ones belong to different pods.
fn targets(pods: &[BenchPod], n: usize, vols: usize) -> Vec<Target> {
    let npods = n.div_ceil(vols);
    assert!(pods.len() >= npods);
    (0..vols)
        .flat_map(|j| {
            pods[..npods].iter().enumerate().map(move |(i, p)| Target {
                dir: p.volume_dirs[j].clone(),
                pid: p.pid,
                pod: i,
            })
        })
        .take(n)
        .collect()
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Floor,
    Sidecar,
    Reloadlet,
    /// The image's static (musl) binary, same flags.
    Static,
}

impl Kind {
    /// Its name in the output (`floor`, `reloadlet`, …).
    pub fn name(self) -> String {
        format!("{self:?}").to_lowercase()
    }
}

/// Everything measured for one approach at one size.
#[derive(Default)]
pub struct Measured {
    pub outcome: Outcome,
    /// Each block's own p99, in order.
    pub block_p99: Vec<f64>,
    pub memory: Memory,
    pub note: String,
}

async fn signal_bench(k: &Knobs) {
    let node = SimNode::start(NODE, "reloadlet-bench-", |_| {})
        .await
        .unwrap();
    let rec_dir = node.path("rec");
    std::fs::create_dir_all(&rec_dir).unwrap();
    let vpp = k.vols_per_pod;
    let sizes = [k.small, k.large];
    let mut pods: Vec<BenchPod> = Vec::new();
    let mut summary = Summary::default();
    println!(
        "== signal: kubelet AtomicWriter swaps at {}/s (open loop), {} per approach and size; {vpp} ConfigMap volumes per pod",
        k.rate, k.swaps
    );
    for (si, &n) in sizes.iter().enumerate() {
        let npods = n.div_ceil(vpp);
        if pods.len() < npods {
            let t = Instant::now();
            let from = pods.len();
            pods.extend(add_pods(&node, &rec_dir, from..npods, vpp));
            println!(
                "-- {n} volumes: {} pods started by the simulated kubelet in {:.1} s",
                npods - from,
                t.elapsed().as_secs_f64()
            );
        }
        let records: Vec<PathBuf> = (0..pods.len())
            .map(|i| rec_dir.join(format!("p{i}")))
            .collect();
        let tg = targets(&pods, n, vpp);
        // Every pod's token volume is watched by reloadlet too.
        let tracked = pods.len() * (vpp + 1);
        let gap = Duration::from_secs_f64(npods as f64 / k.rate);
        if gap < k.deadline {
            println!(
                "   note: a pod is swapped again after {:.0} ms: misses are counted at {:.0} ms, not {:.0} ms",
                gap.as_secs_f64() * 1e3,
                gap.as_secs_f64() * 1e3,
                k.deadline.as_secs_f64() * 1e3
            );
        }
        let sidecar = sidecar_plan(n);
        let mut kinds = vec![Kind::Floor];
        if sidecar.is_ok() {
            kinds.push(Kind::Sidecar);
        }
        kinds.push(Kind::Reloadlet);
        let static_bin = Agent::static_binary();
        if static_bin.is_some() {
            kinds.push(Kind::Static);
        }
        let raised = match &sidecar {
            Ok(Some(to)) => match procs::Raised::to(procs::MAX_USER_INSTANCES, *to) {
                Ok(r) => {
                    println!(
                        "   fs.inotify.max_user_instances raised {} -> {to} for the sidecar fleet (restored after)",
                        r.original()
                    );
                    Some(r)
                }
                Err(e) => {
                    println!("   cannot raise fs.inotify.max_user_instances: {e}");
                    None
                }
            },
            _ => None,
        };
        let mut measured: Vec<(Kind, Measured)> =
            kinds.iter().map(|k| (*k, Measured::default())).collect();
        let meter = stalls::StallMeter::start();
        // An agent with a fresh state dir (a first start, no catch-up), tracking every volume
        // of its root and then still: the blocks measure a running agent, not its start-up's
        // work (hashing every volume, the first state write, the pass over /proc) on the same
        // two CPUs — 5-s turns begun right after the start reached a p99 of 1.1 and 3.1 ms with
        // no steal and at most 2 late wake-ups (docs/architecture.md). Also how long the
        // stillness took to come.
        let start_settled =
            |kind: Kind, root: &std::path::Path, log: &std::path::Path, state: &str| {
                let bin = match kind {
                    Kind::Static => static_bin.clone().expect("checked above"),
                    _ => Agent::glibc_binary(),
                };
                let agent = Agent::start(
                    &node,
                    root,
                    &bin,
                    log,
                    &node.path(&format!("state-{state}")),
                );
                agent.wait_metric("reloadlet_volumes_tracked", tracked as f64);
                let settled = procs::settle(agent.pid(), SETTLED, Duration::from_secs(30));
                (agent, settled)
            };
        // Every approach runs for the whole size, each on its own copy of the pods' volumes
        // ([`roots`]), and the swaps go to them in blocks of `BENCH_BLOCK`, round after round
        // (the order reversed every other round), so that a stretch of the machine's noise
        // lands on every approach alike instead of on whichever had a long turn.
        let mut running: Vec<Approach> = Vec::new();
        for &kind in &kinds {
            let copy = roots::Copy::of(
                &node.kubelet_root(),
                &node.path(&format!("roots/{n}-{}", kind.name())),
            )
            .expect("the pods' volumes are copied");
            let targets = copy.retarget(&node.kubelet_root(), &tg);
            let run = match kind {
                Kind::Floor => Running::Floor(Floor::start(&targets)),
                Kind::Sidecar => match Sidecars::start(&targets, &node.path("sidecars")) {
                    Ok(fleet) => Running::Sidecars(fleet),
                    Err(e) => {
                        measured_of(&mut measured, kind).note = e;
                        continue;
                    }
                },
                Kind::Reloadlet | Kind::Static => {
                    let who = kind.name();
                    let log = node.path(&format!("reloadlet-{n}-{who}.log"));
                    let (agent, settled) =
                        start_settled(kind, copy.root(), &log, &format!("{si}-{n}-{who}"));
                    let armed = std::fs::read_to_string(&log)
                        .unwrap_or_default()
                        .lines()
                        .find(|l| l.contains("volume watches armed"))
                        .unwrap_or("")
                        .trim()
                        .to_owned();
                    println!(
                        "   {who} start -> /readyz {:.0} ms, still for {} ms after {}; {armed}",
                        agent.ready_after.as_secs_f64() * 1e3,
                        SETTLED.as_millis(),
                        settled.map_or("30 s: never".into(), |d| format!(
                            "{:.1} s",
                            d.as_secs_f64()
                        )),
                    );
                    let before = agent.metric(SIGNALED);
                    Running::Agent { agent, before }
                }
            };
            running.push(Approach {
                kind,
                run,
                targets,
                _copy: copy,
            });
        }
        let block = k.block.clamp(1, k.swaps);
        let bench = std::process::id() as i32;
        for round in 0..k.swaps.div_ceil(block) {
            let ks = round * block..((round + 1) * block).min(k.swaps);
            let mut order: Vec<usize> = (0..running.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            let mut line = format!(
                "   round {:>2}, swaps {}-{}:",
                round + 1,
                ks.start,
                ks.end - 1
            );
            for i in order {
                let a = &running[i];
                let m = measured_of(&mut measured, a.kind);
                // Found once per block: a sidecar fleet's are looked up in /proc.
                let pids = a.run.pids();
                let (started, steal) = (Instant::now(), stalls::steal_ticks());
                let cpu = (procs::cpu_ms(&[bench]), procs::cpu_ms(&pids));
                let who = a.kind.name();
                let swaps = swaps::run(&a.targets, ks.clone(), k.rate, &format!("{n}-{who}"));
                let outcome = swaps::collect(&swaps, &records, k.deadline.min(gap));
                // Saturating: a process of the approach that ended meanwhile takes its time along.
                let cpu = (
                    procs::cpu_ms(&[bench]).saturating_sub(cpu.0),
                    procs::cpu_ms(&pids).saturating_sub(cpu.1),
                );
                line += &block_summary(&who, &outcome, &meter.since(started, steal), cpu);
                m.block_p99.push(outcome.percentile(0.99));
                m.outcome.add(outcome);
                m.memory = m.memory.max(Memory::of(&pids));
                // An agent's work after its last signals (the chores 1 s after a change: the
                // state write, its Events) is over before the next approach's block begins,
                // as before its first: it lands on no one else's swaps.
                if let Running::Agent { agent, .. } = &a.run {
                    procs::settle(agent.pid(), SETTLED, Duration::from_secs(30));
                }
            }
            println!("{line}");
        }
        for a in &running {
            let Running::Agent { agent, before } = &a.run else {
                continue;
            };
            let who = a.kind.name();
            if measured_of(&mut measured, a.kind).outcome.misses > 0 {
                println!(
                    "   {who} missed swaps; its actions: {}",
                    agent.series("reloadlet_actions_total")
                );
            }
            procs::keep_smaps(agent.pid(), &format!("{:?}-{n}", a.kind));
            println!(
                "   {who}: {} signals counted, peak RSS {:.1} MiB",
                agent.metric(SIGNALED) - before,
                procs::peak_rss_mib(agent.pid())
            );
            if a.kind == Kind::Reloadlet && si == sizes.len() - 1 && !k.idle.is_zero() {
                summary.idle = Some(idle_wakeups(agent, k.idle));
            }
        }
        // Every approach stopped and its copy removed; the deletion written back now, not
        // during the bursts' swaps on the same disk.
        drop(running);
        nix::unistd::sync();
        drop(raised);
        if si == sizes.len() - 1 && k.bursts + k.held_bursts > 0 {
            for &kind in kinds
                .iter()
                .filter(|x| matches!(x, Kind::Reloadlet | Kind::Static))
            {
                let label = format!("{}-burst", kind.name());
                let log = node.path(&format!("reloadlet-{n}-{label}.log"));
                let (agent, _) = start_settled(kind, &node.kubelet_root(), &log, &label);
                summary.bursts.push(bursts::run(
                    &agent,
                    kind,
                    &tg,
                    &records,
                    k.bursts,
                    k.held_bursts,
                ));
            }
        }
        for (kind, m) in measured {
            summary.rows.push(Row {
                volumes: n,
                kind: kind.name(),
                measured: m,
            });
        }
        if let Err(why) = sidecar {
            summary.rows.push(Row {
                volumes: n,
                kind: "sidecar".into(),
                measured: Measured {
                    note: why,
                    ..Measured::default()
                },
            });
        }
    }
    summary.print(k);
}

/// One block's p99 and max, beside what the machine did meanwhile (a block's tail is only
/// the approach's when the machine was quiet).
/// `cpu`: CPU time in ms meanwhile of the benchmark's process (the simulated API server,
/// the kubelet, the stall meter) and of the approach's processes.
fn block_summary(who: &str, outcome: &Outcome, seen: &stalls::Seen, cpu: (u64, u64)) -> String {
    format!(
        " {who} {:.2}/{:.1} [cpu {}+{}]{}",
        outcome.percentile(0.99),
        outcome.max(),
        cpu.0,
        cpu.1,
        if seen.stalls + seen.steal_ms as usize > 0 {
            format!(
                " ({} late, worst {:.1}; steal {})",
                seen.stalls,
                seen.worst.as_secs_f64() * 1e3,
                seen.steal_ms
            )
        } else {
            String::new()
        }
    )
}

/// What was measured of `kind` (every kind of the size has its entry).
fn measured_of(measured: &mut [(Kind, Measured)], kind: Kind) -> &mut Measured {
    &mut measured
        .iter_mut()
        .find(|(x, _)| *x == kind)
        .expect("every kind of the size is measured")
        .1
}

/// One approach, running for a whole size on its own copy of the volumes.
struct Approach {
    kind: Kind,
    /// Declared before the copy: stopped before its directories go.
    run: Running,
    targets: Vec<Target>,
    _copy: roots::Copy,
}

enum Running {
    Floor(Floor),
    Sidecars(Sidecars),
    /// With its count of signals before the first block.
    Agent {
        agent: Agent,
        before: f64,
    },
}

impl Running {
    fn pids(&self) -> Vec<i32> {
        match self {
            Running::Floor(f) => f.pids(),
            Running::Sidecars(s) => s.pids(),
            Running::Agent { agent, .. } => vec![agent.pid()],
        }
    }
}

/// How long an agent is to be still (no thread woken) before its first block and after each.
pub const SETTLED: Duration = Duration::from_millis(1000);

const SIGNALED: &str = "reloadlet_actions_total{action=\"signal\",outcome=\"signaled\"}";

/// Whether a fleet of `n` sidecars can run here: `Ok(None)` as is, `Ok(Some(limit))` after
/// raising `fs.inotify.max_user_instances` to `limit` for the time of the fleet, `Err(why)`
/// when it cannot (or would need more than `BENCH_SIDECAR_MAX`, default 200, instances).
/// The limit is per user: linux `fs/notify/inotify/inotify_user.c` backs the
/// `max_user_instances` sysctl with `ucount_max[UCOUNT_INOTIFY_INSTANCES]` (128 from
/// `inotify_user_setup`), charged per UID of a user namespace when an instance is created.
fn sidecar_plan(n: usize) -> Result<Option<usize>, String> {
    if !Sidecars::available() {
        return Err("inotifywait not installed (Debian: inotify-tools)".into());
    }
    let limit = procs::max_user_instances();
    let in_use = procs::root_inotify_fds();
    let max = env("BENCH_SIDECAR_MAX", 200);
    if n > max {
        return Err(format!(
            "impossible: {n} sidecars hold {n} inotify instances; fs.inotify.max_user_instances is {limit} per user ({in_use} in use by root now)"
        ));
    }
    // reloadlet and the floor run in between and hold one each; a margin for other users.
    let need = in_use + n + 8;
    Ok((need > limit).then_some(need))
}

/// Wakeups of every reloadlet thread over `window` with no swap, no pod change (after a
/// second to let the last signals' follow-up work finish), and how many threads ended.
fn idle_wakeups(agent: &Agent, window: Duration) -> (u64, usize, Duration) {
    std::thread::sleep(Duration::from_secs(1)); // settle before the idle window
    let before = procs::wakeups(agent.pid());
    std::thread::sleep(window); // the idle window itself
    let (woke, ended, who) = procs::wakeups_between(&before, &procs::wakeups(agent.pid()));
    if !who.is_empty() {
        println!("   idle window: {who}");
    }
    (woke, ended, window)
}
