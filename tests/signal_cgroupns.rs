//! reloadlet in a private cgroup namespace — as a non-privileged container on cgroup v2 is —
//! sees other pods' cgroups as `0::/../../kubepods.slice/…` and must still find and signal
//! the right process (node-facts §4: match on the path's tail, never its head).

mod common;

use common::fixtures::{configmap, pod};
use common::*;
use nodesim::cgroups::CgroupMounts;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// A cgroup for the agent itself, removed (after its processes are gone) on drop.
struct AgentCgroup(PathBuf);
impl Drop for AgentCgroup {
    fn drop(&mut self) {
        common::within_blocking(Duration::from_secs(2), || {
            std::fs::remove_dir(&self.0).is_ok() || !self.0.exists()
        });
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn signals_from_inside_a_private_cgroup_namespace() {
    let v2 = CgroupMounts::detect()
        .unwrap()
        .v2
        .expect("cgroup v2 mounted");
    let mut node = Node::start(NodeOptions {
        cgroup_version: CgroupVersion::V2,
        ..Default::default()
    })
    .await;
    let cg = AgentCgroup(v2.join(format!("reloadlet-agent-{}", std::process::id())));
    std::fs::create_dir(&cg.0).unwrap();
    let mut wrapper = Command::new("/bin/sh");
    nodesim::runtime::default_signals(&mut wrapper);
    wrapper.arg("-c").arg(format!(
        "echo $$ > {}/cgroup.procs && exec unshare --cgroup \"$0\" \"$@\"",
        cg.0.display()
    ));
    wrapper.arg(env!("CARGO_BIN_EXE_reloadlet"));
    node.spawn_agent_with(wrapper, &[]);
    node.wait_ready().await;
    let agent_pid = node.agent().child.id();
    node.api
        .apply_configmap(configmap("ns", "c", &[("k", "1")]));
    let (app, child) = (node.path("app.sig"), node.path("child.sig"));
    node.api.create_pod(
        pod("ns", "web")
            .signal()
            .configmap_volume("conf", "c")
            .recorder_with_child("app", &app, &child, &[("conf", "/c")])
            .build(),
    );
    let handles = node.wait_running("ns", "web").await;
    // What the agent sees: the container's cgroup relative to its own namespace root.
    let main_pid = handles.container("app").unwrap().main_pid;
    let seen = Command::new("nsenter")
        .args([
            "--cgroup",
            "--target",
            &agent_pid.to_string(),
            "cat",
            &format!("/proc/{main_pid}/cgroup"),
        ])
        .output()
        .unwrap();
    let seen = String::from_utf8_lossy(&seen.stdout).to_string();
    assert!(
        seen.lines()
            .any(|l| l.starts_with("0::/../kubepods.slice/")),
        "relative path seen by the agent: {seen}"
    );
    node.wait_tracked(2).await;
    node.api
        .apply_configmap(configmap("ns", "c", &[("k", "2")]));
    eventually(
        "SIGHUP through the relative cgroup path",
        Duration::from_secs(15),
        || (signals_in(&app) == ["SIGHUP"]).then_some(()),
    )
    .await;
    never("the child is left alone", AGENT_QUIET, || {
        !signals_in(&child).is_empty()
    })
    .await;
    let _ = node.stop_agent().await;
}
