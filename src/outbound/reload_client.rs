//! The real [`HttpCaller`]: reload requests to pods (`reloadlet.io/action: http`) with
//! hyper-util's client over hyper-rustls — the TLS stack the kube client and the
//! notification poster already link (rustls with ring; no OpenSSL in the static image).
//!
//! - `https` without `--http-ca-file`: the server certificate is not verified (the
//!   handshake's signatures still are). Pod IPs change with every pod, so a certificate
//!   naming one is rare; the kubelet's own HTTPS probes skip verification the same way
//!   (kubernetes `pkg/probe/http/request.go` and `pkg/kubelet/prober/prober.go`,
//!   `InsecureSkipVerify: true`).
//! - With `--http-ca-file`: the chain must lead to a certificate in that PEM file and name
//!   the pod's IP address (an IP SAN), as for any TLS client.
//! - No redirects are followed, no connection is kept between requests (pods come and go,
//!   and a reload is rare), no proxy is used (a pod IP is reached directly).
//! - The endpoint is the tenant's: of its answer at most [`HTTP_BODY_READ`] bytes of the body
//!   are read (then the connection is dropped), through a read buffer of at most
//!   [`READ_BUFFER`] bytes (the head must fit in it), so 16 requests in flight hold a few
//!   hundred KiB at most whatever the endpoints send.

use crate::core::annotations::HttpMethod;
use crate::outbound::http_client::{body_prefix, error_chain};
use crate::ports::{HttpAnswer, HttpCall, HttpCallError, HttpCaller, HTTP_BODY_READ};
use bytes::Bytes;
use futures::future::BoxFuture;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, USER_AGENT};
use http::{Method, Request};
use http_body_util::Full;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// hyper's read buffer per connection (its default grows to ~400 KiB). An answer's head
/// larger than this fails the attempt ("message head is too large").
const READ_BUFFER: usize = 16 * 1024;

pub struct ReloadClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReloadClientError {
    #[error("--http-ca-file {path}: {error}")]
    CaFile { path: String, error: String },
    #[error("TLS setup: {0}")]
    Tls(#[from] rustls::Error),
}

impl ReloadClient {
    /// `ca_file`: PEM certificates that `https` endpoints must chain to (`None`: no
    /// verification).
    pub fn new(ca_file: Option<&Path>) -> Result<Self, ReloadClientError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let tls = match ca_file {
            Some(path) => versions.with_root_certificates(roots(path)?),
            None => versions
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unverified(provider))),
        }
        .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(Duration::from_secs(10)));
        http.set_nodelay(true);
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .http1_max_buf_size(READ_BUFFER)
            .build(connector);
        Ok(Self { client })
    }

    async fn send(&self, call: &HttpCall) -> Result<HttpAnswer, HttpCallError> {
        let method = match call.method {
            HttpMethod::Post => Method::POST,
            HttpMethod::Put => Method::PUT,
            HttpMethod::Get => Method::GET,
        };
        let mut req = Request::builder()
            .method(method)
            .uri(&call.url)
            .header(USER_AGENT, concat!("reloadlet/", env!("CARGO_PKG_VERSION")));
        if !call.body.is_empty() {
            req = req.header(CONTENT_TYPE, content_type(&call.body));
        }
        // hyper leaves out `Content-Length: 0`; a POST/PUT should carry it (RFC 9110
        // §8.6), and some servers answer 411 Length Required without it.
        if call.method != HttpMethod::Get || !call.body.is_empty() {
            req = req.header(CONTENT_LENGTH, call.body.len());
        }
        let req = req
            .body(Full::new(Bytes::from(call.body.clone())))
            .map_err(|e| HttpCallError::Request(e.to_string()))?;
        let resp = self
            .client
            .request(req)
            .await
            .map_err(|e| HttpCallError::Transport(error_chain(&e)))?;
        let status = resp.status().as_u16();
        let body_prefix = body_prefix(resp.into_body(), HTTP_BODY_READ).await;
        Ok(HttpAnswer {
            status,
            body_prefix,
        })
    }
}

impl HttpCaller for ReloadClient {
    fn call(&self, call: &HttpCall) -> BoxFuture<'_, Result<HttpAnswer, HttpCallError>> {
        let call = call.clone();
        Box::pin(async move { self.send(&call).await })
    }
}

/// `application/json` for a body that is JSON (Fluent Bit's `{}`), else text.
fn content_type(body: &str) -> &'static str {
    if serde_json::from_str::<serde_json::Value>(body).is_ok() {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    }
}

fn roots(path: &Path) -> Result<rustls::RootCertStore, ReloadClientError> {
    let err = |error: String| ReloadClientError::CaFile {
        path: path.display().to_string(),
        error,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no PEM certificate in it".into()));
    }
    let mut store = rustls::RootCertStore::empty();
    for cert in certs {
        store.add(cert).map_err(|e| err(e.to_string()))?;
    }
    Ok(store)
}

/// Accepts any server certificate; checks the handshake signatures with the provider's
/// algorithms (so the session is at least with the holder of the presented key).
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_bodies_are_sent_as_json() {
        assert_eq!(content_type("{}"), "application/json");
        assert_eq!(content_type("reload"), "text/plain; charset=utf-8");
    }

    /// A tenant's endpoint answering 500 with a 64 MiB body (invalid UTF-8, newlines, ANSI
    /// escapes): the client keeps the first 4 KiB and hangs up, so the server cannot write it
    /// all.
    #[tokio::test]
    async fn a_huge_answer_is_read_only_up_to_the_limit_then_dropped() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        const SIZE: usize = 64 << 20;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 1024];
            let _ = conn.read(&mut request).await.unwrap();
            let head =
                format!("HTTP/1.1 500 Internal Server Error\r\ncontent-length: {SIZE}\r\n\r\n");
            conn.write_all(head.as_bytes()).await.unwrap();
            let chunk: Vec<u8> = b"\xff\xfe\n\x1b[31mFAKE\x00 line\r\n"
                .iter()
                .copied()
                .cycle()
                .take(64 * 1024)
                .collect();
            let mut written = 0;
            while written < SIZE {
                if conn.write_all(&chunk).await.is_err() {
                    break;
                }
                written += chunk.len();
            }
            written
        });
        let client = ReloadClient::new(None).unwrap();
        let answer = client
            .send(&HttpCall {
                method: HttpMethod::Post,
                url: format!("http://{addr}/-/reload"),
                body: String::new(),
            })
            .await
            .unwrap();
        assert_eq!(answer.status, 500);
        // Lossy decoding turns each invalid byte into U+FFFD (3 bytes): bounded by 3 × 4 KiB.
        assert!(!answer.body_prefix.is_empty());
        assert!(
            answer.body_prefix.len() <= 3 * HTTP_BODY_READ,
            "{}",
            answer.body_prefix.len()
        );
        assert!(answer.body_prefix.contains('\u{fffd}'));
        drop(client);
        let written = server.await.unwrap();
        assert!(written < SIZE, "the client read the whole body");
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused_in_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let err = ReloadClient::new(Some(&path)).err().unwrap().to_string();
        assert!(err.contains("no PEM certificate"), "{err}");
        let err = ReloadClient::new(Some(&dir.path().join("missing.pem")))
            .err()
            .unwrap()
            .to_string();
        assert!(err.starts_with("--http-ca-file "), "{err}");
    }
}
