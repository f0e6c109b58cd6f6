//! The update pattern and the latency measurement shared by every approach.
//!
//! Swaps run open loop at a fixed rate (swap `k` is due at `start + k / rate`, whether or not
//! earlier ones were answered), each a kubelet AtomicWriter update of one volume
//! ([`bench_support::timed_update`], clock read just before the rename), made by a
//! separate process (`examples/swapper.rs`), as the kubelet's are. The
//! targets are ordered so that consecutive swaps hit different pods; a pod is swapped again
//! only after `pods / rate` seconds.
//!
//! Each target process (`examples/sigrecorder.rs`) appends `SIGHUP <CLOCK_MONOTONIC ns>` when it
//! receives SIGHUP. Latency of swap `k` on pod `p` = the first SIGHUP of `p` at or after the
//! swap and before both the miss deadline and `p`'s next swap, minus the swap's clock. No such
//! SIGHUP: a miss. A SIGHUP matched to no swap: an extra signal.

use crate::approaches::{example, Target};
use nodesim::clock::monotonic_ns;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

#[derive(Clone, Copy, Debug)]
pub struct Swap {
    pub pod: usize,
    pub at_ns: i128,
}

/// Swaps `targets[k % len]` for `k` in `ks`, at `rate` per second, from a separate process
/// (`examples/swapper.rs`: the kubelet is not the watcher's process either). `tag` makes the
/// bytes differ from every earlier turn's: the kubelet never swaps unchanged content, and
/// reloadlet rightly ignores a swap that leaves the bytes as they were.
pub fn run(targets: &[Target], ks: std::ops::Range<usize>, rate: f64, tag: &str) -> Vec<Swap> {
    let mut child = Command::new(example("swapper"))
        .arg(rate.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the swapper starts");
    let picked: Vec<&Target> = ks.clone().map(|k| &targets[k % targets.len()]).collect();
    {
        let mut stdin = std::io::BufWriter::new(child.stdin.take().expect("piped stdin"));
        for (k, t) in ks.zip(&picked) {
            writeln!(stdin, "{}\t{tag}-{k}", t.dir.display()).expect("the schedule is written");
        }
    } // stdin closed: the swaps start
    let out = child.wait_with_output().expect("the swapper ends");
    assert!(out.status.success(), "the swapper failed: {}", out.status);
    let times: Vec<i128> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().parse().expect("a CLOCK_MONOTONIC time per swap"))
        .collect();
    assert_eq!(times.len(), picked.len(), "one time per swap");
    picked
        .iter()
        .zip(times)
        .map(|(t, at_ns)| Swap { pod: t.pod, at_ns })
        .collect()
}

/// What one approach did with one batch of swaps.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub lat_ms: Vec<f64>,
    pub misses: usize,
    pub extra: usize,
}

impl Outcome {
    pub fn add(&mut self, other: Outcome) {
        self.lat_ms.extend(other.lat_ms);
        self.misses += other.misses;
        self.extra += other.extra;
    }

    pub fn percentile(&self, p: f64) -> f64 {
        percentile(&self.lat_ms, p)
    }

    pub fn max(&self) -> f64 {
        self.lat_ms.iter().copied().fold(f64::NAN, f64::max)
    }
}

/// The `p` percentile (0..=1) of `values`, nearest rank; NaN for none.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    let mut v = values.to_vec();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// SIGHUP receipt times recorded in `file` at or after `since_ns`.
fn hups(file: &PathBuf, since_ns: i128) -> Vec<i128> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("SIGHUP "))
        .filter_map(|ns| ns.trim().parse().ok())
        .filter(|ns| *ns >= since_ns)
        .collect()
}

