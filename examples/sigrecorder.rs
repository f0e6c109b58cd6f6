//! A stand-in container process for the integration tests, the demo and the benchmark: records every signal it receives.
//!
//! `sigrecorder <out-file> [--child <child-out-file>] [--mode signalfd|sigwait|handler|ignore]`
//!
//! Each received signal appends `<NAME> <CLOCK_MONOTONIC ns>\n` to `<out-file>` (opened with
//! O_APPEND, one write per line). SIGTERM and SIGINT are recorded, then the process exits.
//! `--child` first forks a child that records into its own file (a "child process" decoy whose
//! parent is inside the container cgroup).
//!
//! `--mode` is how it takes signals, each the way a real program does, each seen differently
//! in `/proc/<pid>/status`:
//! - `signalfd` (default): blocked, read from a signalfd (`SigBlk` shows them at all times).
//! - `sigwait`: blocked, taken with `sigwait` (while it waits, the kernel moves them out of
//!   `SigBlk`, so it looks as if nothing handled them).
//! - `handler`: a `sigaction` handler (`SigCgt`).
//! - `ignore`: `SIG_IGN` for all but SIGTERM and SIGINT (`SigIgn`); records nothing.

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::sys::signalfd::SignalFd;
use nix::time::{clock_gettime, ClockId};
use nix::unistd::{fork, ForkResult};
use std::fs::OpenOptions;
use std::io::Write;
use std::sync::atomic::{AtomicI32, Ordering};

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

/// The write end of the self-pipe the `handler` mode's handler writes signal numbers to.
static PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(signo: libc::c_int) {
    let byte = signo as u8;
    // SAFETY: write(2) is async-signal-safe; the buffer is one byte on the stack.
    unsafe {
        libc::write(
            PIPE_WRITE.load(Ordering::Relaxed),
            (&byte as *const u8).cast(),
            1,
        );
    }
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("sigrecorder: {what}: {e}");
    std::process::exit(1);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(out) = args.get(1).cloned() else {
        eprintln!("usage: sigrecorder <out-file> [--child <child-out-file>] [--mode signalfd|sigwait|handler|ignore]");
        std::process::exit(2);
    };
    let option = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let mode = option("--mode").unwrap_or_else(|| "signalfd".into());
    let mut set = SigSet::empty();
    for s in RECORDED {
        set.add(s);
    }
    // Block before forking so the child inherits the mask: no signal is ever lost or fatal.
    if let Err(e) = set.thread_block() {
        fail("cannot block signals", e);
    }
    let mut target = out;
    if let Some(child_out) = option("--child") {
        // SAFETY: single-threaded program; the child only continues this same loop.
        if let Ok(ForkResult::Child) = unsafe { fork() } {
            target = child_out;
        }
    }
    match mode.as_str() {
        "signalfd" => {
            let fd = SignalFd::new(&set).unwrap_or_else(|e| fail("signalfd", e));
            record(&target, "READY");
            loop {
                let Ok(Some(info)) = fd.read_signal() else {
                    continue;
                };
                let Ok(sig) = Signal::try_from(info.ssi_signo as i32) else {
                    continue;
                };
                on_received(&target, sig);
            }
        }
        "sigwait" => {
            record(&target, "READY");
            loop {
                let Ok(sig) = set.wait() else { continue };
                on_received(&target, sig);
            }
        }
        "handler" => {
            let (read, write) = nix::unistd::pipe().unwrap_or_else(|e| fail("pipe", e));
            PIPE_WRITE.store(
                std::os::fd::IntoRawFd::into_raw_fd(write),
                Ordering::Relaxed,
            );
            let action = SigAction::new(
                SigHandler::Handler(on_signal),
                SaFlags::SA_RESTART,
                SigSet::empty(),
            );
            for s in RECORDED {
                // SAFETY: the handler only calls write(2).
                unsafe { sigaction(s, &action) }.unwrap_or_else(|e| fail("sigaction", e));
            }
            if let Err(e) = set.thread_unblock() {
                fail("cannot unblock signals", e);
            }
            record(&target, "READY");
            let mut byte = [0u8; 1];
            loop {
                if nix::unistd::read(&read, &mut byte) != Ok(1) {
                    continue;
                }
                if let Ok(sig) = Signal::try_from(byte[0] as i32) {
                    on_received(&target, sig);
                }
            }
        }
        "ignore" => {
            for s in RECORDED {
                if !matches!(s, Signal::SIGTERM | Signal::SIGINT) {
                    // SAFETY: SIG_IGN installs no code.
                    unsafe { nix::sys::signal::signal(s, SigHandler::SigIgn) }
                        .unwrap_or_else(|e| fail("signal", e));
                }
            }
            if let Err(e) = set.thread_unblock() {
                fail("cannot unblock signals", e);
            }
            record(&target, "READY");
            loop {
                nix::unistd::pause();
            }
        }
        other => fail("unknown --mode", other),
    }
}

fn on_received(target: &str, sig: Signal) {
    record(target, sig.as_str());
    if matches!(sig, Signal::SIGTERM | Signal::SIGINT) {
        std::process::exit(0);
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
