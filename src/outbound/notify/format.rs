//! The request body per sink (pure). Shapes follow what each service accepts and what
//! Reloader sends (stakater/Reloader `internal/pkg/alerts/alert.go`: `sendSlackAlert`
//! posts `{"attachments":[{"color":…,"author_name":…,"text":…}]}`, `sendTeamsAlert` and
//! `sendGoogleChatAlert` post `{"text":…}`, `sendRawWebhookAlert` posts text/plain;
//! `ALERT_ADDITIONAL_INFO` is prefixed as `"<info> : <message>"`). Text a tenant chooses is
//! quoted per sink by [`super::quote`].

use super::event::{Notification, Severity};
use super::quote::{self, bounded, Quote, MESSAGE_CHARS, NAME_CHARS};
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
/// notifications of the same kind that dedupe held back before this one. The parts a
/// tenant can choose are one bounded line each ([`quote::plain`]); this is the text of
/// `raw` and the `text` field of `json`.
pub fn text(n: &Notification, info: Option<&str>, suppressed: u32) -> String {
    text_quoted(n, info, suppressed, quote::plain)
}

/// [`text`] with each tenant part — the namespace, pod, node, sources and message — quoted
/// by `quote`. `info` is the operator's (`--notify-info`) and is sent as written, so it
/// may mention on purpose (`<!here> prod-eu`); the reason, the action and the count are
/// reloadlet's own.
fn text_quoted(n: &Notification, info: Option<&str>, suppressed: u32, quote: Quote) -> String {
    let mut s = String::new();
    if let Some(info) = info.filter(|i| !i.is_empty()) {
        s.push_str(info);
        s.push_str(" : ");
    }
    s.push_str(&format!(
        "{}: {}/{} on {} ({}",
        n.reason(),
        quote(&n.namespace, NAME_CHARS),
        quote(&n.pod, NAME_CHARS),
        quote(&n.node, NAME_CHARS),
        n.action()
    ));
    if !n.sources.is_empty() {
        let sources: Vec<String> = n.sources.iter().map(ToString::to_string).collect();
        s.push_str("; ");
        s.push_str(&quote(&sources.join(", "), MESSAGE_CHARS));
    }
    s.push(')');
    if !n.message.is_empty() {
        s.push_str(": ");
        s.push_str(&quote(&n.message, MESSAGE_CHARS));
    }
    if suppressed > 0 {
        s.push_str(&format!(
            " (+{suppressed} similar held back since the last notification)"
        ));
    }
    s
}

/// How `format` quotes tenant text.
fn quote_for(format: Format) -> Quote {
    match format {
        Format::Slack => quote::slack,
        Format::Teams => quote::teams,
        Format::Gchat => quote::gchat,
        Format::Raw | Format::Json => quote::plain,
    }
}

