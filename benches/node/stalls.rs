//! What the machine did to everyone during a turn, so that a turn's tail can be told apart
//! from the approach measured in it: a sleeper thread of the benchmark's own that asks to
//! wake every 5 ms and notes each wake-up 1 ms or more late (a runnable thread at the normal
//! policy kept off both CPUs that long: other load, or the hypervisor), and the CPUs' steal
//! time from `/proc/stat` (the 8th value of the `cpu` line, in USER_HZ ticks: time the
//! hypervisor ran someone else; proc(5)).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PERIOD: Duration = Duration::from_millis(5);
const LATE: Duration = Duration::from_millis(1);

pub struct StallMeter {
    stalls: Arc<Mutex<Vec<(Instant, Duration)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What a turn saw of the machine.
pub struct Seen {
    /// Wake-ups of the sleeper at least [`LATE`] late, and the latest of them.
    pub stalls: usize,
    pub worst: Duration,
    /// Steal time, in ms.
    pub steal_ms: u64,
}

impl StallMeter {
    pub fn start() -> StallMeter {
        let stalls = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (stalls.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("stall-meter".into())
            .spawn(move || {
                while !st.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    std::thread::sleep(PERIOD);
                    let late = asked.elapsed().saturating_sub(PERIOD);
                    if late >= LATE {
                        s.lock().unwrap().push((asked, late));
                    }
                }
            })
            .ok();
        StallMeter {
            stalls,
            stop,
            thread,
        }
    }

    /// What happened between `from` and now; `steal_from`: [`steal_ticks`] at `from`.
    pub fn since(&self, from: Instant, steal_from: Option<u64>) -> Seen {
        let stalls = self.stalls.lock().unwrap();
        let during: Vec<Duration> = stalls
            .iter()
            .filter(|(at, _)| *at >= from)
            .map(|(_, late)| *late)
            .collect();
        let steal_ms = match (steal_from, steal_ticks()) {
            // USER_HZ is 100 on Linux (sysconf(_SC_CLK_TCK)).
            (Some(a), Some(b)) => b.saturating_sub(a) * 10,
            _ => 0,
        };
        Seen {
            stalls: during.len(),
            worst: during.into_iter().max().unwrap_or_default(),
            steal_ms,
        }
    }
}

impl Drop for StallMeter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The CPUs' steal time so far, in USER_HZ ticks.
pub fn steal_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().next()?.strip_prefix("cpu ")?;
    cpu.split_whitespace().nth(7)?.parse().ok()
}
