//! The request body per sink (pure). Shapes follow what each service accepts and what
//! Reloader sends (stakater/Reloader `internal/pkg/alerts/alert.go`: `sendSlackAlert`
//! posts `{"attachments":[{"color":…,"author_name":…,"text":…}]}`, `sendTeamsAlert` and
//! `sendGoogleChatAlert` post `{"text":…}`, `sendRawWebhookAlert` posts text/plain;
//! `ALERT_ADDITIONAL_INFO` is prefixed as `"<info> : <message>"`).

use super::event::{Notification, Severity};
use bytes::Bytes;
use serde_json::json;

/// `--notify-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Slack incoming webhook: `{"attachments":[{"color","author_name","text"}]}`.
    Slack,
    /// Microsoft Teams incoming webhook: `{"text"}`.
    Teams,
    /// Google Chat space webhook: `{"text"}`.
    Gchat,
    /// The message as text/plain.
    #[default]
    Raw,
    /// `{"node","namespace","pod","action","sources","outcome","message",…}`.
    Json,
}

/// A rendered request body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payload {
    pub content_type: &'static str,
    pub body: Bytes,
}

const JSON: &str = "application/json";
const TEXT: &str = "text/plain; charset=utf-8";

/// The one-line text a human reads, e.g.
/// `SignalFailed: shop/web-0 on node-1 (signal; configmap app-config): kill(SIGHUP): EPERM`.
/// `info` (`--notify-info`) is prefixed as Reloader does; `suppressed` counts the
/// notifications of the same kind that dedupe held back before this one.
pub fn text(n: &Notification, info: Option<&str>, suppressed: u32) -> String {
    let mut s = String::new();
    if let Some(info) = info.filter(|i| !i.is_empty()) {
        s.push_str(info);
        s.push_str(" : ");
    }
    s.push_str(&format!(
        "{}: {}/{} on {} ({}",
        n.reason(),
        n.namespace,
        n.pod,
        n.node,
        n.action()
    ));
    if !n.sources.is_empty() {
        let sources: Vec<String> = n.sources.iter().map(ToString::to_string).collect();
        s.push_str("; ");
        s.push_str(&sources.join(", "));
    }
    s.push(')');
    if !n.message.is_empty() {
        s.push_str(": ");
        s.push_str(&n.message);
    }
    if suppressed > 0 {
        s.push_str(&format!(
            " (+{suppressed} similar held back since the last notification)"
        ));
    }
    s
}

