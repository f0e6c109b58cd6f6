//! Dedupe (pure, clock injected): one notification per (source object, reason) per
//! window on this node. One ConfigMap mounted by 40 pods of a node that all fail the same
//! way is one message, not 40; the next message after the window says how many were held
//! back.

use super::event::Notification;
use crate::core::model::SourceRef;
use std::collections::HashMap;
use std::time::{Duration, Instant};

pub const DEDUPE_WINDOW: Duration = Duration::from_secs(5 * 60);

/// The most (object, reason) keys remembered. Past it, the namespace that holds the most
/// keys forgets its oldest: a namespace that makes thousands of distinct failures costs
/// bounded memory and CPU, and never makes another namespace's repeats go out again.
pub const MAX_KEYS: usize = 4096;

/// What the notification is about: its ConfigMaps/Secrets (or the pod when it names
/// none), in its namespace, and the reason.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    namespace: String,
    object: Object,
    reason: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Object {
    Sources(Vec<SourceRef>),
    Pod(String),
}

impl Key {
    fn of(n: &Notification) -> Self {
        let object = if n.sources.is_empty() {
            Object::Pod(n.pod.clone())
        } else {
            let mut s = n.sources.clone();
            s.sort();
            s.dedup();
            Object::Sources(s)
        };
        Self {
            namespace: n.namespace.clone(),
            object,
            reason: n.reason(),
        }
    }
}

#[derive(Debug)]
struct Entry {
    sent_at: Instant,
    held_back: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send it; `held_back` notifications of the same key were suppressed before it.
    Send { held_back: u32 },
    /// Sent already within the window.
    Suppress,
}

#[derive(Debug)]
pub struct Dedupe {
    window: Duration,
    last: HashMap<Key, Entry>,
    max_keys: usize,
}

impl Dedupe {
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            last: HashMap::new(),
            max_keys: MAX_KEYS,
        }
    }

    pub fn check(&mut self, n: &Notification, now: Instant) -> Verdict {
        // Forget keys quiet for two windows (a held-back count survives one window so the
        // next message can report it). Memory stays bounded by recent distinct keys.
        let keep = self.window.saturating_mul(2);
        self.last
            .retain(|_, e| now.saturating_duration_since(e.sent_at) < keep);
        let key = Key::of(n);
        match self.last.get_mut(&key) {
            Some(e) if now.saturating_duration_since(e.sent_at) < self.window => {
                e.held_back = e.held_back.saturating_add(1);
                Verdict::Suppress
            }
            Some(e) => {
                let held_back = std::mem::take(&mut e.held_back);
                e.sent_at = now;
                Verdict::Send { held_back }
            }
            None => {
                if self.last.len() >= self.max_keys {
                    self.forget_one();
                }
                self.last.insert(
                    key,
                    Entry {
                        sent_at: now,
                        held_back: 0,
                    },
                );
                Verdict::Send { held_back: 0 }
            }
        }
    }

    /// The oldest key of the namespace holding the most.
    fn forget_one(&mut self) {
        let mut per_namespace: HashMap<&str, usize> = HashMap::new();
        for k in self.last.keys() {
            *per_namespace.entry(k.namespace.as_str()).or_default() += 1;
        }
        let Some(busiest) = per_namespace
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))
            .map(|(ns, _)| ns.to_owned())
        else {
            return;
        };
        let oldest = self
            .last
            .iter()
            .filter(|(k, _)| k.namespace == busiest)
            .min_by_key(|(_, e)| e.sent_at)
            .map(|(k, _)| k.clone());
        if let Some(k) = oldest {
            self.last.remove(&k);
        }
    }

    pub fn len(&self) -> usize {
        self.last.len()
    }

    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::SourceKind;
    use crate::core::outcome::{ActionKind, Outcome};

    fn n(ns: &str, pod: &str, sources: &[&str], outcome: Outcome) -> Notification {
        Notification {
            node: "n1".into(),
            namespace: ns.into(),
            pod: pod.into(),
            action: ActionKind::Signal,
            sources: sources
                .iter()
                .map(|s| SourceRef {
                    kind: SourceKind::ConfigMap,
                    name: (*s).into(),
                })
                .collect(),
            outcome,
            blocked_for: Duration::ZERO,
            message: format!("{pod} failed"),
        }
    }

    const F: Outcome = Outcome::SignalFailed;

    #[test]
    fn table() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        use Verdict::*;
        // (at, notification, verdict): one Dedupe runs through the whole table in order.
        let table: Vec<(Instant, Notification, Verdict)> = vec![
            (s(0), n("a", "web-0", &["cm"], F), Send { held_back: 0 }),
            // Same ConfigMap and reason, other pods of the node: held back.
            (s(1), n("a", "web-1", &["cm"], F), Suppress),
            (s(299), n("a", "web-2", &["cm"], F), Suppress),
            // Another reason, another namespace, another object: separate keys.
            (
                s(2),
                n("a", "web-1", &["cm"], Outcome::ReloadFailed),
                Send { held_back: 0 },
            ),
            (s(3), n("b", "web-1", &["cm"], F), Send { held_back: 0 }),
            (s(4), n("a", "web-1", &["other"], F), Send { held_back: 0 }),
            // The same set of sources in another order is the same object.
            (
                s(5),
                n("a", "x", &["cm", "other"], F),
                Send { held_back: 0 },
            ),
            (s(6), n("a", "y", &["other", "cm"], F), Suppress),
            // No sources: the pod is the object.
            (s(7), n("a", "p", &[], F), Send { held_back: 0 }),
            (s(8), n("a", "q", &[], F), Send { held_back: 0 }),
            (s(9), n("a", "p", &[], F), Suppress),
            // The window is 5 minutes from the last message sent, which reports the two
            // held back.
            (s(300), n("a", "web-3", &["cm"], F), Send { held_back: 2 }),
            (s(301), n("a", "web-3", &["cm"], F), Suppress),
            (s(600), n("a", "web-3", &["cm"], F), Send { held_back: 1 }),
        ];
        let mut d = Dedupe::new(DEDUPE_WINDOW);
        for (i, (at, notif, want)) in table.into_iter().enumerate() {
            assert_eq!(d.check(&notif, at), want, "row {i}: {notif:?}");
        }
    }

    #[test]
    fn quiet_keys_are_forgotten() {
        let t0 = Instant::now();
        let mut d = Dedupe::new(DEDUPE_WINDOW);
        for i in 0..100 {
            d.check(&n("a", "p", &[&format!("cm-{i}")], F), t0);
        }
        assert_eq!(d.len(), 100);
        d.check(&n("a", "p", &["late"], F), t0 + DEDUPE_WINDOW * 2);
        assert_eq!(d.len(), 1);
    }

    /// A namespace making thousands of distinct failures fills the keys up to the cap and
    /// then forgets its own oldest; a quiet namespace's key is kept, so its repeat is still
    /// held back.
    #[test]
    fn the_keys_are_capped_and_a_flood_forgets_its_own() {
        let t0 = Instant::now();
        let mut d = Dedupe::new(DEDUPE_WINDOW);
        d.max_keys = 64;
        assert_eq!(
            d.check(&n("quiet", "api", &["api-conf"], F), t0),
            Verdict::Send { held_back: 0 }
        );
        for i in 0..1000 {
            let cm = format!("cm-{i}");
            d.check(&n("flood", "web", &[cm.as_str()], F), t0);
        }
        assert_eq!(d.len(), 64);
        assert_eq!(
            d.check(&n("quiet", "api", &["api-conf"], F), t0),
            Verdict::Suppress,
            "the quiet namespace's key survived the flood"
        );
    }
}
