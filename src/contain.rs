//! Failure containment (issue #43 §1): a panic while handling one object stays with that
//! object. The agent's loop and the controller's router run each per-object step through
//! [`catch`] (or a feature's `wake` through [`Contained`]); what was caught is logged once,
//! counted in `reloadlet_handler_panics_total{mode,stage}` ([`count`]), told as a Warning
//! `InternalError` Event when the object is a pod, and the object is put in a [`Quarantine`]
//! so that the same input is not handled (and does not panic) again on every event; it
//! leaves the quarantine when it changes or is deleted.
//!
//! A panic outside every contained step (the loop's own code, the chores, the startup)
//! still ends the process, as before, so that the kubelet restarts it: the loop that is
//! still running after a caught panic is whole, and `/readyz` keeps telling the truth about
//! it. That needs panics to unwind: `Cargo.toml` must not set `panic = "abort"`.
//!
//! [`install_panic_hook`] (once, in `main`) keeps the default hook's text on stderr for
//! panics outside the contained steps and sends nothing to stderr for a contained one: the
//! loop logs it through `tracing` with the object it concerns ([`Caught`]).

use crate::serve::metrics::Metrics;
use std::any::Any;
use std::borrow::Borrow;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

/// How long a caught panic's message may be in a log line or an Event note (it may quote
/// tenant input).
const MESSAGE_CHARS: usize = 200;

/// How many objects a loop keeps quarantined at most; the oldest leaves first (it is then
/// handled again at its next event, and quarantined again if it panics again).
pub const QUARANTINE_CAP: usize = 1024;

thread_local! {
    /// How many contained steps this thread is inside (the panic hook's question).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Where the last contained panic of this thread happened (set by the hook).
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// The per-object step a panic was caught in (the `stage` label); its mode is the `mode`
/// label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The agent takes in one pod from the API (annotations validated, nudge seen).
    PodUpdate,
    /// The agent decides and acts on one pod's change.
    Act,
    /// The agent looks at (or takes the hash of) one volume.
    Volume,
    /// The controller routes one input (a pod, a ConfigMap/Secret, a list…) to a feature.
    Route,
    /// A controller feature handles its own timers and results.
    Wake,
    /// A controller feature's work after each turn.
    Settle,
}

impl Stage {
    pub const AGENT: [Stage; 3] = [Stage::PodUpdate, Stage::Act, Stage::Volume];
    pub const CONTROLLER: [Stage; 3] = [Stage::Route, Stage::Wake, Stage::Settle];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::PodUpdate => "pod_update",
            Self::Act => "act",
            Self::Volume => "volume",
            Self::Route => "route",
            Self::Wake => "wake",
            Self::Settle => "settle",
        }
    }

    pub fn mode(self) -> &'static str {
        match self {
            Self::PodUpdate | Self::Act | Self::Volume => "agent",
            Self::Route | Self::Wake | Self::Settle => "controller",
        }
    }
}

/// A panic caught in a contained step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caught {
    /// The panic's message (a `&str` or `String` payload), one line, bounded.
    pub message: String,
    /// `file:line:column` of the panic, when the hook saw it.
    pub location: Option<String>,
}

impl Caught {
    /// The note of the Warning `InternalError` Event on a pod.
    pub fn pod_note(&self) -> String {
        format!(
            "reloadlet could not handle this pod: {}; it is skipped until it changes",
            self.message
        )
    }

    fn from_payload(payload: &(dyn Any + Send)) -> Self {
        let raw = if let Some(s) = payload.downcast_ref::<&str>() {
            s
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.as_str()
        } else {
            "a panic without a message"
        };
        Self {
            message: short(raw),
            location: LOCATION.with(|l| l.borrow_mut().take()),
        }
    }
}

/// The first line of `raw`, at most [`MESSAGE_CHARS`] characters.
fn short(raw: &str) -> String {
    let line = raw.lines().next().unwrap_or_default();
    match line.char_indices().nth(MESSAGE_CHARS) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    }
}

/// Marks this thread as inside a contained step while alive (also while unwinding).
struct Inside;

