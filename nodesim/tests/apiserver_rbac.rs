//! RBAC through the real kube client over plain HTTP: a service account's minted token is
//! authorized by the loaded Roles and bindings (the kubeconfig from
//! `SimNode::kubeconfig_for`), the admin (no token) is allowed everything, and every 403 and
//! every rule used is recorded.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use nodesim::apiserver::rbac::Policy;
use nodesim::node::SimNode;
use serde_json::json;

async fn client(kubeconfig: &std::path::Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).unwrap();
    let mut cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    cfg.default_retry = false;
    Client::try_from(cfg).unwrap()
}

fn policy() -> Policy {
    Policy::from_objects(&[
        json!({"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1",
               "metadata": {"name": "reader"},
               "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]}),
        json!({"kind": "ClusterRoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1",
               "metadata": {"name": "reader"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"},
               "subjects": [{"kind": "ServiceAccount", "name": "agent", "namespace": "sys"}]}),
    ])
    .unwrap()
}

#[tokio::test]
async fn a_service_account_gets_what_its_roles_grant_and_a_403_for_the_rest() {
    let node = SimNode::start("n", "nodesim-rbac-", |_| {}).await.unwrap();
    node.api.set_rbac(policy());
    node.api.create_pod(
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "a"}})).unwrap(),
    );
    let sa = client(&node.kubeconfig_for("sys", "agent").unwrap()).await;
    let admin = client(&node.kubeconfig()).await;

    let pods: Api<Pod> = Api::namespaced(sa.clone(), "a");
    assert_eq!(pods.list(&Default::default()).await.unwrap().items.len(), 1);
    pods.get("web").await.unwrap();
    let patch = Patch::Merge(json!({"metadata": {"annotations": {"x": "1"}}}));
    match pods.patch("web", &PatchParams::default(), &patch).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403);
            assert_eq!(s.reason, "Forbidden");
            assert_eq!(
                s.message,
                "pods \"web\" is forbidden: User \"system:serviceaccount:sys:agent\" cannot patch resource \"pods\" in API group \"\" in the namespace \"a\""
            );
        }
        other => panic!("expected 403, got {other:?}"),
    }
    // Another service account has no binding at all.
    let other = client(&node.kubeconfig_for("sys", "other").unwrap()).await;
    let err = Api::<Pod>::all(other)
        .list(&Default::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "{err:?}"
    );
    // The admin may do anything.
    Api::<Pod>::namespaced(admin, "a")
        .patch("web", &PatchParams::default(), &patch)
        .await
        .unwrap();

    let forbidden: Vec<String> = node.api.forbidden().iter().map(|f| f.to_string()).collect();
    assert_eq!(
        forbidden,
        [
            "PATCH /api/v1/namespaces/a/pods/web (RBAC) by system:serviceaccount:sys:agent: patch \"pods\" in group \"\"",
            "GET /api/v1/pods (RBAC) by system:serviceaccount:sys:other: list \"pods\" in group \"\"",
        ]
    );
    assert_eq!(node.api.unexpected_forbidden().len(), 2);
    node.api.expect_forbidden("patch", "", "pods");
    node.api.expect_forbidden("*", "*", "*");
    assert!(node.api.unexpected_forbidden().is_empty());

    let used: Vec<String> = node
        .api
        .used_rules()
        .iter()
        .map(|u| format!("{} {}: {}", u.user, u.role, u.entry))
        .collect();
    assert_eq!(
        used,
        [
            "system:serviceaccount:sys:agent ClusterRole/reader: get \"\" pods",
            "system:serviceaccount:sys:agent ClusterRole/reader: list \"\" pods",
        ]
    );
}

#[tokio::test]
async fn an_injected_403_is_recorded_too() {
    let node = SimNode::start("n", "nodesim-rbac-", |_| {}).await.unwrap();
    let admin = client(&node.kubeconfig()).await;
    node.api.set_outage(Some(403));
    assert!(Api::<Pod>::all(admin)
        .list(&Default::default())
        .await
        .is_err());
    let f = node.api.unexpected_forbidden();
    assert_eq!(f.len(), 1);
    assert!(!f[0].rbac);
    assert_eq!(f[0].user, "admin");
    node.api.expect_forbidden("list", "", "pods");
    assert!(node.api.unexpected_forbidden().is_empty());
}

#[tokio::test]
async fn a_rotated_token_is_the_same_service_account_and_a_revoked_one_gets_401() {
    let node = SimNode::start("n", "nodesim-rbac-", |_| {}).await.unwrap();
    node.api.set_rbac(policy());
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = |token: &str, name: &str| {
        let path = dir.path().join(name);
        node.api
            .write_kubeconfig_with_token(&path, Some(token))
            .unwrap();
        path
    };
    let old = node
        .api
        .mint_token(nodesim::apiserver::rbac::User::service_account(
            "sys", "agent",
        ));
    let new = node.api.rotate_token(&old);
    assert_ne!(new, old);
    assert_eq!(node.api.user_of(&new), "system:serviceaccount:sys:agent");
    assert_eq!(node.api.user_of("not-minted"), "admin");

    // Both tokens are the service account's: the reader binding lets each list pods, and
    // neither may patch one.
    for (token, name) in [(&old, "old"), (&new, "new")] {
        let pods: Api<Pod> = Api::all(client(&kubeconfig(token, name)).await);
        assert!(pods.list(&Default::default()).await.is_ok(), "{name}");
    }
    assert!(node.api.forbidden().is_empty());

    // The old token is revoked: 401, not the admin's (the server has no static tokens).
    node.api.revoke_token(&old);
    let err = Api::<Pod>::all(client(&kubeconfig(&old, "old")).await)
        .list(&Default::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 401),
        "{err:?}"
    );
    assert!(Api::<Pod>::all(client(&kubeconfig(&new, "new")).await)
        .list(&Default::default())
        .await
        .is_ok());
    let users: Vec<String> = node
        .api
        .used_rules()
        .iter()
        .map(|u| u.user.clone())
        .collect();
    assert_eq!(users, ["system:serviceaccount:sys:agent"]);
}
