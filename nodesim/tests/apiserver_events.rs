//! Events (both APIs), ConfigMaps and Secrets through the real kube client.

mod apiserver_support;

use apiserver_support::*;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Resource;
use nodesim::apiserver::{ApiChange, ApiServer};

#[tokio::test]
async fn recorder_publishing_twice_makes_one_event_with_series_count_2() {
    let server = ApiServer::start().await.unwrap();
    let pod = server.create_pod(pod("team", "web-1", "node-a", &[]));
    let client = client(&server);
    let reporter = Reporter {
        controller: "reloadlet".into(),
        instance: Some("node-a".into()),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let reference: ObjectReference = pod.object_ref(&());
    let ev = Event {
        type_: EventType::Normal,
        reason: "Reloaded".into(),
        note: Some("sent SIGHUP to app".into()),
        action: "Signal".into(),
        secondary: None,
    };
    recorder.publish(&ev, &reference).await.unwrap();
    let first = server.events();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].count, 1);
    recorder.publish(&ev, &reference).await.unwrap();

    let events = server.events();
    assert_eq!(
        events.len(),
        1,
        "the second publish patches the first: {events:?}"
    );
    let e = &events[0];
    assert_eq!(e.count, 2);
    assert_eq!(e.name, first[0].name);
    assert_eq!(
        (
            e.namespace.as_str(),
            e.regarding_kind.as_str(),
            e.regarding_name.as_str()
        ),
        ("team", "Pod", "web-1")
    );
    assert_eq!(Some(&e.regarding_uid), pod.metadata.uid.as_ref());
    assert_eq!(
        (e.type_.as_str(), e.reason.as_str(), e.note.as_str()),
        ("Normal", "Reloaded", "sent SIGHUP to app")
    );
    assert_eq!(
        (e.api.as_str(), e.reporting_controller.as_str()),
        ("events.k8s.io/v1", "reloadlet")
    );

    // A different reason is a different event.
    let warn = Event {
        type_: EventType::Warning,
        reason: "EvictionBlocked".into(),
        ..ev
    };
    recorder.publish(&warn, &reference).await.unwrap();
    assert_eq!(server.events().len(), 2);

    let listed: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client, "team");
    assert_eq!(
        listed
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    let methods: Vec<String> = server
        .requests()
        .iter()
        .filter(|r| r.path.contains("/events"))
        .map(|r| format!("{} {}", r.method, r.status))
        .collect();
    assert_eq!(methods, ["POST 201", "PATCH 200", "POST 201", "GET 200"]);
}

#[tokio::test]
async fn core_v1_events_create_patch_and_list() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<CoreEvent> = Api::namespaced(client(&server), "team");
    let ev = CoreEvent {
        metadata: ObjectMeta {
            name: Some("web-1.abc".into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            kind: Some("Pod".into()),
            name: Some("web-1".into()),
            namespace: Some("team".into()),
            uid: Some("u-1".into()),
            ..Default::default()
        },
        reason: Some("Reloaded".into()),
        message: Some("hup".into()),
        type_: Some("Normal".into()),
        count: Some(1),
        reporting_component: Some("reloadlet".into()),
        ..Default::default()
    };
    let created = api.create(&PostParams::default(), &ev).await.unwrap();
    assert!(created.metadata.uid.is_some());
    let dup = api.create(&PostParams::default(), &ev).await;
    assert!(matches!(dup, Err(kube::Error::Api(st)) if st.code == 409));
    let patch = serde_json::json!({"count": 3, "message": "hup again"});
    let patched = api
        .patch(
            "web-1.abc",
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
        .unwrap();
    assert_eq!(patched.count, Some(3));
    assert_eq!(patched.metadata.uid, created.metadata.uid);
    let e = server.events().pop().unwrap();
    assert_eq!(
        (
            e.api.as_str(),
            e.count,
            e.note.as_str(),
            e.reporting_controller.as_str()
        ),
        ("v1", 3, "hup again", "reloadlet")
    );
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    let missing = api
        .patch("nope", &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    assert!(matches!(missing, Err(kube::Error::Api(st)) if st.code == 404));
}

#[tokio::test]
async fn configmaps_and_secrets_are_served_and_their_reads_are_logged() {
    let server = ApiServer::start().await.unwrap();
    let mut changes = server.subscribe();
    server.apply_configmap(ConfigMap {
        metadata: ObjectMeta {
            name: Some("conf".into()),
            namespace: Some("team".into()),
            ..Default::default()
        },
        data: Some(labels(&[("app.conf", "v=1")])),
        ..Default::default()
    });
    server.apply_secret(Secret {
        metadata: ObjectMeta {
            name: Some("creds".into()),
            namespace: Some("team".into()),
            ..Default::default()
        },
        string_data: Some(labels(&[("token", "t")])),
        ..Default::default()
    });
    assert!(
        matches!(changes.recv().await.unwrap(), ApiChange::ConfigMapChanged { name, .. } if name == "conf")
    );
    assert!(
        matches!(changes.recv().await.unwrap(), ApiChange::SecretChanged { name, .. } if name == "creds")
    );
    assert_eq!(
        server.get_configmap("team", "conf").unwrap().data.unwrap()["app.conf"],
        "v=1"
    );
    assert!(server.get_secret("team", "creds").is_some());
    // In-process reads leave no trace in the request log…
    assert!(server.requests().is_empty());

    // …HTTP reads do.
    let client = client(&server);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    assert_eq!(
        cms.get("conf").await.unwrap().data.unwrap()["app.conf"],
        "v=1"
    );
    let secrets: Api<Secret> = Api::namespaced(client, "team");
    assert!(secrets.get("creds").await.is_ok());
    assert!(matches!(secrets.get("other").await, Err(kube::Error::Api(st)) if st.code == 404));
    let reads = server
        .requests()
        .iter()
        .filter(|r| r.path.contains("/configmaps/") || r.path.contains("/secrets/"))
        .count();
    assert_eq!(reads, 3);
}
