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
use nodesim::clock::monotonic_ns;
use nodesim::hold;
use std::path::PathBuf;
use std::time::Duration;

/// Swaps per second within a burst (`examples/swapper.rs`, one writer): 1,000 volumes in
/// about 0.2 s.
const RATE: f64 = 5000.0;

/// A pod not signaled this long after its last swap of a burst is missed.
const DEADLINE: Duration = Duration::from_secs(10);

/// One kind of burst against one agent: live (the agent running) or held (written while it
/// was stopped).
#[derive(Default)]
pub struct Phase {
    pub rounds: usize,
    /// Each burst's span to the last pod's signal: from the first swap (live) or from the
    /// agent's release (held).
    pub spans_ms: Vec<f64>,
    /// After the phase's last burst, the agent still again.
    pub memory: Memory,
}

impl Phase {
    /// The shortest and the longest span (NaN when there is none).
    pub fn range_ms(&self) -> (f64, f64) {
        let lo = self.spans_ms.iter().copied().fold(f64::NAN, f64::min);
        let hi = self.spans_ms.iter().copied().fold(f64::NAN, f64::max);
        (lo, hi)
    }
}

/// What the bursts came to for one agent binary.
pub struct Bursts {
    pub kind: Kind,
    pub volumes: usize,
    pub pods: usize,
    pub live: Phase,
    pub held: Phase,
    /// Pods not signaled, over every burst.
    pub missed: usize,
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
        volumes: targets.len(),
        pods: 0,
        live: Phase {
            rounds,
            ..Phase::default()
        },
        held: Phase {
            rounds: held,
            ..Phase::default()
        },
        missed: 0,
    };
    let who = kind.name();
    for (held, phase) in [(false, &mut out.live), (true, &mut out.held)] {
        if phase.rounds == 0 {
            continue;
        }
        for round in 0..phase.rounds {
            let tag = format!("burst-{kind:?}-{held}-{round}");
            if held {
                hold::stop(agent.pid(), Duration::from_secs(10)).expect("stop the agent");
            }
            let made = swaps::run(targets, 0..targets.len(), RATE, &tag);
            let released = monotonic_ns();
            if held {
                hold::release(agent.pid()).expect("let the agent go");
            }
            let burst = swaps::collect_burst(&made, records, DEADLINE);
            procs::settle(agent.pid(), SETTLED, Duration::from_secs(30));
            out.pods = burst.pods;
            out.missed += burst.missed;
            let from = if held { released } else { burst.first_ns };
            phase.spans_ms.push(burst.span_ms(from));
        }
        phase.memory = Memory::of(&[agent.pid()]);
        let (name, from) = if held {
            ("held-bursts", "it went on")
        } else {
            ("bursts", "the first swap")
        };
        procs::keep_smaps(agent.pid(), &format!("{kind:?}-{name}"));
        let (lo, hi) = phase.range_ms();
        println!(
            "   {who} {}: {} x {} swaps of {} pods at once{}; last pod signaled {lo:.0}-{hi:.0} ms after {from}; then RSS {:.1} MiB",
            name.replace('-', " "),
            phase.rounds,
            out.volumes,
            out.pods,
            if held { ", written while the agent was stopped" } else { "" },
            phase.memory.rss_mib(),
        );
    }
    println!(
        "   {who}: {} pods missed in all bursts; peak RSS {:.1} MiB",
        out.missed,
        procs::peak_rss_mib(agent.pid())
    );
    out
}
