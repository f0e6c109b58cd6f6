//! The soak (issue #43 §5): a simulated node, the real agent and controller under the chart's
//! RBAC, and for `--minutes N` a tenant who keeps creating, changing and deleting hostile
//! pods and ConfigMaps, beside one innocent pod whose ConfigMap changes every
//! [`INNOCENT_EVERY`] and which must get its SIGHUP each time (the positive control).
//!
//! Once a minute (and at the start and the end) it samples both processes — RSS, CPU time,
//! open fds — and the agent's inotify watches, prints a table, and exits non-zero when a
//! process died, the innocent pod missed a signal, or a bound ([`Bounds`]) was crossed.
//! Run through `hack/soak.sh [MINUTES]` (as root; not in CI).
//!
//! `soak [--minutes N] [--seed S]`

#[path = "../tests/support/rng.rs"]
mod rng;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use nodesim::apiserver::rbac_chart;
use nodesim::node::SimNode;
use rng::Rng;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NODE: &str = "soak-node";
const TENANT: &str = "tenant";
const INNOCENT_NS: &str = "innocent";
/// How often the innocent pod's ConfigMap changes.
const INNOCENT_EVERY: Duration = Duration::from_secs(15);
/// How long the innocent pod may take to get its signal.
const INNOCENT_WAIT: Duration = Duration::from_secs(20);
/// How often the tenant acts.
const TENANT_EVERY: Duration = Duration::from_millis(1500);
/// Hostile pods alive at once, at most.
const MAX_HOSTILE: usize = 24;
const SAMPLE_EVERY: Duration = Duration::from_secs(60);

/// What the soak holds each process to.
struct Bounds {
    agent_rss_mib: f64,
    controller_rss_mib: f64,
    fds: usize,
    /// CPU seconds per wall second over a sampling interval (1.0 = one core).
    cpu_share: f64,
    /// inotify watches per watched volume, plus a fixed allowance (the pods directory, …).
    watches_per_volume: f64,
    watches_base: f64,
}

const BOUNDS: Bounds = Bounds {
    agent_rss_mib: 64.0,
    controller_rss_mib: 256.0,
    fds: 512,
    cpu_share: 0.5,
    watches_per_volume: 4.0,
    watches_base: 32.0,
};

fn main() {
    let mut minutes = 30.0f64;
    let mut seed = 0x50a4_2026u64;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next();
        match (a.as_str(), v.and_then(|v| v.parse::<f64>().ok())) {
            ("--minutes", Some(m)) if m > 0.0 => minutes = m,
            ("--seed", Some(s)) => seed = s as u64,
            _ => {
                eprintln!("usage: soak [--minutes N] [--seed S]");
                std::process::exit(2);
            }
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // On Ctrl-C or SIGTERM the soak is dropped and its simulated node cleans up.
    let result = rt.block_on(async {
        nodesim::interrupt::until_signalled(soak(Duration::from_secs_f64(minutes * 60.0), seed))
            .await
            .unwrap_or_else(|e| Err(e.to_string()))
    });
    match result {
        Ok(()) => println!("soak: passed"),
        Err(e) => {
            eprintln!("soak FAILED: {e}");
            std::process::exit(1);
        }
    }
}

/// A process the soak started: SIGTERM on drop, SIGKILL after 10 s.
struct Started {
    what: &'static str,
    child: Child,
    listen: String,
    log: PathBuf,
}

impl Started {
    fn alive(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            other => Err(format!(
                "{} exited ({other:?}); the end of its log ({}):\n{}",
                self.what,
                self.log.display(),
                tail(&self.log, 30)
            )),
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
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

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `target/<profile>/<name>` beside this example.
fn sibling(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().join(name)
}

fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

fn scrape(listen: &str) -> String {
    nodesim::probe::http_get(listen, "/metrics")
        .map(|(_, body)| body)
        .unwrap_or_default()
}

fn metric(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(k, _)| *k == series)
        .and_then(|(_, v)| v.parse().ok())
}

async fn wait_for<T>(
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
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn spawn(
    what: &'static str,
    node: &SimNode,
    kubeconfig: PathBuf,
    args: &[String],
    env: &[(&str, &str)],
) -> Result<Started, String> {
    let listen = free_addr();
    let log = node.path(&format!("{what}.log"));
    let mut cmd = Command::new(sibling("reloadlet"));
    cmd.args(args)
        .args(["--listen", &listen])
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "info")
        .env_remove("POD_NAME")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).map_err(|e| e.to_string())?);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", sibling("reloadlet").display()))?;
    Ok(Started {
        what,
        child,
        listen,
        log,
    })
}

