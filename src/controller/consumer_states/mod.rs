//! `reloadlet_consumers` (issue #46, docs/status.md "Metrics"): what `reloadlet status` would
//! show for every consumer the controller keeps, counted by namespace and state (and per
//! object behind `--status-metrics-per-object`).
//!
//! The counts come from the pods the controller keeps ([`World`]) and the data versions its
//! publisher read ([`versions`]), through the CLI's own derivation ([`tally`]). Bounded work:
//! a change (a pod, an object, a new version) schedules one recount [`RECOUNT_AFTER`] later;
//! the changes meanwhile join it. Leader only: the publisher reads objects only while leading,
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
}

impl ConsumerStates {
    pub fn new(
        metrics: ConsumerMetrics,
        versions: PublishedVersions,
        secrets: bool,
        per_object: bool,
    ) -> Self {
        Self {
            metrics,
            versions,
            secrets,
            per_object,
            due: None,
        }
    }

    fn schedule(&mut self) {
        if self.due.is_none() {
            self.due = Some(Instant::now() + RECOUNT_AFTER);
        }
    }

    fn recount(&mut self, world: &World) {
        if !world.leader || !world.pods_listed {
            self.metrics.hide();
            return;
        }
        let secrets = self.secrets;
        let followed = move |kind| match kind {
            SourceKind::ConfigMap => true,
            SourceKind::Secret => secrets,
            SourceKind::SecretProviderClass
            | SourceKind::CsiVolume
            | SourceKind::PodCertificate => false,
        };
        let tally = self
            .versions
            .read(|published| tally::tally(world.pods(), followed, published, self.per_object));
        self.metrics.show(tally);
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
                self.metrics.hide();
            }
            Routed::Workload(_) => {}
            _ => self.schedule(),
        }
    }

    fn wake<'a>(&'a mut self, world: &'a World) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let due = self.due;
            let versions = self.versions.clone();
            tokio::select! {
                () = versions.changed() => self.schedule(),
                () = async {
                    match due {
                        Some(due) => tokio::time::sleep_until(due).await,
                        None => std::future::pending().await,
                    }
                } => {
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
