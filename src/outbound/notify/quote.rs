//! Tenant text quoted as data, one pure function per sink.
//!
//! A notification carries text that tenants choose: names (namespace, pod, ConfigMap,
//! Secret, a CSI volume's `secretProviderClass` attribute, which nothing validates) and the
//! Event note, which quotes a reload endpoint's answer and a process's `comm`. Each part is
//! first made one bounded line ([`one_line`]), then escaped for the sink's markup, so it
//! can neither mention anyone, nor link, nor format, nor forge a second line. Text that
//! holds none of a sink's special characters comes out unchanged.

use std::borrow::Cow;

/// At most this many characters of a name: more than any valid Kubernetes name (253).
pub const NAME_CHARS: usize = 256;

/// At most this many characters of a message (and of the list of sources): Kubernetes' own
/// limit on an Event note, which the message is (`NoteLengthLimit = 1024`,
/// kubernetes `pkg/apis/core/validation/events.go`).
pub const MESSAGE_CHARS: usize = 1024;

/// Marks text cut by [`one_line`] or [`bounded`].
const ELLIPSIS: char = '…';

/// Quotes one tenant part for a sink: at most `max` characters (before escaping) on one
/// line.
pub type Quote = fn(&str, usize) -> String;

/// Slack `mrkdwn` (an attachment's `text`).
///
/// Slack reads `&`, `<` and `>` as control characters: `<!channel>`, `<!here>`, `<@U…>`,
/// `<#C…>`, `<!subteam^…>`, `<!date^…>` and `<url|text>` all start with `<`. Its reference
/// says to replace exactly these three with `&amp;`, `&lt;` and `&gt;` when they are not
/// meant as control characters, and no other (only those three entities are decoded):
/// <https://api.slack.com/reference/surfaces/formatting#escaping>.
///
/// mrkdwn has no escape for its formatting characters (`*bold*`, `_italic_`, `~strike~`,
/// `` `code` ``, same reference, "Basic formatting"), so a part holding any of them is put
/// in inline code, inside which Slack formats nothing; a backtick of the part becomes `ˋ`
/// (U+02CB) so it cannot close the span. This holds whether or not the attachment's
/// `mrkdwn_in` lists `text`: the control characters are parsed either way, and without
/// mrkdwn the backticks merely show. Plain `@channel` is no mention: Slack links names
/// only when the payload sets `link_names`, which reloadlet never sends.
pub fn slack(s: &str, max: usize) -> String {
    in_code_if_formatted(&entities(&one_line(s, max)))
}

/// Google Chat text (`{"text"}`).
///
/// Chat's text syntax (<https://developers.google.com/workspace/chat/format-messages>):
/// `<users/{user}>` and `<users/all>` mention, `<url|text>` links, `*`, `_`, `~` and `` ` ``
/// format; it documents no escape. `&`, `<` and `>` become `&amp;`, `&lt;` and `&gt;`, so
/// no `<…>` can form (Chat is reported to show the entities as written, librenms/librenms
/// issue #18234: an operator reads `&lt;`, never a link or a mention); a part holding a formatting character goes in monospace, its
/// backticks turned to `ˋ`, as for [`slack`].
pub fn gchat(s: &str, max: usize) -> String {
    in_code_if_formatted(&entities(&one_line(s, max)))
}

