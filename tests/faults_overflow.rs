//! The kernel's inotify queue overflows (reproduced by lowering
//! `fs.inotify.max_queued_events` while reloadlet creates its inotify instance, and stopping
//! reloadlet while events pile up): reloadlet rescans every volume and acts exactly on the
//! ones whose content changed. Its own binary: the sysctl is global.

mod common;

use common::fixtures::{configmap, pod};
use common::*;
use nodesim::hold;
use std::time::Duration;

const SYSCTL: &str = "/proc/sys/fs/inotify/max_queued_events";

struct RestoreSysctl(String);
impl Drop for RestoreSysctl {
    fn drop(&mut self) {
        let _ = std::fs::write(SYSCTL, &self.0);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_overflow_triggers_a_rescan_that_acts_exactly_on_changed_volumes() {
    let mut node = Node::start(NodeOptions::default()).await;
    let mut outs = Vec::new();
    for name in ["changed", "same"] {
        node.api
            .apply_configmap(configmap("o", name, &[("k", "1")]));
        let out = node.path(&format!("{name}.sig"));
        node.api.create_pod(
            pod("o", name)
                .signal()
                .configmap_volume("conf", name)
                .recorder("app", &out, &[("conf", "/c")])
                .build(),
        );
        node.wait_running("o", name).await;
        outs.push(out);
    }
    {
        let _restore = RestoreSysctl(std::fs::read_to_string(SYSCTL).unwrap());
        std::fs::write(SYSCTL, "16").unwrap();
        node.start_agent(&[]).await; // its inotify instance now has a 16-event queue
    }
    node.wait_tracked(4).await;
    let pid = node.agent().child.id() as i32;
    // Held until every thread has stopped: a quick SIGCONT would cancel a stop still pending.
    hold::stop(pid, Duration::from_secs(10)).expect("hold the agent");
    node.api
        .apply_configmap(configmap("o", "changed", &[("k", "2")]));
    let junk = node.kubelet_root().join("pods");
    for i in 0..40 {
        std::fs::create_dir(junk.join(format!("junk-{i}"))).unwrap();
    }
    hold::release(pid).expect("let the agent go");
    eventually("the overflow is counted", Duration::from_secs(15), || {
        (node.metric("reloadlet_inotify_overflows_total") >= 1.0).then_some(())
    })
    .await;
    eventually(
        "the changed volume is acted on",
        Duration::from_secs(15),
        || (signals_in(&outs[0]) == ["SIGHUP"]).then_some(()),
    )
    .await;
    never("an action for an unchanged volume", AGENT_QUIET, || {
        !signals_in(&outs[1]).is_empty() || signals_in(&outs[0]).len() > 1
    })
    .await;
    for i in 0..40 {
        let _ = std::fs::remove_dir(junk.join(format!("junk-{i}")));
    }
}
