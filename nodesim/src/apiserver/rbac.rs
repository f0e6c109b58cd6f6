//! Kubernetes RBAC, decided as kube-apiserver's RBAC authorizer decides it: pure, no I/O.
//!
//! Followed, read at kubernetes/kubernetes (not copied):
//! - `staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`
//!   (`RequestInfoFactory.NewRequestInfo`): how a URL and method become the request's
//!   attributes ([`Attributes::from_request`]): GET of a collection is `list`, or `watch`
//!   when its first `watch` query value is neither `false` nor `0`; GET of a name is `get`;
//!   POST `create`, PUT `update`, PATCH `patch`, DELETE `delete`, DELETE of a collection
//!   `deletecollection`; `/namespaces/{ns}/{resource}/{name}/{subresource}`, where `status`
//!   and `finalize` right after a namespace's name are the namespace's own subresources; a
//!   list or watch whose `fieldSelector` requires `metadata.name=x` has the name `x` (so a
//!   rule with `resourceNames: [x]` allows it: the single-object watch client-go's
//!   `watch_based_manager.go` and the kubelet use).
//! - `plugin/pkg/auth/authorizer/rbac/rbac.go` (`RuleAllows`): a resource request is allowed
//!   by a rule when its verb, API group, resource (`resource/subresource` combined) and name
//!   all match; a non-resource request by its verb and path.
//! - `pkg/apis/rbac/v1/evaluation_helpers.go`: `VerbMatches` and `APIGroupMatches` (`*` or
//!   equal), `ResourceMatches` (`*`, the exact combined resource, or `*/<subresource>`;
//!   there is no `<resource>/*` form: `pods/*` matches only a subresource literally named
//!   `*`), `ResourceNameMatches` (a rule without resourceNames matches any name; one with
//!   them never matches a request without a name: list, watch, create, deletecollection),
//!   `NonResourceURLMatches` (`*`, equal, or a `prefix*`).
//! - `pkg/registry/rbac/validation/rule.go` (`DefaultRuleResolver.VisitRulesFor`,
//!   `appliesToUser`, `GetRoleReferenceRules`): every ClusterRoleBinding's role applies in
//!   every namespace and at the cluster scope; a RoleBinding's role (a Role of its namespace
//!   or a ClusterRole) applies only to requests in the binding's namespace; a ServiceAccount
//!   subject without a namespace means the binding's namespace (none for a
//!   ClusterRoleBinding: it then matches nobody).
//! - `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go`
//!   (`Forbidden`, `forbiddenMessage`) with apimachinery's `errors.NewForbidden`: the 403
//!   body ([`forbidden`]).

use super::status::ApiStatus;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use serde_json::{json, Value};
use std::fmt;

/// Who makes a request, as an authenticator reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// e.g. `system:serviceaccount:reloadlet-system:reloadlet`.
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    /// A ServiceAccount's user as its token authenticates it
    /// (`k8s.io/apiserver/pkg/authentication/serviceaccount`: `MakeUsername`,
    /// `MakeGroupNames`, plus `system:authenticated`).
    pub fn service_account(namespace: &str, name: &str) -> User {
        User {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }
}

/// What a request asks for: `authorizer.Attributes` as `NewRequestInfo` fills them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// `false`: a non-resource request (discovery, `/healthz`, …) of `path`.
    pub resource_request: bool,
    pub verb: String,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    /// "" at the cluster scope.
    pub namespace: String,
    /// "" for a collection.
    pub name: String,
    pub path: String,
}

/// The namespaces' own subresources (`namespaceSubresources` in requestinfo.go).
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

