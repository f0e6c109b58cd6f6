//! nginx as a real container's PID 1 in CRI-O's shape: conmon creates each container with
//! runc and stays its parent, in the kubelet's cgroupfs layout as CRI-O names it
//! (`/kubepods/besteffort/pod<uid>/crio-<id>`, conmon in the sibling `crio-conmon-<id>`),
//! beside an infra (pause) container (catatonit -P) and a sibling container. reloadlet (the
//! binary) gets a ConfigMap change and sends SIGHUP to nginx's master: same PID, the new config served; conmon, the infra container and the
//! sibling are not signalled (a `sleep` would die of SIGHUP). Then `action: evict`: a
//! ReplicaSet's pod under conmon is evicted through the Eviction API and replaced.
//!
//! Skips in one line where conmon, runc, nginx, busybox or catatonit is missing;
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
async fn nginx_in_a_conmon_runc_container_is_reloaded_by_sighup() {
    if !wait::root_or_skip() {
        return;
    }
    if let Some(why) = missing(&["conmon", "runc", "nginx", "busybox", "catatonit"]) {
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

    // The runtime's part: infra, nginx, sibling, each in its cgroup under the pod's.
    let mut conmon = Conmon::new(&tmp.path().join("crio"));
    let rootfs = rootfs(tmp.path());
    let pod_cgroup = format!("/kubepods/besteffort/pod{uid}");
    let (sandbox_id, nginx_id, sidecar_id) = (
        random_container_id(),
        random_container_id(),
        random_container_id(),
    );
    let (infra_conmon, sandbox) = conmon.run(
        &sandbox_id,
        &rootfs,
        &pod_cgroup,
        &host_mounts(),
        &["/usr/bin/catatonit", "-P"],
    );
    let nginx_mounts = nginx.mounts();
    let (nginx_conmon, master) = conmon.run(
        &nginx_id,
        &rootfs,
        &pod_cgroup,
        &nginx_mounts,
        &["/usr/sbin/nginx", "-c", "/config/nginx.conf"],
    );
    let (sidecar_conmon, sidecar) = conmon.run(
        &sidecar_id,
        &rootfs,
        &pod_cgroup,
        &host_mounts(),
        &["/usr/bin/busybox", "sleep", "3600"],
    );
    assert_eq!(parent(master), nginx_conmon, "conmon is nginx's parent");
    let status = running_status(
        "cri-o",
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
    assert!(running(master), "the same master, reloaded in place");
    let pid_file = std::fs::read_to_string(nginx.run_dir.join("nginx.pid")).unwrap();
    // nginx writes its PID as its own namespace sees it: 1, the container's init.
    assert_eq!(pid_file.trim(), "1", "nginx is the container's PID 1");
    for (what, pid) in [
        ("nginx's conmon", nginx_conmon),
        ("the infra container's conmon", infra_conmon),
        ("the sibling's conmon", sidecar_conmon),
        ("the infra container", sandbox),
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
    evict_scene(&stage, &mut conmon).await;
    assert!(running(master), "nginx was not touched by the eviction");
    // The agent did all of it with the chart's agent role.
    assert_no_forbidden(&api);

    drop(agent);
    drop(conmon);
}
