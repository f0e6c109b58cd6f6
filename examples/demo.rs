//! The main job on a machine without a cluster: a simulated node, a real nginx pod reloaded
//! in place by reloadlet, then three replicas behind a PodDisruptionBudget replaced one at a
//! time through the Eviction API. Run it through `hack/demo.sh` (as root).

use k8s_openapi::api::core::v1::ConfigMap;
use nodesim::node::SimNode;
use serde_json::json;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NODE: &str = "demo-node";

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if let Err(e) = rt.block_on(demo()) {
        eprintln!("demo failed: {e}");
        std::process::exit(1);
    }
}

fn say(s: &str) {
    println!("\x1b[1m==> {s}\x1b[0m");
}

fn cm(name: &str, key: &str, value: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": "demo"}, "data": {key: value}}),
    )
    .unwrap()
}

fn nginx_conf(port: u16, run: &Path, body: &str) -> String {
    let run = run.display();
    format!(
        "daemon off;\nworker_processes 1;\npid {run}/nginx.pid;\nerror_log {run}/error.log;\nevents {{}}\n\
         http {{\n  access_log off;\n  client_body_temp_path {run}/body;\n  proxy_temp_path {run}/proxy;\n  \
         fastcgi_temp_path {run}/fastcgi;\n  uwsgi_temp_path {run}/uwsgi;\n  scgi_temp_path {run}/scgi;\n  \
         server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"{body}\\n\"; }} }}\n}}\n"
    )
}

fn wait_for<T>(
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
        std::thread::sleep(Duration::from_millis(10));
    }
}

struct Agent(Child);
impl Drop for Agent {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.0.wait();
    }
}

