//! Follows the pods of this node (`spec.nodeName=<node>`) with kube's runtime watcher and
//! sends [`PodUpdate`]s to the agent. Relists (410, reconnects) become one `Resync`.
//! Failures back off up to 5 minutes (see [`super::api_backoff`]), are logged once with what
//! is missing, counted, and shown by `/readyz`.

use super::api_backoff::{self, FailureTracker};
use super::pod_convert::pod_info;
use super::pod_view::PodView;
use super::watch_loop::{self, Change, Pacing};
use crate::core::label_selector::LabelSelector;
use crate::core::model::PodInfo;
use crate::ports::Problems;
use futures::StreamExt;
use kube::runtime::watcher;
use kube::{Api, Client};
use std::sync::Arc;
use tokio::sync::mpsc;

// Nearly every update is an `Apply`: boxing it would add an allocation to each for the sake
// of the rare `Delete`/resync markers.
#[allow(clippy::large_enum_variant)]
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
    pub label_selector: Option<LabelSelector>,
}

/// Where failures are reported.
pub struct PodWatchReport {
    pub metrics: api_backoff::ApiMetrics,
    pub health: Arc<dyn Problems>,
    pub denials: crate::ports::RefusalSink,
}

/// Runs until `tx` is closed.
pub async fn run(
    client: Client,
    cfg: PodWatchConfig,
    tx: mpsc::Sender<PodUpdate>,
    report: PodWatchReport,
) {
    let api: Api<PodView> = Api::all(client);
    let mut wc = watcher::Config::default()
        .fields(&format!("spec.nodeName={}", cfg.node_name))
        .page_size(super::POD_LIST_PAGE);
    if let Some(sel) = cfg.label_selector.as_ref().filter(|s| !s.is_empty()) {
        wc = wc.labels(&sel.to_string());
    }
    let changes = watch_loop::changes(api, wc, Pacing::UntilData, pod_info);
    futures::pin_mut!(changes);
    let mut failures = FailureTracker::new(api_backoff::PODS, report.metrics);
    let watched = super::refusals::Watched {
        feature: crate::core::permission::Feature::Pods,
        group: "",
        resource: "pods",
    };
    while let Some(change) = changes.next().await {
        watched.report(&report.denials, &change);
        if !matches!(change, Change::Failed(_)) {
            let after = failures.on_success();
            if after > 0 {
                tracing::info!(failures = after, "pod watch works again");
                report.health.set_problem(None);
            }
        }
        let update = match change {
            Change::Listed(pods) => PodUpdate::Resync(pods),
            Change::Applied(info) => PodUpdate::Apply(info),
            Change::Deleted(pod) => match pod.metadata.uid {
                Some(uid) => PodUpdate::Delete { uid },
                None => continue,
            },
            Change::Failed(e) => {
                let code = api_backoff::status_code(&e);
                if code == Some(410) {
                    // Compaction: the watcher relists; nothing is wrong with the API.
                    tracing::debug!(error = %e, "pod watch expired (410); relisting");
                    PodUpdate::WatchError(e.to_string())
                } else {
                    let failure = failures.on_error(code, &e.to_string());
                    let hopeless = watch_loop::hopeless(code);
                    // A 401/403 is the denials' to name (log, Event, /readyz: the rule to add).
                    let refused = matches!(code, Some(401 | 403));
                    // One error when it cannot heal by itself (or once a transient error has
                    // repeated three times); the retries are paced and not logged above debug.
                    if refused {
                        tracing::debug!(code, failures = failure.count, "pod watch refused");
                    } else if watch_loop::worth_an_error(failure.count, code) {
                        tracing::error!(
                            code,
                            resource = "pods",
                            failures = failure.count,
                            "{}",
                            failure.explanation
                        );
                    } else if failure.count == 1 {
                        tracing::warn!(
                            code,
                            resource = "pods",
                            "{}; retrying with backoff",
                            failure.explanation
                        );
                    } else {
                        tracing::debug!(code, failures = failure.count, error = %e, "pod watch still failing");
                    }
                    // A refusal that cannot heal by itself, or any error that repeats, makes the
                    // agent unready, with the reason in /readyz's body.
                    if !refused && (failure.count >= 2 || hopeless) {
                        report.health.set_problem(Some(format!(
                            "pod watch failing ({} consecutive failures): {}",
                            failure.count, failure.explanation
                        )));
                    }
                    PodUpdate::WatchError(failure.explanation)
                }
            }
        };
        if tx.send(update).await.is_err() {
            return;
        }
    }
}
