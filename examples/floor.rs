//! The floor for the benchmark (`hack/bench.sh`): the least a watcher can do between the
//! kubelet's `..data` swap and the signal. One thread blocked in `read(2)` on one inotify fd
//! that watches every volume dir for `IN_MOVED_TO`; on `..data` it sends SIGHUP to the PID
//! given for that dir with `kill(2)`. Nothing else: no hashing, no pod lookup, no logging.
//!
//! `floor < map`, one `<pid> <volume dir>` per line on stdin. Prints `armed <n>` on stdout
//! once every watch is in place, then runs until killed.

use inotify::{Inotify, WatchMask};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::HashMap;
use std::io::{BufRead, Write};

fn main() {
    let mut inotify = Inotify::init().unwrap_or_else(|e| die(&format!("inotify_init1: {e}")));
    let mut targets = HashMap::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap_or_else(|e| die(&format!("reading the map: {e}")));
        let Some((pid, dir)) = line.split_once(' ') else {
            continue;
        };
        let pid: i32 = pid
            .parse()
            .unwrap_or_else(|_| die(&format!("bad PID in {line:?}")));
        let wd = inotify
            .watches()
            .add(dir, WatchMask::MOVED_TO | WatchMask::ONLYDIR)
            .unwrap_or_else(|e| die(&format!("watching {dir}: {e}")));
        targets.insert(wd, Pid::from_raw(pid));
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "armed {}", targets.len());
    let _ = out.flush();
    drop(out);
    let mut buf = [0u8; 16384];
    loop {
        let events = inotify
            .read_events_blocking(&mut buf)
            .unwrap_or_else(|e| die(&format!("read: {e}")));
        for e in events {
            if e.name.is_some_and(|n| n == "..data") {
                if let Some(pid) = targets.get(&e.wd) {
                    let _ = kill(*pid, Signal::SIGHUP);
                }
            }
        }
    }
}

fn die(msg: &str) -> ! {
    eprintln!("floor: {msg}");
    std::process::exit(1)
}
