//! Bursts, after the signal turns at the large size: every volume of the node swapped at
//! once, `BENCH_BURSTS` (8) times, as an agent meets them when it starts after changes made
//! while it was down, or when a ConfigMap that most pods mount (a CA bundle that
//! trust-manager copies into every namespace) changes and the controller nudges every pod.
//! How long until the last pod is signaled, and what the agent holds afterwards. Then
//! `BENCH_HELD_BURSTS` (4) more, each written while the agent is stopped, as a frozen cgroup
//! holds it: let go, it reads the whole backlog at once, which a live burst never makes it do.
//! That left more heap behind than the same number of swaps spread out (docs/architecture.md,
//! "Memory after a backlog").

use crate::approaches::{Agent, Target};
use crate::procs::{self, Memory};
use crate::swaps;
use crate::{Kind, SETTLED};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use nodesim::bench_support::monotonic_ns;
use std::path::PathBuf;
use std::time::Duration;

/// Swaps per second within a burst (`examples/swapper.rs`, one writer): 1,000 volumes in
/// about 0.2 s.
const RATE: f64 = 5000.0;

/// A pod not signaled this long after its last swap of a burst is missed.
const DEADLINE: Duration = Duration::from_secs(10);

/// What the bursts came to for one agent binary.
pub struct Bursts {
    pub kind: Kind,
    pub rounds: usize,
    pub held_rounds: usize,
    pub volumes: usize,
    pub pods: usize,
    /// Each live burst's span, first swap to the last pod's signal.
    pub spans_ms: Vec<f64>,
    /// Each held burst's span, the agent's thaw to the last pod's signal.
    pub held_ms: Vec<f64>,
    pub missed: usize,
    /// After the last live burst, the agent still again.
    pub memory: Memory,
    /// After the last held burst, the agent still again.
    pub held_memory: Memory,
}

/// `rounds` bursts of every target against `agent` (started and still), each waited for and
/// followed by the agent's stillness (its work after the signals: hashes, state, Events);
/// then `held` bursts written while the agent is stopped (`SIGSTOP`, as a frozen cgroup
/// holds it), so that it meets the whole burst queued at once when it is let go (`SIGCONT`).
pub fn run(
    agent: &Agent,
    kind: Kind,
    targets: &[Target],
    records: &[PathBuf],
    rounds: usize,
    held: usize,
) -> Bursts {
    let mut out = Bursts {
        kind,
        rounds,
        held_rounds: held,
        volumes: targets.len(),
        pods: 0,
        spans_ms: Vec::new(),
        held_ms: Vec::new(),
        missed: 0,
        memory: Memory::default(),
        held_memory: Memory::default(),
    };
    let pid = Pid::from_raw(agent.pid());
    for round in 0..rounds + held {
        let tag = format!("burst-{kind:?}-{round}");
        let hold = round >= rounds;
        if hold {
            kill(pid, Signal::SIGSTOP).expect("stop the agent");
        }
        let made = swaps::run(targets, 0..targets.len(), RATE, &tag);
        let thawed = monotonic_ns();
        if hold {
            kill(pid, Signal::SIGCONT).expect("let the agent go");
        }
        let burst = swaps::collect_burst(&made, records, DEADLINE);
        procs::settle(agent.pid(), SETTLED, Duration::from_secs(30));
        out.pods = burst.pods;
        out.missed += burst.missed;
        if hold {
            // No pod answered: no span (the misses say so).
            let span = (burst.last_ns > 0).then(|| (burst.last_ns - thawed).max(0) as f64 / 1e6);
            out.held_ms.push(span.unwrap_or(f64::NAN));
        } else {
            out.spans_ms.push(burst.span_ms);
        }
        if round + 1 == rounds {
            out.memory = Memory::of(&[agent.pid()]);
            procs::keep_smaps(agent.pid(), &format!("{kind:?}-bursts"));
        }
    }
    let who = format!("{kind:?}").to_lowercase();
    if rounds > 0 {
        let (lo, hi) = range(&out.spans_ms);
        println!(
            "   {who} bursts: {rounds} x {} swaps of {} pods at once; last pod signaled {lo:.0}-{hi:.0} ms after the first swap; then RSS {:.1} MiB",
            out.volumes,
            out.pods,
            out.memory.rss_mib(),
        );
    }
    if held > 0 {
        out.held_memory = Memory::of(&[agent.pid()]);
        procs::keep_smaps(agent.pid(), &format!("{kind:?}-held-bursts"));
        let (lo, hi) = range(&out.held_ms);
        println!(
            "   {who} held bursts: {held} x the same, written while the agent was stopped; last pod signaled {lo:.0}-{hi:.0} ms after it went on; then RSS {:.1} MiB",
            out.held_memory.rss_mib(),
        );
    }
    println!(
        "   {who}: {} pods missed in all bursts; peak RSS {:.1} MiB",
        out.missed,
        procs::peak_rss_mib(agent.pid())
    );
    out
}

/// The smallest and largest of `v` (NaN when empty).
fn range(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::NAN, f64::min);
    let hi = v.iter().copied().fold(f64::NAN, f64::max);
    (lo, hi)
}
