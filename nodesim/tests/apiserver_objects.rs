//! ConfigMaps, Secrets, Leases and pod patches through the real kube client: metadata-only
//! lists and watches, writes with their no-op and conflict semantics, the request log.

mod apiserver_support;

use apiserver_support::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{
    Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::PartialObjectMeta;
use kube::runtime::{watcher, WatchStreamExt};
use nodesim::apiserver::ApiServer;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

fn cm(ns: &str, name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), value.to_string())])),
        ..Default::default()
    }
}

fn secret(ns: &str, name: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        string_data: None,
        data: Some(BTreeMap::from([(
            "k".to_string(),
            k8s_openapi::ByteString(b"v".to_vec()),
        )])),
        ..Default::default()
    }
}

fn rv_of(meta: &ObjectMeta) -> u64 {
    meta.resource_version.as_deref().unwrap().parse().unwrap()
}

#[tokio::test]
async fn metadata_lists_carry_no_data_and_are_paginated() {
    let server = ApiServer::start().await.unwrap();
    for i in 0..5 {
        server.apply_configmap(cm("a", &format!("c{i}"), "v"));
    }
    server.apply_configmap(cm("b", "other", "v"));
    server.apply_secret(secret("a", "s"));
    let client = client(&server);

    let all: Api<ConfigMap> = Api::all(client.clone());
    let list = all
        .list_metadata(&ListParams::default().limit(2))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 2);
    assert!(list.metadata.continue_.is_some(), "a page of 2 out of 6");
    let full = all.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(full.items.len(), 6);
    let a: Api<ConfigMap> = Api::namespaced(client.clone(), "a");
    let ns_list = a.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(ns_list.items.len(), 5);
    assert!(ns_list
        .items
        .iter()
        .all(|i| i.metadata.resource_version.is_some()));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "a");
    assert_eq!(
        secrets
            .list_metadata(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let one = a.get_metadata("c1").await.unwrap();
    assert_eq!(one.metadata.name.as_deref(), Some("c1"));

    // What went over the wire: metadata only, asked for in Accept.
    let raw = reqwest_like_get(&server, "/api/v1/namespaces/a/configmaps", true).await;
    assert_eq!(raw["kind"], "PartialObjectMetadataList");
    assert_eq!(raw["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(raw["items"][0]["kind"], "PartialObjectMetadata");
    assert!(raw["items"][0].get("data").is_none(), "{raw}");
    let full = reqwest_like_get(&server, "/api/v1/namespaces/a/configmaps", false).await;
    assert_eq!(full["items"][0]["data"]["k"], "v");
    assert!(server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/configmaps") && r.method == "GET")
        .any(|r| r.accept.contains("as=PartialObjectMetadataList")));
}

/// A GET over a plain HTTP/1.1 connection, with or without the metadata Accept.
async fn reqwest_like_get(server: &ApiServer, path: &str, metadata: bool) -> serde_json::Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = server.url().trim_start_matches("http://").to_string();
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let accept = if metadata {
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
    } else {
        "application/json"
    };
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap()
}

#[tokio::test]
async fn metadata_watcher_follows_changes_with_resource_versions() {
    let server = ApiServer::start().await.unwrap();
    server.apply_configmap(cm("a", "c", "1"));
    // kube 5: an `Api<PartialObjectMeta<K>>` makes metadata-only requests (what
    // `metadata_watcher` did).
    let api: Api<PartialObjectMeta<ConfigMap>> = Api::all(client(&server));
    let mut stream = watcher(api, watcher::Config::default())
        .applied_objects()
        .boxed();
    let first: PartialObjectMeta<ConfigMap> = stream.try_next().await.unwrap().unwrap();
    let rv1 = rv_of(&first.metadata);
    let stored = server.apply_configmap(cm("a", "c", "2"));
    let next = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .expect("the change is watched")
        .unwrap()
        .unwrap();
    assert_eq!(next.metadata.name.as_deref(), Some("c"));
    assert!(rv_of(&next.metadata) > rv1);
    assert_eq!(
        next.metadata.resource_version,
        stored.metadata.resource_version
    );
    // Only list/watch requests, never a per-object GET.
    assert!(!server
        .requests()
        .iter()
        .any(|r| r.method == "GET" && r.path.ends_with("/configmaps/c")));
}

#[tokio::test]
async fn reapplying_the_same_object_changes_nothing() {
    let server = ApiServer::start().await.unwrap();
    let first = server.apply_configmap(cm("a", "c", "1"));
    let rv = server.resource_version();
    let again = server.apply_configmap(cm("a", "c", "1"));
    assert_eq!(
        again.metadata.resource_version,
        first.metadata.resource_version
    );
    assert_eq!(
        server.resource_version(),
        rv,
        "no write, no new resourceVersion"
    );
    let changed = server.apply_configmap(cm("a", "c", "2"));
    assert!(rv_of(&changed.metadata) > rv_of(&first.metadata));
    assert_eq!(changed.metadata.uid, first.metadata.uid);
}

#[tokio::test]
async fn configmap_writes_over_http() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "a");
    let created = api
        .create(&PostParams::default(), &cm("a", "c", "1"))
        .await
        .unwrap();
    let err = api
        .create(&PostParams::default(), &cm("a", "c", "1"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "AlreadyExists"),
        "{err:?}"
    );

    let mut stale = created.clone();
    let patched = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "2"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["k"], "2");
    stale.data = Some(BTreeMap::from([("k".into(), "3".into())]));
    let err = api
        .replace("c", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"),
        "{err:?}"
    );
    let strategic = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"annotations": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(strategic.metadata.annotations.unwrap()["x"], "y");
    assert_eq!(
        server.get_configmap("a", "c").unwrap().data.unwrap()["k"],
        "2"
    );
    let err = api
        .patch("missing", &PatchParams::default(), &Patch::Merge(json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );
    api.delete("c", &Default::default()).await.unwrap();
    assert!(server.get_configmap("a", "c").is_none());
}

