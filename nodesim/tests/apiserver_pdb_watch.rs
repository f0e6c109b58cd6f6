//! PodDisruptionBudgets across namespaces: list and watch through the real kube client and
//! `kube::runtime::watcher`, as reloadlet's PDB watch uses them.

mod apiserver_support;

use apiserver_support::*;
use futures::StreamExt;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::watcher;
use nodesim::apiserver::ApiServer;
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use test_support::wait::until;

fn budget(ns: &str, name: &str) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": name}}}
    }))
    .unwrap()
}

#[tokio::test]
async fn pdbs_of_every_namespace_are_listed_and_watched() {
    let server = ApiServer::start().await.unwrap();
    server.create_pdb(budget("a", "web"));
    server.create_pdb(budget("b", "api"));
    let api: Api<PodDisruptionBudget> = Api::all(client(&server));
    let names: BTreeSet<String> = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(names, ["api".to_string(), "web".to_string()].into());

    let view = Arc::new(Mutex::new(BTreeSet::<String>::new()));
    let v = view.clone();
    let task = tokio::spawn(async move {
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = stream.next().await {
            let mut v = v.lock().unwrap();
            match ev {
                Ok(watcher::Event::Init) => v.clear(),
                Ok(watcher::Event::InitApply(p) | watcher::Event::Apply(p)) => {
                    v.insert(p.metadata.name.unwrap_or_default());
                }
                Ok(watcher::Event::Delete(p)) => {
                    v.remove(&p.metadata.name.unwrap_or_default());
                }
                _ => {}
            }
        }
    });
    let seen = |want: &[&str]| {
        let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        let view = view.clone();
        move || *view.lock().unwrap() == want
    };
    until("both listed", Duration::from_secs(5), seen(&["api", "web"])).await;
    server.create_pdb(budget("c", "late"));
    until(
        "a new PDB is watched",
        Duration::from_secs(5),
        seen(&["api", "late", "web"]),
    )
    .await;
    server.delete_pdb("a", "web");
    until(
        "a deleted PDB is watched",
        Duration::from_secs(5),
        seen(&["api", "late"]),
    )
    .await;
    task.abort();
}
