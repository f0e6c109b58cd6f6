//! The status record's conditional write against the simulated API server (docs/status.md,
//! "No writer drops the other's entry"): the controller's writer, holding a view of the pod
//! from before the agent recorded on it, keeps the agent's entry; a patch at a stale
//! resourceVersion is a 409 the edge reports as a conflict.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use kube::api::ObjectMeta;
use kube::{Client, Config};
use nodesim::apiserver::ApiServer;
use reloadlet::core::model::{PodInfo, SourceKind, SourceRef};
use reloadlet::core::outcome::{ActionKind, Outcome};
use reloadlet::core::permission::{Feature, Request};
use reloadlet::core::status::applied::{Applied, Entry, Recorded, ANNOTATION};
use reloadlet::execute::applied::{AppliedRecorder, Known, Seen, VersionsOf};
use reloadlet::k8s::controller::KubePatcher;
use reloadlet::ports::{PatchError, PatchRequest, PatchTarget, Patcher, PodRef, Refusals};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use test_support::wait::eventually;

const NS: &str = "shop";

struct NoRefusals;

impl Refusals for NoRefusals {
    fn allowed(&self, _: Feature, _: &'static str, _: &'static str, _: &'static str) {}
    fn outcome(&self, _: Request, _: Option<&str>, _: Result<(), (u16, &str)>) {}
}

fn client(server: &ApiServer) -> Client {
    let mut cfg = Config::new(server.url().parse().expect("server url"));
    cfg.default_retry = false;
    Client::try_from(cfg).expect("kube client")
}

fn cm(name: &str) -> SourceRef {
    SourceRef {
        kind: SourceKind::ConfigMap,
        name: name.into(),
    }
}

/// The agent's record of a signal for ConfigMap `conf` (the volume it acts on).
fn agents_record() -> String {
    let mut record = Applied::default();
    record.record(Entry::new(
        &cm("conf"),
        None,
        jiff::Timestamp::now(),
        "agent",
        ActionKind::Signal,
        Recorded::Applied,
    ));
    record.render()
}

fn record_on(server: &ApiServer) -> Option<Applied> {
    let pod = server.get_pod(NS, "web-0")?;
    let value = pod.metadata.annotations?.get(ANNOTATION)?.clone();
    Applied::parse(&value).ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_controllers_record_keeps_the_entry_the_agent_wrote_since_it_saw_the_pod() {
    let server = ApiServer::start().await.unwrap();
    let created = server.create_pod(Pod {
        metadata: ObjectMeta {
            name: Some("web-0".into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some("node-1".into()),
            containers: vec![Container {
                name: "app".into(),
                image: Some("nginx".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    });
    let uid = created.metadata.uid.clone().unwrap();
    // The pod as the controller knew it when it asked for the rollout: no record yet.
    let known = PodInfo {
        uid: uid.clone(),
        namespace: NS.into(),
        name: "web-0".into(),
        ..PodInfo::default()
    };
    // Then the agent records its signal for the volume.
    server
        .merge_patch_pod(
            NS,
            "web-0",
            &serde_json::json!({"metadata": {"annotations": {ANNOTATION: agents_record()}}}),
        )
        .unwrap();
    let patcher = KubePatcher::status_record(client(&server), Arc::new(NoRefusals), false);
    let recorder = AppliedRecorder::controller(Arc::new(patcher));
    let versions: Arc<VersionsOf> = Arc::new(|_: &PodInfo, _: &[SourceRef]| BTreeMap::new());
    let seen = Seen::known(Known {
        pod: Arc::new(known.clone()),
        versions,
        until: None,
    });
    recorder.note(
        &PodRef::from(&known),
        ActionKind::Rollout,
        Outcome::RolloutRequested,
        "rolled",
        &[cm("app")],
        &seen,
        None,
    );
    let record = eventually("the rolled entry recorded", Duration::from_secs(20), || {
        record_on(&server).filter(|r| r.get(&cm("app")).is_some())
    })
    .await;
    assert_eq!(
        record.get(&cm("conf")).map(|e| (e.by.as_str(), e.result)),
        Some(("agent", Recorded::Applied)),
        "the agent's entry survives: {record:?}"
    );
    assert_eq!(
        record.get(&cm("app")).map(|e| (e.by.as_str(), e.result)),
        Some(("controller", Recorded::RolloutRequested))
    );
    // The write carried the resourceVersion it read. (The request log takes a request once
    // it is answered, after the store has it: polled, like the record.)
    let patch = eventually("the record's patch logged", Duration::from_secs(20), || {
        server
            .requests()
            .into_iter()
            .find(|r| r.method == "PATCH" && r.path == "/api/v1/namespaces/shop/pods/web-0")
    })
    .await;
    assert!(patch.body.contains("\"resourceVersion\""), "{}", patch.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_patch_at_a_stale_resource_version_is_a_conflict_and_the_fresh_one_is_written() {
    let server = ApiServer::start().await.unwrap();
    server.create_pod(Pod {
        metadata: ObjectMeta {
            name: Some("web-0".into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    });
    let patcher = KubePatcher::status_record(client(&server), Arc::new(NoRefusals), false);
    let read = patcher.meta(NS, "web-0").await.unwrap().unwrap();
    assert!(read.annotations.is_empty());
    // Someone writes the pod after the read.
    server
        .merge_patch_pod(
            NS,
            "web-0",
            &serde_json::json!({"metadata": {"labels": {"tier": "web"}}}),
        )
        .unwrap();
    let at = |resource_version: String| PatchRequest {
        target: PatchTarget::PodAt { resource_version },
        namespace: NS.into(),
        name: "web-0".into(),
        uid: Some(read.uid.clone()),
        annotation: ANNOTATION,
        value: Some(agents_record()),
    };
    let stale = patcher.patch(&at(read.resource_version.clone())).await;
    assert!(matches!(stale, Err(PatchError::Conflict(_))), "{stale:?}");
    assert!(
        record_on(&server).is_none(),
        "nothing written at a stale version"
    );
    // Positive control: read again, the same write goes through.
    let fresh = patcher.meta(NS, "web-0").await.unwrap().unwrap();
    assert_ne!(fresh.resource_version, read.resource_version);
    patcher.patch(&at(fresh.resource_version)).await.unwrap();
    assert!(record_on(&server).is_some_and(|r| r.get(&cm("conf")).is_some()));
    // A pod gone: no record, nothing written.
    assert_eq!(patcher.meta(NS, "gone").await.unwrap(), None);
}