/// The body for `format`.
pub fn render(format: Format, n: &Notification, info: Option<&str>, suppressed: u32) -> Payload {
    let text = text(n, info, suppressed);
    let (content_type, body) = match format {
        Format::Slack => {
            let color = match n.severity() {
                Severity::Ok => "good",
                Severity::Warning => "warning",
                Severity::Failure => "danger",
            };
            let v = json!({"attachments": [{
                "color": color,
                "author_name": "reloadlet",
                "text": text,
            }]});
            (JSON, v.to_string())
        }
        Format::Teams | Format::Gchat => (JSON, json!({ "text": text }).to_string()),
        Format::Raw => (TEXT, text),
        Format::Json => {
            let sources: Vec<_> = n
                .sources
                .iter()
                .map(|s| json!({"kind": s.kind.as_str(), "name": s.name}))
                .collect();
            let mut v = json!({
                "node": n.node,
                "namespace": n.namespace,
                "pod": n.pod,
                "action": n.action(),
                "sources": sources,
                "outcome": n.reason(),
                "message": n.message,
                "text": text,
                "suppressed": suppressed,
            });
            if let Some(info) = info.filter(|i| !i.is_empty()) {
                v["info"] = info.into();
            }
            (JSON, v.to_string())
        }
    };
    Payload {
        content_type,
        body: Bytes::from(body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{SourceKind, SourceRef};
    use crate::core::outcome::{ActionKind, Outcome};
    use serde_json::Value;
    use std::time::Duration;

    fn failed() -> Notification {
        Notification {
            node: "node-1".into(),
            namespace: "shop".into(),
            pod: "web-0".into(),
            action: ActionKind::Signal,
            sources: vec![SourceRef {
                kind: SourceKind::ConfigMap,
                name: "app-config".into(),
            }],
            outcome: Outcome::SignalFailed,
            blocked_for: Duration::ZERO,
            message: "kill(SIGHUP) of pid 4242: EPERM".into(),
        }
    }

    fn parsed(p: &Payload) -> Value {
        assert_eq!(p.content_type, JSON);
        serde_json::from_slice(&p.body).unwrap()
    }

    const TEXT_LINE: &str = "SignalFailed: shop/web-0 on node-1 (signal; configmap app-config): kill(SIGHUP) of pid 4242: EPERM";

    #[test]
    fn text_reads_as_one_line() {
        assert_eq!(text(&failed(), None, 0), TEXT_LINE);
        assert_eq!(
            text(&failed(), Some("prod-eu"), 0),
            format!("prod-eu : {TEXT_LINE}")
        );
        assert_eq!(
            text(&failed(), Some(""), 2),
            format!("{TEXT_LINE} (+2 similar held back since the last notification)")
        );
        let mut bare = failed();
        bare.sources.clear();
        bare.message.clear();
        assert_eq!(
            text(&bare, None, 0),
            "SignalFailed: shop/web-0 on node-1 (signal)"
        );
    }

    #[test]
    fn each_format_has_the_shape_its_service_expects() {
        let n = failed();
        let slack = parsed(&render(Format::Slack, &n, None, 0));
        assert_eq!(
            slack,
            json!({"attachments":[{"color":"danger","author_name":"reloadlet","text":TEXT_LINE}]})
        );
        for f in [Format::Teams, Format::Gchat] {
            assert_eq!(
                parsed(&render(f, &n, None, 0)),
                json!({ "text": TEXT_LINE })
            );
        }
        let raw = render(Format::Raw, &n, None, 0);
        assert_eq!(raw.content_type, "text/plain; charset=utf-8");
        assert_eq!(raw.body, TEXT_LINE.as_bytes());
        let j = parsed(&render(Format::Json, &n, Some("prod-eu"), 1));
        assert_eq!(
            j,
            json!({
                "node": "node-1", "namespace": "shop", "pod": "web-0", "action": "signal",
                "sources": [{"kind": "configmap", "name": "app-config"}],
                "outcome": "SignalFailed", "message": "kill(SIGHUP) of pid 4242: EPERM",
                "text": format!("prod-eu : {TEXT_LINE} (+1 similar held back since the last notification)"),
                "suppressed": 1, "info": "prod-eu",
            })
        );
    }

    #[test]
    fn slack_colour_follows_the_outcome() {
        let table = [
            (Outcome::Signaled, "good"),
            (Outcome::Reloaded, "good"),
            (Outcome::Evicted, "good"),
            (Outcome::EvictionBlocked, "warning"),
            (Outcome::SignalFailed, "danger"),
            (Outcome::SignalNotHandled, "danger"),
            (Outcome::SignalWithheld, "danger"),
            (Outcome::ReloadFailed, "danger"),
            (Outcome::EvictionFailed, "danger"),
            (Outcome::EnvNotReloaded, "danger"),
            (Outcome::NudgeFailed, "danger"),
        ];
        for (outcome, colour) in table {
            let mut n = failed();
            n.outcome = outcome;
            n.blocked_for = Duration::from_secs(700);
            let v = parsed(&render(Format::Slack, &n, None, 0));
            assert_eq!(v["attachments"][0]["color"], colour, "{outcome:?}");
        }
    }

    #[test]
    fn quotes_and_newlines_in_messages_stay_valid_json() {
        let mut n = failed();
        n.message = "body \"Lifecycle API is not enabled.\"\nline 2".into();
        for f in [Format::Slack, Format::Teams, Format::Gchat, Format::Json] {
            let v = parsed(&render(f, &n, None, 0));
            assert!(v.to_string().contains("Lifecycle API"), "{f:?}");
        }
    }
}
