//! The two reloadlet processes the controller benchmark runs against the simulated node, at
//! their default flags (only where to listen, which node and where the kubelet keeps pods),
//! and what it reads about them from `/proc` and `/metrics`.

use nodesim::node::SimNode;
use nodesim::probe::http_get;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `reloadlet` (agent or controller), killed on drop.
pub struct Reloadlet {
    child: Child,
    listen: String,
    pub log: PathBuf,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn binary() -> String {
    std::env::var("RELOADLET_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_reloadlet").to_owned())
}

impl Reloadlet {
    /// `reloadlet controller` with leader election on (its default), as a Deployment's pod
    /// would run it (`POD_NAMESPACE`, `POD_NAME` from the downward API).
    pub fn controller(node: &SimNode, name: &str) -> Reloadlet {
        let listen = format!("127.0.0.1:{}", free_port());
        let log = node.path(&format!("{name}.log"));
        let mut cmd = Command::new(binary());
        cmd.args(["controller", "--listen", &listen])
            .env("POD_NAMESPACE", "reloadlet-system")
            .env("POD_NAME", name);
        Self::spawn(cmd, node, listen, log)
    }

    /// [`Reloadlet::controller`] with more flags.
    pub fn controller_with(node: &SimNode, name: &str, args: &[String]) -> Reloadlet {
        let listen = format!("127.0.0.1:{}", free_port());
        let log = node.path(&format!("{name}.log"));
        let mut cmd = Command::new(binary());
        cmd.args(["controller", "--listen", &listen])
            .args(args)
            .env("POD_NAMESPACE", "reloadlet-system")
            .env("POD_NAME", name);
        Self::spawn(cmd, node, listen, log)
    }

    /// The agent (`--debounce` and everything else at the default).
    pub fn agent(node: &SimNode, node_name: &str) -> Reloadlet {
        let listen = format!("127.0.0.1:{}", free_port());
        let log = node.path("agent.log");
        let state = node.path("agent-state");
        std::fs::create_dir_all(&state).unwrap();
        let mut cmd = Command::new(binary());
        cmd.args(["--node-name", node_name, "--listen", &listen])
            .arg("--kubelet-root")
            .arg(node.kubelet_root())
            .arg("--state-dir")
            .arg(&state);
        Self::spawn(cmd, node, listen, log)
    }

    /// Starts `cmd` and waits for `/readyz` (or its exit).
    fn spawn(mut cmd: Command, node: &SimNode, listen: String, log: PathBuf) -> Reloadlet {
        let child = cmd
            .env("KUBECONFIG", node.kubeconfig())
            .env("RUST_LOG", "warn,reloadlet=info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn reloadlet");
        let mut r = Reloadlet { child, listen, log };
        r.wait_until("ready", Duration::from_secs(120), |r| {
            http_get(&r.listen, "/readyz").is_some_and(|(c, _)| c == 200)
        });
        r
    }

    /// Polls `done` until it holds; panics after `timeout` or when the process exits.
    pub fn wait_until(&mut self, what: &str, timeout: Duration, done: impl Fn(&Self) -> bool) {
        let t0 = Instant::now();
        while !done(self) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("reloadlet exited ({status}); see {}", self.log.display());
            }
            assert!(
                t0.elapsed() < timeout,
                "reloadlet not {what} after {timeout:?}; see {}",
                self.log.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// One series of `/metrics` (0 when absent).
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

    /// Every non-zero sample of a metric family, on one line.
    pub fn series(&self, family: &str) -> String {
        let text = http_get(&self.listen, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default();
        text.lines()
            .filter(|l| l.starts_with(family) && !l.ends_with(" 0"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Drop for Reloadlet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A field of `/proc/<pid>/status` in MiB (`VmRSS:`, `VmHWM:`).
pub fn status_mib(pid: i32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix(field)
                    .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
            })
        })
        .unwrap_or(0.0)
        / 1024.0
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

/// The `p`-quantile (nearest rank) of sorted values.
pub fn quantile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (sorted.len() as f64 * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `1.234 s`.
pub fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}
