//! The one place an outcome becomes a metric, a Kubernetes Event and a notification (and
//! the one place `--dry-run` silences Events and notifications), and — for the agent — the
//! pod's `reloadlet.io/applied` record ([`super::applied`]).

use super::applied::{AppliedRecorder, Seen};
use crate::core::model::SourceRef;
use crate::core::outcome::{ActionKind, Outcome};
use crate::outbound::notify::{Notification, Notifier};
use crate::ports::{EventSink, ObjectRef, PodEvent, PodRef};
use crate::serve::metrics::Metrics;
use std::sync::Arc;
use std::time::Duration;

/// Whom an outcome concerns: the pod (named in notifications) and, when the Event is about
/// another object, that object.
struct Subject<'a> {
    pod: &'a PodRef,
    about: Option<&'a ObjectRef>,
}

/// What an outcome's log line says beside the pod, the action and the outcome. The line is
/// at `warn` for an outcome whose Event is a Warning, else at `info`; its message is
/// `message`, else the note.
#[derive(Clone, Copy, Default)]
pub struct Line<'a> {
    pub message: Option<&'a str>,
    /// What changed (`configmap app-config changed`).
    pub cause: Option<&'a dyn std::fmt::Display>,
    /// The pod's volumes that changed (the agent).
    pub volumes: Option<&'a [&'a str]>,
    /// Why nothing was done (an annotation's error).
    pub error: Option<&'a dyn std::fmt::Display>,
    /// The line was written where the outcome arose, with what only that place knows (a
    /// caught panic's location, at `error`): not written again.
    pub written: bool,
}

impl<'a> Line<'a> {
    /// A line whose message is the note.
    pub fn note() -> Self {
        Self::default()
    }

    /// No line here: the outcome's was written where it arose.
    pub fn written() -> Self {
        Self {
            written: true,
            ..Self::default()
        }
    }

    /// A line with its own message.
    pub fn saying(message: &'a str) -> Self {
        Self {
            message: Some(message),
            ..Self::default()
        }
    }

    pub fn cause(self, cause: &'a dyn std::fmt::Display) -> Self {
        Self {
            cause: Some(cause),
            ..self
        }
    }

    pub fn volumes(self, volumes: &'a [&'a str]) -> Self {
        Self {
            volumes: Some(volumes),
            ..self
        }
    }

    pub fn error(self, error: &'a dyn std::fmt::Display) -> Self {
        Self {
            error: Some(error),
            ..self
        }
    }

    fn write(self, pod: &PodRef, action: ActionKind, outcome: Outcome, note: &str) {
        use tracing::field::{debug, display};
        if self.written {
            return;
        }
        let message = self.message.unwrap_or(note);
        let (volumes, cause, error) = (
            self.volumes.map(debug),
            self.cause.map(display),
            self.error.map(display),
        );
        let (pod, action, outcome_name) = (pod.full_name(), action.as_str(), outcome.as_str());
        if outcome.event().is_some_and(|e| e.warning) {
            tracing::warn!(pod = %pod, volumes, cause, action, outcome = outcome_name, error, "{message}");
        } else {
            tracing::info!(pod = %pod, volumes, cause, action, outcome = outcome_name, error, "{message}");
        }
    }
}

#[derive(Clone)]
pub struct Reporter {
    events: Arc<dyn EventSink>,
    notifier: Notifier,
    metrics: Metrics,
    dry_run: bool,
    /// The node that acts (named in notifications).
    node: String,
    /// The agent's `reloadlet.io/applied` writer (`None`: the controller, or not recording).
    applied: Option<AppliedRecorder>,
}

impl Reporter {
    pub fn new(
        events: Arc<dyn EventSink>,
        notifier: Notifier,
        metrics: Metrics,
        dry_run: bool,
        node: String,
    ) -> Self {
        Self {
            events,
            notifier,
            metrics,
            dry_run,
            node,
            applied: None,
        }
    }

    /// Records the outcomes of actions on the pods' `reloadlet.io/applied` (the agent).
    pub fn with_applied(mut self, applied: Option<AppliedRecorder>) -> Self {
        self.applied = applied;
        self
    }

    /// The pod's record of `outcome` (under `--dry-run` too: the write is then a dry run).
    /// `seen`: the writes of the changed volumes the action was for; `until`: a deferral's end.
    #[allow(clippy::too_many_arguments)]
    pub fn note_applied(
        &self,
        pod: &PodRef,
        action: ActionKind,
        outcome: Outcome,
        note: &str,
        sources: &[SourceRef],
        seen: &Seen,
        until: Option<jiff::Timestamp>,
    ) {
        if let Some(applied) = &self.applied {
            applied.note(pod, action, outcome, note, sources, seen, until);
        }
    }