// ---------------------------------------------------------------------------------------
// One process's numbers
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Default)]
struct Usage {
    rss_mib: f64,
    cpu_secs: f64,
    fds: usize,
}

fn usage(pid: u32) -> Usage {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces): state is field 3, utime 14, stime 15.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    Usage {
        rss_mib: rss_kib / 1024.0,
        cpu_secs: (ticks(11) + ticks(12)) / hz,
        fds,
    }
}

struct Sample {
    at: Duration,
    agent: Usage,
    controller: Usage,
    agent_cpu_share: f64,
    controller_cpu_share: f64,
    watches: f64,
    volumes: f64,
    hostile: usize,
    signals: usize,
}

fn header() {
    println!(
        "{:>6} | {:>9} {:>8} {:>5} {:>7} {:>8} | {:>9} {:>8} {:>5} | {:>7} {:>7} {:>7}",
        "t",
        "agent RSS",
        "CPU%",
        "fds",
        "watches",
        "volumes",
        "ctrl RSS",
        "CPU%",
        "fds",
        "hostile",
        "signals",
        "bounds"
    );
}

impl Sample {
    fn print(&self, verdict: &str) {
        println!(
            "{:>5.0}s | {:>5.1} MiB {:>7.1}% {:>5} {:>7} {:>8} | {:>5.1} MiB {:>7.1}% {:>5} | {:>7} {:>7} {:>7}",
            self.at.as_secs_f64(),
            self.agent.rss_mib,
            self.agent_cpu_share * 100.0,
            self.agent.fds,
            self.watches,
            self.volumes,
            self.controller.rss_mib,
            self.controller_cpu_share * 100.0,
            self.controller.fds,
            self.hostile,
            self.signals,
            verdict
        );
    }

    /// Every bound this sample crosses.
    fn over(&self) -> Vec<String> {
        let b = &BOUNDS;
        let mut out = Vec::new();
        let mut check = |bad: bool, what: String| {
            if bad {
                out.push(what);
            }
        };
        check(
            self.agent.rss_mib >= b.agent_rss_mib,
            format!(
                "agent RSS {:.1} MiB >= {}",
                self.agent.rss_mib, b.agent_rss_mib
            ),
        );
        check(
            self.controller.rss_mib >= b.controller_rss_mib,
            format!(
                "controller RSS {:.1} MiB >= {}",
                self.controller.rss_mib, b.controller_rss_mib
            ),
        );
        check(
            self.agent.fds >= b.fds,
            format!("agent fds {} >= {}", self.agent.fds, b.fds),
        );
        check(
            self.controller.fds >= b.fds,
            format!("controller fds {} >= {}", self.controller.fds, b.fds),
        );
        check(
            self.agent_cpu_share >= b.cpu_share,
            format!("agent CPU {:.0}% of a core", self.agent_cpu_share * 100.0),
        );
        check(
            self.controller_cpu_share >= b.cpu_share,
            format!(
                "controller CPU {:.0}% of a core",
                self.controller_cpu_share * 100.0
            ),
        );
        let allowed = b.watches_base + b.watches_per_volume * self.volumes;
        check(
            self.watches > allowed,
            format!(
                "{} inotify watches for {} volumes (> {allowed})",
                self.watches, self.volumes
            ),
        );
        out
    }
}

// ---------------------------------------------------------------------------------------
// The tenant
// ---------------------------------------------------------------------------------------

/// Annotation values a tenant writes (the fragments `tests/hostile_props.rs` searches with).
const FRAGMENTS: &[&str] = &[
    "",
    "300000000000y",
    "99999999999999999999",
    "-1s",
    "0s",
    "8d",
    "1/300000000000y",
    "SIGKILL",
    "\u{0}",
    "\u{1b}[31m",
    "\u{202e}",
    "..",
    "../../etc/passwd",
    "(a+)+$",
    "a{1000}{1000}",
    "* * * * *",
    "0 0 31 2 *",
    "*/0 * * * *",
    "Moon/Base",
    "65536",
    "a,b,,c",
];

const KEYS: &[&str] = &[
    "reloadlet.io/signal",
    "reloadlet.io/containers",
    "reloadlet.io/configmaps",
    "reloadlet.io/debounce",
    "reloadlet.io/min-interval",
    "reloadlet.io/flap-threshold",
    "reloadlet.io/window",
    "reloadlet.io/window-timezone",
    "reloadlet.io/on-blocked",
    "reloadlet.io/blocked-timeout",
    "reloadlet.io/http-port",
    "reloadlet.io/http-path",
    "reloadlet.io/env-baseline",
    "reloadlet.io/rollout-baseline",
    "reloadlet.io/projection-nudge",
    "reloadlet.io/bogus",
    "configmap.reloader.stakater.com/reload",
    "reloader.stakater.com/auto",
];

