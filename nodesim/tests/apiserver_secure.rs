//! The API server's optional TLS (its own CA) and bearer-token authentication, through the
//! real kube client: the right token is served, a wrong or missing one gets kube-apiserver's
//! 401 `Unauthorized` Status, a retired token stops working, and a client that does not trust
//! the CA cannot connect.

use k8s_openapi::api::core::v1::Pod;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use nodesim::apiserver::{ApiServer, ApiServerOptions};

/// A client from a kubeconfig naming the server, its CA (unless `trust` is false) and `token`.
async fn client(
    server: &ApiServer,
    dir: &std::path::Path,
    token: Option<&str>,
    trust: bool,
) -> Client {
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, server.ca_pem().expect("TLS server")).unwrap();
    let ca_line = if trust {
        format!("\n    certificate-authority: {}", ca.display())
    } else {
        String::new()
    };
    let user = match token {
        Some(t) => format!("{{token: {t}}}"),
        None => "{}".into(),
    };
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: s\n  cluster:\n    server: {}{ca_line}\n\
         contexts:\n- name: s\n  context: {{cluster: s, user: u}}\ncurrent-context: s\n\
         users:\n- name: u\n  user: {user}\n",
        server.url()
    );
    let kubeconfig = Kubeconfig::from_yaml(&text).unwrap();
    let mut cfg = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    cfg.default_retry = false;
    Client::try_from(cfg).unwrap()
}

async fn list(client: Client) -> Result<usize, kube::Error> {
    let pods: Api<Pod> = Api::all(client);
    pods.list(&Default::default()).await.map(|l| l.items.len())
}

fn assert_unauthorized(result: Result<usize, kube::Error>) {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 401, "{status:?}");
            assert_eq!(status.reason, "Unauthorized", "{status:?}");
            assert_eq!(status.message, "Unauthorized", "{status:?}");
        }
        other => panic!("expected 401 Unauthorized, got {other:?}"),
    }
}

#[tokio::test]
async fn tls_and_bearer_tokens_answer_like_kube_apiserver() {
    let dir = tempfile::tempdir().unwrap();
    let server = ApiServer::start_with(ApiServerOptions {
        tls: true,
        bearer_tokens: Some(vec!["token-1".into()]),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(
        server.url().starts_with("https://127.0.0.1:"),
        "{}",
        server.url()
    );

    assert_eq!(
        list(client(&server, dir.path(), Some("token-1"), true).await)
            .await
            .unwrap(),
        0
    );
    assert_unauthorized(list(client(&server, dir.path(), Some("wrong"), true).await).await);
    assert_unauthorized(list(client(&server, dir.path(), None, true).await).await);

    // Rotation: the new token works alongside the old, then the old one is retired.
    server.set_tokens(Some(vec!["token-1".into(), "token-2".into()]));
    assert!(
        list(client(&server, dir.path(), Some("token-2"), true).await)
            .await
            .is_ok()
    );
    server.set_tokens(Some(vec!["token-2".into()]));
    assert_unauthorized(list(client(&server, dir.path(), Some("token-1"), true).await).await);

    let tokens: Vec<String> = server.requests().iter().map(|r| r.token.clone()).collect();
    assert_eq!(tokens, ["token-1", "wrong", "", "token-2", "token-1"]);

    // Without the CA, the handshake fails: the server is not trusted by default.
    match list(client(&server, dir.path(), Some("token-2"), false).await).await {
        Err(kube::Error::Api(s)) => panic!("a client without the CA was answered: {s:?}"),
        Err(_) => {}
        Ok(_) => panic!("a client without the CA connected"),
    }
}

#[tokio::test]
async fn the_default_server_is_plain_http_without_authentication() {
    let server = ApiServer::start().await.unwrap();
    assert!(server.url().starts_with("http://"), "{}", server.url());
    assert!(server.ca_pem().is_none());
}
