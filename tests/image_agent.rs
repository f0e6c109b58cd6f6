//! The shipped image, run as the chart runs it: this machine's platform pulled from the image
//! index of hack/build-image.sh's OCI archive into a private podman, and started with the
//! DaemonSet's posture taken from the rendered chart (host PID, capabilities, read-only
//! root, no_new_privs, RuntimeDefault seccomp, UID 0, the kubelet pods directory with
//! HostToContainer propagation, the state hostPath) in a private cgroup namespace, with
//! in-cluster credentials (a service account token and `ca.crt`,
//! `KUBERNETES_SERVICE_HOST`/`PORT`) against the simulated API server over TLS with
//! bearer-token authentication: the token is the agent's service account's, authorized by
//! the chart's RBAC (the rules of the same render, enforced). From the image, the agent
//! reloads real nginx, evicts behind a PodDisruptionBudget, serves /metrics, and picks up a
//! rotated token (the same service account) without a restart, with no request refused.
//!
//! Skips in one line where podman, runc, conmon or the image archive is missing;
//! `RELOADLET_REQUIRE_IMAGE=1` (hack/test.sh) makes that a failure instead.

#[path = "support/image.rs"]
mod image_support;
use test_support::wait;

use image_support::*;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use nodesim::probe::http_get;
use serde_json::json;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

fn nginx_conf(port: u16, run_dir: &Path, body: &str) -> String {
    let run = run_dir.display();
    format!(
        r#"daemon off;
master_process on;
worker_processes 1;
pid {run}/nginx.pid;
error_log {run}/error.log notice;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {run}/body;
    proxy_temp_path {run}/proxy;
    fastcgi_temp_path {run}/fastcgi;
    uwsgi_temp_path {run}/uwsgi;
    scgi_temp_path {run}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 200 "{body}"; }}
    }}
}}
"#
    )
}

fn nginx_binary() -> &'static str {
    ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("nginx is not installed (hack/install-test-deps.sh)")
}

/// [`wait::eventually`] while the agent's container runs: panics naming `what`, with the
/// agent's log, when time runs out or the container stops.
async fn agent_eventually<T>(
    node: &ImageNode,
    id: &str,
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let log = || format!("--- agent log ---\n{}", node.podman.logs(id));
    let mut looks = 0u32;
    let probe = || {
        let found = f();
        looks += 1;
        // About once a second: is the agent's container still running?
        if found.is_none() && looks % 100 == 0 {
            let running = node.podman.inspect(id, "{{.State.Running}}");
            assert!(
                running == "true",
                "the agent's container stopped while waiting for: {what}\n{}",
                log()
            );
        }
        found
    };
    wait::eventually_showing(what, timeout, probe, log).await
}

fn status_field(pid: &str, name: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0)
}