impl Inside {
    fn enter() -> Self {
        DEPTH.with(|d| d.set(d.get() + 1));
        Inside
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Runs one per-object step; a panic in it is caught and returned. `AssertUnwindSafe`: the
/// caller drops or quarantines what the step may have left half-done (the contract of every
/// call site).
pub fn catch<T>(step: impl FnOnce() -> T) -> Result<T, Caught> {
    let _inside = Inside::enter();
    catch_unwind(AssertUnwindSafe(step)).map_err(|payload| Caught::from_payload(&*payload))
}

/// A future whose every poll is a contained step: it ends with `Err` at the first panic.
pub struct Contained<F> {
    inner: F,
}

impl<F: Future + Unpin> Contained<F> {
    pub fn new(inner: F) -> Self {
        Self { inner }
    }
}

impl<F: Future + Unpin> Future for Contained<F> {
    type Output = Result<F::Output, Caught>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.inner;
        match catch(|| Pin::new(inner).poll(cx)) {
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(caught) => Poll::Ready(Err(caught)),
        }
    }
}

/// Counts one caught panic.
pub fn count(metrics: &Metrics, stage: Stage) {
    metrics.handler_panic(stage.mode(), stage.as_str());
}

/// Creates a mode's series of `reloadlet_handler_panics_total` at 0.
pub fn precreate(metrics: &Metrics, stages: &[Stage]) {
    for stage in stages {
        metrics.handler_panics_series(stage.mode(), stage.as_str());
    }
}

/// Installs the process's panic hook (once; later calls do nothing). A panic inside a
/// contained step only leaves its location for [`Caught`]: its loop logs it with the object
/// through `tracing`. Any other panic goes to the default hook (its text on stderr), and
/// then unwinds as it always did.
pub fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if DEPTH.with(Cell::get) > 0 {
                let at = info.location().map(|l| l.to_string());
                LOCATION.with(|l| *l.borrow_mut() = at);
            } else {
                default(info);
            }
        }));
    });
}

/// Objects whose handling panicked, each with the version that did (`V`: the pod as it was,
/// a resourceVersion…), at most `cap` of them. An object is skipped while it comes again at
/// that version, handled again once it changes ([`Self::holds`] releases it then), and
/// released when deleted ([`Self::release`]).
pub struct Quarantine<K, V> {
    cap: usize,
    held: HashMap<K, V>,
    /// Oldest first: who leaves when the quarantine is full.
    order: VecDeque<K>,
}

impl<K: Eq + Hash + Clone, V: PartialEq> Quarantine<K, V> {
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            held: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Quarantines `key` at `version` (the oldest entry leaves when full).
    pub fn hold(&mut self, key: K, version: V) {
        if self.held.insert(key.clone(), version).is_none() {
            self.order.push_back(key);
        }
        while self.held.len() > self.cap {
            match self.order.pop_front() {
                Some(old) => {
                    self.held.remove(&old);
                }
                None => break,
            }
        }
    }

    /// Whether `key` is quarantined at `version`. Held at another version: the object
    /// changed, it is released (and `false`).
    pub fn holds<Q>(&mut self, key: &Q, version: &V) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self.held.get(key) {
            None => false,
            Some(held) if held == version => true,
            Some(_) => {
                self.release(key);
                false
            }
        }
    }

    /// Whether `key` is quarantined, whatever its version.
    pub fn contains<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.held.contains_key(key)
    }

    /// The object was deleted (or is to be handled again).
    pub fn release<Q>(&mut self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let was = self.held.remove(key).is_some();
        if was {
            self.order.retain(|k| k.borrow() != key);
        }
        was
    }

    /// Keeps only the keys `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.held.retain(|k, _| keep(k));
        let held = &self.held;
        self.order.retain(|k| held.contains_key(k));
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_in_a_step_is_caught_with_its_message_and_the_next_step_runs() {
        install_panic_hook();
        let caught = catch(|| -> u32 { panic!("boom on {}", "pod-a") }).unwrap_err();
        assert_eq!(caught.message, "boom on pod-a");
        assert!(
            caught.location.as_deref().unwrap().contains("contain.rs"),
            "{caught:?}"
        );
        let caught = catch(|| std::panic::panic_any(7_u8)).unwrap_err();
        assert_eq!(caught.message, "a panic without a message");
        assert_eq!(catch(|| 2 + 2), Ok(4));
        assert_eq!(DEPTH.with(Cell::get), 0, "left after unwinding");
    }

    #[test]
    fn a_message_is_one_bounded_line() {
        let long = "x".repeat(500) + "\nsecond line";
        let caught = catch(|| panic!("{long}")).unwrap_err();
        assert_eq!(caught.message.chars().count(), MESSAGE_CHARS + 1);
        assert!(caught.message.ends_with('…') && !caught.message.contains('\n'));
        assert_eq!(short("é".repeat(300).as_str()).chars().count(), 201);
    }

    #[test]
    fn a_contained_future_ends_with_the_panic() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let fine = rt.block_on(Contained::new(Box::pin(async { 3 })));
        assert_eq!(fine, Ok(3));
        let failed = rt.block_on(Contained::new(Box::pin(async {
            tokio::task::yield_now().await;
            panic!("in a wake")
        })));
        assert_eq!(failed.unwrap_err().message, "in a wake");
    }

    #[test]
    fn the_quarantine_holds_a_version_until_it_changes_and_stays_bounded() {
        let mut q = Quarantine::new(2);
        q.hold("a", 1);
        assert!(q.holds(&"a", &1), "the same input");
        assert!(!q.holds(&"a", &2), "changed: released");
        assert!(!q.holds(&"a", &1), "and not held again by itself");
        q.hold("a", 1);
        q.hold("b", 1);
        q.hold("c", 1);
        assert_eq!(q.len(), 2);
        assert!(!q.contains(&"a"), "the oldest left");
        assert!(q.release(&"b") && !q.release(&"b"));
        q.retain(|k| *k != "c");
        assert!(q.is_empty());
    }
}
