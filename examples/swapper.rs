//! The benchmark's writer (`hack/bench.sh`), in a process of its own as the kubelet is: the
//! watcher under test never shares an address space, an allocator or a runtime with the
//! process that swaps its volumes.
//!
//! `swapper <rate> < schedule`: one `<volume dir>\t<bytes>` per line; after stdin closes,
//! performs the kubelet AtomicWriter update of each line in order, open loop at `rate` per
//! second (line `k` is due at `start + k / rate` whether or not earlier ones were answered),
//! and prints for each the `CLOCK_MONOTONIC` nanoseconds read just before its
//! `rename(..data_tmp, ..data)`, one per line, in the same order.

use bench_support::timed_update;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn main() {
    let rate: f64 = std::env::args()
        .nth(1)
        .and_then(|r| r.parse().ok())
        .filter(|r: &f64| *r > 0.0)
        .unwrap_or_else(|| die("usage: swapper <rate per second> < schedule"));
    let schedule: Vec<(PathBuf, String)> = std::io::stdin()
        .lock()
        .lines()
        .map(|l| l.unwrap_or_else(|e| die(&format!("reading the schedule: {e}"))))
        .filter_map(|l| {
            l.split_once('\t')
                .map(|(dir, data)| (PathBuf::from(dir), data.to_owned()))
        })
        .collect();
    let start = Instant::now();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut times = Vec::with_capacity(schedule.len());
    for (k, (dir, data)) in schedule.iter().enumerate() {
        let due = start + Duration::from_secs_f64(k as f64 / rate);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait); // the open-loop schedule
        }
        let at = timed_update(dir, "k", data.as_bytes())
            .unwrap_or_else(|e| die(&format!("swapping {}: {e}", dir.display())));
        times.push(at);
    }
    for at in times {
        let _ = writeln!(out, "{at}");
    }
    let _ = out.flush();
}

fn die(msg: &str) -> ! {
    eprintln!("swapper: {msg}");
    std::process::exit(2)
}