#[tokio::test]
async fn a_pod_patch_that_changes_nothing_is_not_written() {
    let server = ApiServer::start().await.unwrap();
    server.create_pod(pod("a", "p", "node-1", &[("app", "x")]));
    let api: Api<Pod> = Api::namespaced(client(&server), "a");
    let mut events = api
        .watch(
            &WatchParams::default(),
            &server.resource_version().to_string(),
        )
        .await
        .unwrap()
        .boxed();
    let nudge = Patch::Merge(json!({"metadata": {"annotations": {"n": "cm/c@7"}}}));
    let first = api
        .patch("p", &PatchParams::default(), &nudge)
        .await
        .unwrap();
    let rv = server.resource_version();
    let second = api
        .patch("p", &PatchParams::default(), &nudge)
        .await
        .unwrap();
    assert_eq!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );
    assert_eq!(
        server.resource_version(),
        rv,
        "the same value twice: no write"
    );
    // A later real change is the next event after the first patch: the no-op sent none.
    api.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"n": "cm/c@7#2"}}})),
    )
    .await
    .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match tokio::time::timeout(Duration::from_secs(10), events.try_next()).await {
            Ok(Ok(Some(WatchEvent::Modified(p)))) => {
                seen.push(p.metadata.annotations.unwrap()["n"].clone())
            }
            Ok(Ok(Some(_))) => {}
            other => panic!("watch ended: {other:?}"),
        }
    }
    assert_eq!(seen, ["cm/c@7", "cm/c@7#2"]);
    // Status is not the main resource's to change; a stale resourceVersion conflicts.
    let err = api
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1", "labels": {"z": "1"}}})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err:?}"
    );
    let patches = server
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path == "/api/v1/namespaces/a/pods/p")
        .map(|r| (r.content_type.clone(), r.status))
        .collect::<Vec<_>>();
    assert_eq!(patches.len(), 4);
    assert!(patches[0].0.starts_with("application/merge-patch+json"));
    assert!(server
        .requests()
        .iter()
        .any(|r| r.body.contains("cm/c@7#2")));
}

#[tokio::test]
async fn pod_metadata_watch_and_status_only_change() {
    let server = ApiServer::start().await.unwrap();
    server.create_pod(pod("a", "p", "node-1", &[]));
    let api: Api<Pod> = Api::namespaced(client(&server), "a");
    let list = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let rv = list.metadata.resource_version.clone().unwrap();
    let mut events = api
        .watch_metadata(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    server.set_pod_status("a", "p", running(true));
    match tokio::time::timeout(Duration::from_secs(10), events.try_next()).await {
        Ok(Ok(Some(WatchEvent::Modified(p)))) => assert_eq!(p.metadata.name.as_deref(), Some("p")),
        other => panic!("expected MODIFIED: {other:?}"),
    }
}

fn lease_spec(holder: &str) -> serde_json::Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}})
}

