//! The real [`Poster`]: hyper-util's client over hyper-rustls, the same TLS stack (rustls
//! with ring, the platform's CA certificates through rustls-native-certs) the kube client
//! already links, so no second TLS library. HTTP/1.1 only; redirects are not followed
//! (a webhook that redirects is misconfigured, and Reloader refuses them too:
//! `redirectPolicy` in stakater/Reloader `internal/pkg/alerts/alert.go`).
//! An optional `http://` proxy is used with CONNECT (hyper-util's `Tunnel`).

use super::format::Payload;
use super::poster::{PostError, PostResponse, Poster};
use super::secret_url::SecretUrl;
use crate::outbound::http_client::{body_prefix, error_chain};
use base64::Engine;
use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use http::{HeaderValue, Method, Request, Uri};
use http_body_util::Full;
use hyper_rustls::{ConfigBuilderExt, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use std::time::Duration;

const BODY_PREFIX: usize = 256;

enum Inner {
    Direct(Client<HttpsConnector<HttpConnector>, Full<Bytes>>),
    Proxied(Client<HttpsConnector<Tunnel<HttpConnector>>, Full<Bytes>>),
}

pub struct HttpPoster {
    inner: Inner,
}

#[derive(Debug, thiserror::Error)]
pub enum HttpPosterError {
    #[error("cannot load the system's CA certificates for https notifications: {0}")]
    Roots(std::io::Error),
    #[error("TLS setup: {0}")]
    Tls(#[from] rustls::Error),
}

impl HttpPoster {
    /// The poster for `settings`: the system's CA certificates are loaded (and must be
    /// found) only when a webhook is `https://`. `SSL_CERT_FILE` / `SSL_CERT_DIR` point
    /// rustls-native-certs at a private CA bundle.
    pub fn for_settings(settings: &super::NotifySettings) -> Result<Self, HttpPosterError> {
        let https = settings.urls.iter().any(SecretUrl::is_https);
        Self::build(settings.proxy.as_ref(), settings.timeout, https)
    }

    /// `connect_timeout` bounds the TCP connect only; the sender bounds each attempt.
    pub fn new(
        proxy: Option<&SecretUrl>,
        connect_timeout: Duration,
    ) -> Result<Self, HttpPosterError> {
        Self::build(proxy, connect_timeout, true)
    }

    fn build(
        proxy: Option<&SecretUrl>,
        connect_timeout: Duration,
        system_roots: bool,
    ) -> Result<Self, HttpPosterError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?;
        let tls = if system_roots {
            versions
                .with_native_roots()
                .map_err(HttpPosterError::Roots)?
        } else {
            versions.with_root_certificates(rustls::RootCertStore::empty())
        }
        .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(connect_timeout));
        let builder = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1();
        let inner = match proxy {
            None => Inner::Direct(
                Client::builder(TokioExecutor::new()).build(builder.wrap_connector(http)),
            ),
            Some(proxy) => {
                let (dst, auth) = proxy_parts(proxy.expose());
                let mut tunnel = Tunnel::new(dst, http);
                if let Some(auth) = auth {
                    tunnel = tunnel.with_auth(auth);
                }
                Inner::Proxied(
                    Client::builder(TokioExecutor::new()).build(builder.wrap_connector(tunnel)),
                )
            }
        };
        Ok(Self { inner })
    }
}

/// `http://user:pass@host:port` → (`http://host:port`, `Basic base64(user:pass)`).
fn proxy_parts(uri: &Uri) -> (Uri, Option<HeaderValue>) {
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let dst = Uri::builder()
        .scheme("http")
        .authority(hostport)
        .path_and_query("/")
        .build()
        .unwrap_or_else(|_| uri.clone());
    let auth = userinfo.and_then(|u| {
        let encoded = base64::engine::general_purpose::STANDARD.encode(u);
        let mut v = HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
        v.set_sensitive(true);
        Some(v)
    });
    (dst, auth)
}

impl Poster for HttpPoster {
    async fn post(&self, url: &SecretUrl, payload: &Payload) -> Result<PostResponse, PostError> {
        let req = Request::builder()
            .method(Method::POST)
            .uri(url.expose().clone())
            .header(CONTENT_TYPE, payload.content_type)
            .header(USER_AGENT, concat!("reloadlet/", env!("CARGO_PKG_VERSION")))
            .body(Full::new(payload.body.clone()))
            .map_err(|e| PostError::Request(scrub(&e.to_string(), url)))?;
        let resp = match &self.inner {
            Inner::Direct(c) => c.request(req).await,
            Inner::Proxied(c) => c.request(req).await,
        }
        .map_err(|e| PostError::Transport(scrub(&error_chain(&e), url)))?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body_prefix = body_prefix(resp.into_body(), BODY_PREFIX).await;
        Ok(PostResponse {
            status,
            retry_after,
            body_prefix,
        })
    }
}

/// Belt and braces: no error text from a library may carry the URL's secret parts.
fn scrub(text: &str, url: &SecretUrl) -> String {
    let full = url.expose().to_string();
    let mut out = text.replace(&full, &url.redacted());
    if let Some(pq) = url.expose().path_and_query() {
        if pq.as_str().len() > 1 {
            out = out.replace(pq.as_str(), "/…");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_credentials_become_a_basic_header() {
        let (dst, auth) = proxy_parts(&"http://al:s3cret@proxy.corp:3128".parse().unwrap());
        assert_eq!(dst.to_string(), "http://proxy.corp:3128/");
        let auth = auth.unwrap();
        assert!(auth.is_sensitive());
        assert_eq!(auth, "Basic YWw6czNjcmV0");
        let (dst, auth) = proxy_parts(&"http://proxy.corp:3128".parse().unwrap());
        assert_eq!(dst.to_string(), "http://proxy.corp:3128/");
        assert!(auth.is_none());
    }

    #[test]
    fn scrub_removes_path_and_query() {
        let u = SecretUrl::parse("https://h.example/services/SECRET?x=1").unwrap();
        let s = scrub(
            "error for https://h.example/services/SECRET?x=1 and /services/SECRET?x=1",
            &u,
        );
        assert!(!s.contains("SECRET"), "{s}");
    }
}
