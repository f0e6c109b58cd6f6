//! Secrets from CSI drivers (docs/csi.md) end to end on a simulated node: inline CSI volumes
//! published after the pod started, rotated through the AtomicWriter or in place, and what a
//! user of `reloadlet.io/action: signal` sees — one signal per rotation, nothing for the
//! rest.

mod common;

use common::fixtures::{pod, spc_volume};
use common::*;
use nodesim::csi::{CsiVolume, WriteStyle};
use serde_json::json;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

const NS: &str = "vault";
const WAIT: Duration = Duration::from_secs(15);
const SECRETS_STORE: &str = "secrets-store.csi.k8s.io";
const CERT_MANAGER: &str = "csi.cert-manager.io";
const EBS: &str = "ebs.csi.aws.com";
const IN_PLACE: WriteStyle = WriteStyle::InPlace {
    pause: Duration::from_millis(500),
};

fn csi_volume(name: &str, driver: &str) -> serde_json::Value {
    json!({"name": name, "csi": {"driver": driver, "readOnly": true,
        "volumeAttributes": {"csi.cert-manager.io/issuer-name": "ca"}}})
}

async fn quiet(out: &Path, what: &str) {
    never(what, AGENT_QUIET, || !signals_in(out).is_empty()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_atomic_rotation_signals_once_and_identical_bytes_do_nothing() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    let out = node.path("app.sig");
    node.api.create_pod(
        pod(NS, "app")
            .signal()
            .volume(spc_volume("secrets", "vault-db"))
            .recorder("app", &out, &[("secrets", "/mnt/secrets")])
            .build(),
    );
    node.wait_running(NS, "app").await;
    let uid = node.uid(NS, "app");
    // kube-api-access, then the CSI volume once the driver published it.
    node.wait_tracked(1).await;
    let db = node.publish_csi(
        &uid,
        "secrets",
        SECRETS_STORE,
        WriteStyle::Atomic,
        &[("db-password", "hunter2"), ("db-user", "app")],
    );
    node.wait_tracked(2).await;
    quiet(&out, "a signal for the first write (a baseline)").await;

    // The driver's poll finds the same secret: the AtomicWriter writes nothing.
    db.rotate(&[("db-password", "hunter2"), ("db-user", "app")])
        .unwrap();
    quiet(&out, "a signal for identical bytes").await;

    db.rotate(&[("db-password", "correct horse"), ("db-user", "app")])
        .unwrap();
    eventually("one SIGHUP for the rotation", WAIT, || {
        (signals_in(&out) == ["SIGHUP"]).then_some(())
    })
    .await;
    let ev = node.wait_event(NS, "app", "Signaled").await;
    assert!(
        ev.note
            .ends_with(": secretproviderclass vault-db (volume secrets) changed"),
        "{}",
        ev.note
    );
    quiet_after_one(&out).await;

    // Secret at rest: the state file is private and holds keyed digests only.
    let state = node.path("state").join("state.json");
    eventually("the CSI volume's digest persisted", WAIT, || {
        fs::read_to_string(&state)
            .ok()
            .filter(|s| s.contains("/csi/secrets"))
    })
    .await;
    assert_eq!(
        fs::metadata(&state).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let text = fs::read_to_string(&state).unwrap();
    let log = node.agent_log();
    for secret in ["hunter2", "correct horse"] {
        assert!(!text.contains(secret), "secret in the state file");
        assert!(!log.contains(secret), "secret in the log");
    }
    // Keyed as a Secret volume's: the saved digest is the node key's, and no other key's.
    let saved: serde_json::Value = serde_json::from_str(&text).unwrap();
    let csi_key = format!("{uid}/csi/secrets");
    let saved = saved["volumes"][&csi_key][""].as_str().unwrap().to_owned();
    let node_key: [u8; 32] = fs::read(node.path("state").join("hash.key"))
        .unwrap()
        .try_into()
        .unwrap();
    let digest_with = |key: [u8; 32]| {
        let d = reloadlet::host::volume_read::hash_volume(
            &db.mount_dir(),
            1 << 20,
            &reloadlet::core::volume_digest::HashKey::from_bytes(key),
            &reloadlet::host::volume_read::Layout::csi(),
        )
        .unwrap()
        .unwrap();
        d.get("")
            .unwrap()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    assert_eq!(digest_with(node_key), saved);
    assert_ne!(digest_with([0; 32]), saved);
    assert!(!log.contains(&saved[..12]), "a digest prefix in the log");

    // Pod deletion: the kubelet unpublishes (unmount) and removes the volume: no action.
    node.api.delete_pod(NS, "app");
    eventually("the pod's directory removed", WAIT, || {
        (!node.kubelet_root().join("pods").join(&uid).exists()).then_some(())
    })
    .await;
    drop(db);
    never("another action after the unmount", AGENT_QUIET, || {
        node.events(NS, "app", "Signaled").len() != 1
            || !node.all_events().iter().all(|e| e.type_ == "Normal")
    })
    .await;
}

async fn quiet_after_one(out: &Path) {
    never("a second signal", AGENT_QUIET, || {
        signals_in(out).len() != 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn three_files_written_in_place_over_a_second_act_once_after_settling() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    let out = node.path("app.sig");
    node.api.create_pod(
        pod(NS, "legacy")
            .signal()
            .volume(spc_volume("secrets", "vault-legacy"))
            .recorder("app", &out, &[("secrets", "/mnt/secrets")])
            .build(),
    );
    node.wait_running(NS, "legacy").await;
    let uid = node.uid(NS, "legacy");
    node.wait_tracked(1).await;
    let files = [("a", "1"), ("b", "1"), ("c", "1")];
    let vol = node.publish_csi(&uid, "secrets", SECRETS_STORE, IN_PLACE, &files);
    eventually("the in-place volume's baseline", WAIT, || {
        (node.metric("reloadlet_volumes_tracked") >= 2.0).then_some(())
    })
    .await;
    quiet(&out, "a signal for the first write").await;

    // Rewritten with the same bytes: settled, hashed, unchanged.
    tokio::task::block_in_place(|| vol.rotate(&files)).unwrap();
    never(
        "a signal for identical bytes written in place",
        Duration::from_secs(3),
        || !signals_in(&out).is_empty(),
    )
    .await;

    tokio::task::block_in_place(|| vol.rotate(&[("a", "2"), ("b", "2"), ("c", "2")])).unwrap();
    eventually("one SIGHUP once the writes settled", WAIT, || {
        (signals_in(&out) == ["SIGHUP"]).then_some(())
    })
    .await;
    never("a second signal", Duration::from_secs(3), || {
        signals_in(&out).len() != 1
    })
    .await;
    assert_eq!(node.events(NS, "legacy", "Signaled").len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn class_and_volume_narrowing_and_other_drivers() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    let (by_class, by_volume) = (node.path("class.sig"), node.path("volume.sig"));
    for (name, key, value, out) in [
        (
            "by-class",
            "reloadlet.io/secretproviderclasses",
            "vault-db",
            &by_class,
        ),
        ("by-volume", "reloadlet.io/csi-volumes", "certs", &by_volume),
    ] {
        node.api.create_pod(
            pod(NS, name)
                .signal()
                .annotate(key, value)
                .volume(spc_volume("secrets", "vault-db"))
                .volume(csi_volume("certs", CERT_MANAGER))
                .volume(csi_volume("data", EBS))
                .recorder(
                    "app",
                    out,
                    &[("secrets", "/s"), ("certs", "/c"), ("data", "/d")],
                )
                .build(),
        );
    }
    let mut vols = Vec::new();
    for name in ["by-class", "by-volume"] {
        node.wait_running(NS, name).await;
        let uid = node.uid(NS, name);
        let s = node.publish_csi(
            &uid,
            "secrets",
            SECRETS_STORE,
            WriteStyle::Atomic,
            &[("p", "1")],
        );
        let c = node.publish_csi(
            &uid,
            "certs",
            CERT_MANAGER,
            WriteStyle::Atomic,
            &[("tls.crt", "1")],
        );
        let d = CsiVolume::publish_storage(&node.kubelet_root(), &uid, "data", EBS).unwrap();
        vols.push((s, c, d));
    }
    // Two token volumes and two known CSI volumes per pod; the storage volumes never.
    node.wait_tracked(6).await;

    // A block/file storage driver's volume: written, never watched.
    for (_, _, d) in &vols {
        fs::write(d.mount_dir().join("db.sqlite"), "rows").unwrap();
    }
    for (_, c, _) in &vols {
        c.rotate(&[("tls.crt", "2")]).unwrap();
    }
    eventually("csi-volumes: certs signals", WAIT, || {
        (signals_in(&by_volume) == ["SIGHUP"]).then_some(())
    })
    .await;
    quiet(&by_class, "a signal for a class not listed").await;
    let ev = node.wait_event(NS, "by-volume", "Signaled").await;
    assert!(
        ev.note
            .ends_with(": csi volume certs (csi.cert-manager.io) changed"),
        "{}",
        ev.note
    );

    for (s, _, _) in &vols {
        s.rotate(&[("p", "2")]).unwrap();
    }
    eventually("secretproviderclasses: vault-db signals", WAIT, || {
        (signals_in(&by_class) == ["SIGHUP"]).then_some(())
    })
    .await;
    never(
        "by-volume signalled for an unlisted volume",
        AGENT_QUIET,
        || signals_in(&by_volume).len() != 1,
    )
    .await;
    assert_eq!(node.metric("reloadlet_volumes_tracked"), 6.0);
    assert!(!node.agent_log().contains("ebs.csi.aws.com/data"));
}

#[tokio::test(flavor = "multi_thread")]
async fn csi_drivers_replaces_the_list() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&["--csi-drivers", CERT_MANAGER]).await;
    let (out, control) = (node.path("app.sig"), node.path("listed.sig"));
    node.api.create_pod(
        pod(NS, "app")
            .signal()
            .volume(spc_volume("secrets", "vault-db"))
            .recorder("app", &out, &[("secrets", "/s")])
            .build(),
    );
    // The positive control: a pod beside it whose CSI driver is the one listed.
    node.api.create_pod(
        pod(NS, "listed")
            .signal()
            .volume(csi_volume("certs", CERT_MANAGER))
            .recorder("app", &control, &[("certs", "/c")])
            .build(),
    );
    node.wait_running(NS, "app").await;
    node.wait_running(NS, "listed").await;
    until("both recorders ready", WAIT, || {
        recorder_ready(&out) && recorder_ready(&control)
    })
    .await;
    let uid = node.uid(NS, "app");
    // The two pods' service-account tokens.
    node.wait_tracked(2).await;
    let s = node.publish_csi(
        &uid,
        "secrets",
        SECRETS_STORE,
        WriteStyle::Atomic,
        &[("p", "1")],
    );
    let c = node.publish_csi(
        &node.uid(NS, "listed"),
        "certs",
        CERT_MANAGER,
        WriteStyle::Atomic,
        &[("tls.crt", "1")],
    );
    node.wait_tracked(3).await;
    s.rotate(&[("p", "2")]).unwrap();
    c.rotate(&[("tls.crt", "2")]).unwrap();
    until("the pod with the listed driver got SIGHUP", WAIT, || {
        signals_in(&control) == ["SIGHUP"]
    })
    .await;
    quiet(&out, "a signal for a driver left out of --csi-drivers").await;
    assert_eq!(node.metric("reloadlet_volumes_tracked"), 3.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn restarts_act_only_on_what_rotated_while_the_agent_was_down() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    let out = node.path("app.sig");
    node.api.create_pod(
        pod(NS, "app")
            .signal()
            .volume(spc_volume("secrets", "vault-db"))
            .volume(csi_volume("certs", CERT_MANAGER))
            .recorder("app", &out, &[("secrets", "/s"), ("certs", "/c")])
            .build(),
    );
    node.wait_running(NS, "app").await;
    let uid = node.uid(NS, "app");
    node.wait_tracked(1).await;
    let s = node.publish_csi(
        &uid,
        "secrets",
        SECRETS_STORE,
        WriteStyle::Atomic,
        &[("p", "1")],
    );
    let c = node.publish_csi(&uid, "certs", CERT_MANAGER, IN_PLACE, &[("tls.crt", "1")]);
    node.wait_tracked(3).await;
    let state = node.path("state").join("state.json");
    eventually("both CSI digests persisted", WAIT, || {
        fs::read_to_string(&state)
            .ok()
            .filter(|t| t.contains("/csi/secrets") && t.contains("/csi/certs"))
    })
    .await;

    // Unchanged files across a restart: nothing.
    node.stop_agent().await;
    node.start_agent(&[]).await;
    node.wait_tracked(3).await;
    quiet(&out, "a signal after a restart with unchanged files").await;

    // Rotated while the agent is down: one action after the restart.
    node.stop_agent().await;
    s.rotate(&[("p", "2")]).unwrap();
    c.rotate(&[("tls.crt", "2")]).unwrap();
    node.start_agent(&[]).await;
    eventually("one SIGHUP after the restart", WAIT, || {
        (signals_in(&out) == ["SIGHUP"]).then_some(())
    })
    .await;
    quiet_after_one(&out).await;
    let ev = node.wait_event(NS, "app", "Signaled").await;
    assert!(
        ev.note.ends_with(
            ": csi volume certs (csi.cert-manager.io), secretproviderclass vault-db (volume secrets) changed"
        ) || ev.note.ends_with(
            ": secretproviderclass vault-db (volume secrets), csi volume certs (csi.cert-manager.io) changed"
        ),
        "{}",
        ev.note
    );
}
