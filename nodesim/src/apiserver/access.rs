//! Who may do what on the simulated API server: the tokens minted for service accounts, the
//! RBAC objects loaded ([`super::rbac::Policy`]), and what was decided — every 403 answered
//! and every rule that allowed a request — for tests to check.
//!
//! A request bearing a minted token is the service account's and is authorized by RBAC; any
//! other request (no token, or one of [`super::ApiServerOptions::bearer_tokens`]) is the
//! admin's, allowed everything, as `system:masters` is: the test harness itself, the
//! simulated kubelet's view, and tests that did not opt in. A minted token can be rotated
//! (a new token of the same user) and revoked (401 from then on, never the admin's).

use super::rbac::{self, Attributes, Grant, Policy, RoleId, RuleEntry, User};
use super::status::ApiStatus;
use std::collections::{BTreeSet, HashMap, HashSet};

/// One 403 the server answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForbiddenRecord {
    /// The user's name (`system:serviceaccount:<ns>:<name>`, or `admin`).
    pub user: String,
    pub method: String,
    pub path: String,
    /// The request's attributes, as the authorizer saw them.
    pub attributes: Attributes,
    /// `true`: denied by RBAC; `false`: an injected 403 ([`super::ApiServer::set_outage`]).
    pub rbac: bool,
}

impl std::fmt::Display for ForbiddenRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let a = &self.attributes;
        let source = if self.rbac { "RBAC" } else { "injected" };
        write!(
            f,
            "{} {} ({source}) by {}: {} {:?} in group {:?}",
            self.method,
            self.path,
            self.user,
            a.verb,
            a.combined_resource(),
            a.api_group
        )
    }
}

/// A rule entry that allowed a service account's request.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UsedRule {
    pub user: String,
    pub role: RoleId,
    pub entry: RuleEntry,
}

/// 403s a test declares it expects: verb, API group and resource (`resource/subresource`),
/// each `*` for any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedForbidden {
    pub verb: String,
    pub group: String,
    pub resource: String,
}

impl ExpectedForbidden {
    fn covers(&self, r: &ForbiddenRecord) -> bool {
        let m = |want: &str, got: &str| want == "*" || want == got;
        let a = &r.attributes;
        m(&self.verb, &a.verb)
            && m(&self.group, &a.api_group)
            && m(&self.resource, &a.combined_resource())
    }
}

/// How a request was authorized.
pub(crate) enum Decision {
    /// Not a service account's token: allowed, unrecorded.
    Admin,
    Allowed,
    Denied(ApiStatus),
}

#[derive(Default)]
pub(crate) struct Access {
    /// Minted tokens and their users (revoked ones too: their requests are still named).
    users: HashMap<String, User>,
    /// Minted tokens no longer accepted.
    revoked: HashSet<String>,
    policy: Policy,
    forbidden: Vec<ForbiddenRecord>,
    expected: Vec<ExpectedForbidden>,
    used: BTreeSet<UsedRule>,
}

impl Access {
    /// A new token for `user`.
    pub fn mint(&mut self, user: User) -> String {
        let token = format!("nodesim-{:032x}", rand::random::<u128>());
        self.users.insert(token.clone(), user);
        token
    }

    /// A new token of the same user as the minted `token` (`None` for any other token).
    ///
    /// A projected service account token's rotation keeps its identity: the kubelet
    /// refreshes the pod's token (older than 80 % of its lifetime or than 24 h; the
    /// `expirationSeconds` field of `ServiceAccountTokenProjection` in the core/v1 API) with
    /// a new TokenRequest for the pod's same ServiceAccount, whose JWT's `sub` is again
    /// `system:serviceaccount:<namespace>:<name>` (kubernetes `pkg/serviceaccount/claims.go`,
    /// `Claims`: `Subject: apiserverserviceaccount.MakeUsername(sa.Namespace, sa.Name)`), so
    /// the same RBAC bindings apply to the new token.
    pub fn rotate(&mut self, token: &str) -> Option<String> {
        let user = self.users.get(token)?.clone();
        Some(self.mint(user))
    }

    /// Stops accepting a minted token, as kube-apiserver refuses an expired one (401).
    pub fn revoke(&mut self, token: &str) {
        if self.users.contains_key(token) {
            self.revoked.insert(token.to_string());
        }
    }

    /// Whether `token` was minted and is not revoked.
    pub fn is_minted(&self, token: &str) -> bool {
        self.users.contains_key(token) && !self.revoked.contains(token)
    }

    pub fn is_revoked(&self, token: &str) -> bool {
        self.revoked.contains(token)
    }

    pub fn set_policy(&mut self, policy: Policy) {
        self.policy = policy;
    }

    /// Authorizes a request bearing `token`, recording the rule that allowed it.
    pub fn authorize(&mut self, token: &str, attrs: &Attributes) -> Decision {
        let Some(user) = self.users.get(token) else {
            return Decision::Admin;
        };
        match self.policy.authorize(user, attrs) {
            Some(Grant { role, entry, .. }) => {
                self.used.insert(UsedRule {
                    user: user.name.clone(),
                    role,
                    entry,
                });
                Decision::Allowed
            }
            None => Decision::Denied(rbac::forbidden(user, attrs)),
        }
    }

    /// The user of a token, `admin` for any other.
    pub fn user_name(&self, token: &str) -> String {
        self.users
            .get(token)
            .map_or_else(|| "admin".to_string(), |u| u.name.clone())
    }

    pub fn record_forbidden(&mut self, record: ForbiddenRecord) {
        self.forbidden.push(record);
    }

    pub fn forbidden(&self) -> Vec<ForbiddenRecord> {
        self.forbidden.clone()
    }

    pub fn expect(&mut self, e: ExpectedForbidden) {
        self.expected.push(e);
    }

    pub fn unexpected(&self) -> Vec<ForbiddenRecord> {
        self.forbidden
            .iter()
            .filter(|r| !self.expected.iter().any(|e| e.covers(r)))
            .cloned()
            .collect()
    }

    pub fn used(&self) -> Vec<UsedRule> {
        self.used.iter().cloned().collect()
    }
}
