//! Follows the pods of this node (`spec.nodeName=<node>`) with kube's runtime watcher and
//! sends [`PodUpdate`]s to the agent. Relists (410, reconnects) become one `Resync`.

use super::pod_convert::pod_info;
use crate::model::PodInfo;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use tokio::sync::mpsc;

#[derive(Debug)]
pub enum PodUpdate {
    Apply(PodInfo),
    Delete {
        uid: String,
    },
    /// The complete list after a (re)list: pods not in it are gone.
    Resync(Vec<PodInfo>),
    /// The watch failed and will be retried with backoff.
    WatchError(String),
}

pub struct PodWatchConfig {
    pub node_name: String,
    pub label_selector: Option<String>,
}

/// Runs until `tx` is closed. Errors are reported and retried with kube's default backoff.
pub async fn run(client: Client, cfg: PodWatchConfig, tx: mpsc::Sender<PodUpdate>) {
    let api: Api<Pod> = Api::all(client);
    let mut wc = watcher::Config::default().fields(&format!("spec.nodeName={}", cfg.node_name));
    if let Some(sel) = &cfg.label_selector {
        wc = wc.labels(sel);
    }
    let stream = watcher::watcher(api, wc).default_backoff();
    futures::pin_mut!(stream);
    let mut relist: Vec<PodInfo> = Vec::new();
    while let Some(item) = stream.next().await {
        let update = match item {
            Ok(Event::Init) => {
                relist.clear();
                continue;
            }
            Ok(Event::InitApply(pod)) => {
                relist.extend(pod_info(&pod));
                continue;
            }
            Ok(Event::InitDone) => PodUpdate::Resync(std::mem::take(&mut relist)),
            Ok(Event::Apply(pod)) => match pod_info(&pod) {
                Some(info) => PodUpdate::Apply(info),
                None => continue,
            },
            Ok(Event::Delete(pod)) => match pod.metadata.uid {
                Some(uid) => PodUpdate::Delete { uid },
                None => continue,
            },
            Err(e) => PodUpdate::WatchError(e.to_string()),
        };
        if tx.send(update).await.is_err() {
            return;
        }
    }
}