    /// An outcome reported whole, here: its log line ([`Line`]), its count, its Event and
    /// notification, and its record on the pod (`seen`, the writes of the changed volumes
    /// the action was for). Callers write no line of their own for it.
    #[allow(clippy::too_many_arguments)]
    pub fn said(
        &self,
        pod: &PodRef,
        action: ActionKind,
        outcome: Outcome,
        note: String,
        sources: &[SourceRef],
        seen: &Seen,
        line: Line<'_>,
    ) {
        line.write(pod, action, outcome, &note);
        self.record_seen(pod, action, outcome, note, sources, seen);
    }

    /// [`Self::said`] of an outcome counted where its action runs (the controller's Warnings
    /// about a restart the node agent performs): its log line, Event, notification and
    /// record, no count.
    pub fn told(
        &self,
        pod: &PodRef,
        action: ActionKind,
        outcome: Outcome,
        note: String,
        line: Line<'_>,
    ) {
        line.write(pod, action, outcome, &note);
        self.publish(pod, action, outcome, note, &[]);
    }

    /// `--dry-run`: actions are only looked at (signals) or asked with `dryRun=All`
    /// (evictions), and no Event is published.
    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// Counts `outcome` and publishes its Event and notification. `sources`: the
    /// ConfigMaps/Secrets whose change led to it.
    pub fn record(
        &self,
        pod: &PodRef,
        action: ActionKind,
        outcome: Outcome,
        note: String,
        sources: &[SourceRef],
    ) {
        self.record_seen(pod, action, outcome, note, sources, &Seen::none());
    }

    /// [`Self::record`] of an action on the writes `seen` (recorded on the pod, too).
    pub fn record_seen(
        &self,
        pod: &PodRef,
        action: ActionKind,
        outcome: Outcome,
        note: String,
        sources: &[SourceRef],
        seen: &Seen,
    ) {
        self.count(action, outcome);
        self.publish_seen(pod, action, outcome, note, sources, seen);
    }

    /// [`Self::record`] with the Event regarding `object` (the workload a rollout patched)
    /// instead of the pod; the notification still names `pod`.
    pub fn record_about(
        &self,
        object: &ObjectRef,
        pod: &PodRef,
        action: ActionKind,
        outcome: Outcome,
        note: String,
        sources: &[SourceRef],
    ) {
        self.count(action, outcome);
        let subject = Subject {
            pod,
            about: Some(object),
        };
        self.emit(subject, action, outcome, note, sources, Duration::ZERO);
    }

    /// Counts `outcome` in `reloadlet_actions_total` (when it is counted at all).
    pub fn count(&self, action: ActionKind, outcome: Outcome) {
        if outcome.counted() {
            self.metrics.action(action, outcome);
        }
    }

    /// Publishes the Event and notification of `outcome` (if it has them), unless
    /// `--dry-run`.
    pub fn publish(
        &self,
        pod: &PodRef,
        action: ActionKind,
        outcome: Outcome,
        note: String,
        sources: &[SourceRef],
    ) {
        self.publish_seen(pod, action, outcome, note, sources, &Seen::none());
    }

    /// [`Self::publish`] of an action on the writes `seen` (recorded on the pod, too).
    pub fn publish_seen(
        &self,
        pod: &PodRef,
        action: ActionKind,
        outcome: Outcome,
        note: String,
        sources: &[SourceRef],
        seen: &Seen,
    ) {
        self.note_applied(pod, action, outcome, &note, sources, seen, None);
        let subject = Subject { pod, about: None };
        self.emit(subject, action, outcome, note, sources, Duration::ZERO);
    }

    /// [`Self::publish`] of `EvictionBlocked`, refused for `blocked_for` so far (a
    /// notification under `--notify-on failure` only once that is long).
    pub fn blocked(
        &self,
        pod: &PodRef,
        note: String,
        sources: &[SourceRef],
        seen: &Seen,
        blocked_for: Duration,
    ) {
        let outcome = Outcome::EvictionBlocked;
        self.note_applied(pod, ActionKind::Evict, outcome, &note, sources, seen, None);
        let subject = Subject { pod, about: None };
        self.emit(
            subject,
            ActionKind::Evict,
            outcome,
            note,
            sources,
            blocked_for,
        );
    }

    fn emit(
        &self,
        subject: Subject<'_>,
        action: ActionKind,
        outcome: Outcome,
        note: String,
        sources: &[SourceRef],
        blocked_for: Duration,
    ) {
        if self.dry_run {
            return;
        }
        let pod = subject.pod;
        if outcome.notified() {
            self.notifier.notify(&Notification {
                node: self.node.clone(),
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                action,
                sources: sources.to_vec(),
                outcome,
                blocked_for,
                message: note.clone(),
            });
        }
        if let Some(kind) = outcome.event() {
            let event = PodEvent {
                warning: kind.warning,
                reason: kind.reason,
                action: action.event_action().into(),
                note,
            };
            match subject.about {
                Some(object) => self.events.publish_about(object, event),
                None => self.events.publish(pod, event),
            }
            // Events are dropped only here (the queue is full): count them now.
            let dropped = self.events.dropped();
            let counted = self.metrics.events_dropped.get();
            self.metrics
                .events_dropped
                .inc_by(dropped.saturating_sub(counted));
        }
    }

