//! Scenes 1 and 2: the nginx pod, one ConfigMap change applied and each step of its way to
//! nginx serving the new content timed (the controller's nudge, the kubelet's sync writing
//! the file, reloadlet's SIGHUP, the new response).

use crate::support::*;
use crate::{cm, NUDGE, SIGNALED};
use nodesim::kubelet_sync::SyncReason;
use nodesim::node::SimNode;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub fn nginx_conf(port: u16, run: &Path, body: &str) -> String {
    let run = run.display();
    format!(
        "daemon off;\nworker_processes 1;\npid {run}/nginx.pid;\nerror_log {run}/error.log;\nevents {{}}\n\
         http {{\n  access_log off;\n  client_body_temp_path {run}/body;\n  proxy_temp_path {run}/proxy;\n  \
         fastcgi_temp_path {run}/fastcgi;\n  uwsgi_temp_path {run}/uwsgi;\n  scgi_temp_path {run}/scgi;\n  \
         server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"{body}\\n\"; }} }}\n}}\n"
    )
}

/// The nginx pod and what the scenes observe of it.
pub struct Nginx<'a> {
    pub node: &'a SimNode,
    pub uid: String,
    pub port: u16,
    pub run: PathBuf,
    pub addr: String,
    /// nginx.conf in the pod's configMap volume, as the kubelet projects it.
    pub projected: PathBuf,
}

/// When each step of one ConfigMap change was first seen.
pub struct Observed {
    timeline: Timeline,
    nudge: Option<(Instant, String)>,
    on_disk: Instant,
    sync_reason: Option<SyncReason>,
    signaled: Instant,
    serving: Instant,
}

impl Nginx<'_> {
    pub fn nudge(&self) -> Option<String> {
        self.node
            .api
            .get_pod("demo", "nginx-0")?
            .metadata
            .annotations?
            .get(NUDGE)
            .cloned()
    }

    /// `kubectl apply` of nginx.conf returning `body`, then polls every 10 ms until nginx
    /// serves it, noting when the nudge, the new file, the SIGHUP and the new content
    /// appeared. With `progress`, a line every 5 s while it waits.
    pub async fn change(
        &self,
        agent: &str,
        old: &str,
        body: &str,
        timeout: Duration,
        progress: bool,
    ) -> Result<Observed, String> {
        let api = &self.node.api;
        let want = nginx_conf(self.port, &self.run, body);
        let nudge_before = self.nudge();
        let signaled_before = metric(agent, SIGNALED).ok_or("reloadlet /metrics")?;
        let timeline = Timeline::start();
        api.apply_configmap(cm("nginx-conf", "nginx.conf", &want));
        timeline.line(
            timeline.t0,
            &format!("kubectl apply: ConfigMap nginx-conf now returns {body:?}"),
        );
        let (mut nudge, mut on_disk, mut signaled, mut serving) = (None, None, None, None);
        let mut next_progress = timeline.t0 + Duration::from_secs(5);
        loop {
            let now = Instant::now();
            if nudge.is_none() {
                nudge = self
                    .nudge()
                    .filter(|v| Some(v) != nudge_before.as_ref())
                    .map(|v| (now, v));
            }
            if on_disk.is_none()
                && std::fs::read_to_string(&self.projected).is_ok_and(|t| t == want)
            {
                on_disk = Some(now);
            }
            if signaled.is_none() && metric(agent, SIGNALED).is_some_and(|n| n > signaled_before) {
                signaled = Some(now);
            }
            if serving.is_none() && http_get(&self.addr, "/").is_some_and(|b| b == body) {
                serving = Some(now);
            }
            if let (Some(on_disk), Some(signaled), Some(serving)) = (on_disk, signaled, serving) {
                let sync_reason = self
                    .node
                    .kubelet
                    .syncs(&self.uid)
                    .into_iter()
                    .find(|s| s.at >= timeline.t0)
                    .map(|s| s.reason);
                return Ok(Observed {
                    timeline,
                    nudge,
                    on_disk,
                    sync_reason,
                    signaled,
                    serving,
                });
            }
            if now > timeline.t0 + timeout {
                return Err(format!("nginx did not serve {body:?} within {timeout:?}"));
            }
            if progress && now >= next_progress {
                println!(
                    "      … t+{} nginx still serves {old:?}: the kubelet has not synced the pod yet",
                    secs(timeline.since(now))
                );
                next_progress += Duration::from_secs(5);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Observed {
    pub fn print(&self, body: &str) {
        let tl = &self.timeline;
        if let Some((at, v)) = &self.nudge {
            tl.line(
                *at,
                &format!("reloadlet controller patches nginx-0: {NUDGE}: {v:?}"),
            );
        }
        let why = match self.sync_reason {
            Some(SyncReason::Periodic) => "its periodic sync".to_owned(),
            Some(SyncReason::PodUpdate) => "a pod update: the nudge".to_owned(),
            Some(r) => format!("{r:?} sync"),
            None => "a sync".to_owned(),
        };
        tl.line(
            self.on_disk,
            &format!("kubelet syncs nginx-0 ({why}) and writes the new nginx.conf"),
        );
        let after = if self.nudge.is_some() {
            "10 ms after the volume the nudge announced swapped"
        } else {
            "after its 250 ms --debounce: nobody announced this swap"
        };
        tl.line(
            self.signaled,
            &format!("reloadlet sends SIGHUP to the nginx master ({after})"),
        );
        tl.line(self.serving, &format!("nginx serves {body:?}"));
    }

    pub fn took(&self) -> Duration {
        self.timeline.since(self.serving)
    }
}