impl Attributes {
    /// The attributes of an HTTP request (`query` without the `?`), as
    /// `RequestInfoFactory.NewRequestInfo` derives them with the API prefixes `api` (no
    /// group) and `apis`.
    pub fn from_request(method: &str, path: &str, query: &str) -> Attributes {
        let mut info = Attributes {
            verb: method.to_ascii_lowercase(),
            path: path.to_string(),
            ..Default::default()
        };
        let trimmed = path.trim_matches('/');
        let mut parts: Vec<&str> = if trimmed.is_empty() {
            Vec::new()
        } else {
            trimmed.split('/').collect()
        };
        if parts.len() < 3 || !matches!(parts[0], "api" | "apis") {
            return info;
        }
        let grouped = parts[0] == "apis";
        parts.remove(0);
        if grouped {
            if parts.len() < 3 {
                return info;
            }
            info.api_group = parts.remove(0).to_string();
        }
        info.resource_request = true;
        info.api_version = parts.remove(0).to_string();
        if matches!(parts[0], "proxy" | "watch") {
            // `/{specialVerb}/...`; with nothing after it the real server errs, and the
            // request stays as parsed so far.
            info.verb = parts.remove(0).to_string();
            if parts.is_empty() {
                return info;
            }
        } else {
            info.verb = match method {
                "POST" => "create",
                "GET" | "HEAD" => "get",
                "PUT" => "update",
                "PATCH" => "patch",
                "DELETE" => "delete",
                _ => "",
            }
            .to_string();
        }
        if parts[0] == "namespaces" && parts.len() > 1 {
            info.namespace = parts[1].to_string();
            if parts.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&parts[2]) {
                parts.drain(..2);
            }
        }
        // resource/name/subresource/…; proxy takes no subresource.
        if parts.len() >= 3 && info.verb != "proxy" {
            info.subresource = parts[2].to_string();
        }
        if parts.len() >= 2 {
            info.name = parts[1].to_string();
        }
        if !parts.is_empty() {
            info.resource = parts[0].to_string();
        }
        if info.name.is_empty() && info.verb == "get" {
            // A parameter's first value, as url.Values.Get gives it.
            let first = |key: &str| {
                form_urlencoded::parse(query.as_bytes())
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.into_owned())
            };
            // Any `watch` value but "false" and "0" is true (apimachinery's
            // Convert_Slice_string_To_bool).
            let watch = first("watch").map(|v| v.to_ascii_lowercase());
            info.verb = match watch.as_deref() {
                None | Some("false" | "0") => "list",
                Some(_) => "watch",
            }
            .to_string();
            // A list or watch of one name (`fieldSelector=metadata.name=x`) is authorized as a
            // request for that name, so a rule's `resourceNames` can grant it.
            if let Some(name) = first("fieldSelector").as_deref().and_then(selected_name) {
                info.name = name;
            }
        }
        if info.name.is_empty() && info.verb == "delete" {
            info.verb = "deletecollection".into();
        }
        info
    }

    /// `resource` or `resource/subresource`.
    pub fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// The name a field selector selects, as `NewRequestInfo` reads it: when one of its terms
/// requires `metadata.name` to equal a name that is a valid path segment
/// (`fields.Selector.RequiresExactMatch("metadata.name")`: `=` or `==`, never `!=`;
/// apimachinery `path.IsValidPathSegmentName`: not `.` or `..`, no `/` or `%`). The
/// selector's `\` escapes are not undone: a name with an escaped `,` or `=` is no valid
/// object name anyway.
fn selected_name(selector: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        if term.contains("!=") {
            return None;
        }
        let (field, value) = term.split_once("==").or_else(|| term.split_once('='))?;
        let value = value.trim();
        let valid = !matches!(value, "" | "." | "..") && !value.contains(['/', '%']);
        (field.trim() == "metadata.name" && valid).then(|| value.to_owned())
    })
}

fn entries(v: &Option<Vec<String>>) -> &[String] {
    v.as_deref().unwrap_or_default()
}

/// `VerbMatches`: the first entry of the rule that matches, if any.
fn verb_entry<'r>(rule: &'r PolicyRule, verb: &str) -> Option<&'r str> {
    rule.verbs
        .iter()
        .map(String::as_str)
        .find(|v| *v == "*" || *v == verb)
}

/// `APIGroupMatches`.
fn group_entry<'r>(rule: &'r PolicyRule, group: &str) -> Option<&'r str> {
    entries(&rule.api_groups)
        .iter()
        .map(String::as_str)
        .find(|g| *g == "*" || *g == group)
}

/// `ResourceMatches`: `*`, the combined resource exactly, or `*/<subresource>`.
fn resource_entry<'r>(rule: &'r PolicyRule, combined: &str, subresource: &str) -> Option<&'r str> {
    entries(&rule.resources)
        .iter()
        .map(String::as_str)
        .find(|r| {
            *r == "*"
                || *r == combined
                || (!subresource.is_empty() && r.strip_prefix("*/") == Some(subresource))
        })
}

