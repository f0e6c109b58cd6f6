//! Scene 4: `reloadlet.io/action: http` — Debian's real Prometheus (`--web.enable-lifecycle`)
//! reloaded through `POST /-/reload` at its pod IP when its ConfigMap changes, instead of a
//! configmap-reload sidecar in the pod. Skipped, with the reason, when Prometheus is not
//! installed (`hack/demo.sh` installs it with apt-get).

use crate::support::*;
use crate::{cm, NODE};
use nodesim::node::SimNode;
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const RELOADED: &str = "reloadlet_actions_total{action=\"http\",outcome=\"reloaded\"}";

fn prometheus_yml(job: &str) -> String {
    format!(
        "global:\n  scrape_interval: 1h\nscrape_configs:\n  - job_name: {job}\n    static_configs:\n      - targets: ['127.0.0.1:1']\n"
    )
}

/// Runs the scene; `None` when Prometheus is not installed. Returns the time from the
/// ConfigMap apply to Prometheus serving the new configuration.
pub async fn scene(node: &SimNode, agent: &str) -> Result<Option<Duration>, String> {
    let Some(bin) = ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        say("4. skipped: Prometheus is not installed (apt-get install prometheus; hack/demo.sh does it)");
        return Ok(None);
    };
    let (api, kubelet, root) = (&node.api, &node.kubelet, node.kubelet_root());
    let version = Command::new(bin)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(|l| l.split(" (").next().unwrap_or(l).replace(", version", ""))
        })
        .unwrap_or_else(|| "prometheus".into());
    say(&format!(
        "4. reloadlet.io/action: http — demo/prometheus-0 runs real {version}, no reload sidecar"
    ));
    let port = free_addr()?
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .ok_or("no free port")?;
    let conf_dir = node.path("etc-prometheus");
    let data = node.path("prometheus-data");
    std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
    api.apply_configmap(cm(
        "prometheus-config",
        "prometheus.yml",
        &prometheus_yml("before"),
    ));
    let tracked_before = metric(agent, "reloadlet_volumes_tracked").unwrap_or(0.0);
    let pod = api.create_pod(
        serde_json::from_value(json!({
            "metadata": {"name": "prometheus-0", "namespace": "demo", "annotations": {
                "reloadlet.io/action": "http", "reloadlet.io/http-port": "web"}},
            "spec": {"nodeName": NODE,
                "volumes": [{"name": "config", "configMap": {"name": "prometheus-config"}}],
                "containers": [{"name": "prometheus", "image": "prometheus",
                    "command": [bin, format!("--config.file={}/prometheus.yml", conf_dir.display()),
                        format!("--web.listen-address=:{port}"),
                        format!("--storage.tsdb.path={}", data.display()),
                        "--web.enable-lifecycle"],
                    "ports": [{"name": "web", "containerPort": port}],
                    "volumeMounts": [{"name": "config", "mountPath": conf_dir.display().to_string()}]}]}
        }))
        .unwrap(),
    );
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    kubelet
        .wait_for_pod(&uid, Duration::from_secs(30))
        .ok_or("prometheus-0 did not start within 30 s")?;
    let ip = wait_for(
        "prometheus-0's status.podIP",
        Duration::from_secs(10),
        || {
            api.get_pod("demo", "prometheus-0")
                .and_then(|p| p.status)
                .and_then(|s| s.pod_ip)
        },
    )
    .await?;
    let addr = format!("{ip}:{port}");
    wait_for("prometheus /-/ready", Duration::from_secs(30), || {
        nodesim::probe::http_get(&addr, "/-/ready").filter(|(code, _)| *code == 200)
    })
    .await?;
    wait_for(
        "reloadlet to know prometheus-0's volume",
        Duration::from_secs(10),
        || metric(agent, "reloadlet_volumes_tracked").filter(|n| *n > tracked_before),
    )
    .await?;
    let job = |want: &str| {
        http_get(&addr, "/api/v1/status/config")
            .filter(|c| c.contains(&format!("job_name: {want}")))
            .map(|_| ())
    };
    job("before").ok_or("prometheus does not serve job \"before\"")?;
    println!("    prometheus-0 (pod IP {ip}) serves scrape job \"before\" on {addr}");

    let projected = root.join(format!(
        "pods/{uid}/volumes/kubernetes.io~configmap/config/prometheus.yml"
    ));
    let want = prometheus_yml("after");
    let reloaded_before = metric(agent, RELOADED).unwrap_or(0.0);
    let timeline = Timeline::start();
    api.apply_configmap(cm("prometheus-config", "prometheus.yml", &want));
    timeline.line(
        timeline.t0,
        "kubectl apply: ConfigMap prometheus-config now has scrape job \"after\"",
    );
    let (mut on_disk, mut reloaded, mut serving) = (None, None, None);
    let deadline = Instant::now() + Duration::from_secs(30);
    while serving.is_none() || reloaded.is_none() || on_disk.is_none() {
        let now = Instant::now();
        if now > deadline {
            return Err(format!(
                "prometheus-0 was not reloaded within 30 s (on disk: {}, reloaded: {}, serving: {})",
                on_disk.is_some(),
                reloaded.is_some(),
                serving.is_some()
            ));
        }
        if on_disk.is_none() && std::fs::read_to_string(&projected).is_ok_and(|t| t == want) {
            on_disk = Some(now);
        }
        if reloaded.is_none() && metric(agent, RELOADED).is_some_and(|n| n > reloaded_before) {
            reloaded = Some(now);
        }
        if serving.is_none() && job("after").is_some() {
            serving = Some(now);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (on_disk, reloaded, serving) = (on_disk.unwrap(), reloaded.unwrap(), serving.unwrap());
    timeline.line(
        on_disk,
        "kubelet syncs prometheus-0 (the controller's nudge) and writes the new prometheus.yml",
    );
    let note = api
        .events()
        .into_iter()
        .rev()
        .find(|e| e.regarding_name == "prometheus-0" && e.reason == "Reloaded")
        .map(|e| e.note)
        .unwrap_or_else(|| "(Event not recorded yet)".into());
    timeline.line(reloaded, &format!("reloadlet: Event Reloaded: {note}"));
    timeline.line(serving, "prometheus serves scrape job \"after\"");
    Ok(Some(timeline.since(serving)))
}
