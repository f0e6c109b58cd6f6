//! Pod list/watch through the real kube client and `kube::runtime::watcher`.

mod apiserver_support;

use apiserver_support::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, VersionMatch, WatchEvent, WatchParams};
use kube::runtime::watcher;
use nodesim::apiserver::{ApiServer, ApiServerOptions};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use test_support::wait::until;

/// What a `watcher` stream has shown so far.
#[derive(Default)]
struct Seen {
    /// Names in the watcher's current view (rebuilt on every (re)list).
    names: BTreeSet<String>,
    /// Names seen deleted.
    deleted: Vec<String>,
    /// How many initial lists ran.
    lists: usize,
    /// Watch errors with HTTP code 410.
    gone: usize,
}

fn follow(api: Api<Pod>, cfg: watcher::Config) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s = seen.clone();
    let task = tokio::spawn(async move {
        let mut stream = watcher(api, cfg).boxed();
        let mut building = BTreeSet::new();
        while let Some(ev) = stream.next().await {
            let mut s = s.lock().unwrap();
            match ev {
                Ok(watcher::Event::Init) => {
                    s.lists += 1;
                    building.clear();
                }
                Ok(watcher::Event::InitApply(p)) => {
                    building.insert(p.metadata.name.unwrap_or_default());
                }
                Ok(watcher::Event::InitDone) => s.names = std::mem::take(&mut building),
                Ok(watcher::Event::Apply(p)) => {
                    s.names.insert(p.metadata.name.unwrap_or_default());
                }
                Ok(watcher::Event::Delete(p)) => {
                    let n = p.metadata.name.unwrap_or_default();
                    s.names.remove(&n);
                    s.deleted.push(n);
                }
                Err(watcher::Error::WatchError(st)) if st.code == 410 => s.gone += 1,
                Err(_) => {}
            }
        }
    });
    (seen, task)
}

fn names(seen: &Arc<Mutex<Seen>>) -> Vec<String> {
    seen.lock().unwrap().names.iter().cloned().collect()
}

#[tokio::test]
async fn watcher_with_node_field_selector_sees_only_that_nodes_pods() {
    let server = ApiServer::start().await.unwrap();
    server.create_pod(pod("default", "a-1", "node-a", &[]));
    server.create_pod(pod("default", "b-1", "node-b", &[]));
    let api: Api<Pod> = Api::all(client(&server));
    let (seen, task) = follow(
        api,
        watcher::Config::default().fields("spec.nodeName=node-a"),
    );

    until("initial list of node-a", Duration::from_secs(10), || {
        names(&seen) == ["a-1"]
    })
    .await;

    server.create_pod(pod("other", "a-2", "node-a", &[]));
    server.create_pod(pod("default", "b-2", "node-b", &[]));
    until("a-2 added", Duration::from_secs(10), || {
        names(&seen) == ["a-1", "a-2"]
    })
    .await;

    // An update is seen (annotations change).
    let mut p = server.get_pod("default", "a-1").unwrap();
    p.metadata.annotations = Some(labels(&[("x", "1")]));
    server.replace_pod(p);
    server.set_pod_status("default", "a-1", running(true));

    // Leaving the selector looks like a deletion to this watcher.
    let mut moved = server.get_pod("other", "a-2").unwrap();
    moved.spec.as_mut().unwrap().node_name = Some("node-b".into());
    server.replace_pod(moved);
    until("a-2 left node-a", Duration::from_secs(10), || {
        names(&seen) == ["a-1"]
    })
    .await;

    server.delete_pod("default", "a-1");
    server.delete_pod("default", "b-1");
    until("a-1 deleted", Duration::from_secs(10), || {
        names(&seen).is_empty()
    })
    .await;
    let deleted = seen.lock().unwrap().deleted.clone();
    assert_eq!(
        deleted,
        ["a-2", "a-1"],
        "node-b pods never reach this watcher"
    );
    task.abort();
}

