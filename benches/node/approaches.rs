//! The three ways of turning a `..data` swap into a SIGHUP that the benchmark compares, each
//! started on the same simulated node, on its own copy of the same volumes ([`crate::roots`]),
//! and stopped (with every process it started) on drop:
//!
//! - [`Floor`]: `examples/floor.rs`, one process blocked in `read(2)` on one inotify fd.
//! - [`Sidecars`]: one `inotifywait` + `kill` shell loop per volume (inotify-tools).
//! - [`Agent`]: reloadlet itself, `--debounce 0s`.

use crate::procs;
use crate::NODE;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use nodesim::node::SimNode;
use nodesim::probe::http_get;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A volume to watch and the PID its swap must signal.
#[derive(Clone, Debug)]
pub struct Target {
    pub dir: PathBuf,
    pub pid: i32,
    /// Index of the pod (and its record file).
    pub pod: usize,
}

/// A built example next to the benchmark binary (`target/release/examples/<name>`).
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe.parent().and_then(Path::parent).unwrap();
    let p = target.join("examples").join(name);
    assert!(
        p.exists(),
        "{} missing: run hack/bench.sh (it builds the examples first)",
        p.display()
    );
    p
}

fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

pub struct Floor {
    child: Child,
}

impl Floor {
    pub fn start(targets: &[Target]) -> Floor {
        let mut child = Command::new(example("floor"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut map = String::new();
        for t in targets {
            map += &format!("{} {}\n", t.pid, t.dir.display());
        }
        child
            .stdin
            .take()
            .unwrap()
            .write_all(map.as_bytes())
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(
            line.trim(),
            format!("armed {}", targets.len()),
            "floor did not arm"
        );
        Floor { child }
    }

    pub fn pids(&self) -> Vec<i32> {
        vec![self.child.id() as i32]
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// The sidecar of configmap-reload and friends, reduced to its shell form.
const SIDECAR: &str = r#"inotifywait -m -e moved_to --format %f "$1" | while read -r f; do [ "$f" = ..data ] && kill -HUP "$2"; done"#;

pub struct Sidecars {
    /// The `bash` of each sidecar, leader of its own process group (its `inotifywait` and
    /// the subshell running the loop are in the same group).
    leaders: Vec<Child>,
}

impl Sidecars {
    pub fn available() -> bool {
        Command::new("inotifywait")
            .arg("--help")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    }

    /// Starts one sidecar per target and waits until every `inotifywait` reports its watch.
    pub fn start(targets: &[Target], logs: &Path) -> Result<Sidecars, String> {
        std::fs::create_dir_all(logs).unwrap();
        let mut fleet = Sidecars {
            leaders: Vec::new(),
        };
        let mut log_files = Vec::new();
        for (n, t) in targets.iter().enumerate() {
            let log = logs.join(format!("sidecar-{n}.log"));
            let child = Command::new("bash")
                .args(["-c", SIDECAR, "sidecar"])
                .arg(&t.dir)
                .arg(t.pid.to_string())
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .map_err(|e| format!("spawning sidecar {n}: {e}"))?;
            fleet.leaders.push(child);
            log_files.push(log);
        }
        let t0 = Instant::now();
        for log in &log_files {
            loop {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                if text.contains("Watches established") {
                    break;
                }
                if text.contains("Couldn't") || text.contains("Failed") {
                    return Err(format!("a sidecar failed: {}", text.trim()));
                }
                if t0.elapsed() > Duration::from_secs(60) {
                    return Err("sidecars not watching after 60 s".into());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(fleet)
    }

    /// Every process of the fleet: per volume a `bash`, its `inotifywait` and its subshell.
    pub fn pids(&self) -> Vec<i32> {
        let leaders: Vec<i32> = self.leaders.iter().map(|c| c.id() as i32).collect();
        procs::in_process_groups(&leaders)
    }
}

impl Drop for Sidecars {
    fn drop(&mut self) {
        for c in &mut self.leaders {
            let _ = killpg(Pid::from_raw(c.id() as i32), Signal::SIGKILL);
            let _ = c.wait();
        }
    }
}

/// reloadlet under test, on a kubelet root (the node's, or an approach's copy of its volumes:
/// [`crate::roots`]) and the node's API server.
pub struct Agent {
    child: Child,
    listen: String,
    pub ready_after: Duration,
}

impl Agent {
    /// The glibc build this benchmark was compiled with (`RELOADLET_BIN` overrides it).
    pub fn glibc_binary() -> PathBuf {
        std::env::var_os("RELOADLET_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_reloadlet")))
    }

    /// The image's static (musl) binary, when `BENCH_STATIC_BIN` names one (`hack/bench.sh`
    /// builds it with `hack/build-release.sh` where musl-gcc is installed).
    pub fn static_binary() -> Option<PathBuf> {
        std::env::var_os("BENCH_STATIC_BIN")
            .map(PathBuf::from)
            .filter(|p| p.is_file())
    }

    /// Starts reloadlet (`bin`) with `--debounce 0s` on `kubelet_root` and waits for /readyz.
    pub fn start(
        node: &SimNode,
        kubelet_root: &Path,
        bin: &Path,
        log: &Path,
        state_dir: &Path,
    ) -> Agent {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let listen = format!("127.0.0.1:{port}");
        let t0 = Instant::now();
        let child = Command::new(bin)
            .args(["--node-name", NODE, "--debounce", "0s", "--listen", &listen])
            // Every swap of the run is measured: the flap breaker (10/10m by default) would
            // hold a pod swapped more often (docs/pacing.md).
            .args(["--flap-threshold", "off"])
            .arg("--kubelet-root")
            .arg(kubelet_root)
            .arg("--state-dir")
            .arg(state_dir)
            .env("KUBECONFIG", node.kubeconfig())
            .env("RUST_LOG", "warn,reloadlet=info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let mut agent = Agent {
            child,
            listen,
            ready_after: Duration::ZERO,
        };
        while http_get(&agent.listen, "/readyz").is_none_or(|(c, _)| c != 200) {
            assert!(t0.elapsed() < Duration::from_secs(60), "not ready");
            assert!(
                agent.child.try_wait().unwrap().is_none(),
                "reloadlet exited; see {}",
                log.display()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        agent.ready_after = t0.elapsed();
        agent
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn metric(&self, series: &str) -> f64 {
        let text = http_get(&self.listen, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default();
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                l.rsplit_once(' ')
                    .filter(|(n, _)| *n == series)
                    .and_then(|(_, v)| v.parse().ok())
            })
            .unwrap_or(0.0)
    }

    /// Every sample of a metric family, on one line.
    pub fn series(&self, family: &str) -> String {
        let text = http_get(&self.listen, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default();
        text.lines()
            .filter(|l| l.starts_with(family))
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn wait_metric(&self, series: &str, at_least: f64) {
        let t0 = Instant::now();
        while self.metric(series) < at_least {
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "{series} never reached {at_least}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}