fn signaled(node: &ImageNode, pod: &str) -> usize {
    node.api
        .events()
        .iter()
        .filter(|e| e.reason == "Signaled" && e.regarding_name == pod)
        .map(|e| e.count.max(1) as usize)
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_runs_as_the_chart_runs_it_against_a_tls_api_server() {
    if !wait::root_or_skip() {
        return;
    }
    if let Some(why) = missing() {
        wait::skipped(why);
        return;
    }
    let mut node = ImageNode::start().await;
    node.podman.load(&archive());

    // The DaemonSet as the chart renders it for this node: its kubelet root and state dir,
    // a free metrics port, and test pacing through the chart's own knobs.
    let metrics_port = free_port();
    let docs = render_chart(&[
        format!("--set=kubeletRoot={}", node.kubelet_root().display()),
        format!("--set=stateDir={}", node.path("state").display()),
        format!("--set=metricsPort={metrics_port}"),
        "--set=debounce=0s".into(),
        "--set=logLevel=reloadlet=debug\\,info".into(),
        r#"--set-json=extraEnv=[{"name":"RELOADLET_EVICTION_BACKOFF","value":"200ms"},{"name":"RELOADLET_EVICTION_BACKOFF_MAX","value":"1s"}]"#.into(),
    ]);
    let ds = find_kind(&docs, "DaemonSet");
    // The image the chart names is the one built, and its USER agrees with the chart's
    // runAsUser (the Dockerfile's `USER 0:0`, `ENTRYPOINT ["/reloadlet"]`).
    let image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap();
    let config = node.podman.inspect(
        image,
        "{{.Config.User}} {{json .Config.Entrypoint}} {{index .Labels \"org.opencontainers.image.version\"}}",
    );
    let run_as = &ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsUser"];
    assert_eq!(
        config,
        format!("{run_as}:0 [\"/reloadlet\"] {}", env!("CARGO_PKG_VERSION"))
    );
    let token_1 = node.authorize_as(&docs, ds);
    let args = node.run_args(
        &ds["spec"]["template"],
        "reloadlet-x7k2p",
        "reloadlet-system",
    );
    let id = node.podman.run_detached("reloadlet-agent", &args);
    let listen = format!("127.0.0.1:{metrics_port}");
    agent_eventually(
        &node,
        &id,
        "/readyz answers 200",
        Duration::from_secs(30),
        || http_get(&listen, "/readyz").and_then(|(code, _)| (code == 200).then_some(())),
    )
    .await;

    // The posture, as the kernel sees the agent's process.
    let pid = node.podman.inspect(&id, "{{.State.Pid}}");
    let cap_eff = u64::from_str_radix(&status_field(&pid, "CapEff"), 16).unwrap();
    // capability.h: CAP_DAC_READ_SEARCH 2, CAP_KILL 5.
    assert_eq!(
        cap_eff,
        (1 << 2) | (1 << 5),
        "only KILL and DAC_READ_SEARCH"
    );
    assert_eq!(status_field(&pid, "NoNewPrivs"), "1");
    assert_eq!(
        status_field(&pid, "Seccomp"),
        "2",
        "a seccomp filter (podman's default profile)"
    );
    assert!(status_field(&pid, "Uid").starts_with("0\t"), "UID 0");
    // Under that seccomp filter and without CAP_SYS_NICE, the async runtime's worker still
    // runs at SCHED_IDLE (--background-sched idle) and the hot thread at the normal policy.
    let policy_of = |comm: &str| -> Vec<bool> {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
        tasks
            .filter_map(|t| {
                let dir = t.ok()?.path();
                let name = std::fs::read_to_string(dir.join("comm")).ok()?;
                let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
                (name.trim_end() == comm).then(|| reloadlet::host::sched::thread_is_idle(&stat))?
            })
            .collect()
    };
    assert_eq!(policy_of("reloadlet-hot"), [false]);
    assert!(policy_of("tokio-rt-worker").contains(&true));
    let ns = |p: &str, n: &str| std::fs::read_link(format!("/proc/{p}/ns/{n}")).unwrap();
    assert_eq!(ns(&pid, "pid"), ns("self", "pid"), "host PID namespace");
    assert_ne!(
        ns(&pid, "cgroup"),
        ns("self", "cgroup"),
        "private cgroup namespace"
    );
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let root_mount = mountinfo
        .lines()
        .find(|l| l.split(' ').nth(4) == Some("/"))
        .expect("root mount");
    assert!(
        root_mount
            .split(' ')
            .nth(5)
            .unwrap()
            .split(',')
            .any(|o| o == "ro"),
        "{root_mount}"
    );
    let pods_dir = node.kubelet_root().join("pods").display().to_string();
    let pods_mount = mountinfo
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(pods_dir.as_str()))
        .expect("pods mount");
    assert!(
        pods_mount.contains(" master:"),
        "HostToContainer (rslave): {pods_mount}"
    );

    // 1. nginx reloaded in place by SIGHUP.
    let nginx = nginx_binary();
    let port = free_port();
    let run_dir = node.path("nginx-run");
    std::fs::create_dir_all(&run_dir).unwrap();
    let conf_dir = node.path("etc-nginx");
    let ns_web = "web";
    let conf = |body: &str| {
        configmap(
            ns_web,
            "nginx-conf",
            &[("nginx.conf", &nginx_conf(port, &run_dir, body))],
        )
    };
    node.api.apply_configmap(conf("v1"));
    node.api.create_pod(
        serde_json::from_value(json!({
            "metadata": {"name": "nginx-0", "namespace": ns_web, "annotations": {
                "reloadlet.io/action": "signal",
                "reloadlet.io/containers": "nginx",
                "reloadlet.io/configmaps": "nginx-conf",
                // Step 4 reloads every 3 s until kube re-reads the token file (up to a
                // minute): more than the default flap breaker (10 in 10 min) lets through.
                "reloadlet.io/flap-threshold": "off"
            }},
            "spec": {
                "nodeName": NODE,
                "containers": [{
                    "name": "nginx",
                    "image": "nginx",
                    "command": [nginx, "-c", format!("{}/nginx.conf", conf_dir.display())],
                    "volumeMounts": [{"name": "conf", "mountPath": conf_dir.display().to_string()}]
                }],
                "volumes": [{"name": "conf", "configMap": {"name": "nginx-conf"}}]
            }
        }))
        .unwrap(),
    );
    let addr = format!("127.0.0.1:{port}");
    let serves = |body: &str| {
        let addr = addr.clone();
        let body = body.to_string();
        move || http_get(&addr, "/").filter(|(code, b)| *code == 200 && *b == body)
    };
    agent_eventually(
        &node,
        &id,
        "nginx serves v1",
        Duration::from_secs(20),
        serves("v1"),
    )
    .await;
    let master = std::fs::read_to_string(run_dir.join("nginx.pid")).unwrap();
    agent_eventually(
        &node,
        &id,
        "the agent tracks nginx's volume",
        Duration::from_secs(20),
        || {
            let m = http_get(&listen, "/metrics")?.1;
            (metric(&m, "reloadlet_volumes_tracked") >= 2.0).then_some(())
        },
    )
    .await;
    node.api.apply_configmap(conf("v2"));
    agent_eventually(
        &node,
        &id,
        "nginx serves v2",
        Duration::from_secs(20),
        serves("v2"),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(run_dir.join("nginx.pid")).unwrap(),
        master,
        "same master"
    );
    agent_eventually(
        &node,
        &id,
        "a Signaled event",
        Duration::from_secs(10),
        || (signaled(&node, "nginx-0") >= 1).then_some(()),
    )
    .await;

    // 2. Eviction behind a PodDisruptionBudget: two replicas, one may be down at a time.
    let ns_apps = "apps";
    node.api
        .apply_configmap(configmap(ns_apps, "app-conf", &[("k", "v1")]));
    node.api.create_pdb(
        serde_json::from_value::<PodDisruptionBudget>(json!({
            "metadata": {"name": "web", "namespace": ns_apps},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .unwrap(),
    );
    let template: PodTemplateSpec = serde_json::from_value(json!({
        "metadata": {"labels": {"app": "web"}, "annotations": {"reloadlet.io/action": "evict"}},
        "spec": {
            "containers": [{"name": "app", "image": "app", "volumeMounts": [{"name": "conf", "mountPath": node.path("mnt/conf").display().to_string()}]}],
            "volumes": [{"name": "conf", "configMap": {"name": "app-conf"}}]
        }
    }))
    .unwrap();
    node.api
        .create_replicaset(ns_apps, "web", 2, template, NODE);
    let uids = |node: &ImageNode| -> BTreeSet<String> {
        node.api
            .pods_of_replicaset(ns_apps, "web")
            .iter()
            .filter_map(|p| p.metadata.uid.clone())
            .collect()
    };
    let before = agent_eventually(
        &node,
        &id,
        "two replicas run and are tracked",
        Duration::from_secs(30),
        || {
            let u = uids(&node);
            let m = http_get(&listen, "/metrics")?.1;
            (u.len() == 2 && metric(&m, "reloadlet_volumes_tracked") >= 6.0).then_some(u)
        },
    )
    .await;
    node.api
        .apply_configmap(configmap(ns_apps, "app-conf", &[("k", "v2")]));
    agent_eventually(
        &node,
        &id,
        "both replicas replaced through the Eviction API",
        Duration::from_secs(60),
        || {
            let now = uids(&node);
            (now.len() == 2 && now.is_disjoint(&before)).then_some(())
        },
    )
    .await;
    let evicted: Vec<_> = node
        .api
        .evictions()
        .into_iter()
        .filter(|e| e.code == 201)
        .collect();
    assert_eq!(evicted.len(), 2, "{evicted:?}");

    // 3. /metrics from the image.
    let m = http_get(&listen, "/metrics").expect("/metrics").1;
    assert!(
        metric(
            &m,
            "reloadlet_actions_total{action=\"signal\",outcome=\"signaled\"}"
        ) >= 1.0,
        "{m}"
    );
    assert!(
        metric(
            &m,
            "reloadlet_actions_total{action=\"evict\",outcome=\"evicted\"}"
        ) >= 2.0,
        "{m}"
    );

    // 4. The kubelet rotates the projected token: a new token of the same service account
    // (the same RBAC bindings) is in the file, the old one stays valid for a while. kube
    // re-reads the token file once its cached copy is within 10 s of its 60 s lifetime
    // (kube-client 5.0.0, src/client/auth/mod.rs: TokenFile, SIXTY_SEC / TEN_SEC), so the
    // agent's requests carry the new token within a minute.
    let started = node.podman.inspect(&id, "{{.State.StartedAt}}");
    let token_2 = node.api.rotate_token(&token_1);
    node.write_token(&token_2);
    let mut round = 0u32;
    let mut last_bump = tokio::time::Instant::now();
    agent_eventually(
        &node,
        &id,
        "a request with the rotated token",
        Duration::from_secs(90),
        || {
            if node
                .api
                .requests()
                .iter()
                .any(|r| r.token == token_2 && r.status < 400)
            {
                return Some(());
            }
            // Give the agent reasons to call the API server (a reload posts an Event).
            if last_bump.elapsed() >= Duration::from_secs(3) {
                round += 1;
                last_bump = tokio::time::Instant::now();
                node.api.apply_configmap(conf(&format!("rotation-{round}")));
            }
            None
        },
    )
    .await;
    // The old token expires (401 from now on); the agent keeps working without a restart.
    node.api.revoke_token(&token_1);
    let events_before = signaled(&node, "nginx-0");
    node.api.apply_configmap(conf("v3"));
    agent_eventually(
        &node,
        &id,
        "nginx serves v3",
        Duration::from_secs(20),
        serves("v3"),
    )
    .await;
    agent_eventually(
        &node,
        &id,
        "a Signaled event with the new token",
        Duration::from_secs(20),
        || (signaled(&node, "nginx-0") > events_before).then_some(()),
    )
    .await;
    assert_eq!(
        node.podman.inspect(&id, "{{.State.StartedAt}}"),
        started,
        "no restart"
    );
    assert_eq!(node.podman.inspect(&id, "{{.RestartCount}}"), "0");
    assert_eq!(
        std::fs::read_to_string(run_dir.join("nginx.pid")).unwrap(),
        master
    );
    // The agent did all of it, before and after the rotation, with the chart's agent role.
    node.assert_no_forbidden();
}
