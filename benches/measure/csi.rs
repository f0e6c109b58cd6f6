//! CSI secret rotation → signal latency (docs/csi.md "Latency"), moved from tests/csi.rs.

use crate::common::fixtures::{pod, spc_volume};
use crate::common::*;
use nodesim::csi::WriteStyle;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const NS: &str = "vault";
const WAIT: Duration = Duration::from_secs(15);
const SECRETS_STORE: &str = "secrets-store.csi.k8s.io";
const IN_PLACE: WriteStyle = WriteStyle::InPlace {
    pause: Duration::from_millis(500),
};

/// Rotation → signal latency of both write styles against the atomic swap of a Secret volume
/// in the same run (docs/csi.md "Latency"). A measurement, not a test: it prints and asserts
/// nothing about time.
pub async fn rotation_to_signal_latency() {
    use crate::common::fixtures::secret;
    use nodesim::atomic_writer::{self, FileProjection};
    use std::time::Instant;
    const ROUNDS: usize = 10;
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&["--csi-settle", "2s"]).await;
    node.api.apply_secret(secret(NS, "ref", &[("p", "0")]));
    let outs = [
        node.path("secret.sig"),
        node.path("atomic.sig"),
        node.path("inplace.sig"),
    ];
    for (name, volume, out) in [
        (
            "secret",
            json!({"name": "v", "secret": {"secretName": "ref"}}),
            &outs[0],
        ),
        ("atomic", spc_volume("v", "vault-db"), &outs[1]),
        ("inplace", spc_volume("v", "vault-legacy"), &outs[2]),
    ] {
        node.api.create_pod(
            pod(NS, name)
                .signal()
                .volume(volume)
                .recorder("app", out, &[("v", "/v")])
                .build(),
        );
    }
    for name in ["secret", "atomic", "inplace"] {
        node.wait_running(NS, name).await;
    }
    let secret_dir = node
        .kubelet_root()
        .join("pods")
        .join(node.uid(NS, "secret"))
        .join("volumes/kubernetes.io~secret/v");
    let atomic = node.publish_csi(
        &node.uid(NS, "atomic"),
        "v",
        SECRETS_STORE,
        WriteStyle::Atomic,
        &[("p", "0")],
    );
    let files = |v: usize| {
        [
            ("a", v.to_string()),
            ("b", v.to_string()),
            ("c", v.to_string()),
        ]
    };
    let inplace = node.publish_csi(
        &node.uid(NS, "inplace"),
        "v",
        SECRETS_STORE,
        IN_PLACE,
        &[("a", "0"), ("b", "0"), ("c", "0")],
    );
    node.wait_tracked(6).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let wait_signal = |out: &Path, n: usize, start: Instant| loop {
        if signals_in(out).len() >= n {
            return start.elapsed();
        }
        assert!(start.elapsed() < WAIT, "no signal");
        std::thread::sleep(Duration::from_micros(500));
    };
    let mut lat: [Vec<Duration>; 3] = Default::default();
    for round in 1..=ROUNDS {
        tokio::task::block_in_place(|| {
            // The kubelet's own swap of a Secret volume, written with the same AtomicWriter.
            let payload = [("p".to_string(), FileProjection::new(round.to_string()))].into();
            let start = Instant::now();
            atomic_writer::write(&secret_dir, &payload).unwrap();
            lat[0].push(wait_signal(&outs[0], round, start));
            let start = Instant::now();
            atomic.rotate(&[("p", &round.to_string())]).unwrap();
            lat[1].push(wait_signal(&outs[1], round, start));
            let f = files(round);
            let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let start = Instant::now();
            inplace.rotate(&f).unwrap();
            lat[2].push(wait_signal(&outs[2], round, start));
        });
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (s, a, i) = (
        median(&mut lat[0]),
        median(&mut lat[1]),
        median(&mut lat[2]),
    );
    println!(
        "rotation → signal, median of {ROUNDS}: secret volume swap {s:?}; CSI atomic {a:?} ({:.2}× the secret swap); CSI in place, 3 files over 1 s + 2 s settle: {i:?} ({:.0}×)",
        a.as_secs_f64() / s.as_secs_f64(),
        i.as_secs_f64() / s.as_secs_f64()
    );
}
