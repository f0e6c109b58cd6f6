//! The main job on a machine without a cluster: a simulated node whose kubelet keeps its
//! real sync timing, a real nginx pod reloaded in place by reloadlet — one ConfigMap change
//! without `reloadlet controller` (the wait for the kubelet's periodic sync) and one with it
//! (fast projection) — then three replicas behind a PodDisruptionBudget replaced one at a
//! time through the Eviction API, a real Prometheus reloaded over HTTP, a Deployment rolled, and
//! `reloadlet status` answering where the change went. Run it through `hack/demo.sh` (as root);
//! `hack/demo.sh --sync-frequency 60s` shows a real kubelet's default wait.

mod evictions;
mod http;
mod nginx;
mod rollout;
mod status;
mod support;

use k8s_openapi::api::core::v1::ConfigMap;
use nginx::{nginx_conf, Nginx};
use nodesim::kubelet_sync::{
    SyncMode, SyncReason, DEFAULT_SYNC_FREQUENCY, POPULATOR_PERIOD, RECONCILER_PERIOD,
    RESYNC_JITTER_FACTOR,
};
use nodesim::node::SimNode;
use serde_json::json;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

const NODE: &str = "demo-node";
/// The demo's kubelet `syncFrequency`: a third of the real default, so the "controller off"
/// wait is 20–30 s instead of 60–90 s. The timing is otherwise the kubelet's own.
const DEMO_SYNC_FREQUENCY: Duration = Duration::from_secs(20);
const NUDGE: &str = "reloadlet.io/projection-nudge";
const SIGNALED: &str = "reloadlet_actions_total{action=\"signal\",outcome=\"signaled\"}";

fn main() {
    let sync_frequency = match sync_frequency_arg() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("demo: {e}\nusage: demo [--sync-frequency <duration, e.g. 60s>]");
            std::process::exit(2);
        }
    };
    // RUST_LOG=nodesim=debug shows the simulated kubelet's work (quiet by default).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // On Ctrl-C or SIGTERM the demo future is dropped: its guards stop the agent and the
    // controller, then the simulated node stops its processes and removes its mounts and
    // cgroups, as on an error.
    let result = rt.block_on(async {
        nodesim::interrupt::until_signalled(demo(sync_frequency))
            .await
            .unwrap_or_else(|e| Err(e.to_string()))
    });
    if let Err(e) = result {
        eprintln!("demo failed: {e}");
        std::process::exit(1);
    }
}

fn sync_frequency_arg() -> Result<Duration, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(DEMO_SYNC_FREQUENCY),
        [flag, value] if flag == "--sync-frequency" => humantime::parse_duration(value)
            .map_err(|e| format!("--sync-frequency {value:?}: {e}"))
            .and_then(|d| {
                (d >= Duration::from_secs(1))
                    .then_some(d)
                    .ok_or_else(|| "--sync-frequency must be at least 1s".to_owned())
            }),
        _ => Err(format!("unexpected arguments {args:?}")),
    }
}

fn cm(name: &str, key: &str, value: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": "demo"}, "data": {key: value}}),
    )
    .unwrap()
}

/// "20–30 s": the window of a periodic sync after the pod's last one.
fn periodic_window(sync_frequency: Duration) -> String {
    format!(
        "{}–{}",
        sync_frequency.as_secs_f64().round(),
        secs(sync_frequency.mul_f64(1.0 + RESYNC_JITTER_FACTOR))
    )
}

