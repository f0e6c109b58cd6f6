//! `reloadlet controller` as a child process against a simulated node: start (waits for
//! /readyz), log, metrics, stop (SIGTERM). Include with
//! `#[path = "support/controller_process.rs"] mod controller_process;` after `mod common;`.
#![allow(dead_code)]

use crate::common::{eventually_while_running, http_get, metric_value, terminate, Node};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct ControllerProcess {
    pub child: Child,
    pub listen: String,
    log: PathBuf,
}

impl ControllerProcess {
    /// Spawns `reloadlet controller` with `args` and `env` and waits for /readyz (failing at
    /// once, with its log, if it exits).
    pub async fn start(node: &Node, args: &[&str], env: &[(&str, &str)]) -> Self {
        let values = crate::common::rbac::controller_chart_values(args, env);
        Self::start_under(node, &values, args, env, "/readyz").await
    }

    /// Spawns `reloadlet controller` authorized by the chart's RBAC for `chart_values`
    /// (whatever its flags ask: `&[]` is also what the kustomize base grants) and waits
    /// until `path` answers 200 (`/healthz`: live, ready or not).
    pub async fn start_under(
        node: &Node,
        chart_values: &[String],
        args: &[&str],
        env: &[(&str, &str)],
        path: &str,
    ) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let listen = format!("127.0.0.1:{port}");
        let log = node.path(&format!("controller-{port}.log"));
        if node.rbac {
            node.load_chart_rbac(chart_values);
        }
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_reloadlet"));
        nodesim::runtime::default_signals(&mut cmd)
            .arg("controller")
            .args(["--listen", &listen])
            .args(args)
            .env("KUBECONFIG", node.controller_kubeconfig())
            .env("RUST_LOG", "reloadlet=debug,info")
            // The controller's own namespace, as the chart's downward API gives it: its key
            // Secret lives there (tests that elect a leader pass their own).
            .env("POD_NAMESPACE", "reloadlet-system")
            .env_remove("POD_NAME")
            .env_remove("RELOADLET_ENV_CONSUMERS")
            .env_remove("RELOADLET_ENV_CONSUMERS_SECRETS")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut c = Self {
            child: cmd.spawn().expect("spawn reloadlet controller"),
            listen,
            log,
        };
        let (listen, log) = (c.listen.clone(), c.log.clone());
        eventually_while_running(
            &format!("controller {path}"),
            Duration::from_secs(30),
            &mut c.child,
            || std::fs::read_to_string(&log).unwrap_or_default(),
            || http_get(&listen, path).and_then(|(code, _)| (code == 200).then_some(())),
        )
        .await;
        c
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn metric(&self, series: &str) -> f64 {
        let body = http_get(&self.listen, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default();
        metric_value(&body, series)
    }

    /// Resident set size (VmRSS) in KiB.
    pub fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// SIGTERM, then waits (SIGKILL after 15 s).
    pub async fn stop(mut self) {
        terminate(&mut self.child).await;
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // A failing test shows what the controller did, as the node shows the agent's log.
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!(
                "--- reloadlet controller log ({}) ---\n{log}",
                self.log.display()
            );
        }
    }
}