/// `ResourceNameMatches`: no names in the rule matches any request, even one without a name.
fn resource_name_matches(rule: &PolicyRule, name: &str) -> bool {
    let names = entries(&rule.resource_names);
    names.is_empty() || names.iter().any(|n| n == name)
}

/// `NonResourceURLMatches`.
fn non_resource_url_matches(rule: &PolicyRule, path: &str) -> bool {
    entries(&rule.non_resource_urls)
        .iter()
        .any(|u| u == "*" || u == path || u.strip_suffix('*').is_some_and(|p| path.starts_with(p)))
}

/// Which entries of a rule allowed a request: the verb, group and resource as the rule
/// spells them (`*` when a wildcard matched) and the rule's resourceNames.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleEntry {
    pub verb: String,
    pub group: String,
    /// `resource` or `resource/subresource`; for a non-resource rule, the URL entry.
    pub resource: String,
    /// The rule's resourceNames, comma-separated ("" when it has none).
    pub names: String,
}

impl fmt::Display for RuleEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.group.is_empty() {
            "\"\""
        } else {
            &self.group
        };
        write!(f, "{} {group} {}", self.verb, self.resource)?;
        if !self.names.is_empty() {
            write!(f, " [{}]", self.names)?;
        }
        Ok(())
    }
}

/// `RuleAllows`: the entries that allowed the request, or `None`.
pub fn rule_allows(attrs: &Attributes, rule: &PolicyRule) -> Option<RuleEntry> {
    let verb = verb_entry(rule, &attrs.verb)?;
    let names = entries(&rule.resource_names).join(",");
    if !attrs.resource_request {
        let url = entries(&rule.non_resource_urls)
            .iter()
            .find(|u| {
                let one = PolicyRule {
                    non_resource_urls: Some(vec![(*u).clone()]),
                    ..Default::default()
                };
                non_resource_url_matches(&one, &attrs.path)
            })?
            .clone();
        return Some(RuleEntry {
            verb: verb.into(),
            group: String::new(),
            resource: url,
            names,
        });
    }
    let group = group_entry(rule, &attrs.api_group)?;
    let resource = resource_entry(rule, &attrs.combined_resource(), &attrs.subresource)?;
    resource_name_matches(rule, &attrs.name).then(|| RuleEntry {
        verb: verb.into(),
        group: group.into(),
        resource: resource.into(),
        names,
    })
}

/// A Role (with its namespace) or a ClusterRole.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RoleId {
    /// `Role` or `ClusterRole`.
    pub kind: String,
    /// A Role's namespace ("" for a ClusterRole).
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for RoleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.kind, self.name)
        } else {
            write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// Why a request was allowed: the binding, its role, the rule's index in it and the
/// entries that matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// As the authorizer's reason names it, e.g. `ClusterRoleBinding "reloadlet" of
    /// ClusterRole "reloadlet" to ServiceAccount "reloadlet/reloadlet-system"`.
    pub binding: String,
    pub role: RoleId,
    pub rule: usize,
    pub entry: RuleEntry,
}

/// The RBAC objects a cluster holds.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    pub roles: Vec<Role>,
    pub cluster_roles: Vec<ClusterRole>,
    pub role_bindings: Vec<RoleBinding>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
}

/// A Policy could not be read.
#[derive(Debug, thiserror::Error)]
#[error("RBAC objects: {0}")]
pub struct PolicyError(String);

impl PolicyError {
    pub(crate) fn new(why: String) -> Self {
        Self(why)
    }
}

fn ns_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or_default()
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

/// `appliesToUser`.
fn applies_to_user(user: &User, subject: &Subject, namespace: &str) -> bool {
    match subject.kind.as_str() {
        "User" => user.name == subject.name,
        "Group" => user.groups.contains(&subject.name),
        "ServiceAccount" => {
            let ns = subject
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(namespace);
            !ns.is_empty() && user.name == format!("system:serviceaccount:{ns}:{}", subject.name)
        }
        _ => false,
    }
}

