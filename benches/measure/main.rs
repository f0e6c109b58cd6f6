//! `cargo bench --bench measure` (hack/bench.sh, step 5), as root: measurements on the
//! simulated node that print figures and judge nothing, kept here rather than as ignored tests
//! (a test that asserts nothing cannot fail, so it does not belong in the suite).
//!
//! 1. `csi` (`csi.rs`): CSI secret rotation → signal latency, atomic and in place, against
//!    the kubelet's own Secret volume swap (docs/csi.md "Latency"); about a minute.
//! 2. `apply` (`apply.rs`): ConfigMap apply → SIGHUP under the kubelet's real sync timing with
//!    the controller, for choosing `--debounce` (`RELOADLET_MEASURE_DEBOUNCE`, 1s;
//!    `RELOADLET_MEASURE_SAMPLES`, 10); about a minute.
//! 3. `env` (`env.rs`): 5,000 env-consumer pods over 2,000 ConfigMaps: ready and baselined
//!    times, ConfigMap change → first eviction request p50/p99, the controller's RSS.
//! 4. `actions` (`actions.rs`): `restart` vs `rollout` vs `evict` on a 3-replica Deployment
//!    behind a PDB: change → every replica serving the new config, pods created per change,
//!    ratios (issue #45 §4); about 3 minutes.
//!
//! `BENCH_MEASURE` picks some (comma-separated, default `csi,apply,env,actions`); the harness is the
//! integration tests' (tests/common, tests/support).

#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "../../tests/support/controller_process.rs"]
mod controller_process;

mod actions;
mod apply;
mod csi;
mod env;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    // On Ctrl-C or SIGTERM the measurements are dropped and their simulated nodes clean up.
    if let Err(e) = nodesim::interrupt::until_signalled(measure()).await {
        eprintln!("measure: {e}");
        std::process::exit(1);
    }
}

async fn measure() {
    let picked = std::env::var("BENCH_MEASURE").unwrap_or_else(|_| "csi,apply,env,actions".into());
    let picked: Vec<&str> = picked.split(',').map(str::trim).collect();
    if picked.contains(&"csi") {
        csi::rotation_to_signal_latency().await;
    }
    if picked.contains(&"apply") {
        apply::apply_to_sighup().await;
    }
    if picked.contains(&"env") {
        env::env_scale().await;
    }
    if picked.contains(&"actions") {
        actions::restart_rollout_evict().await;
    }
}
