//! The agent's periodic chores, once after a burst of changes: the state write (off the hot
//! thread, [`super::state_writer`]), `NoDisruptionBudget` warnings, and, after the first pod
//! list, the evictions pending when reloadlet last stopped.

use super::budget_warnings::BudgetWarnings;
use super::pods::Pods;
use super::state_writer::{Snapshot, StateWriter};
use super::volumes::VolumeTracker;
use crate::core::disruption_budgets::{no_budget_note, BudgetIndex};
use crate::core::outcome::{ActionKind, Outcome};
use crate::execute::evict::EvictJob;
use crate::execute::report::Line;
use crate::execute::Executor;
use crate::host::state_file::SavedState;
use crate::ports::PodRef;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Chores after a change (state write, `NoDisruptionBudget` warnings) wait this long, so a
/// burst of changes costs one of each.
pub const CHORES_DELAY: Duration = Duration::from_secs(1);

pub struct Chores {
    /// Writes the state file off the hot thread (`None`: nothing is persisted).
    store: Option<StateWriter>,
    /// The pending evictions last written (the loaded digests went to the volume tracker).
    saved: SavedState,
    /// When the chores run next (`None`: nothing to do, no timer).
    at: Option<Instant>,
    /// Warning `NoDisruptionBudget` for evict pods (off without [`Self::with_budgets`]).
    budget_warnings: BudgetWarnings,
}

impl Chores {
    pub fn new(store: Option<StateWriter>, saved: SavedState) -> Self {
        Self {
            store,
            saved,
            at: None,
            budget_warnings: BudgetWarnings::default(),
        }
    }

    /// Warns about evict pods that no PodDisruptionBudget in `budgets` selects.
    pub fn with_budgets(&mut self, budgets: Arc<RwLock<BudgetIndex>>) {
        self.budget_warnings = BudgetWarnings::new(budgets);
    }

    /// Notified when the budgets change (`None` without budgets).
    pub fn budgets_changed(&self) -> Option<Arc<tokio::sync::Notify>> {
        self.budget_warnings.budgets_changed()
    }

    /// When the chores are due (`None`: no timer).
    pub fn next(&self) -> Option<Instant> {
        self.at
    }

    /// The chores run [`CHORES_DELAY`] after `now`, unless they are due sooner already.
    pub fn soon(&mut self, now: Instant) {
        self.at.get_or_insert_with(|| now + CHORES_DELAY);
    }

    /// Whether the chores are due at `now` (the timer is then cleared).
    pub fn take_due(&mut self, now: Instant) -> bool {
        let due = self.at.is_some_and(|at| at <= now);
        if due {
            self.at = None;
        }
        due
    }

    pub fn pods_changed(&mut self) {
        self.budget_warnings.pods_changed();
    }

    pub fn forget(&mut self, uid: &str) {
        self.budget_warnings.forget(uid);
    }

    /// `NoDisruptionBudget` warnings and the state write, once after a burst of changes.
    pub fn run(&mut self, pods: &Pods, volumes: &mut VolumeTracker, exec: &Executor) {
        self.warn_unprotected_evictions(pods, exec);
        if self.store.is_none() {
            // Without a store the change stays "unsaved" for ever, and the loop would arm the
            // chores timer again after every turn: one wakeup a second while idle.
            volumes.not_persisted();
        } else if volumes.dirty() || self.evictions_changed(exec) {
            self.save_state(pods, volumes, exec);
        }
    }

    fn warn_unprotected_evictions(&mut self, pods: &Pods, exec: &Executor) {
        let index = pods.index();
        let due = self
            .budget_warnings
            .due(index.iter().filter(|pod| pods.in_scope(pod)));
        drop(index);
        for pod in due {
            let note = no_budget_note();
            let outcome = Outcome::NoDisruptionBudget;
            let line = Line::note();
            exec.report(&(&pod).into(), ActionKind::Evict, outcome, note, line);
        }
    }

    fn evictions_changed(&self, exec: &Executor) -> bool {
        self.store.is_some() && exec.pending_evictions() != self.saved.pending_evictions
    }

    /// After the first sync: evictions that were pending when reloadlet last stopped resume for
    /// pods that still exist with the same UID.
    pub fn resume_evictions(&mut self, pods: &Pods, exec: &Executor) {
        let pending = std::mem::take(&mut self.saved.pending_evictions);
        for p in pending {
            let known = pods.index().get(&p.uid).is_some();
            if known {
                tracing::info!(pod = %format!("{}/{}", p.namespace, p.name), cause = %p.cause, "resuming an eviction pending before the restart");
                exec.evict(EvictJob {
                    pod: PodRef {
                        uid: p.uid,
                        namespace: p.namespace,
                        name: p.name,
                    },
                    cause: p.cause,
                    first_seen: None,
                    sources: Vec::new(),
                    seen: Default::default(),
                });
            }
        }
    }

    /// Hands a snapshot to the state writer thread: the encoding, write and fsyncs never
    /// hold up the hot thread.
    fn save_state(&mut self, pods: &Pods, volumes: &mut VolumeTracker, exec: &Executor) {
        if let Some(snapshot) = self.snapshot(pods, volumes, exec) {
            if let Some(writer) = &self.store {
                writer.save(snapshot);
            }
        }
    }

    fn snapshot(
        &mut self,
        pods: &Pods,
        volumes: &mut VolumeTracker,
        exec: &Executor,
    ) -> Option<Snapshot> {
        self.store.as_ref()?;
        let synced = pods.synced();
        // Until the first sync, pending evictions from the last run are kept as they were.
        if synced {
            self.saved.pending_evictions = exec.pending_evictions();
        }
        Some(Snapshot {
            pending_evictions: self.saved.pending_evictions.clone(),
            volumes: volumes.snapshot(),
            pacers: pods.pacing().snapshot(super::now()),
        })
    }

    /// The last state write, at shutdown, waited for.
    pub async fn flush(&mut self, pods: &Pods, volumes: &mut VolumeTracker, exec: &Executor) {
        if let Some(snapshot) = self.snapshot(pods, volumes, exec) {
            if let Some(writer) = &mut self.store {
                writer.flush(snapshot).await;
            }
        }
    }
}
