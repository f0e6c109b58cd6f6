//! Secret contents at rest: the state directory is private, its digests are keyed with a
//! per-node key, and a state file of reloadlet 0.1 (unkeyed SHA-256) is migrated without
//! acting on anything that did not change.

mod common;

use common::fixtures::{configmap, pod, secret};
use common::*;
use serde_json::json;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

const NS: &str = "vault";
const WAIT: Duration = Duration::from_secs(15);

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Every keyed digest in a version-2 state file, as hex.
fn digests(state: &Path) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_slice(&fs::read(state).unwrap()).unwrap();
    assert_eq!(v["version"], 2, "{v}");
    v["volumes"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|parts| parts.as_object().unwrap().values())
        .map(|h| h.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn state_is_private_keyed_and_never_logged() {
    let mut node = Node::start(NodeOptions::default()).await;
    // Left by reloadlet 0.1: a world-readable dir and file.
    let dir = node.path("state");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(dir.join("state.json"), r#"{"version":1,"volumes":{}}"#).unwrap();
    fs::set_permissions(dir.join("state.json"), fs::Permissions::from_mode(0o644)).unwrap();
    node.start_agent(&[]).await;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("state.json")), 0o600);
    let key = dir.join("hash.key");
    assert_eq!(mode(&key), 0o600);
    assert_eq!(fs::read(&key).unwrap().len(), 32);

    node.api
        .apply_secret(secret(NS, "db", &[("password", "hunter2")]));
    let out = node.path("app.sig");
    node.api.create_pod(
        pod(NS, "app")
            .signal()
            .secret_volume("db", "db")
            .recorder("app", &out, &[("db", "/db")])
            .build(),
    );
    node.wait_running(NS, "app").await;
    node.wait_tracked(2).await;
    node.api
        .apply_secret(secret(NS, "db", &[("password", "hunter3")]));
    eventually("the Secret change signals", WAIT, || {
        (signals_in(&out) == ["SIGHUP"]).then_some(())
    })
    .await;
    node.stop_agent().await;

    let state = dir.join("state.json");
    assert_eq!(mode(&state), 0o600);
    let saved = digests(&state);
    assert!(!saved.is_empty());
    // No content hash, whole or shortened, in the log, the Events or the metrics.
    node.start_agent(&[]).await;
    let scrape = node.scrape();
    node.stop_agent().await;
    let log = fs::read_dir(node.path(""))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.to_string_lossy().contains("reloadlet-") && p.extension().is_some_and(|e| e == "log")
        })
        .map(|p| fs::read_to_string(p).unwrap())
        .collect::<String>();
    assert!(log.contains("signal sent"), "{log}");
    let events: String = node.all_events().iter().map(|e| e.note.clone()).collect();
    for h in &saved {
        for text in [&log, &events, &scrape] {
            assert!(
                !text.contains(&h[..12]),
                "a digest prefix {} leaked",
                &h[..12]
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_secret_on_two_nodes_saves_different_digests() {
    let mut saved = Vec::new();
    for _ in 0..2 {
        let mut node = Node::start(NodeOptions::default()).await;
        node.start_agent(&[]).await;
        node.api
            .apply_secret(secret(NS, "db", &[("password", "hunter2")]));
        node.api.create_pod(
            pod(NS, "app")
                .secret_volume("db", "db")
                .recorder("app", &node.path("app.sig"), &[("db", "/db")])
                .build(),
        );
        node.wait_running(NS, "app").await;
        node.wait_tracked(2).await;
        node.stop_agent().await;
        let uid = node.uid(NS, "app");
        let v: serde_json::Value =
            serde_json::from_slice(&fs::read(node.path("state/state.json")).unwrap()).unwrap();
        saved.push(
            v["volumes"][format!("{uid}/secret/db")][""]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(saved[0].len(), 64);
    assert_ne!(
        saved[0], saved[1],
        "the same content must not hash the same on two nodes"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_version_1_state_is_migrated_acting_only_on_real_changes_made_while_down() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api
        .apply_configmap(configmap(NS, "same", &[("k", "v1")]));
    node.api
        .apply_configmap(configmap(NS, "edited", &[("k", "v1")]));
    let (same, labelled, edited) = (
        node.path("same.sig"),
        node.path("labelled.sig"),
        node.path("edited.sig"),
    );
    node.api.create_pod(
        pod(NS, "same")
            .signal()
            .configmap_volume("conf", "same")
            .recorder("app", &same, &[("conf", "/c")])
            .build(),
    );
    node.api.create_pod(
        pod(NS, "labelled")
            .signal()
            .label("tier", "web")
            .volume(json!({"name": "mixed", "projected": {"sources": [
                {"configMap": {"name": "same"}},
                {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}
            ]}}))
            .recorder("app", &labelled, &[("mixed", "/c")])
            .build(),
    );
    node.api.create_pod(
        pod(NS, "edited")
            .signal()
            .configmap_volume("conf", "edited")
            .recorder("app", &edited, &[("conf", "/c")])
            .build(),
    );
    for name in ["same", "labelled", "edited"] {
        node.wait_running(NS, name).await;
    }
    node.wait_tracked(6).await;
    node.stop_agent().await;

    // Replace the state with what reloadlet 0.1 would have saved: unkeyed SHA-256 per volume.
    let pods = node.kubelet_root().join("pods");
    let mut volumes = serde_json::Map::new();
    for uid in ["same", "labelled", "edited"].map(|n| node.uid(NS, n)) {
        for (plugin_dir, plugin) in [
            ("kubernetes.io~configmap", "configmap"),
            ("kubernetes.io~projected", "projected"),
        ] {
            let Ok(entries) = fs::read_dir(pods.join(&uid).join("volumes").join(plugin_dir)) else {
                continue;
            };
            for e in entries {
                let e = e.unwrap();
                let h = reloadlet::host::volume_read::legacy_sha256(&e.path(), 1 << 20)
                    .unwrap()
                    .unwrap();
                volumes.insert(
                    format!("{uid}/{plugin}/{}", e.file_name().to_string_lossy()),
                    json!(hex::encode(h)),
                );
            }
        }
    }
    assert_eq!(volumes.len(), 6);
    let legacy: Vec<String> = volumes
        .values()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    let state = node.path("state/state.json");
    fs::write(
        &state,
        json!({"version": 1, "volumes": volumes}).to_string(),
    )
    .unwrap();

    // While down: a label edit (the projected volume's downwardAPI file), a token refresh, and
    // a real change of `edited`.
    let mut p = node.api.get_pod(NS, "labelled").unwrap();
    p.metadata
        .labels
        .get_or_insert_default()
        .insert("tier".into(), "canary".into());
    node.api.replace_pod(p);
    node.kubelet.rotate_tokens();
    node.api
        .apply_configmap(configmap(NS, "edited", &[("k", "v2")]));
    node.kubelet.resync_all();

    node.start_agent(&[]).await;
    eventually("the change made while down is acted on", WAIT, || {
        (signals_in(&edited) == ["SIGHUP"]).then_some(())
    })
    .await;
    never(
        "an action on anything else after the migration",
        AGENT_QUIET,
        || {
            !signals_in(&same).is_empty()
                || !signals_in(&labelled).is_empty()
                || signals_in(&edited).len() > 1
        },
    )
    .await;
    assert_eq!(node.events(NS, "edited", "Signaled").len(), 1);
    node.stop_agent().await;
    // Written back keyed; the unkeyed hashes are gone from the disk.
    let text = fs::read_to_string(&state).unwrap();
    assert_eq!(digests(&state).len(), 6);
    for h in &legacy {
        assert!(!text.contains(h.as_str()), "{text}");
    }
}