#[tokio::test]
async fn leases_conflict_on_stale_updates_and_foreign_applies() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<Lease> = Api::namespaced(client(&server), "ctl");
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("reloadlet-controller".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec::default()),
    };
    let created = api.create(&PostParams::default(), &lease).await.unwrap();
    let mut mine = created.clone();
    mine.spec.as_mut().unwrap().holder_identity = Some("a".into());
    let updated = api
        .replace("reloadlet-controller", &PostParams::default(), &mine)
        .await
        .unwrap();
    let mut theirs = created.clone();
    theirs.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let err = api
        .replace("reloadlet-controller", &PostParams::default(), &theirs)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"),
        "{err:?}"
    );
    assert_eq!(
        server
            .get_lease("ctl", "reloadlet-controller")
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("a")
    );
    assert!(rv_of(&updated.metadata) > rv_of(&created.metadata));

    // Server-side apply: a field another manager set cannot be taken without force.
    let a = PatchParams::apply("lease-a");
    let b = PatchParams::apply("lease-b");
    api.patch("l2", &a, &Patch::Apply(lease_spec("a")))
        .await
        .unwrap();
    let err = api
        .patch("l2", &b, &Patch::Apply(lease_spec("b")))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err:?}"
    );
    api.patch("l2", &a, &Patch::Apply(lease_spec("a")))
        .await
        .unwrap();
    // A release by strategic merge (an update) drops the holder; then b may apply.
    api.patch(
        "l2",
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"holderIdentity": null}})),
    )
    .await
    .unwrap();
    let got = api
        .patch("l2", &b, &Patch::Apply(lease_spec("b")))
        .await
        .unwrap();
    assert_eq!(got.spec.unwrap().holder_identity.as_deref(), Some("b"));
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 2);
}

#[tokio::test]
async fn lease_watch_sees_updates() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<Lease> = Api::namespaced(client(&server), "ctl");
    let mut stream = watcher(api.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    api.patch(
        "l",
        &PatchParams::apply("m"),
        &Patch::Apply(lease_spec("x")),
    )
    .await
    .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(got.metadata.name.as_deref(), Some("l"));
}

#[tokio::test]
async fn metadata_watches_have_bookmarks_and_expire_like_pod_watches() {
    let server = ApiServer::start_with(nodesim::apiserver::ApiServerOptions {
        bookmark_interval: Duration::from_millis(50),
        ..Default::default()
    })
    .await
    .unwrap();
    server.apply_configmap(cm("a", "c", "1"));
    let old = server.resource_version().to_string();
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "a");
    let mut events = api
        .watch_metadata(&WatchParams::default(), &old)
        .await
        .unwrap()
        .boxed();
    server.apply_configmap(cm("a", "c", "2"));
    let mut modified = false;
    let mut bookmark = false;
    while !(modified && bookmark) {
        match tokio::time::timeout(Duration::from_secs(10), events.try_next()).await {
            Ok(Ok(Some(WatchEvent::Modified(m)))) => {
                assert_eq!(m.metadata.name.as_deref(), Some("c"));
                modified = true;
            }
            Ok(Ok(Some(WatchEvent::Bookmark(b)))) => {
                assert!(!b.metadata.resource_version.is_empty());
                bookmark = true;
            }
            other => panic!("unexpected: {other:?}"),
        }
    }
    // After compaction, watching from the old version answers 410 Gone.
    server.compact();
    let mut stale = api
        .watch_metadata(&WatchParams::default(), &old)
        .await
        .unwrap()
        .boxed();
    match tokio::time::timeout(Duration::from_secs(10), stale.try_next()).await {
        Ok(Ok(Some(WatchEvent::Error(e)))) => assert_eq!(e.code, 410),
        other => panic!("expected 410: {other:?}"),
    }
}

