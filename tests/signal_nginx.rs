//! The headline scenario with a real program: nginx (Debian's package) runs as a container's
//! main process and serves `return 200 "v1"` from its ConfigMap; after the ConfigMap changes,
//! reloadlet sends SIGHUP and nginx serves "v2" — no restart, no sidecar.

mod common;

use common::fixtures::{configmap, pod};
use common::*;
use serde_json::json;
use std::net::TcpListener;
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
    for p in ["/usr/sbin/nginx", "/usr/bin/nginx"] {
        if Path::new(p).exists() {
            return p;
        }
    }
    panic!("nginx is not installed: `apt-get install -y nginx-light` (the CI script does it)");
}

#[tokio::test(flavor = "multi_thread")]
async fn nginx_reloads_its_configmap_on_sighup_and_serves_the_new_content() {
    let nginx = nginx_binary();
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let run_dir = node.path("nginx-run");
    std::fs::create_dir_all(&run_dir).unwrap();
    let conf_dir = node.path("etc-nginx");
    let ns = "web";
    node.api.apply_configmap(configmap(
        ns,
        "nginx-conf",
        &[("nginx.conf", &nginx_conf(port, &run_dir, "v1"))],
    ));
    node.api.create_pod(
        pod(ns, "nginx-0")
            .signal()
            .annotate("reloadlet.io/containers", "nginx")
            .annotate("reloadlet.io/configmaps", "nginx-conf")
            .configmap_volume("conf", "nginx-conf")
            .container(json!({
                "name": "nginx",
                "image": "nginx",
                "command": [nginx, "-c", format!("{}/nginx.conf", conf_dir.display())],
                "volumeMounts": [{"name": "conf", "mountPath": conf_dir.display().to_string()}]
            }))
            .build(),
    );
    let handles = node.wait_running(ns, "nginx-0").await;
    let addr = format!("127.0.0.1:{port}");
    eventually("nginx serves v1", Duration::from_secs(15), || {
        http_get(&addr, "/").filter(|(code, body)| *code == 200 && body == "v1")
    })
    .await;
    node.wait_tracked(2).await;

    node.api.apply_configmap(configmap(
        ns,
        "nginx-conf",
        &[("nginx.conf", &nginx_conf(port, &run_dir, "v2"))],
    ));

    eventually(
        "nginx serves v2 after SIGHUP",
        Duration::from_secs(15),
        || http_get(&addr, "/").filter(|(code, body)| *code == 200 && body == "v2"),
    )
    .await;
    let ev = node.wait_event(ns, "nginx-0", "Signaled").await;
    let master = handles.container("nginx").unwrap().main_pid;
    assert_eq!(
        ev.note,
        format!("sent SIGHUP to container nginx (pid {master}): configmap nginx-conf changed")
    );
    assert!(
        alive(master),
        "nginx reloaded in place: the master process is the same"
    );
    let log = std::fs::read_to_string(run_dir.join("error.log")).unwrap_or_default();
    assert!(
        log.contains("signal 1 (SIGHUP) received"),
        "nginx's own log shows the reload:\n{log}"
    );
}