#[tokio::test]
async fn compaction_makes_the_watcher_relist_and_recover() {
    let server = ApiServer::start().await.unwrap();
    server.create_pod(pod("default", "c-1", "node-a", &[]));
    let api: Api<Pod> = Api::all(client(&server));
    let (seen, task) = follow(
        api,
        watcher::Config::default().fields("spec.nodeName=node-a"),
    );
    until("first list", Duration::from_secs(10), || {
        names(&seen) == ["c-1"]
    })
    .await;
    assert_eq!(seen.lock().unwrap().lists, 1);
    // Compacted while its watch is open (a watch started after the compaction from the
    // compacted version itself is not too old, and would see no 410).
    until("the watch open", Duration::from_secs(10), || {
        server.open_watches().get("Pod").is_some_and(|n| *n >= 1)
    })
    .await;

    server.compact();
    server.create_pod(pod("default", "c-2", "node-a", &[]));
    until(
        "410 seen, relisted, c-2 present",
        Duration::from_secs(10),
        || {
            let s = seen.lock().unwrap();
            s.gone >= 1 && s.lists >= 2 && s.names.contains("c-2")
        },
    )
    .await;

    // After recovering, the new watch keeps delivering.
    server.create_pod(pod("default", "c-3", "node-a", &[]));
    until("c-3 after recovery", Duration::from_secs(10), || {
        names(&seen) == ["c-1", "c-2", "c-3"]
    })
    .await;
    task.abort();
}

#[tokio::test]
async fn watch_from_a_compacted_version_answers_410_expired() {
    let server = ApiServer::start_with(ApiServerOptions {
        history_len: 2,
        ..Default::default()
    })
    .await
    .unwrap();
    let api: Api<Pod> = Api::namespaced(client(&server), "default");
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    for i in 0..5 {
        server.create_pod(pod("default", &format!("h-{i}"), "node-a", &[]));
    }
    let mut stream = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Error(st)) => {
            assert_eq!(st.code, 410);
            assert_eq!(st.reason, "Expired");
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }

    // A list at that version with NotOlderThan is 410 too.
    let lp = ListParams::default()
        .at(&rv)
        .matching(VersionMatch::NotOlderThan);
    match api.list(&lp).await {
        Err(kube::Error::Api(st)) => assert_eq!((st.code, st.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410, got {other:?}"),
    }

    // Within the retained window the history is replayed.
    let recent = server
        .get_pod("default", "h-3")
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let recent: u64 = recent.parse().unwrap();
    let mut stream = api
        .watch(&WatchParams::default(), &(recent - 1).to_string())
        .await
        .unwrap()
        .boxed();
    let mut replayed = Vec::new();
    for _ in 0..2 {
        match stream.try_next().await.unwrap() {
            Some(WatchEvent::Added(p)) => replayed.push(p.metadata.name.unwrap()),
            other => panic!("expected ADDED, got {other:?}"),
        }
    }
    assert_eq!(replayed, ["h-3", "h-4"]);
}

#[tokio::test]
async fn bookmarks_arrive_and_advance_past_unrelated_changes() {
    let server = ApiServer::start_with(ApiServerOptions {
        bookmark_interval: Duration::from_millis(100),
        ..Default::default()
    })
    .await
    .unwrap();
    let api: Api<Pod> = Api::all(client(&server));
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let wp = WatchParams::default().fields("spec.nodeName=node-a");
    let mut stream = api.watch(&wp, &rv).await.unwrap().boxed();
    let other = server.create_pod(pod("default", "elsewhere", "node-b", &[]));
    let other_rv: u64 = other.metadata.resource_version.unwrap().parse().unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let ev = tokio::time::timeout_at(deadline, stream.try_next())
            .await
            .expect("a bookmark within 10 s")
            .unwrap();
        match ev {
            Some(WatchEvent::Bookmark(bm)) => {
                let at: u64 = bm.metadata.resource_version.parse().unwrap();
                if at >= other_rv {
                    break;
                }
            }
            Some(WatchEvent::Added(p)) => panic!(
                "node-b pod leaked into a node-a watch: {:?}",
                p.metadata.name
            ),
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn watch_ends_at_timeout_seconds() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<Pod> = Api::all(client(&server));
    let wp = WatchParams::default().timeout(1).disable_bookmarks();
    let started = tokio::time::Instant::now();
    let mut stream = api.watch(&wp, "0").await.unwrap().boxed();
    let end = tokio::time::timeout(Duration::from_secs(10), stream.try_next()).await;
    assert!(
        matches!(end, Ok(Ok(None))),
        "stream should end cleanly: {end:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(900));
}

#[tokio::test]
async fn outage_answers_503_and_breaks_open_watches() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<Pod> = Api::all(client(&server));
    let mut stream = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    server.set_outage(Some(503));
    let end = tokio::time::timeout(Duration::from_secs(10), stream.try_next()).await;
    assert!(
        matches!(end, Ok(Ok(None)) | Ok(Err(_))),
        "watch should break: {end:?}"
    );
    match api.list(&ListParams::default()).await {
        Err(kube::Error::Api(st)) => assert_eq!(st.code, 503),
        other => panic!("expected 503, got {other:?}"),
    }
    server.set_outage(None);
    assert!(api.list(&ListParams::default()).await.is_ok());
    let logged: Vec<u16> = server.requests().iter().map(|r| r.status).collect();
    assert_eq!(logged, [200, 503, 200]);
}

#[tokio::test]
async fn list_pages_with_limit_and_continue() {
    let server = ApiServer::start().await.unwrap();
    for i in 0..5 {
        server.create_pod(pod("paged", &format!("p-{i}"), "node-a", &[("app", "web")]));
    }
    server.create_pod(pod("paged", "other", "node-a", &[("app", "db")]));
    let api: Api<Pod> = Api::namespaced(client(&server), "paged");
    let mut got = Vec::new();
    let mut lp = ListParams::default().labels("app in (web)").limit(2);
    loop {
        let page = api.list(&lp).await.unwrap();
        got.extend(page.items.into_iter().map(|p| p.metadata.name.unwrap()));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(got, ["p-0", "p-1", "p-2", "p-3", "p-4"]);
    let bad = api
        .list(&ListParams::default().fields("spec.bogus=1"))
        .await;
    assert!(matches!(bad, Err(kube::Error::Api(st)) if st.code == 400));
}

#[tokio::test]
async fn kubeconfig_is_accepted_by_kube() {
    let server = ApiServer::start().await.unwrap();
    server.create_pod(pod("default", "k-1", "node-a", &[]));
    let dir = std::env::temp_dir().join(format!("nodesim-kubeconfig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config");
    server.write_kubeconfig(&path).unwrap();
    let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let client = kube::Client::try_from(cfg).unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client);
    let p = pods.get("k-1").await.unwrap();
    assert_eq!(p.spec.unwrap().node_name.as_deref(), Some("node-a"));
    assert!(matches!(pods.get("nope").await, Err(kube::Error::Api(st)) if st.code == 404));
}

#[tokio::test]
async fn shutdown_stops_serving() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<Pod> = Api::all(client(&server));
    assert!(api.list(&ListParams::default()).await.is_ok());
    server.shutdown().await;
    assert!(api.list(&ListParams::default()).await.is_err());
}

#[tokio::test]
async fn response_delay_slows_every_answer() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<Pod> = Api::all(client(&server));
    server.set_response_delay(Some(Duration::from_millis(300)));
    let t = tokio::time::Instant::now();
    api.list(&ListParams::default()).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(300));
    server.set_response_delay(None);
    let t = tokio::time::Instant::now();
    api.list(&ListParams::default()).await.unwrap();
    assert!(t.elapsed() < Duration::from_millis(300));
}