struct Tenant {
    rng: Rng,
    live: Vec<String>,
    next: usize,
    mnt: PathBuf,
    configmaps: Vec<String>,
    ops: BTreeMap<&'static str, usize>,
}

impl Tenant {
    fn value(&mut self) -> String {
        match self.rng.below(8) {
            0 => "x".repeat(64 * 1024),
            1 => (0..3)
                .map(|_| *self.rng.pick(FRAGMENTS))
                .collect::<Vec<_>>()
                .join(","),
            _ => self.rng.pick(FRAGMENTS).to_string(),
        }
    }

    fn mount(&self, name: &str, volume: &str) -> Value {
        json!({"name": volume, "mountPath": self.mnt.join(name).join(volume).display().to_string()})
    }

    /// One hostile pod: which kind, and the pod.
    fn hostile_pod(&mut self) -> (&'static str, Pod) {
        self.next += 1;
        let name = format!("h{}", self.next);
        let cm = self.rng.pick(&self.configmaps).clone();
        let mut annotations =
            json!({"reloadlet.io/action": *self.rng.pick(&["signal", "evict", "http", "rollout"])});
        let mut volumes = vec![json!({"name": "conf", "configMap": {"name": cm}})];
        let mut container = json!({"name": "app", "image": "app"});
        let mut owners = json!([]);
        let kind = match self.rng.below(7) {
            0 => {
                for _ in 0..1 + self.rng.below(5) {
                    let k = *self.rng.pick(KEYS);
                    annotations[k] = json!(self.value());
                }
                "random annotations"
            }
            1 => {
                let path = vec!["d"; 1_000].join("/") + "/k";
                volumes[0] = json!({"name": "conf", "configMap": {"name": cm, "items": [{"key": "k", "path": path}]}});
                "deep volume"
            }
            2 => {
                for i in 0..30 {
                    let cm = self.rng.pick(&self.configmaps).clone();
                    volumes.push(json!({"name": format!("v{i}"), "configMap": {"name": cm}}));
                }
                "many volumes"
            }
            3 => {
                annotations["reloadlet.io/http-body"] = json!("y".repeat(200 * 1024));
                annotations["reloadlet.io/configmaps"] = json!(vec![cm.as_str(); 2_000].join(","));
                "huge annotations"
            }
            4 => {
                annotations["reloadlet.io/action"] = json!("http");
                annotations["reloadlet.io/http-port"] = json!("1");
                container["ports"] = json!([{"containerPort": 1}]);
                "http to a closed port"
            }
            5 => {
                annotations["reloadlet.io/action"] = json!("evict");
                annotations["reloadlet.io/on-blocked"] = json!("rollout");
                annotations["reloadlet.io/blocked-timeout"] =
                    json!(*self.rng.pick(&["300000000000y", "0s", "1ns", "7d"]));
                "on-blocked rollout"
            }
            _ => {
                annotations["reloadlet.io/action"] = json!("rollout");
                owners = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "innocent-5d8f",
                    "uid": "forged-uid", "controller": true}]);
                "forged owner"
            }
        };
        let mounts: Vec<Value> = volumes
            .iter()
            .map(|v| self.mount(&name, v["name"].as_str().unwrap()))
            .collect();
        container["volumeMounts"] = json!(mounts);
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": TENANT, "annotations": annotations,
                "labels": {"app": "hostile"}, "ownerReferences": owners},
            "spec": {"nodeName": NODE, "containers": [container], "volumes": volumes}
        });
        (kind, serde_json::from_value(pod).expect("a pod"))
    }

    /// One step: create, delete or change something.
    fn act(&mut self, node: &SimNode) {
        let op = match self.rng.below(10) {
            0..=3 if self.live.len() < MAX_HOSTILE => {
                let (kind, pod) = self.hostile_pod();
                self.live.push(pod.metadata.name.clone().unwrap());
                node.api.create_pod(pod);
                kind
            }
            0..=5 if !self.live.is_empty() => {
                let i = self.rng.below(self.live.len());
                let name = self.live.swap_remove(i);
                node.api.delete_pod(TENANT, &name);
                "delete pod"
            }
            _ => {
                let name = self.rng.pick(&self.configmaps).clone();
                let size = *self.rng.pick(&[1usize, 100, 64 * 1024, 512 * 1024]);
                let keys = *self.rng.pick(&[1usize, 10, 200]);
                let value = "z".repeat(size / keys.max(1));
                let data: BTreeMap<String, String> = (0..keys)
                    .map(|i| (format!("k{i}"), format!("{}{value}", self.rng.next())))
                    .collect();
                node.api.apply_configmap(configmap(TENANT, &name, data));
                "change ConfigMap"
            }
        };
        *self.ops.entry(op).or_default() += 1;
    }
}