    /// A Warning Event of `reason` on the pod that is no outcome of an action (not counted,
    /// not notified, not recorded on the pod): `RestartUncoordinated`. Not under `--dry-run`.
    pub fn warning(&self, pod: &PodRef, action: ActionKind, reason: &'static str, note: String) {
        if self.dry_run {
            return;
        }
        self.events.publish(
            pod,
            PodEvent {
                warning: true,
                reason,
                action: action.event_action().into(),
                note,
            },
        );
    }

    /// From the first swap to the signal sent / eviction accepted.
    pub fn latency(&self, action: ActionKind, latency: Duration) {
        self.metrics.observe_latency(action, latency.as_secs_f64());
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::IntoEnumIterator;

    #[test]
    fn a_notification_says_what_its_event_says() {
        for outcome in Outcome::iter().filter(|o| o.notified()) {
            let n = Notification {
                node: "node-1".into(),
                namespace: "ns".into(),
                pod: "web".into(),
                action: ActionKind::None,
                sources: vec![],
                outcome,
                blocked_for: Duration::ZERO,
                message: String::new(),
            };
            match outcome.event() {
                Some(event) => assert_eq!(n.reason(), event.reason, "{outcome:?}"),
                None => assert_eq!(n.reason(), "NudgeFailed", "{outcome:?}"),
            }
        }
    }

    /// The log lines written while `f` runs (plain text, no colours).
    fn lines_of(f: impl FnOnce()) -> Vec<String> {
        #[derive(Clone, Default)]
        struct Buffer(Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .without_time()
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_owned).collect()
    }

    fn reporter(
        events: Arc<crate::ports::fake::Events>,
    ) -> (Reporter, prometheus_client::registry::Registry) {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::new(&mut registry);
        let report = Reporter::new(events, Notifier::disabled(), metrics, false, "n".into());
        (report, registry)
    }

    #[test]
    fn an_outcome_said_is_one_line_its_count_and_its_event() {
        let events = Arc::new(crate::ports::fake::Events::default());
        let (report, registry) = reporter(events.clone());
        let pod = PodRef {
            uid: "u1".into(),
            namespace: "shop".into(),
            name: "web-0".into(),
        };
        let cause = "configmap app-config changed";
        let volumes = ["config"];
        let lines = lines_of(|| {
            let line = Line::saying("eviction refused").cause(&cause);
            let line = line.volumes(&volumes).error(&"the pod has no owner");
            let (action, outcome) = (ActionKind::Evict, Outcome::Refused);
            let seen = Seen::none();
            report.said(&pod, action, outcome, "no owner".into(), &[], &seen, line);
            // A Normal outcome, its note as the message.
            let (action, outcome) = (ActionKind::Evict, Outcome::EvictionHandedOff);
            report.said(
                &pod,
                action,
                outcome,
                "handed".into(),
                &[],
                &seen,
                Line::note(),
            );
            // Written where it arose: not again.
            let (action, outcome) = (ActionKind::None, Outcome::InternalError);
            report.said(
                &pod,
                action,
                outcome,
                "panic".into(),
                &[],
                &seen,
                Line::written(),
            );
        });
        assert_eq!(lines.len(), 2, "{lines:#?}");
        let warned = &lines[0];
        for part in [
            "WARN",
            "eviction refused",
            "pod=shop/web-0",
            "volumes=[\"config\"]",
            "cause=configmap app-config changed",
            "action=\"evict\"",
            "outcome=\"refused\"",
            "error=the pod has no owner",
        ] {
            assert!(warned.contains(part), "{part} in {warned}");
        }
        assert!(
            lines[1].contains("INFO") && lines[1].contains("handed"),
            "{}",
            lines[1]
        );
        assert!(!lines[1].contains("cause="), "{}", lines[1]);
        // Each counted and published once, the panic's too.
        let reasons = events.reasons();
        assert_eq!(
            reasons,
            ["EvictionRefused", "EvictionHandedOff", "InternalError"]
        );
        let counted = crate::serve::metrics::encode(&registry);
        assert!(
            counted.contains(r#"actions_total{action="evict",outcome="refused"} 1"#),
            "{counted}"
        );
    }

    #[test]
    fn a_notification_names_the_action_counted() {
        let named = |action, outcome: Outcome| outcome.named_action(action);
        assert_eq!(named(ActionKind::Signal, Outcome::SignalFailed), "signal");
        assert_eq!(named(ActionKind::Http, Outcome::ReloadFailed), "http");
        assert_eq!(named(ActionKind::Evict, Outcome::EvictionBlocked), "evict");
        // Nothing was done: not "signal", whatever the pod's action.
        assert_eq!(named(ActionKind::None, Outcome::EnvNotReloaded), "none");
        assert_eq!(named(ActionKind::None, Outcome::NudgeFailed), "nudge");
    }
}