async fn demo(sync_frequency: Duration) -> Result<(), String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Err(
            "run as root (the simulated node makes cgroups, mounts and PID namespaces)".into(),
        );
    }
    let started = Instant::now();
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .ok_or("nginx is not installed (hack/demo.sh installs it)")?;
    let node = SimNode::start(NODE, "reloadlet-demo-", |o| {
        o.sync_mode = SyncMode::Faithful { sync_frequency }
    })
    .await
    .map_err(|e| e.to_string())?;
    let (api, kubelet, root) = (&node.api, &node.kubelet, node.kubelet_root());
    say(&format!("simulated node {NODE}: API server {}, kubelet root {}, containerd + systemd cgroup driver, cgroup v2", api.url(), root.display()));
    let window = periodic_window(sync_frequency);
    let real_window = periodic_window(DEFAULT_SYNC_FREQUENCY);
    println!(
        "    the kubelet keeps its real timing: it re-projects a pod's ConfigMap volumes only when it\n    \
         syncs the pod: at once on a pod update, else periodically {window} after the pod's last\n    \
         sync, on the sync loop's next 1 s tick\n    (syncFrequency {} × jitter 0.5{})",
        secs(sync_frequency),
        if sync_frequency == DEFAULT_SYNC_FREQUENCY {
            ", the kubelet's default".to_owned()
        } else {
            format!(
                "; shortened for this demo, a real kubelet's default is {} → {real_window}",
                secs(DEFAULT_SYNC_FREQUENCY)
            )
        }
    );

    // --- nginx, reloaded in place ---
    let port = free_addr()?
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .ok_or("no free port")?;
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
        .ok_or_else(|| {
            format!(
                "nginx pod did not start within 30 s (RUST_LOG=nodesim=debug shows the kubelet's work); its status: {:?}",
                api.get_pod("demo", "nginx-0").and_then(|p| p.status)
            )
        })?;
    let master = handles
        .container("nginx")
        .map(|c| c.main_pid)
        .unwrap_or_default();
    let web = Nginx {
        node: &node,
        projected: root.join(format!(
            "pods/{uid}/volumes/kubernetes.io~configmap/conf/nginx.conf"
        )),
        uid,
        port,
        run,
        addr: format!("127.0.0.1:{port}"),
    };
    let body = wait_for("nginx", Duration::from_secs(10), || {
        http_get(&web.addr, "/").filter(|b| b == "v1")
    })
    .await?;
    say(&format!(
        "pod demo/nginx-0 runs real nginx (master pid {master}) serving {}: {body:?}",
        web.addr
    ));

    let listen = free_addr()?;
    let log = node.path("reloadlet.log");
    let mut agent = Started {
        child: Command::new(reloadlet_binary())
            .args([
                "--node-name",
                NODE,
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
            // Its own pod, as the downward API names it (the namespace is also where it reads
            // the controller's key for its status records).
            .env("POD_NAMESPACE", "reloadlet-system")
            .env("POD_NAME", "reloadlet-demo-agent")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", reloadlet_binary().display()))?,
    };
    wait_for("reloadlet /readyz", Duration::from_secs(20), || {
        http_get(&listen, "/readyz").filter(|b| b == "ready")
    })
    .await
    .or_else(|e| agent.check_alive("reloadlet", &log).and(Err(e)))?;
    wait_for(
        "reloadlet to know the volumes",
        Duration::from_secs(10),
        || metric(&listen, "reloadlet_volumes_tracked").filter(|n| *n > 0.0),
    )
    .await?;
    say(&format!(
        "reloadlet agent (pid {}) is ready on {listen}, default --debounce 250ms",
        agent.pid()
    ));

    // --- 1. without the controller: the kubelet's periodic sync ---
    say("1. reloadlet controller NOT running: kubectl edit configmap nginx-conf (return \"v2\")");
    // A just-started pod gets one more sync on the next tick (Pending -> Running is a phase
    // transition, pod_workers.go completeWork); a pod in steady state has long had it.
    wait_for(
        "the kubelet's post-start sync of nginx-0",
        Duration::from_secs(10),
        || {
            kubelet
                .syncs(&web.uid)
                .iter()
                .any(|s| s.reason == SyncReason::PhaseTransition)
                .then_some(())
        },
    )
    .await?;
    // ... and its volume manager re-projects the volumes at most one populator and one
    // reconciler period after that sync: the change below must come after that, or this
    // re-projection would pick it up (nodesim/src/kubelet_sync.rs).
    if let Some(post_start) = kubelet
        .syncs(&web.uid)
        .iter()
        .find(|s| s.reason == SyncReason::PhaseTransition)
        .map(|s| s.at)
    {
        let remounted = post_start + POPULATOR_PERIOD + RECONCILER_PERIOD;
        if let Some(left) = remounted.checked_duration_since(Instant::now()) {
            tokio::time::sleep(left).await; // until that re-projection is done
        }
    }
    if let Some(last) = kubelet.syncs(&web.uid).last() {
        println!(
            "    the kubelet last synced nginx-0 {:.1} s ago; its next periodic sync is due {window} after that",
            last.at.elapsed().as_secs_f64()
        );
    }
    let off = web
        .change(
            &listen,
            "v1",
            "v2",
            sync_frequency.mul_f64(1.0 + RESYNC_JITTER_FACTOR) + Duration::from_secs(15),
            true,
        )
        .await?;
    off.print("v2");

    // --- 2. with the controller: fast projection ---
    let c_listen = free_addr()?;
    let c_log = node.path("controller.log");
    let mut controller = Started {
        child: Command::new(reloadlet_binary())
            .args(["controller", "--listen", &c_listen])
            .env("KUBECONFIG", node.kubeconfig())
            .env("POD_NAMESPACE", "reloadlet-system")
            .env("POD_NAME", "reloadlet-controller-demo")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&c_log).map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("cannot start reloadlet controller: {e}"))?,
    };
    wait_for(
        "reloadlet controller to hold its Lease",
        Duration::from_secs(20),
        || metric(&c_listen, "reloadlet_controller_leader").filter(|v| *v == 1.0),
    )
    .await
    .or_else(|e| {
        controller
            .check_alive("reloadlet controller", &c_log)
            .and(Err(e))
    })?;
    wait_for(
        "reloadlet controller /readyz",
        Duration::from_secs(20),
        || nodesim::probe::http_get(&c_listen, "/readyz").filter(|(code, _)| *code == 200),
    )
    .await?;
    say(&format!(
        "2. reloadlet controller (pid {}) running, default flags, leader of Lease reloadlet-system/reloadlet-controller: kubectl edit configmap nginx-conf (return \"v3\")",
        controller.pid()
    ));
    let on = web
        .change(&listen, "v2", "v3", Duration::from_secs(15), false)
        .await?;
    on.print("v3");
    println!(
        "    same nginx master process (pid {master}) still running: {}",
        Path::new(&format!("/proc/{master}")).exists()
    );
    if let Some(ev) = api
        .events()
        .into_iter()
        .rev()
        .find(|e| e.reason == "Signaled")
    {
        println!("    Event {} {}: {}", ev.type_, ev.reason, ev.note);
    }

    // --- 3. evictions paced by a PodDisruptionBudget (controller on) ---
    let (replaced, violations) = evictions::scene(&node, &listen).await?;

    // --- 4. the http action: real Prometheus, no reload sidecar ---
    let http_took = http::scene(&node, &listen).await?;

    // --- 5. the rollout action: a one-replica Deployment without reload support ---
    let (rolled, zero_ready) = rollout::scene(&node).await?;

    // --- 6. one more edit, then reloadlet status: every consumer of nginx-conf and whether it
    //        runs the new data ---
    say("6. kubectl edit configmap nginx-conf (return \"v4\"), then ask reloadlet status");
    let last = web
        .change(&listen, "v3", "v4", Duration::from_secs(15), false)
        .await?;
    last.print("v4");
    let all_current = status::scene(&node).await?;

    say("summary: kubectl apply -> nginx serves the new config");
    println!(
        "    controller off: {:>7.3} s  (the kubelet's periodic sync, due {window} after the pod's last sync\n                               here, on the next 1 s tick; {real_window} with the default syncFrequency {})",
        off.took().as_secs_f64(),
        secs(DEFAULT_SYNC_FREQUENCY)
    );
    println!(
        "    controller on:  {:>7.3} s  (nudge -> pod-update sync; the agent acts 10 ms after the announced swap)",
        on.took().as_secs_f64()
    );
    println!(
        "    web replicas replaced behind the PDB in {:.1} s, {} PDB violations; demo ran {:.0} s",
        replaced.as_secs_f64(),
        violations,
        started.elapsed().as_secs_f64()
    );
    if let Some(took) = http_took {
        println!(
            "    prometheus reloaded over HTTP (POST /-/reload at its pod IP): {:.3} s from the apply",
            took.as_secs_f64()
        );
    }
    println!(
        "    one-replica Deployment rolled surge-first in {:.1} s; a moment without a Ready pod: {}",
        rolled.as_secs_f64(),
        if zero_ready { "YES" } else { "never" }
    );
    println!(
        "    reloadlet status configmap/nginx-conf: {}",
        if all_current {
            "every consumer current"
        } else {
            "NOT every consumer current (the table above says why)"
        }
    );
    if !all_current {
        // What each side did, before the simulated node (and these logs) go.
        for (what, path) in [("reloadlet", &log), ("reloadlet controller", &c_log)] {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            println!("    the last lines of {what}'s log:");
            for line in &lines[lines.len().saturating_sub(15)..] {
                println!("      {line}");
            }
        }
        return Err(
            "reloadlet status did not report every consumer of nginx-conf current within 10 s of the change, although nginx serves it (the table above says why)".into(),
        );
    }
    say("done; cleaning up the simulated node");
    drop(controller);
    drop(agent);
    drop(node);
    Ok(())
}
