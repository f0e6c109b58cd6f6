//! The API server's optional TLS and bearer-token authentication, as a pod reaches a real
//! API server: `https://` with a certificate from the cluster's own CA (the `ca.crt` of the
//! service account volume) and `Authorization: Bearer <token>`. Off by default.
//!
//! A request without a token, or with one the server does not know, is answered 401 with the
//! `Status` kube-apiserver writes: its authentication filter's failure handler
//! (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/authentication.go`, `Unauthorized`)
//! answers `apierrors.NewUnauthorized("Unauthorized")`, i.e. `reason: Unauthorized`,
//! `message: Unauthorized`, `code: 401`.

use super::status::ApiStatus;
use axum::http::{header, HeaderMap};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The server's CA and serving certificate, made fresh for each server.
pub(crate) struct Pki {
    /// The CA certificate (PEM): what a client trusts, the service account's `ca.crt`.
    pub ca_pem: String,
    pub acceptor: TlsAcceptor,
}

/// Names the serving certificate is valid for: the loopback address the server binds, and
/// the names a pod uses for the API server (`kubernetes.default.svc`, as kube-apiserver's own
/// serving certificate lists them).
const DNS_NAMES: [&str; 4] = [
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
];

impl Pki {
    pub fn generate() -> anyhow::Result<Pki> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "nodesim-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = rcgen::Issuer::new(ca_params, ca_key);

        let key = KeyPair::generate()?;
        let mut params =
            CertificateParams::new(DNS_NAMES.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        let cert = params.signed_by(&key, &issuer)?;

        let chain = vec![CertificateDer::from(cert.der().to_vec())];
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, private)?;
        Ok(Pki {
            ca_pem: ca_cert.pem(),
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}

/// A TCP listener whose connections complete a TLS handshake before axum serves them.
pub(crate) struct TlsListener {
    pub tcp: TcpListener,
    pub acceptor: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, addr) = match self.tcp.accept().await {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::debug!("simulated API server: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            // A client that never finishes its handshake must not hold up the others for long.
            match tokio::time::timeout(Duration::from_secs(5), self.acceptor.accept(stream)).await {
                Ok(Ok(tls)) => return (tls, addr),
                Ok(Err(e)) => tracing::debug!("simulated API server: TLS handshake failed: {e}"),
                Err(_) => tracing::debug!("simulated API server: TLS handshake timed out"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// The bearer token of a request ("" when it has none).
pub(crate) fn bearer(headers: &HeaderMap) -> String {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_string())
        .unwrap_or_default()
}

/// `apierrors.NewUnauthorized("Unauthorized")`, as the authentication filter answers.
pub(crate) fn unauthorized() -> ApiStatus {
    ApiStatus::failure(401, "Unauthorized", "Unauthorized")
}
