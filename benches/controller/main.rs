//! `cargo bench --bench controller` (the last step of `hack/bench.sh`), as root: the numbers
//! of fast projection (`reloadlet controller`, issue 11), each printed with PASS/FAIL
//! against the bar.
//!
//! 1. latency (`latency.rs`): ConfigMap updated through the API → SIGHUP received, with the
//!    controller and without (the kubelet's periodic sync), on a node with the kubelet's
//!    real sync timing; agent and controller at their default flags. About 2 minutes;
//!    `BENCH_CTL_SLOW=0` skips the case without the controller (then about 40 s).
//! 2. scale (`scale.rs`): `BENCH_CTL_PODS` (5,000) pods over `BENCH_CTL_CONFIGMAPS` (2,000)
//!    ConfigMaps, `BENCH_CTL_CHANGED` (20) of them changed at once: the controller's RSS,
//!    watches per kind, requests per change.
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
    pub configmaps: usize,
    pub changed: usize,
}

fn main() {
    let knobs = Knobs {
        samples: env("BENCH_CTL_SAMPLES", 60).max(1),
        gap: Duration::from_millis(env("BENCH_CTL_GAP_MS", 400) as u64),
        slow: env("BENCH_CTL_SLOW", 40),
        pods: env("BENCH_CTL_PODS", 5000).max(1),
        configmaps: env("BENCH_CTL_CONFIGMAPS", 2000).max(1),
        changed: env("BENCH_CTL_CHANGED", 20).max(1),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let ok = rt.block_on(async {
        let mut ok = true;
        if env("BENCH_CTL_LATENCY", 1) != 0 {
            ok &= latency::run(&knobs).await;
        }
        if env("BENCH_CTL_SCALE", 1) != 0 {
            ok &= scale::run(&knobs).await;
        }
        ok
    });
    if !ok {
        std::process::exit(1);
    }
}