fn configmap(namespace: &str, name: &str, data: BTreeMap<String, String>) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": namespace}, "data": data}),
    )
    .unwrap()
}

fn signals_in(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("SIGHUP"))
        .count()
}

// ---------------------------------------------------------------------------------------
// The soak
// ---------------------------------------------------------------------------------------

async fn soak(duration: Duration, seed: u64) -> Result<(), String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Err(
            "run as root (the simulated node makes cgroups, mounts and PID namespaces)".into(),
        );
    }
    let node = SimNode::start(NODE, "reloadlet-soak-", |_| {})
        .await
        .map_err(|e| e.to_string())?;
    node.api.set_nodes(&[NODE]);
    node.api
        .set_rbac(rbac_chart::policy(&[]).ok_or("no chart RBAC render for the defaults")?);
    let kubeconfig =
        |(ns, name): (&str, &str)| node.kubeconfig_for(ns, name).map_err(|e| e.to_string());

    // The innocent pod, and the tenant's ConfigMaps.
    node.api.apply_configmap(configmap(
        INNOCENT_NS,
        "innocent-conf",
        [("k".to_owned(), "v0".to_owned())].into(),
    ));
    let configmaps: Vec<String> = (0..6).map(|i| format!("tenant-conf-{i}")).collect();
    for name in &configmaps {
        node.api.apply_configmap(configmap(
            TENANT,
            name,
            [("k".to_owned(), "v".to_owned())].into(),
        ));
    }
    let out = node.path("innocent.sig");
    let recorder = sibling("examples/sigrecorder");
    if !recorder.exists() {
        return Err(format!(
            "{} is missing: build it (hack/soak.sh does)",
            recorder.display()
        ));
    }
    let innocent: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        // Its ConfigMap changes every INNOCENT_EVERY, more often than the default flap
        // threshold (10 in 10 minutes) allows: the pod opts out, as such a pod's author would.
        "metadata": {"name": "innocent", "namespace": INNOCENT_NS, "annotations": {
            "reloadlet.io/action": "signal", "reloadlet.io/flap-threshold": "off"}},
        "spec": {"nodeName": NODE, "volumes": [{"name": "conf", "configMap": {"name": "innocent-conf"}}],
            "containers": [{"name": "app", "image": "sigrecorder",
                "command": [recorder.display().to_string(), out.display().to_string()],
                "volumeMounts": [{"name": "conf", "mountPath": node.path("mnt/innocent").display().to_string()}]}]}
    }))
    .unwrap();
    node.api.create_pod(innocent);
    wait_for(
        "the innocent pod's recorder",
        Duration::from_secs(30),
        || {
            std::fs::read_to_string(&out)
                .unwrap_or_default()
                .contains("READY")
                .then_some(())
        },
    )
    .await?;

    let root = node.kubelet_root().display().to_string();
    let state = node.path("state").display().to_string();
    let agent_args: Vec<String> = [
        "--node-name",
        NODE,
        "--kubelet-root",
        &root,
        "--state-dir",
        &state,
        "--debounce",
        "0s",
    ]
    .map(String::from)
    .into();
    let mut agent = spawn(
        "agent",
        &node,
        kubeconfig(rbac_chart::AGENT)?,
        &agent_args,
        &[],
    )?;
    let controller_args = ["controller", "--leader-elect=false"].map(String::from);
    let mut controller = spawn(
        "controller",
        &node,
        kubeconfig(rbac_chart::CONTROLLER)?,
        &controller_args,
        &[("POD_NAMESPACE", "reloadlet-system")],
    )?;
    for p in [&mut agent, &mut controller] {
        let listen = p.listen.clone();
        let ready = wait_for(
            &format!("{} /readyz", p.what),
            Duration::from_secs(30),
            || nodesim::probe::http_get(&listen, "/readyz").filter(|(code, _)| *code == 200),
        )
        .await;
        if let Err(e) = ready {
            p.alive()?;
            return Err(e);
        }
    }
    println!(
        "soak: {:.1} min, seed {seed}; agent pid {}, controller pid {}; node dir {}",
        duration.as_secs_f64() / 60.0,
        agent.child.id(),
        controller.child.id(),
        node.path("").display()
    );

    let mut tenant = Tenant {
        rng: Rng(seed),
        live: Vec::new(),
        next: 0,
        mnt: node.path("mnt/tenant"),
        configmaps,
        ops: BTreeMap::new(),
    };
    let started = Instant::now();
    let mut failures: Vec<String> = Vec::new();
    let (mut changes, mut missed) = (0usize, 0usize);
    let mut pending: Option<(usize, Instant)> = None;
    let mut next_change = started + Duration::from_secs(5);
    let mut next_sample = started;
    let mut last: Option<(Instant, Usage, Usage)> = None;
    let mut samples: Vec<Sample> = Vec::new();
    header();
    loop {
        let now = Instant::now();
        let done = now >= started + duration;
        // The innocent pod: one change at a time, each must be signalled in time.
        if let Some((want, since)) = pending {
            let got = signals_in(&out);
            if got >= want {
                pending = None;
            } else if since.elapsed() > INNOCENT_WAIT {
                missed += 1;
                failures.push(format!(
                    "the innocent pod missed the signal for change {want} (has {got})"
                ));
                pending = None;
            }
        } else if now >= next_change && !done {
            changes += 1;
            node.api.apply_configmap(configmap(
                INNOCENT_NS,
                "innocent-conf",
                [("k".to_owned(), format!("v{changes}"))].into(),
            ));
            pending = Some((signals_in(&out) + 1, Instant::now()));
            next_change = now + INNOCENT_EVERY;
        }
        if now >= next_sample || (done && pending.is_none()) {
            for p in [&mut agent, &mut controller] {
                if let Err(e) = p.alive() {
                    failures.push(e);
                }
            }
            let (a, c) = (usage(agent.child.id()), usage(controller.child.id()));
            let (agent_cpu_share, controller_cpu_share) = match last {
                Some((at, la, lc)) => {
                    let wall = at.elapsed().as_secs_f64().max(1e-3);
                    (
                        (a.cpu_secs - la.cpu_secs) / wall,
                        (c.cpu_secs - lc.cpu_secs) / wall,
                    )
                }
                None => (0.0, 0.0),
            };
            last = Some((Instant::now(), a, c));
            let body = scrape(&agent.listen);
            let sample = Sample {
                at: started.elapsed(),
                agent: a,
                controller: c,
                agent_cpu_share,
                controller_cpu_share,
                watches: metric(&body, "reloadlet_inotify_watches").unwrap_or(-1.0),
                volumes: metric(&body, "reloadlet_watched_volumes").unwrap_or(-1.0),
                hostile: tenant.live.len(),
                signals: signals_in(&out),
            };
            let over = sample.over();
            sample.print(if over.is_empty() { "ok" } else { "OVER" });
            failures.extend(
                over.into_iter()
                    .map(|o| format!("at {:.0} s: {o}", sample.at.as_secs_f64())),
            );
            samples.push(sample);
            next_sample = now + SAMPLE_EVERY;
            if done {
                break;
            }
        }
        if !done {
            tenant.act(&node);
        }
        tokio::time::sleep(if done {
            Duration::from_millis(100)
        } else {
            TENANT_EVERY
        })
        .await;
    }

    let peak = |f: &dyn Fn(&Sample) -> f64| samples.iter().map(f).fold(0.0, f64::max);
    println!(
        "peaks: agent RSS {:.1} MiB, fds {}, watches {}; controller RSS {:.1} MiB, fds {}",
        peak(&|s| s.agent.rss_mib),
        peak(&|s| s.agent.fds as f64),
        peak(&|s| s.watches),
        peak(&|s| s.controller.rss_mib),
        peak(&|s| s.controller.fds as f64),
    );
    println!(
        "innocent pod: {changes} ConfigMap changes, {} SIGHUPs, {missed} missed",
        signals_in(&out)
    );
    println!("tenant: {:?}", tenant.ops);
    // What the chart's RBAC refused the agent and the controller: each is a missing rule or a
    // request the code should not make.
    let forbidden = node.api.unexpected_forbidden();
    println!(
        "403s answered to the agent and the controller: {}",
        forbidden.len()
    );
    for f in forbidden.iter().take(5) {
        println!("  {f}");
    }
    println!(
        "bounds: agent RSS < {} MiB, controller RSS < {} MiB, fds < {}, CPU < {:.0}% of a core per interval, watches <= {} + {} per watched volume",
        BOUNDS.agent_rss_mib,
        BOUNDS.controller_rss_mib,
        BOUNDS.fds,
        BOUNDS.cpu_share * 100.0,
        BOUNDS.watches_base,
        BOUNDS.watches_per_volume
    );
    if changes == 0 {
        failures.push("the innocent pod's ConfigMap never changed (run longer)".into());
    }
    drop(controller);
    drop(agent);
    drop(node);
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}
