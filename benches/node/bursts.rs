//! Bursts, after the signal turns at the large size: every volume of the node swapped at
//! once, `BENCH_BURSTS` (8) times, as an agent meets them when it starts after changes made
//! while it was down, or when a ConfigMap that most pods mount (a CA bundle that
//! trust-manager copies into every namespace) changes and the controller nudges every pod.
//! How long until the last pod is signaled, and what the agent holds afterwards: bursts left
//! more heap behind than the same number of swaps spread out (docs/architecture.md, "Can the
//! benchmark tell our tail from the machine's?").

use crate::approaches::{Agent, Target};
use crate::procs::{self, Memory};
use crate::swaps;
use crate::{Kind, SETTLED};
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
    pub volumes: usize,
    pub pods: usize,
    /// Each burst's span, first swap to the last pod's signal.
    pub spans_ms: Vec<f64>,
    pub missed: usize,
    /// After the last burst, the agent still again.
    pub memory: Memory,
}

/// `rounds` bursts of every target against `agent` (started and still), each waited for and
/// followed by the agent's stillness (its work after the signals: hashes, state, Events).
pub fn run(
    agent: &Agent,
    kind: Kind,
    targets: &[Target],
    records: &[PathBuf],
    rounds: usize,
) -> Bursts {
    let mut out = Bursts {
        kind,
        rounds,
        volumes: targets.len(),
        pods: 0,
        spans_ms: Vec::new(),
        missed: 0,
        memory: Memory::default(),
    };
    for round in 0..rounds {
        let tag = format!("burst-{kind:?}-{round}");
        let made = swaps::run(targets, 0..targets.len(), RATE, &tag);
        let burst = swaps::collect_burst(&made, records, DEADLINE);
        procs::settle(agent.pid(), SETTLED, Duration::from_secs(30));
        out.pods = burst.pods;
        out.spans_ms.push(burst.span_ms);
        out.missed += burst.missed;
    }
    out.memory = Memory::of(&[agent.pid()]);
    let mut spans = out.spans_ms.clone();
    spans.sort_by(f64::total_cmp);
    println!(
        "   {} bursts: {rounds} x {} swaps of {} pods at once; last pod signaled {:.0}-{:.0} ms after the first swap; {} pods missed; then RSS {:.1} MiB (peak {:.1})",
        format!("{kind:?}").to_lowercase(),
        out.volumes,
        out.pods,
        spans.first().copied().unwrap_or(f64::NAN),
        spans.last().copied().unwrap_or(f64::NAN),
        out.missed,
        out.memory.rss_mib(),
        procs::peak_rss_mib(agent.pid())
    );
    out
}
