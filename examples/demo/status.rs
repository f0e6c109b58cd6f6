//! The last scene: `reloadlet status configmap/nginx-conf -n demo`, as an operator would ask
//! "is my change live everywhere?" after the edits above (docs/status.md). The controller
//! publishes the ConfigMap's data version; the agent recorded on nginx-0 what it signalled.

use super::support::*;
use nodesim::node::SimNode;
use std::process::Command;
use std::time::Duration;

/// Runs `reloadlet status` (the admin kubeconfig of the simulated API server) until it
/// reports every consumer current or 10 s pass, prints its table, and returns whether every
/// consumer is current (its exit code 0).
pub async fn scene(node: &SimNode) -> Result<bool, String> {
    println!("    where did my change go? $ reloadlet status configmap/nginx-conf -n demo");
    let ask = || {
        Command::new(reloadlet_binary())
            .args(["status", "configmap/nginx-conf", "-n", "demo"])
            .env("KUBECONFIG", node.kubeconfig())
            .output()
    };
    let mut out = ask().map_err(|e| format!("cannot run reloadlet status: {e}"))?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // The controller publishes the data version and the agent records its signal a moment
    // after the change: ask again while it says pending, as `--wait` would.
    while !out.status.success() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        out = ask().map_err(|e| format!("cannot run reloadlet status: {e}"))?;
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        println!("    {line}");
    }
    for line in String::from_utf8_lossy(&out.stderr).lines() {
        println!("    {line}");
    }
    Ok(out.status.success())
}
