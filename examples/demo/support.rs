//! What the demo's scenes share: the processes it starts (stopped again however the demo
//! ends), polling with deadlines, HTTP and metrics reads, and timestamped output.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant, SystemTime};

pub fn say(s: &str) {
    println!("\x1b[1m==> {s}\x1b[0m");
}

/// A process the demo started: on drop (success, error, Ctrl-C) SIGTERM, then SIGKILL if it
/// has not exited within 10 s. Only ever this child's own pid.
pub struct Started {
    pub child: Child,
}

impl Started {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails if the process has already exited (a bad flag, a crash): its log says why.
    pub fn check_alive(&mut self, what: &str, log: &Path) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            _ => Err(format!(
                "{what} exited; its log ({}):\n{}",
                log.display(),
                std::fs::read_to_string(log).unwrap_or_default()
            )),
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The reloadlet binary built beside the demo (`target/<profile>/reloadlet`), or
/// `RELOADLET_BIN`.
pub fn reloadlet_binary() -> PathBuf {
    if let Ok(p) = std::env::var("RELOADLET_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(Path::parent)
        .unwrap()
        .join("reloadlet")
}

/// Polls `f` every 10 ms until it answers, or fails after `timeout`.
pub async fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The body of a GET, trimmed.
pub fn http_get(addr: &str, path: &str) -> Option<String> {
    nodesim::probe::http_get(addr, path).map(|(_, body)| body.trim().to_owned())
}

/// One series of a Prometheus text exposition (`name{labels}` exactly as exported).
pub fn metric(addr: &str, series: &str) -> Option<f64> {
    http_get(addr, "/metrics")?
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(k, _)| *k == series)
        .and_then(|(_, v)| v.parse().ok())
}

/// Whole seconds: "20 s".
pub fn secs(d: Duration) -> String {
    format!("{:.0} s", d.as_secs_f64())
}

/// A free loopback address.
pub fn free_addr() -> Result<String, String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    Ok(format!("127.0.0.1:{port}"))
}

/// Wall-clock and elapsed times relative to one moment (the `kubectl apply`).
pub struct Timeline {
    pub t0: Instant,
    wall0: SystemTime,
}

impl Timeline {
    pub fn start() -> Timeline {
        Timeline {
            t0: Instant::now(),
            wall0: SystemTime::now(),
        }
    }

    pub fn since(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.t0)
    }

    /// `    19:20:01.123 UTC  t+ 0.412 s  <what>`
    pub fn line(&self, at: Instant, what: &str) {
        let wall = humantime::format_rfc3339_millis(self.wall0 + self.since(at)).to_string();
        println!(
            "    {} UTC  t+{:>7.3} s  {what}",
            &wall[11..23],
            self.since(at).as_secs_f64()
        );
    }
}
