//! nginx as a real container's PID 1 under containerd (1.6, through `ctr`) with runc, in the
//! kubelet's cgroupfs layout (`/kubepods/besteffort/pod<uid>/<container id>`, the shim
//! outside it as the container's parent), beside a pause-like sandbox (catatonit -P) and a
//! sibling container. reloadlet (the binary) gets a ConfigMap change and sends SIGHUP to
//! nginx's master: same PID, the new config served; the shim, the sandbox and the sibling are
//! not signalled (a `sleep` would die of SIGHUP). Then `action: evict`: a ReplicaSet's pod
//! in containerd is evicted through the Eviction API and replaced.
//!
//! Skips in one line where containerd, ctr, runc, nginx, busybox or catatonit is missing;
//! `RELOADLET_REQUIRE_IMAGE=1` (hack/test.sh) makes that a failure.

#[path = "support/runtime/mod.rs"]
mod runtime_support;
use test_support::wait;

use nodesim::apiserver::ApiServer;
use nodesim::probe::http_get;
use nodesim::runtime::random_container_id;
use runtime_support::*;
use std::time::Duration;

const NODE: &str = "node-a";
const NS: &str = "web";

#[tokio::test(flavor = "multi_thread")]
async fn nginx_in_a_containerd_container_is_reloaded_by_sighup() {
    if !wait::root_or_skip() {
        return;
    }
    if let Some(why) = missing(&["containerd", "ctr", "runc", "nginx", "busybox", "catatonit"]) {
        wait::skipped(why);
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("reloadlet-rt-")
        .tempdir()
        .unwrap();
    let api = ApiServer::start().await.unwrap();
    agent_kubeconfig(&api, &tmp.path().join("kubeconfig"));
    let root = tmp.path().join("kubelet");
    // The pod as the API knows it (nginx with its ConfigMap, and a sibling) and its volumes
    // as the kubelet writes them.
    let nginx = NginxPod::create(&api, &root, NS, NODE);
    let (uid, port) = (nginx.uid.clone(), nginx.port);

    // The runtime's part: sandbox, nginx, sibling, each in its cgroup under the pod's.
    let mut containerd = Containerd::start(&tmp.path().join("containerd"));
    let rootfs = rootfs(tmp.path());
    let pod_cgroup = format!("/kubepods/besteffort/pod{uid}");
    let (sandbox_id, nginx_id, sidecar_id) = (
        random_container_id(),
        random_container_id(),
        random_container_id(),
    );
    let sandbox = containerd.run(
        &sandbox_id,
        &rootfs,
        &format!("{pod_cgroup}/{sandbox_id}"),
        &host_mounts(),
        &["/usr/bin/catatonit", "-P"],
    );
    let nginx_mounts = nginx.mounts();
    let master = containerd.run(
        &nginx_id,
        &rootfs,
        &format!("{pod_cgroup}/{nginx_id}"),
        &nginx_mounts,
        &["/usr/sbin/nginx", "-c", "/config/nginx.conf"],
    );
    let sidecar = containerd.run(
        &sidecar_id,
        &rootfs,
        &format!("{pod_cgroup}/{sidecar_id}"),
        &host_mounts(),
        &["/usr/bin/busybox", "sleep", "3600"],
    );
    let shim = parent(master);
    assert!(
        containerd.shims().contains(&shim),
        "the shim is nginx's parent"
    );
    let status = running_status(
        "containerd",
        &[
            ("nginx", &nginx_id, "nginx"),
            ("sidecar", &sidecar_id, "busybox"),
        ],
    );
    api.set_pod_status(NS, "nginx-0", serde_json::from_value(status).unwrap());

    let addr = format!("127.0.0.1:{port}");
    wait::eventually(
        "nginx serves v1 from its container",
        Duration::from_secs(20),
        || http_get(&addr, "/").filter(|(c, b)| *c == 200 && b == "v1"),
    )
    .await;

    let (agent, listen) = spawn_agent(tmp.path(), &root, NODE);
    let ok = wait::within(Duration::from_secs(30), || tracked(&listen) >= 1.0).await;
    assert!(
        ok,
        "the agent never tracked nginx's volume:\n{}",
        agent.log()
    );

    // The ConfigMap changes; the kubelet writes the volume; nginx reloads once.
    nginx.change_and_see_one_reload(&api, NS, &agent).await;
    assert_eq!(
        containerd.pid(&nginx_id),
        Some(master),
        "the same master, reloaded in place"
    );
    for (what, pid) in [
        ("the shim", shim),
        ("the sandbox", sandbox),
        ("the sibling", sidecar),
    ] {
        assert!(running(pid), "{what} (pid {pid}) was not signalled");
    }

    // `action: evict`: a ReplicaSet's pod running in the runtime is evicted and replaced.
    let stage = Stage {
        api: &api,
        root: &root,
        rootfs: &rootfs,
        namespace: NS,
        node: NODE,
        agent: &agent,
        listen: &listen,
        tracked_before: 1.0,
    };
    evict_scene(&stage, &mut containerd).await;
    assert!(running(master), "nginx was not touched by the eviction");
    // The agent did all of it with the chart's agent role.
    assert_no_forbidden(&api);

    drop(agent);
    drop(containerd);
}
