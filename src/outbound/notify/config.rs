//! Notification flags (`--notify-*`, `RELOADLET_NOTIFY_*`) and Reloader's `ALERT_*`
//! variables, parsed once into [`NotifySettings`].
//!
//! Reloader reads `ALERT_WEBHOOK_URL`, `ALERT_SINK`, `ALERT_WEBHOOK_PROXY`,
//! `ALERT_ADDITIONAL_INFO` in stakater/Reloader `internal/pkg/alerts/alert.go`
//! (`SendWebhookAlert`) and sends on a reload only when `ALERT_ON_RELOAD` is exactly
//! `"true"` (`internal/handler/upgrade.go`). Here each `ALERT_*` variable is a fallback for
//! the matching `--notify-*` setting: reloadlet's own flag or variable wins when both are
//! set.

use super::event::NotifyOn;
use super::format::Format;
use super::secret_url::{split_url_list, SecretUrl};
use std::fmt;
use std::time::Duration;

/// A command-line or environment value that is a credential: kept as given until
/// [`NotifyArgs::settings`] validates it, and never shown by `Debug`. (Validating inside
/// clap would make clap echo a malformed URL, token included, in its error message.)
#[derive(Clone)]
pub struct RawSecret(String);

impl RawSecret {
    fn from_arg(s: &str) -> Result<Self, std::convert::Infallible> {
        Ok(Self(s.to_owned()))
    }
}

impl fmt::Debug for RawSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RawSecret(<redacted>)")
    }
}

/// Notification flags; flatten into a command with `#[command(flatten)]`.
#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Notifications")]
pub struct NotifyArgs {
    /// Webhook to notify (repeatable). From the environment: comma- or newline-separated,
    /// e.g. from a Secret. It is a credential: logs show only its host. Fallback: ALERT_WEBHOOK_URL.
    #[arg(
        long = "notify-url",
        env = "RELOADLET_NOTIFY_URL",
        hide_env_values = true,
        value_name = "URL",
        value_parser = RawSecret::from_arg
    )]
    pub notify_url: Vec<RawSecret>,
    /// Request body [default: raw; fallback: ALERT_SINK].
    #[arg(long, env = "RELOADLET_NOTIFY_FORMAT", value_enum)]
    pub notify_format: Option<Format>,
    /// Which outcomes are sent [default: failure; ALERT_ON_RELOAD=true means all].
    #[arg(long, env = "RELOADLET_NOTIFY_ON", value_enum)]
    pub notify_on: Option<NotifyOn>,
    /// Text put before every message, e.g. the cluster name. Fallback: ALERT_ADDITIONAL_INFO.
    #[arg(long, env = "RELOADLET_NOTIFY_INFO", value_name = "TEXT")]
    pub notify_info: Option<String>,
    /// HTTP proxy (`http://[user:password@]host:port`) reached with CONNECT for every
    /// webhook. Fallback: ALERT_WEBHOOK_PROXY.
    #[arg(
        long,
        env = "RELOADLET_NOTIFY_PROXY",
        hide_env_values = true,
        value_name = "URL",
        value_parser = RawSecret::from_arg
    )]
    pub notify_proxy: Option<RawSecret>,
}

/// Validated notification settings. `Debug` shows URLs redacted.
#[derive(Clone, Debug)]
pub struct NotifySettings {
    /// Empty: notifications are off.
    pub urls: Vec<SecretUrl>,
    pub format: Format,
    pub on: NotifyOn,
    pub info: Option<String>,
    pub proxy: Option<SecretUrl>,
    /// Requests waiting per webhook; the oldest is dropped (and counted) beyond this.
    pub queue_capacity: usize,
    /// One attempt's limit (connect, TLS, request and response head).
    pub timeout: Duration,
    /// Retries after the first attempt (connection errors, timeouts, 408, 429, 5xx).
    pub retries: usize,
    /// First retry delay; doubles, plus up to 100 % jitter, at most `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    pub jitter: bool,
    pub dedupe_window: Duration,
}

impl Default for NotifySettings {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            format: Format::Raw,
            on: NotifyOn::Failure,
            info: None,
            proxy: None,
            queue_capacity: 100,
            timeout: Duration::from_secs(5),
            retries: 3,
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            jitter: true,
            dedupe_window: super::dedupe::DEDUPE_WINDOW,
        }
    }
}

impl NotifySettings {
    pub fn enabled(&self) -> bool {
        !self.urls.is_empty()
    }