/// A streaming list (kube's `watcher::Config::streaming_lists()`): one watch with
/// `sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true`, the
/// current objects as ADDED, then a BOOKMARK annotated `k8s.io/initial-events-end: "true"`,
/// then changes; no LIST at all.
#[tokio::test]
async fn a_streaming_list_sends_the_objects_then_the_initial_events_end_bookmark() {
    let server = ApiServer::start().await.unwrap();
    for i in 0..3 {
        server.create_pod(pod("default", &format!("s-{i}"), "node-a", &[]));
    }
    let api: Api<Pod> = Api::all(client(&server));
    // The raw stream: ADDED × 3, then the annotated BOOKMARK at the list's resourceVersion.
    let rv = server.resource_version();
    let wp = WatchParams {
        bookmarks: true,
        send_initial_events: true,
        ..WatchParams::default()
    };
    let mut raw = api.watch(&wp, "0").await.unwrap().boxed();
    let mut added = Vec::new();
    let bookmark = loop {
        match raw.try_next().await.unwrap().unwrap() {
            WatchEvent::Added(p) => added.push(p.metadata.name.unwrap()),
            WatchEvent::Bookmark(b) => break b,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(added, ["s-0", "s-1", "s-2"]);
    assert_eq!(
        bookmark
            .metadata
            .annotations
            .get("k8s.io/initial-events-end"),
        Some(&"true".to_string())
    );
    assert_eq!(bookmark.metadata.resource_version, rv.to_string());
    drop(raw);

    let (seen, task) = follow(api, watcher::Config::default().streaming_lists());
    until("the streamed list", Duration::from_secs(10), || {
        names(&seen) == ["s-0", "s-1", "s-2"]
    })
    .await;
    server.create_pod(pod("default", "s-3", "node-a", &[]));
    until("a change after the list", Duration::from_secs(10), || {
        names(&seen).len() == 4
    })
    .await;
    let requests = server.requests();
    assert!(
        requests.iter().all(|r| r.is_watch()),
        "no LIST: {:?}",
        requests.iter().map(|r| &r.query).collect::<Vec<_>>()
    );
    let streamed = requests
        .iter()
        .filter(|r| r.query.contains("sendInitialEvents=true"))
        .count();
    assert_eq!(streamed, 2, "the raw watch and the watcher's");
    assert_eq!(seen.lock().unwrap().lists, 1);
    task.abort();
}

/// With the `WatchList` feature gate off, kube-apiserver refuses the streaming watch as
/// invalid ListOptions (422), and still serves paged lists and plain watches.
#[tokio::test]
async fn without_the_watch_list_gate_a_streaming_watch_is_refused_with_422() {
    let server = ApiServer::start_with(ApiServerOptions {
        watch_list: false,
        ..Default::default()
    })
    .await
    .unwrap();
    server.create_pod(pod("default", "p-1", "node-a", &[]));
    let api: Api<Pod> = Api::all(client(&server));
    let wp = WatchParams {
        bookmarks: true,
        send_initial_events: true,
        ..WatchParams::default()
    };
    match api.watch(&wp, "0").await {
        Err(kube::Error::Api(st)) => {
            assert_eq!((st.code, st.reason.as_str()), (422, "Invalid"));
            assert_eq!(
                st.message,
                "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: \
                 sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
            );
        }
        Err(other) => panic!("expected 422, got {other:?}"),
        Ok(_) => panic!("expected 422, got a stream"),
    }
    // A paged list and a plain watch still work; turned on again, so does the stream.
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    assert!(api.watch(&WatchParams::default(), "0").await.is_ok());
    server.set_watch_list(true);
    assert!(api.watch(&wp, "0").await.is_ok());
    // resourceVersionMatch without sendInitialEvents is refused whatever the gate.
    let addr = server.addr().to_string();
    let answer = tokio::task::spawn_blocking(move || {
        nodesim::probe::http_get(
            &addr,
            "/api/v1/pods?watch=true&resourceVersionMatch=NotOlderThan",
        )
    })
    .await
    .unwrap();
    assert_eq!(answer.map(|(code, _)| code), Some(422));
}

/// Each page of a paged list starts after the last key of the one before; every object
/// comes exactly once and `remainingItemCount` counts down (unfiltered lists only).
#[tokio::test]
async fn a_paged_list_serves_each_object_once_in_key_order() {
    let server = ApiServer::start().await.unwrap();
    for i in 0..25 {
        server.create_pod(pod(
            &format!("ns-{}", i % 3),
            &format!("p-{i:02}"),
            "node-a",
            &[("app", "web")],
        ));
    }
    let api: Api<Pod> = Api::all(client(&server));
    let mut got = Vec::new();
    let mut remaining = Vec::new();
    let mut lp = ListParams::default().limit(10);
    loop {
        let page = api.list(&lp).await.unwrap();
        got.extend(page.items.into_iter().map(|p| {
            format!(
                "{}/{}",
                p.metadata.namespace.unwrap(),
                p.metadata.name.unwrap()
            )
        }));
        remaining.push(page.metadata.remaining_item_count);
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    let mut want = got.clone();
    want.sort();
    want.dedup();
    assert_eq!(got, want, "in key order, each once");
    assert_eq!(got.len(), 25);
    assert_eq!(remaining, [Some(15), Some(5), None]);
    // Under a selector the count is left out, as kube-apiserver leaves it out.
    let page = api
        .list(&ListParams::default().labels("app=web").limit(10))
        .await
        .unwrap();
    assert_eq!(page.items.len(), 10);
    assert_eq!(page.metadata.remaining_item_count, None);
}