/// `pods/status` (the drain readiness gate's write): a strategic merge patch merges the
/// conditions by `type`, the spec stays as it is, a foreign UID or a stale resourceVersion
/// conflicts.
#[tokio::test]
async fn pod_status_patches_merge_conditions_by_type_and_leave_the_spec() {
    let server = ApiServer::start().await.unwrap();
    server.create_pod(pod("a", "p", "node-1", &[("app", "x")]));
    server.set_pod_status(
        "a",
        "p",
        serde_json::from_value(json!({"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}]}))
        .unwrap(),
    );
    let api: Api<Pod> = Api::namespaced(client(&server), "a");
    let uid = server.get_pod("a", "p").unwrap().metadata.uid.unwrap();
    let gate = |status: &str, uid: &str| {
        Patch::Strategic(json!({
            "metadata": {"uid": uid},
            "spec": {"nodeName": "elsewhere"},
            "status": {"conditions": [{"type": "x.io/gate", "status": status}]},
        }))
    };
    let p = api
        .patch_status("p", &PatchParams::default(), &gate("False", &uid))
        .await
        .unwrap();
    let types = |p: &Pod| -> Vec<(String, String)> {
        let conditions = p.status.as_ref().unwrap().conditions.as_ref().unwrap();
        conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status.clone()))
            .collect()
    };
    let pair = |t: &str, s: &str| (t.to_string(), s.to_string());
    assert_eq!(
        types(&p),
        [pair("Ready", "True"), pair("x.io/gate", "False")]
    );
    assert_eq!(
        p.spec.unwrap().node_name.as_deref(),
        Some("node-1"),
        "pods/status leaves the spec"
    );
    let p = api
        .patch_status("p", &PatchParams::default(), &gate("True", &uid))
        .await
        .unwrap();
    assert_eq!(
        types(&p),
        [pair("Ready", "True"), pair("x.io/gate", "True")]
    );
    // a foreign UID: 422 (metadata.uid is immutable); a stale resourceVersion: 409
    for (patch, code) in [
        (gate("False", "another-uid"), 422),
        (
            Patch::Strategic(
                json!({"metadata": {"resourceVersion": "1"}, "status": {"phase": "Failed"}}),
            ),
            409,
        ),
    ] {
        let err = api
            .patch_status("p", &PatchParams::default(), &patch)
            .await
            .unwrap_err();
        assert!(
            matches!(err, kube::Error::Api(ref s) if s.code == code),
            "{err}"
        );
    }
}

/// A merge patch naming the pod's own UID applies (the writers' precondition); another UID
/// is 422 Invalid, `metadata.uid` being immutable (apimachinery `ValidateObjectMetaUpdate`),
/// and nothing is written.
#[tokio::test]
async fn a_pod_patch_naming_another_uid_is_invalid_and_writes_nothing() {
    let server = ApiServer::start().await.unwrap();
    server.create_pod(pod("a", "p", "node-1", &[("app", "x")]));
    let api: Api<Pod> = Api::namespaced(client(&server), "a");
    let uid = server.get_pod("a", "p").unwrap().metadata.uid.unwrap();
    let note = |uid: &str, v: &str| {
        Patch::Merge(json!({"metadata": {"uid": uid, "annotations": {"x.io/note": v}}}))
    };
    let p = api
        .patch("p", &PatchParams::default(), &note(&uid, "one"))
        .await
        .unwrap();
    assert_eq!(p.metadata.annotations.unwrap()["x.io/note"], "one");
    let err = api
        .patch("p", &PatchParams::default(), &note("another-uid", "two"))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(ref s) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{err}");
            assert!(
                s.message
                    .contains("metadata.uid: Invalid value: \"another-uid\": field is immutable"),
                "{err}"
            );
        }
        other => panic!("expected 422: {other}"),
    }
    let stored = server.get_pod("a", "p").unwrap();
    assert_eq!(stored.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(stored.metadata.annotations.unwrap()["x.io/note"], "one");
}

/// managedFields as kube-apiserver keeps them (`nodesim::apiserver::managed_fields`): one entry
/// per manager and operation; a manager takes the data keys it adds or changes, and its time
/// moves only then.
#[tokio::test]
async fn configmap_writes_keep_managed_fields() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "a");
    let as_manager = |m: &str| PatchParams {
        field_manager: Some(m.into()),
        ..Default::default()
    };
    api.create(
        &PostParams {
            field_manager: Some("creator".into()),
            ..Default::default()
        },
        &cm("a", "c", "1"),
    )
    .await
    .unwrap();
    api.patch(
        "c",
        &as_manager("labeler"),
        &Patch::Strategic(json!({"metadata": {"labels": {"team": "x"}}})),
    )
    .await
    .unwrap();
    api.patch(
        "c",
        &as_manager("editor"),
        &Patch::Merge(json!({"data": {"k": "2", "new": "n"}})),
    )
    .await
    .unwrap();
    api.patch(
        "c",
        &as_manager("helm").force(),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"applied": "a"}})),
    )
    .await
    .unwrap();
    let got = api.get("c").await.unwrap();
    let fields: Vec<(String, String, serde_json::Value)> = got
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .map(|e| {
            assert!(e.time.is_some(), "{e:?}");
            (
                e.manager.unwrap(),
                e.operation.unwrap(),
                e.fields_v1.unwrap().0,
            )
        })
        .collect();
    let owned = |m: &str| {
        fields
            .iter()
            .find(|f| f.0 == m)
            .map(|f| (f.1.clone(), f.2.clone()))
    };
    assert_eq!(
        owned("helm"),
        Some(("Apply".into(), json!({"f:data": {"f:applied": {}}})))
    );
    assert_eq!(
        owned("editor"),
        Some(("Update".into(), json!({"f:data": {"f:k": {}, "f:new": {}}})))
    );
    assert_eq!(
        owned("labeler"),
        Some((
            "Update".into(),
            json!({"f:metadata": {"f:labels": {"f:team": {}}}})
        ))
    );
    // The creator's only key was taken over by the editor: its entry is gone.
    assert_eq!(owned("creator"), None, "{fields:?}");
}