/// `describeSubject`.
fn describe_subject(s: &Subject, binding_namespace: &str) -> String {
    match s.kind.as_str() {
        "ServiceAccount" => {
            let ns = s
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_namespace);
            format!("{} {:?}", s.kind, format!("{}/{ns}", s.name))
        }
        _ => format!("{} {:?}", s.kind, s.name),
    }
}

impl Policy {
    /// The RBAC objects among `objects` (Kubernetes objects as JSON; other kinds are
    /// skipped): e.g. a rendered chart's documents.
    pub fn from_objects(objects: &[Value]) -> Result<Policy, PolicyError> {
        let mut p = Policy::default();
        let bad = |kind: &str, e: serde_json::Error| PolicyError(format!("a {kind}: {e}"));
        for o in objects {
            let kind = o.get("kind").and_then(Value::as_str).unwrap_or_default();
            let o = o.clone();
            match kind {
                "Role" => p
                    .roles
                    .push(serde_json::from_value(o).map_err(|e| bad(kind, e))?),
                "ClusterRole" => p
                    .cluster_roles
                    .push(serde_json::from_value(o).map_err(|e| bad(kind, e))?),
                "RoleBinding" => p
                    .role_bindings
                    .push(serde_json::from_value(o).map_err(|e| bad(kind, e))?),
                "ClusterRoleBinding" => p
                    .cluster_role_bindings
                    .push(serde_json::from_value(o).map_err(|e| bad(kind, e))?),
                _ => {}
            }
        }
        Ok(p)
    }

    /// `GetRoleReferenceRules`: the rules of a binding's role (`None`: no such role).
    fn role_rules(
        &self,
        role_ref: &RoleRef,
        binding_namespace: &str,
    ) -> Option<(RoleId, &[PolicyRule])> {
        let rules = match role_ref.kind.as_str() {
            "Role" => self
                .roles
                .iter()
                .find(|r| {
                    ns_of(&r.metadata) == binding_namespace && name_of(&r.metadata) == role_ref.name
                })
                .map(|r| entries_of(&r.rules))?,
            "ClusterRole" => self
                .cluster_roles
                .iter()
                .find(|r| name_of(&r.metadata) == role_ref.name)
                .map(|r| entries_of(&r.rules))?,
            _ => return None,
        };
        let namespace = if role_ref.kind == "Role" {
            binding_namespace.to_string()
        } else {
            String::new()
        };
        Some((
            RoleId {
                kind: role_ref.kind.clone(),
                namespace,
                name: role_ref.name.clone(),
            },
            rules,
        ))
    }

    /// `VisitRulesFor`: calls `visit` with each rule that applies to `user` in `namespace`
    /// ("" for the cluster scope), ClusterRoleBindings first, until it returns `false`.
    fn visit_rules_for(
        &self,
        user: &User,
        namespace: &str,
        mut visit: impl FnMut(&str, &RoleId, usize, &PolicyRule) -> bool,
    ) {
        for b in &self.cluster_role_bindings {
            let subjects = b.subjects.as_deref().unwrap_or_default();
            let Some(subject) = subjects.iter().find(|s| applies_to_user(user, s, "")) else {
                continue;
            };
            let Some((role, rules)) = self.role_rules(&b.role_ref, "") else {
                continue;
            };
            let source = format!(
                "ClusterRoleBinding {:?} of {} {:?} to {}",
                name_of(&b.metadata),
                b.role_ref.kind,
                b.role_ref.name,
                describe_subject(subject, "")
            );
            for (i, rule) in rules.iter().enumerate() {
                if !visit(&source, &role, i, rule) {
                    return;
                }
            }
        }
        if namespace.is_empty() {
            return;
        }
        for b in self
            .role_bindings
            .iter()
            .filter(|b| ns_of(&b.metadata) == namespace)
        {
            let subjects = b.subjects.as_deref().unwrap_or_default();
            let Some(subject) = subjects
                .iter()
                .find(|s| applies_to_user(user, s, namespace))
            else {
                continue;
            };
            let Some((role, rules)) = self.role_rules(&b.role_ref, namespace) else {
                continue;
            };
            let source = format!(
                "RoleBinding {:?} of {} {:?} to {}",
                format!("{}/{namespace}", name_of(&b.metadata)),
                b.role_ref.kind,
                b.role_ref.name,
                describe_subject(subject, namespace)
            );
            for (i, rule) in rules.iter().enumerate() {
                if !visit(&source, &role, i, rule) {
                    return;
                }
            }
        }
    }

