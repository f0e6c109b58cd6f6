//! A stand-in container process for the integration tests, the demo and the benchmark: records every signal it receives.
//!
//! `sigrecorder <out-file> [--child <child-out-file>]`
//!
//! Each received signal appends `<NAME> <CLOCK_MONOTONIC ns>\n` to `<out-file>` (opened with
//! O_APPEND, one write per line). SIGTERM and SIGINT are recorded, then the process exits.
//! `--child` first forks a child that records into its own file (a "child process" decoy whose
//! parent is inside the container cgroup).

use nix::sys::signal::{SigSet, Signal};
use nix::time::{clock_gettime, ClockId};
use nix::unistd::{fork, ForkResult};
use std::fs::OpenOptions;
use std::io::Write;

const RECORDED: [Signal; 8] = [
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGTERM,
    Signal::SIGWINCH,
    Signal::SIGALRM,
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(out) = args.get(1).cloned() else {
        eprintln!("usage: sigrecorder <out-file> [--child <child-out-file>]");
        std::process::exit(2);
    };
    let mut set = SigSet::empty();
    for s in RECORDED {
        set.add(s);
    }
    // Block before forking so the child inherits the mask: no signal is ever lost or fatal.
    if let Err(e) = set.thread_block() {
        eprintln!("sigrecorder: cannot block signals: {e}");
        std::process::exit(1);
    }
    let mut target = out;
    if args.get(2).map(String::as_str) == Some("--child") {
        if let Some(child_out) = args.get(3) {
            // SAFETY: single-threaded program; the child only continues this same loop.
            if let Ok(ForkResult::Child) = unsafe { fork() } {
                target = child_out.clone();
            }
        }
    }
    record(&target, "READY");
    loop {
        let Ok(sig) = set.wait() else { continue };
        record(&target, sig.as_str());
        if matches!(sig, Signal::SIGTERM | Signal::SIGINT) {
            std::process::exit(0);
        }
    }
}

fn record(path: &str, name: &str) {
    let ns = clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as i128 * 1_000_000_000 + t.tv_nsec() as i128)
        .unwrap_or(0);
    if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write_all(format!("{name} {ns}\n").as_bytes());
    }
}
