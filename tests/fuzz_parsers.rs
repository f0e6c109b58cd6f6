//! The fuzz targets' properties (`fuzz/checks.rs`) on stable Rust: a bounded random
//! search over the seed corpus, mutations of it, and random bytes. cargo-fuzz
//! (`hack/fuzz.sh`, nightly) searches the same properties with coverage guidance.
//!
//! `RELOADLET_FUZZ_ITERS` (default 50000) and `RELOADLET_FUZZ_SEED` tune a run; a failure
//! prints the seed and the input so it can be replayed.

#[path = "../fuzz/checks.rs"]
mod checks;
#[path = "support/rng.rs"]
mod rng;

use rng::Rng;
use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

/// Fragments that make random inputs reach the interesting branches.
const TOKENS: &[&str] = &[
    "/",
    ":",
    "0::",
    "1:name=systemd:",
    "12:cpu,cpuacct:",
    "\n",
    "/../..",
    "pod",
    "-pod",
    "_",
    "-",
    ".slice",
    ".scope",
    ".mount",
    "kubepods",
    "kubepods-burstable",
    "kubepods-besteffort",
    "burstable",
    "cri-containerd-",
    "crio-",
    "crio-conmon-",
    "docker-",
    ":cri-containerd:",
    "containerd://",
    "cri-o://",
    "docker://",
    "7d3c1f0a-2b4e-4c6d-8e9f-0a1b2c3d4e5f",
    "7d3c1f0a_2b4e_4c6d_8e9f_0a1b2c3d4e5f",
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "0123456789ABCDEF",
    "é",
    "\u{0}",
    "\r",
];

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut seeds: Vec<Vec<u8>> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|entry| fs::read(entry.unwrap().path()).unwrap())
        .collect();
    seeds.sort();
    assert!(!seeds.is_empty(), "empty corpus {}", dir.display());
    seeds
}

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut data = match rng.below(4) {
        0 => (0..rng.below(200)).map(|_| rng.next() as u8).collect(),
        1 => (0..rng.below(12))
            .flat_map(|_| TOKENS[rng.below(TOKENS.len())].bytes())
            .collect(),
        _ => seeds[rng.below(seeds.len())].clone(),
    };
    for _ in 0..rng.below(6) {
        let at = rng.below(data.len() + 1);
        match rng.below(5) {
            0 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] ^= 1 << rng.below(8);
            }
            1 if !data.is_empty() => {
                let end = (at + rng.below(16)).min(data.len());
                data.drain(at.min(end)..end);
            }
            2 => {
                let token = TOKENS[rng.below(TOKENS.len())].as_bytes();
                data.splice(at..at, token.iter().copied());
            }
            3 if !data.is_empty() => {
                // Splice in a slice of another seed.
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len());
                let to = (from + rng.below(64)).min(other.len());
                data.splice(at..at, other[from..to].iter().copied());
            }
            _ => data.truncate(at),
        }
    }
    data
}

fn run(target: &str, check: fn(&[u8])) {
    let iters: usize = std::env::var("RELOADLET_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let seed = rng::seed(0x5eed_2026);
    let seeds = corpus(target);
    let mut rng = Rng(seed);
    let inputs = seeds
        .iter()
        .cloned()
        .chain((0..iters).map(|_| mutate(&mut rng, &seeds)));
    for (i, input) in inputs.enumerate() {
        if catch_unwind(AssertUnwindSafe(|| check(&input))).is_err() {
            panic!(
                "{target}: property failed on input #{i} (seed {seed}): {:?}",
                String::from_utf8_lossy(&input)
            );
        }
    }
}

#[test]
fn cgroup_paths_properties_hold() {
    run("cgroup_paths", checks::cgroup_paths);
}

#[test]
fn annotation_properties_hold() {
    run("annotations", checks::annotations);
}

#[test]
fn container_id_properties_hold() {
    run("container_id", checks::container_id);
}

#[test]
fn proc_status_properties_hold() {
    run("proc_status", checks::proc_status);
}

#[test]
fn the_search_reaches_containers_and_conmon() {
    // Guard against a search that never exercises the interesting branch.
    let seeds = corpus("cgroup_paths");
    let mut rng = Rng(1);
    let (mut containers, mut conmons) = (0, 0);
    for _ in 0..2_000 {
        let text = String::from_utf8_lossy(&mutate(&mut rng, &seeds)).into_owned();
        for line in reloadlet::host::process::cgroup::parse_proc_cgroup(&text) {
            match reloadlet::host::process::cgroup::container_of(&line.path) {
                Some(c) if c.conmon => conmons += 1,
                Some(_) => containers += 1,
                None => {}
            }
        }
    }
    assert!(
        containers > 100 && conmons > 5,
        "containers {containers}, conmon {conmons}"
    );
}