/// Waits (polling) until every swap has a SIGHUP or its window has closed, then matches.
/// `records[p]` is pod `p`'s record file; `deadline` the miss deadline.
pub fn collect(swaps: &[Swap], records: &[PathBuf], deadline: Duration) -> Outcome {
    let Some(first) = swaps.iter().map(|s| s.at_ns).min() else {
        return Outcome::default();
    };
    let last = swaps.iter().map(|s| s.at_ns).max().unwrap();
    let dl = deadline.as_nanos() as i128;
    let mut expected = vec![0usize; records.len()];
    for s in swaps {
        expected[s.pod] += 1;
    }
    loop {
        let complete = expected
            .iter()
            .enumerate()
            .all(|(p, n)| *n == 0 || hups(&records[p], first).len() >= *n);
        if complete || monotonic_ns() > last + dl {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut out = Outcome::default();
    let mut by_pod: Vec<Vec<(usize, i128)>> = vec![Vec::new(); records.len()];
    for (k, s) in swaps.iter().enumerate() {
        by_pod[s.pod].push((k, s.at_ns));
    }
    for (p, pod_swaps) in by_pod.iter().enumerate() {
        if pod_swaps.is_empty() {
            continue;
        }
        let got = hups(&records[p], first);
        let mut used = vec![false; got.len()];
        for (n, (_, at)) in pod_swaps.iter().enumerate() {
            let end = pod_swaps
                .get(n + 1)
                .map_or(at + dl, |(_, next)| (*next).min(at + dl));
            match got
                .iter()
                .enumerate()
                .find(|(i, ns)| !used[*i] && **ns >= *at && **ns < end)
            {
                Some((i, ns)) => {
                    used[i] = true;
                    out.lat_ms.push((ns - at) as f64 / 1e6);
                }
                None => out.misses += 1,
            }
        }
        out.extra += used.iter().filter(|u| !**u).count();
    }
    out
}

/// What one burst came to: every pod's swaps made at once ([`crate::bursts`]).
#[derive(Clone, Copy, Debug)]
pub struct Burst {
    /// The burst's first swap, on the CLOCK_MONOTONIC of the swaps.
    pub first_ns: i128,
    /// The last pod's first SIGHUP after its own last swap (`None`: no pod answered).
    pub last_ns: Option<i128>,
    /// Pods with no SIGHUP after their last swap within the deadline.
    pub missed: usize,
    pub pods: usize,
}

impl Burst {
    /// From `from_ns` (the first swap, or when a stopped agent was let go) to the last pod's
    /// signal; NaN when no pod answered.
    pub fn span_ms(&self, from_ns: i128) -> f64 {
        self.last_ns
            .map_or(f64::NAN, |last| (last - from_ns).max(0) as f64 / 1e6)
    }
}

/// Waits (polling) until every pod swapped in `swaps` has a SIGHUP at or after its last swap,
/// or `deadline` after the last swap. Several swaps of one pod may be answered by one SIGHUP
/// (an agent that reads them in one batch acts once): only the last swap is owed one.
pub fn collect_burst(swaps: &[Swap], records: &[PathBuf], deadline: Duration) -> Burst {
    let first_ns = swaps.iter().map(|s| s.at_ns).min().unwrap_or(0);
    let mut last_swap: std::collections::BTreeMap<usize, i128> = Default::default();
    for s in swaps {
        let at = last_swap.entry(s.pod).or_insert(s.at_ns);
        *at = (*at).max(s.at_ns);
    }
    let end = last_swap.values().max().copied().unwrap_or(0) + deadline.as_nanos() as i128;
    // Each pod's first SIGHUP after its last swap, once seen; only the others are read again.
    let mut answered: std::collections::BTreeMap<usize, i128> = Default::default();
    loop {
        for (p, at) in &last_swap {
            if !answered.contains_key(p) {
                if let Some(ns) = hups(&records[*p], *at).into_iter().min() {
                    answered.insert(*p, ns);
                }
            }
        }
        if answered.len() == last_swap.len() || monotonic_ns() > end {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Burst {
        first_ns,
        last_ns: answered.values().max().copied(),
        missed: last_swap.len() - answered.len(),
        pods: last_swap.len(),
    }
}