/// Microsoft Teams (the Office 365 connector's `{"text"}`: "Markdown and limited HTML",
/// <https://learn.microsoft.com/microsoftteams/platform/task-modules-and-cards/cards/cards-format>).
///
/// `&`, `<` and `>` become `&amp;`, `&lt;` and `&gt;` (no tag, no `<at>`: a Teams mention
/// needs an `entities` list besides, which reloadlet never sends), and each Markdown
/// structure character — `\` `` ` `` `*` `_` `~` `[` `]` `#` `|` — its numeric character
/// reference (`&#42;` for `*`): CommonMark decodes those to the character but never reads
/// them as structure (spec 0.30, §6.2 "Entity and numeric character references"). A link
/// or an image needs `[`…`]`, so `(`, `)` and `!` are left as they are (`kill(SIGHUP)`
/// reads as before).
pub fn teams(s: &str, max: usize) -> String {
    let line = one_line(s, max);
    let mut out = String::with_capacity(line.len());
    for c in line.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\\' | '`' | '*' | '_' | '~' | '[' | ']' | '#' | '|' => {
                out.push_str(&format!("&#{};", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out
}

/// Text with no markup (`raw`, and the `text` field of `json`): one bounded line, nothing
/// else changed.
pub fn plain(s: &str, max: usize) -> String {
    one_line(s, max).into_owned()
}

/// At most `max` characters (`max` ≥ 1) on one line. A control character (C0 and C1: a
/// newline, a carriage return, the ESC of an ANSI sequence), a line or paragraph separator
/// (U+2028, U+2029) or a bidirectional override (U+202A–U+202E, U+2066–U+2069: text that
/// reads in another order than it is) is written out as Rust does (`\n`, `\r`, `\t`,
/// `\u{1b}`), so what follows it stays on the notification's one line and shows as sent.
/// Longer text keeps its first `max - 1` characters (never half an escape) and `…`.
pub fn one_line(s: &str, max: usize) -> Cow<'_, str> {
    if s.chars().nth(max).is_none() && !s.chars().any(hidden) {
        return Cow::Borrowed(s);
    }
    let mut out = String::new();
    // Characters written, and the length of `out` when they were still fewer than `max`.
    let (mut written, mut cut) = (0, 0);
    for c in s.chars() {
        if hidden(c) {
            let escape = c.escape_debug();
            written += escape.clone().count();
            out.extend(escape);
        } else {
            written += 1;
            out.push(c);
        }
        if written < max {
            cut = out.len();
        } else if written > max {
            out.truncate(cut);
            out.push(ELLIPSIS);
            break;
        }
    }
    Cow::Owned(out)
}

/// At most `max` characters (`max` ≥ 1), nothing else changed: the structured fields of
/// `json`, data that a JSON encoder already quotes.
pub fn bounded(s: &str, max: usize) -> Cow<'_, str> {
    match s.char_indices().nth(max) {
        None => Cow::Borrowed(s),
        Some(_) => {
            let keep = s.char_indices().nth(max - 1).map_or(s.len(), |(i, _)| i);
            let mut out = s[..keep].to_owned();
            out.push(ELLIPSIS);
            Cow::Owned(out)
        }
    }
}

/// A character that would break the line, or change how the text around it reads, when
/// shown as itself.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `&`, `<`, `>` as HTML entities.
fn entities(s: &str) -> Cow<'_, str> {
    if !s.contains(['&', '<', '>']) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;"),
    )
}

/// Inline code when `s` holds a Slack or Google Chat formatting character; its backticks
/// turned to `ˋ` (U+02CB) so the span holds.
fn in_code_if_formatted(s: &str) -> String {
    if s.contains(['*', '_', '~', '`']) {
        format!("`{}`", s.replace('`', "\u{2cb}"))
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slack_and_gchat_quote_mentions_links_and_formatting() {
        let table = [
            (
                "kill(SIGHUP) of pid 4242: EPERM",
                "kill(SIGHUP) of pid 4242: EPERM",
            ),
            ("shop/web-0", "shop/web-0"),
            ("<!channel>", "&lt;!channel&gt;"),
            ("<!here|here>", "&lt;!here|here&gt;"),
            ("<@U024BE7LH>", "&lt;@U024BE7LH&gt;"),
            ("<#C024BE7LR>", "&lt;#C024BE7LR&gt;"),
            (
                "<https://evil.example|click me>",
                "&lt;https://evil.example|click me&gt;",
            ),
            ("<users/all>", "&lt;users/all&gt;"),
            ("a &lt; b", "a &amp;lt; b"),
            ("*bold*", "`*bold*`"),
            ("_it_ ~gone~", "`_it_ ~gone~`"),
            ("`code` and *x*", "`ˋcodeˋ and *x*`"),
            ("```", "`ˋˋˋ`"),
            ("<!channel> *now*", "`&lt;!channel&gt; *now*`"),
            (
                "[click](https://evil.example)",
                "[click](https://evil.example)",
            ),
            ("a\nSignalFailed: fake", "a\\nSignalFailed: fake"),
        ];
        for (input, want) in table {
            assert_eq!(slack(input, NAME_CHARS), want, "{input:?}");
            assert_eq!(gchat(input, NAME_CHARS), want, "{input:?}");
        }
    }

    #[test]
    fn teams_quotes_markdown_and_html() {
        let table = [
            (
                "kill(SIGHUP) of pid 4242: EPERM",
                "kill(SIGHUP) of pid 4242: EPERM",
            ),
            ("configmap app-config", "configmap app-config"),
            (
                "[click](https://evil.example)",
                "&#91;click&#93;(https://evil.example)",
            ),
            (
                "![x](https://evil.example/x.png)",
                "!&#91;x&#93;(https://evil.example/x.png)",
            ),
            ("<at>everyone</at>", "&lt;at&gt;everyone&lt;/at&gt;"),
            (
                "<a href=\"https://evil.example\">x</a>",
                "&lt;a href=\"https://evil.example\"&gt;x&lt;/a&gt;",
            ),
            ("&#42;", "&amp;&#35;42;"),
            (
                "**bold** _it_ ~~s~~",
                "&#42;&#42;bold&#42;&#42; &#95;it&#95; &#126;&#126;s&#126;&#126;",
            ),
            ("`x`", "&#96;x&#96;"),
            ("# title | cell", "&#35; title &#124; cell"),
            ("a\\*b", "a&#92;&#42;b"),
            ("a\nb", "a&#92;nb"),
        ];
        for (input, want) in table {
            assert_eq!(teams(input, NAME_CHARS), want, "{input:?}");
        }
    }

    #[test]
    fn plain_keeps_one_line() {
        let table = [
            ("kill(SIGHUP): EPERM", "kill(SIGHUP): EPERM"),
            ("<!channel> *x*", "<!channel> *x*"),
            ("ok\nSignaled: shop/fake-0", "ok\\nSignaled: shop/fake-0"),
            ("a\r\nb\tc", "a\\r\\nb\\tc"),
            ("\u{1b}[31mred\u{1b}[0m", "\\u{1b}[31mred\\u{1b}[0m"),
            (
                "a\u{85}b\u{2028}c\u{2029}d",
                "a\\u{85}b\\u{2028}c\\u{2029}d",
            ),
            ("user\u{202e}gpj.exe", "user\\u{202e}gpj.exe"),
            ("x\u{7f}", "x\\u{7f}"),
            ("", ""),
        ];
        for (input, want) in table {
            assert_eq!(plain(input, NAME_CHARS), want, "{input:?}");
        }
    }

    #[test]
    fn every_part_is_bounded_with_an_ellipsis() {
        assert_eq!(one_line("abcd", 4), "abcd");
        assert_eq!(one_line("abcde", 4), "abc…");
        assert_eq!(one_line("ééééé", 4), "ééé…");
        // An escape is never cut in half: `\n` is two characters.
        assert_eq!(one_line("ab\ncd", 4), "ab…");
        assert_eq!(one_line("a\nb", 4), "a\\nb");
        assert_eq!(bounded("abcde", 4), "abc…");
        assert_eq!(bounded("a\nbc", 4), "a\nbc");
        assert_eq!(bounded("ééééé", 4), "ééé…");

        let huge = "<!channel>\n".repeat(100_000); // ~1 MiB
        for quote in [slack as Quote, gchat, teams] {
            let q = quote(&huge, MESSAGE_CHARS);
            assert!(q.ends_with('…'), "{q}");
            assert!(q.len() < 8 * MESSAGE_CHARS, "{}", q.len());
            assert!(!q.contains(['<', '>', '\n']), "{q}");
        }
        assert_eq!(plain(&huge, MESSAGE_CHARS).chars().count(), MESSAGE_CHARS);
        assert_eq!(bounded(&huge, MESSAGE_CHARS).chars().count(), MESSAGE_CHARS);
    }

    #[test]
    fn text_without_special_characters_is_not_copied() {
        assert!(matches!(one_line("web-0", NAME_CHARS), Cow::Borrowed(_)));
        assert!(matches!(bounded("web-0", NAME_CHARS), Cow::Borrowed(_)));
        assert!(matches!(entities("web-0"), Cow::Borrowed(_)));
    }
}