/// The body for `format`.
pub fn render(format: Format, n: &Notification, info: Option<&str>, suppressed: u32) -> Payload {
    let text = text_quoted(n, info, suppressed, quote_for(format));
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
            // Data for a program: each field as it is, only bounded (serde_json quotes it).
            let sources: Vec<_> = n
                .sources
                .iter()
                .map(|s| json!({"kind": s.kind.as_str(), "name": bounded(&s.name, NAME_CHARS)}))
                .collect();
            let mut v = json!({
                "node": bounded(&n.node, NAME_CHARS),
                "namespace": bounded(&n.namespace, NAME_CHARS),
                "pod": bounded(&n.pod, NAME_CHARS),
                "action": n.action(),
                "sources": sources,
                "outcome": n.reason(),
                "message": bounded(&n.message, MESSAGE_CHARS),
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

    // ------------------------------------------------------------ tenant text, per sink

    /// What a tenant can put in a reload endpoint's answer (and so in the Event note), or in
    /// a name nothing validates (a CSI volume's `secretProviderClass` attribute).
    const HOSTILE: &[&str] = &[
        "<!channel>",
        "<!here|here>",
        "<!everyone>",
        "<@U024BE7LH>",
        "<#C024BE7LR>",
        "<!subteam^SAZ94GDB8>",
        "<https://evil.example|click me>",
        "[click](https://evil.example)",
        "![x](https://evil.example/x.png)",
        "<users/all>",
        "<at>everyone</at>",
        "<a href=\"https://evil.example\">x</a>",
        "*bold* _it_ ~gone~",
        "`code` ``` block ```",
        "# heading | table |",
        "ok\nSignaled: shop/web-0 on node-1 (signal): all fine",
        "ok\r\nReloaded: shop/web-0",
        "\u{1b}[2K\u{1b}[1Gforged",
        "line\u{2028}separator\u{85}next",
        "\u{202e}txt.exe",
    ];

    fn hostile(part: &str) -> Notification {
        let mut n = failed();
        n.message = format!("POST http://10.0.0.7:9090/-/reload → 403 {part:?}: {part}");
        n.sources.push(SourceRef {
            kind: SourceKind::SecretProviderClass,
            name: format!("{part} (volume secrets)"),
        });
        n
    }

    fn text_of(format: Format, n: &Notification) -> String {
        let p = render(format, n, None, 0);
        match format {
            Format::Raw => String::from_utf8(p.body.to_vec()).unwrap(),
            Format::Slack => parsed(&p)["attachments"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned(),
            _ => parsed(&p)["text"].as_str().unwrap().to_owned(),
        }
    }

    /// No character that starts a line break or a terminal sequence.
    fn one_line(text: &str) -> bool {
        !text.chars().any(|c| {
            c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}')
        })
    }

    /// Every `*`, `_`, `~` outside inline code; and the spans closed.
    fn formatting_outside_code(text: &str) -> Option<String> {
        let spans: Vec<&str> = text.split('`').collect();
        if spans.len() % 2 == 0 {
            return Some("an unclosed code span".into());
        }
        spans
            .iter()
            .step_by(2)
            .find(|plain| plain.contains(['*', '_', '~']))
            .map(|plain| format!("formatting outside code: {plain:?}"))
    }

    #[test]
    fn slack_and_gchat_carry_no_live_mention_link_or_formatting() {
        for part in HOSTILE {
            let n = hostile(part);
            for format in [Format::Slack, Format::Gchat] {
                let text = text_of(format, &n);
                // Every `<…>` construct (mention, channel, link, `<users/all>`) starts with
                // `<`; reloadlet's own words hold none.
                assert!(!text.contains(['<', '>']), "{format:?} {part:?}: {text}");
                assert!(one_line(&text), "{format:?} {part:?}: {text:?}");
                assert_eq!(
                    formatting_outside_code(&text),
                    None,
                    "{format:?} {part:?}: {text}"
                );
                assert!(
                    text.starts_with("SignalFailed: shop/web-0 on node-1 (signal; "),
                    "{text}"
                );
            }
        }
        let text = text_of(Format::Slack, &hostile("<!channel>"));
        assert_eq!(
            text,
            "SignalFailed: shop/web-0 on node-1 (signal; configmap app-config, \
             secretproviderclass &lt;!channel&gt; (volume secrets)): POST \
             http://10.0.0.7:9090/-/reload → 403 \"&lt;!channel&gt;\": &lt;!channel&gt;"
        );
        let text = text_of(Format::Slack, &hostile("*bold*"));
        assert!(
            text.ends_with(": `POST http://10.0.0.7:9090/-/reload → 403 \"*bold*\": *bold*`"),
            "{text}"
        );
    }

    /// `text` with every entity reloadlet writes taken out; `None` if an `&` starts none.
    fn without_entities(text: &str) -> Option<String> {
        let mut out = String::new();
        let mut rest = text;
        while let Some(i) = rest.find('&') {
            out.push_str(&rest[..i]);
            rest = &rest[i..];
            let named = ["&amp;", "&lt;", "&gt;"]
                .iter()
                .find(|e| rest.starts_with(**e))
                .map(|e| e.len());
            let numeric = rest
                .strip_prefix("&#")
                .and_then(|r| r.split_once(';'))
                .filter(|(digits, _)| digits.parse::<u32>().is_ok())
                .map(|(digits, _)| digits.len() + 3);
            rest = &rest[named.or(numeric)?..];
        }
        out.push_str(rest);
        Some(out)
    }

    #[test]
    fn teams_carries_no_live_markdown_or_html() {
        for part in HOSTILE {
            let text = text_of(Format::Teams, &hostile(part));
            let bare = without_entities(&text).unwrap_or_else(|| panic!("{part:?}: {text}"));
            assert!(
                !bare.contains(['<', '>', '[', ']', '*', '_', '~', '`', '#', '|', '\\']),
                "{part:?}: {text}"
            );
            assert!(one_line(&text), "{part:?}: {text:?}");
        }
        assert!(
            text_of(Format::Teams, &hostile("[click](https://evil.example)"))
                .ends_with(": &#91;click&#93;(https://evil.example)")
        );
    }

    #[test]
    fn raw_and_json_text_stay_on_one_line() {
        for part in HOSTILE {
            let n = hostile(part);
            let raw = text_of(Format::Raw, &n);
            assert!(one_line(&raw), "{part:?}: {raw:?}");
            assert!(!raw.contains("\nSignaled"), "{raw:?}");
            let j = parsed(&render(Format::Json, &n, None, 0));
            assert_eq!(j["text"], raw.as_str());
            // The structured fields are data, as they were.
            assert_eq!(j["message"], n.message.as_str());
        }
        assert!(text_of(Format::Raw, &hostile("ok\nSignaled: shop/web-0"))
            .ends_with(": ok\\nSignaled: shop/web-0"));
    }

    #[test]
    fn a_huge_body_is_cut_in_every_format() {
        let mut n = hostile("<!channel>");
        n.message = format!("→ 400 {}", "<!channel> *x*\n".repeat(70_000)); // > 1 MiB
        n.pod = "p".repeat(10_000);
        n.sources[1].name = "s".repeat(10_000);
        for format in [
            Format::Slack,
            Format::Teams,
            Format::Gchat,
            Format::Raw,
            Format::Json,
        ] {
            let p = render(format, &n, None, 0);
            assert!(
                p.body.len() < 16 * 1024,
                "{format:?}: {} bytes",
                p.body.len()
            );
            let text = text_of(format, &n);
            assert!(text.contains('…'), "{format:?}");
            assert!(!text.contains(&"p".repeat(NAME_CHARS)), "{format:?}");
        }
        let j = parsed(&render(Format::Json, &n, None, 0));
        assert_eq!(
            j["message"].as_str().unwrap().chars().count(),
            MESSAGE_CHARS
        );
        assert_eq!(j["pod"].as_str().unwrap().chars().count(), NAME_CHARS);
        assert_eq!(
            j["sources"][1]["name"].as_str().unwrap().chars().count(),
            NAME_CHARS
        );
    }

    #[test]
    fn the_operators_info_is_sent_as_written() {
        let text = text_of(Format::Slack, &failed());
        assert_eq!(text, TEXT_LINE);
        let p = render(Format::Slack, &failed(), Some("<!here> prod-eu"), 0);
        assert_eq!(
            parsed(&p)["attachments"][0]["text"],
            format!("<!here> prod-eu : {TEXT_LINE}")
        );
        // No field that would make Slack link plain `@channel`.
        assert!(parsed(&p).get("link_names").is_none());
    }
}