    /// One line for the startup log, hosts only.
    pub fn describe(&self) -> String {
        if !self.enabled() {
            return "notifications off (no --notify-url)".into();
        }
        let hosts: Vec<String> = self.urls.iter().map(SecretUrl::redacted).collect();
        let mut s = format!(
            "notifications on {:?} as {:?} to {}",
            self.on,
            self.format,
            hosts.join(", ")
        )
        .to_lowercase();
        if let Some(p) = &self.proxy {
            s.push_str(&format!(" via proxy {}", p.redacted()));
        }
        s
    }
}

/// Go's `strings.TrimSpace` then a non-empty check: how Reloader reads its variables.
fn env_value(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

impl NotifyArgs {
    /// Validates the flags and applies the `ALERT_*` fallbacks read through `env`
    /// (`|k| std::env::var(k).ok()` in `main`). Error messages never contain a URL.
    pub fn settings(
        self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<NotifySettings, crate::core::invalid::Invalid> {
        let mut urls = Vec::new();
        let (raw, origin) = if self.notify_url.is_empty() {
            (
                env_value(env, "ALERT_WEBHOOK_URL").into_iter().collect(),
                "ALERT_WEBHOOK_URL",
            )
        } else {
            (
                self.notify_url.into_iter().map(|r| r.0).collect::<Vec<_>>(),
                "--notify-url (RELOADLET_NOTIFY_URL)",
            )
        };
        for value in &raw {
            for one in split_url_list(value) {
                let url = SecretUrl::parse(one)
                    .map_err(|e| format!("{origin}: URL #{} {e}", urls.len() + 1))?;
                if !urls.contains(&url) {
                    urls.push(url);
                }
            }
        }

        let format = match self.notify_format {
            Some(f) => f,
            // Reloader: slack, teams, gchat; anything else is its raw webhook.
            None => match env_value(env, "ALERT_SINK")
                .map(|s| s.to_lowercase())
                .as_deref()
            {
                Some("slack") => Format::Slack,
                Some("teams") => Format::Teams,
                Some("gchat") => Format::Gchat,
                _ => Format::Raw,
            },
        };

        let on = match self.notify_on {
            Some(on) => on,
            None => match env_value(env, "ALERT_ON_RELOAD")
                .map(|s| s.to_lowercase())
                .as_deref()
            {
                Some("true") => NotifyOn::All,
                None | Some("false") => NotifyOn::Failure,
                Some(_) => return Err("ALERT_ON_RELOAD must be true or false".into()),
            },
        };

        let info = self
            .notify_info
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .or_else(|| env_value(env, "ALERT_ADDITIONAL_INFO"));

        let (proxy, origin) = match self.notify_proxy {
            Some(p) => (Some(p.0), "--notify-proxy (RELOADLET_NOTIFY_PROXY)"),
            None => (env_value(env, "ALERT_WEBHOOK_PROXY"), "ALERT_WEBHOOK_PROXY"),
        };
        let proxy = match proxy.map(|p| p.trim().to_owned()).filter(|p| !p.is_empty()) {
            None => None,
            Some(p) => {
                let url =
                    SecretUrl::parse(&p).map_err(|e| format!("{origin}: the proxy URL {e}"))?;
                if url.is_https() {
                    return Err(crate::invalid!(
                        "{origin}: only http:// proxies are supported (the webhook's own TLS \
                         runs inside the CONNECT tunnel)"
                    ));
                }
                Some(url)
            }
        };

        Ok(NotifySettings {
            urls,
            format,
            on,
            info,
            proxy,
            ..NotifySettings::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::collections::HashMap;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        notify: NotifyArgs,
    }

    const SLACK: &str = "https://hooks.slack.com/services/T0/B0/SECRETTOKEN";
    const TEAMS: &str = "https://example.webhook.office.com/webhookb2/SECRETTOKEN";

    fn settings(
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<NotifySettings, crate::core::invalid::Invalid> {
        let cli = Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        cli.notify.settings(&|k| env.get(k).cloned())
    }

    fn exposed(s: &NotifySettings) -> Vec<String> {
        s.urls.iter().map(|u| u.expose().to_string()).collect()
    }

    #[test]
    fn off_without_a_url_and_defaults_otherwise() {
        let s = settings(&[], &[]).unwrap();
        assert!(!s.enabled());
        assert_eq!(s.describe(), "notifications off (no --notify-url)");
        let s = settings(&["--notify-url", SLACK], &[]).unwrap();
        assert_eq!(exposed(&s), [SLACK]);
        assert_eq!(
            (s.format, s.on, s.info),
            (Format::Raw, NotifyOn::Failure, None)
        );
        assert_eq!(s.timeout, Duration::from_secs(5));
        assert_eq!(s.retries, 3);
    }

    #[test]
    fn flags_repeat_and_values_split_on_commas_and_newlines() {
        let s = settings(
            &[
                "--notify-url",
                SLACK,
                "--notify-url",
                &format!("{TEAMS},\n{SLACK}\n"),
                "--notify-format",
                "teams",
                "--notify-on",
                "all",
                "--notify-info",
                " prod-eu ",
            ],
            &[],
        )
        .unwrap();
        assert_eq!(exposed(&s), [SLACK, TEAMS]);
        assert_eq!(s.format, Format::Teams);
        assert_eq!(s.on, NotifyOn::All);
        assert_eq!(s.info.as_deref(), Some("prod-eu"));
    }

    #[test]
    fn reloader_alert_variables_are_fallbacks() {
        let reloader = [
            ("ALERT_ON_RELOAD", "true"),
            ("ALERT_SINK", " Slack "),
            ("ALERT_WEBHOOK_URL", SLACK),
            ("ALERT_ADDITIONAL_INFO", "cluster prod"),
            ("ALERT_WEBHOOK_PROXY", "http://proxy.corp:3128"),
        ];
        let s = settings(&[], &reloader).unwrap();
        assert_eq!(exposed(&s), [SLACK]);
        assert_eq!(s.format, Format::Slack);
        assert_eq!(s.on, NotifyOn::All);
        assert_eq!(s.info.as_deref(), Some("cluster prod"));
        assert_eq!(
            s.proxy.as_ref().unwrap().expose().to_string(),
            "http://proxy.corp:3128/"
        );
        // Reloader's sinks: gchat, teams; anything else (its "webhook") is raw.
        for (sink, want) in [
            ("gchat", Format::Gchat),
            ("teams", Format::Teams),
            ("webhook", Format::Raw),
        ] {
            let s = settings(&[], &[("ALERT_WEBHOOK_URL", SLACK), ("ALERT_SINK", sink)]).unwrap();
            assert_eq!(s.format, want, "{sink}");
        }
        for (v, want) in [
            ("false", NotifyOn::Failure),
            ("", NotifyOn::Failure),
            ("TRUE", NotifyOn::All),
        ] {
            let s = settings(&[], &[("ALERT_WEBHOOK_URL", SLACK), ("ALERT_ON_RELOAD", v)]).unwrap();
            assert_eq!(s.on, want, "{v:?}");
        }
        assert!(settings(&[], &[("ALERT_ON_RELOAD", "yes")]).is_err());
        // reloadlet's own flags win.
        let s = settings(
            &[
                "--notify-url",
                TEAMS,
                "--notify-format",
                "json",
                "--notify-on",
                "failure",
                "--notify-info",
                "mine",
            ],
            &reloader,
        )
        .unwrap();
        assert_eq!(exposed(&s), [TEAMS]);
        assert_eq!((s.format, s.on), (Format::Json, NotifyOn::Failure));
        assert_eq!(s.info.as_deref(), Some("mine"));
    }

    #[test]
    fn bad_values_are_named_without_echoing_the_secret() {
        for (args, env) in [
            (vec!["--notify-url", "hooks.slack.com/SECRETTOKEN"], vec![]),
            (
                vec!["--notify-url", &format!("{SLACK},ftp://SECRETTOKEN")],
                vec![],
            ),
            (vec![], vec![("ALERT_WEBHOOK_URL", "SECRETTOKEN")]),
            (
                vec!["--notify-proxy", "https://u:SECRETTOKEN@proxy:3128"],
                vec![],
            ),
            (
                vec![],
                vec![("ALERT_WEBHOOK_PROXY", "socks5://SECRETTOKEN@proxy")],
            ),
        ] {
            let err = settings(&args, &env).unwrap_err();
            assert!(!err.contains("SECRETTOKEN"), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
        assert!(settings(&["--notify-format", "discord"], &[]).is_err());
        assert!(settings(&["--notify-on", "sometimes"], &[]).is_err());
    }

    #[test]
    fn debug_output_never_shows_a_url() {
        let cli = Cli::try_parse_from([
            "x",
            "--notify-url",
            SLACK,
            "--notify-proxy",
            "http://user:SECRETTOKEN@proxy:3128",
        ])
        .unwrap();
        let args = format!("{cli:?}");
        assert!(!args.contains("SECRETTOKEN"), "{args}");
        let s = cli.notify.settings(&|_| None).unwrap();
        for shown in [format!("{s:?}"), s.describe()] {
            assert!(!shown.contains("SECRETTOKEN"), "{shown}");
            assert!(shown.contains("https://hooks.slack.com/…"), "{shown}");
        }
        assert_eq!(
            s.describe(),
            "notifications on failure as raw to https://hooks.slack.com/… via proxy http://proxy/…"
        );
    }
}