    /// `RBACAuthorizer.Authorize`: the first rule that allows the request, or `None`
    /// (no opinion: denied, as no other authorizer runs here).
    pub fn authorize(&self, user: &User, attrs: &Attributes) -> Option<Grant> {
        let mut grant = None;
        self.visit_rules_for(
            user,
            &attrs.namespace,
            |source, role, i, rule| match rule_allows(attrs, rule) {
                Some(entry) => {
                    grant = Some(Grant {
                        binding: source.to_string(),
                        role: role.clone(),
                        rule: i,
                        entry,
                    });
                    false
                }
                None => true,
            },
        );
        grant
    }

    /// Every rule entry (each verb × group × resource of each rule) bound to `user` by any
    /// binding, in any namespace: what least privilege must account for.
    pub fn granted(&self, user: &User) -> Vec<(RoleId, RuleEntry)> {
        let mut namespaces: Vec<&str> = vec![""];
        namespaces.extend(self.role_bindings.iter().map(|b| ns_of(&b.metadata)));
        namespaces.sort_unstable();
        namespaces.dedup();
        let mut out = Vec::new();
        for ns in namespaces {
            self.visit_rules_for(user, ns, |_, role, _, rule| {
                let names = entries(&rule.resource_names).join(",");
                let targets: Vec<(&str, &str)> = if entries(&rule.resources).is_empty() {
                    entries(&rule.non_resource_urls)
                        .iter()
                        .map(|u| ("", u.as_str()))
                        .collect()
                } else {
                    entries(&rule.api_groups)
                        .iter()
                        .flat_map(|g| {
                            entries(&rule.resources)
                                .iter()
                                .map(move |r| (g.as_str(), r.as_str()))
                        })
                        .collect()
                };
                for verb in &rule.verbs {
                    for (group, resource) in &targets {
                        out.push((
                            role.clone(),
                            RuleEntry {
                                verb: verb.clone(),
                                group: group.to_string(),
                                resource: resource.to_string(),
                                names: names.clone(),
                            },
                        ));
                    }
                }
                true
            });
        }
        out.sort();
        out.dedup();
        out
    }
}

fn entries_of(rules: &Option<Vec<PolicyRule>>) -> &[PolicyRule] {
    rules.as_deref().unwrap_or_default()
}

/// The 403 kube-apiserver answers a request its authorizers did not allow
/// (`responsewriters.Forbidden` → `forbiddenMessage` → `errors.NewForbidden`), the RBAC
/// authorizer giving no reason.
pub fn forbidden(user: &User, attrs: &Attributes) -> ApiStatus {
    let why = if !attrs.resource_request {
        format!(
            "User {:?} cannot {} path {:?}",
            user.name, attrs.verb, attrs.path
        )
    } else if attrs.namespace.is_empty() {
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} at the cluster scope",
            user.name,
            attrs.verb,
            attrs.combined_resource(),
            attrs.api_group
        )
    } else {
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} in the namespace {:?}",
            user.name,
            attrs.verb,
            attrs.combined_resource(),
            attrs.api_group,
            attrs.namespace
        )
    };
    // NewForbidden(GroupResource{group, resource}, name, err): the qualified resource is
    // `resource.group`; empty for a non-resource request.
    let (group, resource) = if attrs.resource_request {
        (attrs.api_group.as_str(), attrs.resource.as_str())
    } else {
        ("", "")
    };
    let qualified = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    let message = if qualified.is_empty() {
        format!("forbidden: {why}")
    } else if attrs.name.is_empty() {
        format!("{qualified} is forbidden: {why}")
    } else {
        format!("{qualified} {:?} is forbidden: {why}", attrs.name)
    };
    let mut s = ApiStatus::failure(403, "Forbidden", message);
    // metav1.StatusDetails: every field omitempty.
    let mut details = json!({});
    for (k, v) in [
        ("name", attrs.name.as_str()),
        ("group", group),
        ("kind", resource),
    ] {
        if !v.is_empty() {
            details[k] = Value::String(v.to_string());
        }
    }
    s.body["details"] = details;
    s
}

#[cfg(test)]
mod tests;