fn reloadlet_binary() -> PathBuf {
    if let Ok(p) = std::env::var("RELOADLET_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(Path::parent)
        .unwrap()
        .join("reloadlet")
}

async fn demo() -> Result<(), String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Err(
            "run as root (the simulated node makes cgroups, mounts and PID namespaces)".into(),
        );
    }
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .ok_or("nginx is not installed (hack/demo.sh installs it)")?;
    let node = SimNode::start(NODE, "reloadlet-demo-", |_| {})
        .await
        .map_err(|e| e.to_string())?;
    let (api, kubelet, root) = (&node.api, &node.kubelet, node.kubelet_root());
    say(&format!("simulated node {NODE}: API server {}, kubelet root {}, containerd + systemd cgroup driver, cgroup v2", api.url(), root.display()));

    // --- scene 1: nginx reloads in place ---
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| e.to_string())?
        .local_addr()
        .unwrap()
        .port();
    let run = node.path("nginx-run");
    std::fs::create_dir_all(&run).map_err(|e| e.to_string())?;
    let conf_dir = node.path("etc-nginx");
    api.apply_configmap(cm(
        "nginx-conf",
        "nginx.conf",
        &nginx_conf(port, &run, "v1"),
    ));
    let pod = api.create_pod(
        serde_json::from_value(json!({
            "metadata": {"name": "nginx-0", "namespace": "demo", "annotations": {
                "reloadlet.io/action": "signal", "reloadlet.io/signal": "SIGHUP", "reloadlet.io/containers": "nginx"}},
            "spec": {"nodeName": NODE,
                "volumes": [{"name": "conf", "configMap": {"name": "nginx-conf"}}],
                "containers": [{"name": "nginx", "image": "nginx",
                    "command": [nginx, "-c", format!("{}/nginx.conf", conf_dir.display())],
                    "volumeMounts": [{"name": "conf", "mountPath": conf_dir.display().to_string()}]}]}
        }))
        .unwrap(),
    );
    let uid = pod.metadata.uid.clone().unwrap();
    let handles = kubelet
        .wait_for_pod(&uid, Duration::from_secs(30))
        .ok_or("nginx pod did not start")?;
    let master = handles
        .container("nginx")
        .map(|c| c.main_pid)
        .unwrap_or_default();
    let addr = format!("127.0.0.1:{port}");
    let body = wait_for("nginx", Duration::from_secs(10), || {
        http_get(&addr, "/").filter(|b| b == "v1")
    })?;
    say(&format!(
        "pod demo/nginx-0 runs real nginx (master pid {master}) serving {addr}: {body:?}"
    ));

    let listen = format!(
        "127.0.0.1:{}",
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    );
    let log = node.path("reloadlet.log");
    let agent = Agent(
        Command::new(reloadlet_binary())
            .args([
                "--node-name",
                NODE,
                "--debounce",
                "0s",
                "--listen",
                &listen,
                "--eviction-backoff",
                "500ms",
                "--eviction-backoff-max",
                "2s",
            ])
            .arg("--kubelet-root")
            .arg(&root)
            .arg("--state-dir")
            .arg(node.path("state"))
            .env("KUBECONFIG", node.kubeconfig())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", reloadlet_binary().display()))?,
    );
    wait_for("reloadlet /readyz", Duration::from_secs(20), || {
        http_get(&listen, "/readyz").filter(|b| b == "ready")
    })?;
    wait_for(
        "reloadlet to know the volumes",
        Duration::from_secs(10),
        || {
            http_get(&listen, "/metrics").filter(|m| {
                m.lines()
                    .any(|l| l.starts_with("reloadlet_volumes_tracked ") && !l.ends_with(" 0"))
            })
        },
    )?;
    say(&format!(
        "reloadlet (pid {}) is ready on {listen}",
        agent.0.id()
    ));

    say("kubectl edit configmap nginx-conf: return 200 \"v2\"");
    let t0 = Instant::now();
    api.apply_configmap(cm(
        "nginx-conf",
        "nginx.conf",
        &nginx_conf(port, &run, "v2"),
    ));
    let body = wait_for("nginx to serve v2", Duration::from_secs(10), || {
        http_get(&addr, "/").filter(|b| b == "v2")
    })?;
    let took = t0.elapsed();
    let ev = wait_for("the Signaled event", Duration::from_secs(5), || {
        api.events().into_iter().find(|e| e.reason == "Signaled")
    })?;
    println!("    nginx now serves {body:?}, {:.1} ms after the ConfigMap changed (the kubelet here projects at once; a real one takes 60-90 s)", took.as_secs_f64() * 1e3);
    println!("    Event {} {}: {}", ev.type_, ev.reason, ev.note);
    let logtext = std::fs::read_to_string(&log).unwrap_or_default();
    if let Some(l) = logtext.lines().find(|l| l.contains("signal sent")) {
        println!("    reloadlet log: {}", l.trim());
    }
    println!(
        "    same nginx master process still running: {}",
        Path::new(&format!("/proc/{master}")).exists()
    );

    // --- scene 2: evictions paced by a PodDisruptionBudget ---
    say("3 replicas of demo/web with reloadlet.io/action: evict, PDB maxUnavailable: 1");
    api.apply_configmap(cm("web-conf", "app.conf", "v1"));
    api.create_pdb(
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "demo"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}))
        .unwrap(),
    );
    let template = serde_json::from_value(json!({
        "metadata": {"labels": {"app": "web"}, "annotations": {"reloadlet.io/action": "evict", "nodesim.reloadlet.io/ready-delay-ms": "1500"}},
        "spec": {"containers": [{"name": "app", "image": "app", "volumeMounts": [{"name": "conf", "mountPath": node.path("mnt/conf").display().to_string()}]}],
                 "volumes": [{"name": "conf", "configMap": {"name": "web-conf"}}]}
    })).unwrap();
    api.create_replicaset("demo", "web", 3, template, NODE);
    let originals: BTreeSet<String> = api
        .pods_of_replicaset("demo", "web")
        .into_iter()
        .filter_map(|p| p.metadata.uid)
        .collect();
    for u in &originals {
        kubelet
            .wait_for_pod(u, Duration::from_secs(30))
            .ok_or("replica did not start")?;
    }
    wait_for("replicas Ready", Duration::from_secs(10), || {
        let pdb = api.get_pdb("demo", "web")?;
        (pdb.status?.current_healthy == 3).then_some(())
    })?;
    std::thread::sleep(Duration::from_millis(300));
    say("kubectl edit configmap web-conf");
    api.apply_configmap(cm("web-conf", "app.conf", "v2"));
    let t0 = Instant::now();
    let mut seen = 0;
    loop {
        let ev = api.evictions();
        for e in ev.iter().skip(seen) {
            let pdb = api.get_pdb("demo", "web").and_then(|p| p.status);
            let verdict = match e.code {
                201 => "evicted",
                429 => "refused by the PDB (429)",
                _ => "error",
            };
            println!(
                "    t+{:>5.1}s eviction of {} -> {verdict}; PDB healthy {}/{} desired",
                t0.elapsed().as_secs_f64(),
                e.pod,
                pdb.as_ref().map(|s| s.current_healthy).unwrap_or(0),
                pdb.as_ref().map(|s| s.desired_healthy).unwrap_or(0)
            );
        }
        seen = ev.len();
        let evicted: BTreeSet<String> = ev
            .iter()
            .filter(|e| e.code == 201)
            .filter_map(|e| e.uid.clone())
            .collect();
        if evicted == originals {
            break;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            return Err("evictions did not complete".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let violations = api.invariant_violations();
    println!(
        "    all 3 replaced one at a time in {:.1} s; PDB violations: {}; replicas now: {:?}",
        t0.elapsed().as_secs_f64(),
        violations.len(),
        api.pods_of_replicaset("demo", "web")
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    let requested = api
        .events()
        .into_iter()
        .filter(|e| e.reason == "EvictionRequested")
        .count();
    let blocked = api
        .events()
        .into_iter()
        .filter(|e| e.reason == "EvictionBlocked")
        .count();
    println!("    Events: {requested} EvictionRequested, {blocked} EvictionBlocked");
    say("done; cleaning up the simulated node");
    drop(agent);
    drop(node);
    Ok(())
}

/// The body of a successful GET, trimmed.
fn http_get(addr: &str, path: &str) -> Option<String> {
    nodesim::probe::http_get(addr, path).map(|(_, body)| body.trim().to_owned())
}
