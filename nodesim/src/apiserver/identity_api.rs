//! The in-process handle's identities: bearer tokens, kubeconfigs, the RBAC policy, and
//! what it forbade (see [`super::access`], [`super::rbac`]).

use super::{rbac, ApiServer, ExpectedForbidden, ForbiddenRecord, UsedRule};
use std::path::Path;

impl ApiServer {
    /// Replaces the bearer tokens the server accepts (`None`: no authentication), e.g. to
    /// retire a rotated service account token. Requests already being served are unaffected.
    pub fn set_tokens(&self, tokens: Option<Vec<String>>) {
        self.inner.shared.set_tokens(tokens);
    }
    /// A kubeconfig whose current context points at this server (no auth, i.e. the admin;
    /// with TLS, it trusts the server's CA).
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        self.write_kubeconfig_with_token(path, None)
    }
    /// A kubeconfig as [`ApiServer::write_kubeconfig`] whose user presents `token`
    /// (e.g. one from [`ApiServer::mint_token`]).
    pub fn write_kubeconfig_with_token(
        &self,
        path: &Path,
        token: Option<&str>,
    ) -> std::io::Result<()> {
        let ca = match self.ca_pem() {
            Some(pem) => {
                let ca_path = path.with_extension("ca.crt");
                std::fs::write(&ca_path, pem)?;
                format!("\n    certificate-authority: {}", ca_path.display())
            }
            None => String::new(),
        };
        let user = match token {
            Some(t) => format!("\n    token: {t}"),
            None => " {}".to_string(),
        };
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: nodesim\n  cluster:\n    server: {}{ca}\n\
             contexts:\n- name: nodesim\n  context:\n    cluster: nodesim\n    user: nodesim\n    namespace: default\n\
             current-context: nodesim\nusers:\n- name: nodesim\n  user:{user}\npreferences: {{}}\n",
            self.url()
        );
        std::fs::write(path, text)
    }
    /// A new bearer token that authenticates as `user` (e.g.
    /// [`rbac::User::service_account`]): its requests are authorized by the RBAC objects of
    /// [`ApiServer::set_rbac`]. Requests with no token or another are the admin's, allowed
    /// everything.
    pub fn mint_token(&self, user: rbac::User) -> String {
        self.inner.shared.access().mint(user)
    }
    /// A new token of the same user as `token`, a minted one (panics for another): a
    /// projected service account token rotated by the kubelet, authorized by the same RBAC
    /// bindings (see `Access::rotate`). The old token stays valid until
    /// [`ApiServer::revoke_token`].
    pub fn rotate_token(&self, token: &str) -> String {
        self.inner
            .shared
            .access()
            .rotate(token)
            .unwrap_or_else(|| panic!("rotate_token: {token:?} was not minted"))
    }
    /// Stops accepting a minted token: its requests get 401 `Unauthorized`, as an expired
    /// service account token's do.
    pub fn revoke_token(&self, token: &str) {
        self.inner.shared.access().revoke(token);
    }
    /// The user a request bearing `token` is authenticated as: a minted token's (revoked or
    /// not), `admin` for any other.
    pub fn user_of(&self, token: &str) -> String {
        self.inner.shared.access().user_name(token)
    }
    /// Replaces the RBAC objects (Roles, ClusterRoles and their bindings) that authorize
    /// minted tokens' requests.
    pub fn set_rbac(&self, policy: rbac::Policy) {
        self.inner.shared.access().set_policy(policy);
    }
    /// Every 403 answered so far: denied by RBAC, or injected ([`ApiServer::set_outage`]).
    pub fn forbidden(&self) -> Vec<ForbiddenRecord> {
        self.inner.shared.access().forbidden()
    }
    /// Declares 403s the test expects: `verb`, API `group` and `resource`
    /// (`resource/subresource`), each `*` for any.
    pub fn expect_forbidden(&self, verb: &str, group: &str, resource: &str) {
        self.inner.shared.access().expect(ExpectedForbidden {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
        });
    }
    /// The 403s answered that no [`ApiServer::expect_forbidden`] declared.
    pub fn unexpected_forbidden(&self) -> Vec<ForbiddenRecord> {
        self.inner.shared.access().unexpected()
    }
    /// Every rule entry that allowed a minted token's request, with its role and user.
    pub fn used_rules(&self) -> Vec<UsedRule> {
        self.inner.shared.access().used()
    }
}
