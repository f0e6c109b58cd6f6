//! `cargo bench --bench controller` (the last step of `hack/bench.sh`), as root: the numbers
//! of fast projection (`reloadlet controller`, issue 11), each printed with PASS/FAIL
//! against the bar.
//!
//! 1. latency (`latency.rs`): ConfigMap updated through the API → SIGHUP received, with the
//!    controller and without (the kubelet's periodic sync), on a node with the kubelet's
//!    real sync timing; agent and controller at their default flags. About 2 minutes;
//!    `BENCH_CTL_SLOW=0` skips the case without the controller (then about 40 s).
//! 2. scale (`scale.rs`, issue 30 §3): `BENCH_CTL_PODS` (100,000) pods spread over
//!    `BENCH_CTL_NODES` (1,000) nodes that exist only in the API, `BENCH_CTL_CONFIGMAPS`
//!    (20,000) ConfigMaps, `BENCH_CTL_SECRETS` (10,000) Secrets, `BENCH_CTL_ENV_PODS` (5,000)
//!    env consumers, the controller with `--secrets` and `--max-nudges-per-second
//!    BENCH_CTL_RATE` (200): steady and peak RSS, ready and leading, memory per pod and per
//!    object; one ConfigMap consumed by `BENCH_CTL_HOT` (2,000) pods (pacing, every pod
//!    reached, no other pod written); `BENCH_CTL_FIFTY` (30) changes of objects with 50
//!    consumers each (first write p99). About 4 minutes at the default size on 2 cores.
//!
//! Knobs: `BENCH_CTL_SAMPLES` (60) pods with fast projection, changed `BENCH_CTL_GAP_MS`
//! (400) apart; `BENCH_CTL_SLOW` (40) pods without. `BENCH_CTL_LATENCY=0` or
//! `BENCH_CTL_SCALE=0` skip a part. The machine is shared: the figures are what this run
//! measured; the process exits non-zero when a bar is missed.

mod latency;
mod procs;
mod scale;

use std::time::Duration;

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
    pub samples: usize,
    pub gap: Duration,
    pub slow: usize,
    pub pods: usize,
    pub nodes: usize,
    pub configmaps: usize,
    pub secrets: usize,
    pub env_pods: usize,
    pub hot: usize,
    pub fifty: usize,
    pub rate: usize,
}

fn main() {
    let knobs = Knobs {
        samples: env("BENCH_CTL_SAMPLES", 60).max(1),
        gap: Duration::from_millis(env("BENCH_CTL_GAP_MS", 400) as u64),
        slow: env("BENCH_CTL_SLOW", 40),
        pods: env("BENCH_CTL_PODS", 100_000).max(1),
        nodes: env("BENCH_CTL_NODES", 1000).max(1),
        configmaps: env("BENCH_CTL_CONFIGMAPS", 20_000).max(1),
        secrets: env("BENCH_CTL_SECRETS", 10_000).max(1),
        env_pods: env("BENCH_CTL_ENV_PODS", 5000),
        hot: env("BENCH_CTL_HOT", 2000).max(1),
        fifty: env("BENCH_CTL_FIFTY", 30).max(1),
        rate: env("BENCH_CTL_RATE", 200).max(1),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    // On Ctrl-C or SIGTERM the benchmark is dropped and its simulated nodes clean up.
    let ok = rt.block_on(nodesim::interrupt::until_signalled(async {
        let mut ok = true;
        if env("BENCH_CTL_LATENCY", 1) != 0 {
            ok &= latency::run(&knobs).await;
        }
        if env("BENCH_CTL_SCALE", 1) != 0 {
            ok &= scale::run(&knobs).await;
        }
        ok
    }));
    let ok = ok.unwrap_or_else(|e| {
        eprintln!("bench: {e}");
        false
    });
    if !ok {
        std::process::exit(1);
    }
}
