//! `reloadlet_consumers` (issue #46, docs/status.md "Metrics"): what `reloadlet status` would
//! show for every consumer the controller keeps, counted by namespace and state (and per
//! object behind `--status-metrics-per-object`).
//!
//! The counts come from the pods the controller keeps ([`World`]) and the data versions its
//! publisher read ([`versions`]), through the CLI's own derivation ([`tally`]). Bounded work:
//! a change (a pod, an object, a new version) schedules one recount [`RECOUNT_AFTER`] later;
//! the changes meanwhile join it. A recount runs on a blocking thread over shared pods and a
//! copy of the versions (at 100,000 pods it takes a while), one at a time: the loop never
//! waits for it. Leader only: the publisher reads objects only while leading,
//! so a standby's counts would be stale; a standby shows no series, and a sum over the
//! replicas is the leader's count.

pub mod metrics;
pub mod tally;
pub mod versions;

use super::feature::{Feature, Routed, World};
use crate::core::model::SourceKind;
use futures::future::BoxFuture;
use metrics::ConsumerMetrics;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use versions::PublishedVersions;

/// How long after a change the counts are taken again.
pub const RECOUNT_AFTER: Duration = Duration::from_secs(10);

pub struct ConsumerStates {
    metrics: ConsumerMetrics,
    versions: PublishedVersions,
    /// `--secrets`: Secrets have data versions too (else only ConfigMaps are counted).
    secrets: bool,
    per_object: bool,
    due: Option<Instant>,
    /// A recount in flight, and the leadership term it was taken in.
    counting: bool,
    term: u64,
    /// `(term, counts)`; `None`: the recount panicked.
    tx: mpsc::UnboundedSender<(u64, Option<tally::Tally>)>,
    rx: mpsc::UnboundedReceiver<(u64, Option<tally::Tally>)>,
}

impl ConsumerStates {
    pub fn new(
        metrics: ConsumerMetrics,
        versions: PublishedVersions,
        secrets: bool,
        per_object: bool,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            metrics,
            versions,
            secrets,
            per_object,
            due: None,
            counting: false,
            term: 0,
            tx,
            rx,
        }
    }

    fn schedule(&mut self) {
        if self.due.is_none() {
            self.due = Some(Instant::now() + RECOUNT_AFTER);
        }
    }

    /// Starts a recount (or hides the series when there is nothing to count as leader).
    fn recount(&mut self, world: &World) {
        if !world.leader || !world.pods_listed {
            self.metrics.hide();
            return;
        }
        if self.counting {
            // One at a time: the next one when this one is in.
            self.schedule();
            return;
        }
        self.counting = true;
        let secrets = self.secrets;
        let followed = move |kind| match kind {
            SourceKind::ConfigMap => true,
            SourceKind::Secret => secrets,
            SourceKind::SecretProviderClass
            | SourceKind::CsiVolume
            | SourceKind::PodCertificate => false,
        };
        let (pods, published) = (world.shared_pods(), self.versions.snapshot());
        let (per_object, term, tx) = (self.per_object, self.term, self.tx.clone());
        tokio::task::spawn_blocking(move || {
            let counted = crate::contain::catch(|| {
                tally::tally(pods.iter().map(|p| &**p), followed, &published, per_object)
            });
            if counted.is_err() {
                tracing::error!(
                    "reloadlet_consumers: the recount panicked; the counts stay as they were"
                );
            }
            let _ = tx.send((term, counted.ok()));
        });
    }

    /// A recount's result: shown if it was taken in this leadership term.
    fn counted(&mut self, term: u64, counted: Option<tally::Tally>) {
        self.counting = false;
        if let Some(counted) = counted.filter(|_| term == self.term) {
            self.metrics.show(counted);
        }
    }
}

impl Feature for ConsumerStates {
    fn name(&self) -> &'static str {
        "consumer-states"
    }

    fn kinds(&self) -> Vec<SourceKind> {
        Vec::new()
    }

    fn route(&mut self, event: Routed<'_>, _world: &World) {
        match event {
            Routed::Leader(false) => {
                self.due = None;
                // A recount in flight is of the past term: not shown.
                self.term += 1;
                self.metrics.hide();
            }
            Routed::Workload(_) => {}
            _ => self.schedule(),
        }
    }

    fn wake<'a>(&'a mut self, world: &'a World) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            enum Woke {
                Counted(u64, Option<tally::Tally>),
                Changed,
                Due,
            }
            let due = self.due;
            let versions = self.versions.clone();
            let woke = tokio::select! {
                Some((term, counted)) = self.rx.recv() => Woke::Counted(term, counted),
                () = versions.changed() => Woke::Changed,
                () = async {
                    match due {
                        Some(due) => tokio::time::sleep_until(due).await,
                        None => std::future::pending().await,
                    }
                } => Woke::Due,
            };
            match woke {
                Woke::Counted(term, counted) => self.counted(term, counted),
                Woke::Changed => self.schedule(),
                Woke::Due => {
                    self.due = None;
                    self.recount(world);
                }
            }
        })
    }

    fn settle(&mut self, _world: &World) {}
}

#[cfg(test)]
mod tests;
