//! A webhook or proxy URL is a credential (a Slack incoming-webhook URL *is* the token).
//! [`SecretUrl`] keeps it out of logs, metrics and `Debug` output: both `Debug` and
//! `Display` print only the scheme and host (`https://hooks.slack.com/…`).

use http::Uri;
use std::fmt;

/// Why a URL is refused; the text follows the value's name ("URL #2 has no host") and
/// never shows the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("is not a valid URL (the value is not shown: it is a credential)")]
    Invalid,
    #[error("must start with https:// or http://")]
    Scheme,
    #[error("has no host")]
    NoHost,
}

/// A validated `http://` or `https://` URL whose path, query and user info are secret.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl {
    uri: Uri,
}

impl SecretUrl {
    /// Parses and validates a URL. The error never contains the URL itself.
    pub fn parse(raw: &str) -> Result<Self, UrlError> {
        let raw = raw.trim();
        let uri: Uri = raw.parse().map_err(|_| UrlError::Invalid)?;
        match uri.scheme_str() {
            Some("http") | Some("https") => {}
            _ => return Err(UrlError::Scheme),
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(UrlError::NoHost);
        }
        Ok(Self { uri })
    }

    /// The full URL, for the HTTP client only. Never log it.
    pub fn expose(&self) -> &Uri {
        &self.uri
    }

    /// `https://hooks.slack.com/…`: scheme and host, safe to log.
    pub fn redacted(&self) -> String {
        let scheme = self.uri.scheme_str().unwrap_or("?");
        let host = self.uri.host().unwrap_or("?");
        format!("{scheme}://{host}/…")
    }

    pub fn is_https(&self) -> bool {
        self.uri.scheme_str() == Some("https")
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretUrl({})", self.redacted())
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// Splits a list of URLs given as one value (an environment variable from a Secret):
/// separated by commas and/or newlines, blanks ignored. A comma inside a URL must be
/// percent-encoded (`%2C`).
pub fn split_url_list(raw: &str) -> impl Iterator<Item = &str> {
    raw.split([',', '\n', '\r'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLACK: &str = "https://hooks.slack.com/services/T000/B000/XXXXSECRETXXXX";

    #[test]
    fn debug_and_display_show_only_scheme_and_host() {
        let u = SecretUrl::parse(SLACK).unwrap();
        for shown in [format!("{u:?}"), format!("{u}"), format!("{:?}", Some(&u))] {
            assert!(!shown.contains("SECRET"), "{shown}");
            assert!(!shown.contains("/services"), "{shown}");
            assert!(shown.contains("https://hooks.slack.com/…"), "{shown}");
        }
        assert_eq!(u.expose().to_string(), SLACK);
    }

    #[test]
    fn user_info_is_not_shown() {
        let u = SecretUrl::parse("http://user:pa55@proxy.local:3128").unwrap();
        assert_eq!(u.to_string(), "http://proxy.local/…");
    }

    #[test]
    fn bad_urls_are_refused_without_echoing_them() {
        for bad in [
            "hooks.slack.com/services/SECRET",
            "ftp://x/SECRET",
            "https:///SECRET",
            "not a url SECRET",
            "",
        ] {
            let err = SecretUrl::parse(bad).unwrap_err().to_string();
            assert!(!err.contains("SECRET"), "{bad:?} → {err}");
        }
    }

    #[test]
    fn lists_split_on_commas_and_newlines() {
        let v: Vec<_> = split_url_list("https://a/1, https://b/2\nhttps://c/3\r\n\n,").collect();
        assert_eq!(v, ["https://a/1", "https://b/2", "https://c/3"]);
    }
}
