//! Table tests of the authorizer against the cited upstream semantics.

use super::*;
use serde_json::json;

fn attrs(method: &str, path: &str, query: &str) -> Attributes {
    Attributes::from_request(method, path, query)
}

#[test]
fn a_url_becomes_the_attributes_request_info_derives() {
    // (method, path, query) → (verb, group, resource, subresource, namespace, name)
    let table: &[(&str, &str, &str, [&str; 6])] = &[
        ("GET", "/api/v1/pods", "", ["list", "", "pods", "", "", ""]),
        (
            "GET",
            "/api/v1/pods",
            "watch=true",
            ["watch", "", "pods", "", "", ""],
        ),
        (
            "GET",
            "/api/v1/namespaces/a/pods",
            "labelSelector=x&watch=1",
            ["watch", "", "pods", "", "a", ""],
        ),
        (
            "GET",
            "/api/v1/namespaces/a/pods",
            "watch=false",
            ["list", "", "pods", "", "a", ""],
        ),
        (
            "GET",
            "/api/v1/namespaces/a/pods",
            "watch=0&watch=true",
            ["list", "", "pods", "", "a", ""],
        ),
        (
            "GET",
            "/api/v1/namespaces/a/pods/web",
            "watch=true",
            ["get", "", "pods", "", "a", "web"],
        ),
        (
            "PATCH",
            "/api/v1/namespaces/a/pods/web",
            "",
            ["patch", "", "pods", "", "a", "web"],
        ),
        (
            "POST",
            "/api/v1/namespaces/a/pods/web/eviction",
            "",
            ["create", "", "pods", "eviction", "a", "web"],
        ),
        (
            "DELETE",
            "/api/v1/namespaces/a/pods/web",
            "",
            ["delete", "", "pods", "", "a", "web"],
        ),
        (
            "DELETE",
            "/api/v1/namespaces/a/pods",
            "",
            ["deletecollection", "", "pods", "", "a", ""],
        ),
        (
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/s/leases/l",
            "",
            ["update", "coordination.k8s.io", "leases", "", "s", "l"],
        ),
        (
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/s/leases",
            "",
            ["create", "coordination.k8s.io", "leases", "", "s", ""],
        ),
        (
            "POST",
            "/apis/events.k8s.io/v1/namespaces/a/events",
            "",
            ["create", "events.k8s.io", "events", "", "a", ""],
        ),
        (
            "GET",
            "/apis/policy/v1/poddisruptionbudgets",
            "watch=true",
            ["watch", "policy", "poddisruptionbudgets", "", "", ""],
        ),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/a/deployments/d/scale",
            "",
            ["patch", "apps", "deployments", "scale", "a", "d"],
        ),
        // A namespace is itself the resource; status and finalize are its subresources.
        (
            "GET",
            "/api/v1/namespaces/a",
            "",
            ["get", "", "namespaces", "", "a", "a"],
        ),
        (
            "PUT",
            "/api/v1/namespaces/a/finalize",
            "",
            ["update", "", "namespaces", "finalize", "a", "a"],
        ),
        // A list or watch of one name by its field selector carries that name; `!=`, another
        // field or an invalid path segment does not.
        (
            "GET",
            "/api/v1/namespaces/s/secrets",
            "fieldSelector=metadata.name%3Dkey&watch=true",
            ["watch", "", "secrets", "", "s", "key"],
        ),
        (
            "GET",
            "/api/v1/namespaces/s/secrets",
            "fieldSelector=type%3DOpaque%2Cmetadata.name%3D%3Dkey",
            ["list", "", "secrets", "", "s", "key"],
        ),
        (
            "GET",
            "/api/v1/namespaces/s/secrets",
            "fieldSelector=metadata.name%21%3Dkey&watch=1",
            ["watch", "", "secrets", "", "s", ""],
        ),
        (
            "GET",
            "/api/v1/namespaces/s/secrets",
            "fieldSelector=metadata.namespace%3Ds",
            ["list", "", "secrets", "", "s", ""],
        ),
        (
            "GET",
            "/api/v1/namespaces/s/secrets",
            "fieldSelector=metadata.name%3D..",
            ["list", "", "secrets", "", "s", ""],
        ),
        // The deprecated /watch/ prefix is a verb of its own.
        (
            "GET",
            "/api/v1/watch/namespaces/a/pods",
            "",
            ["watch", "", "pods", "", "a", ""],
        ),
    ];
    for (method, path, query, want) in table {
        let a = attrs(method, path, query);
        let got = [
            a.verb.as_str(),
            &a.api_group,
            &a.resource,
            &a.subresource,
            &a.namespace,
            &a.name,
        ];
        assert_eq!(&got, want, "{method} {path}?{query}");
        assert!(a.resource_request, "{method} {path}");
    }
}

#[test]
fn discovery_and_other_paths_are_non_resource_requests() {
    for (method, path) in [
        ("GET", "/api"),
        ("GET", "/api/v1"),
        ("GET", "/apis"),
        ("GET", "/apis/apps/v1"),
        ("GET", "/apis/argoproj.io/v1alpha1"),
        ("GET", "/healthz"),
        ("GET", "/version/x/y"),
    ] {
        let a = attrs(method, path, "");
        assert!(!a.resource_request, "{path}");
        assert_eq!(a.verb, "get");
        assert_eq!(a.path, path);
    }
}

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> PolicyRule {
    let v = |s: &[&str]| Some(s.iter().map(|x| x.to_string()).collect::<Vec<_>>());
    PolicyRule {
        verbs: verbs.iter().map(|x| x.to_string()).collect(),
        api_groups: v(groups),
        resources: v(resources),
        resource_names: if names.is_empty() { None } else { v(names) },
        non_resource_urls: None,
    }
}

#[test]
fn a_rule_allows_by_verb_group_resource_and_name() {
    let pods_read = rule(&["get", "list", "watch"], &[""], &["pods"], &[]);
    let eviction = rule(&["create"], &[""], &["pods/eviction"], &[]);
    let any_eviction = rule(&["create"], &[""], &["*/eviction"], &[]);
    let pods_slash_star = rule(&["create"], &[""], &["pods/*"], &[]);
    let everything = rule(&["*"], &["*"], &["*"], &[]);
    let lease = rule(
        &["get", "update"],
        &["coordination.k8s.io"],
        &["leases"],
        &["reloadlet-controller"],
    );
    let key_read = rule(&["list", "watch"], &[""], &["secrets"], &["key"]);
    let secrets_path = "/api/v1/namespaces/s/secrets";
    let evict = attrs("POST", "/api/v1/namespaces/a/pods/web/eviction", "");
    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/s/leases";
    let table: &[(&str, &PolicyRule, Attributes, bool)] = &[
        ("list", &pods_read, attrs("GET", "/api/v1/pods", ""), true),
        (
            "watch",
            &pods_read,
            attrs("GET", "/api/v1/pods", "watch=true"),
            true,
        ),
        (
            "get",
            &pods_read,
            attrs("GET", "/api/v1/namespaces/a/pods/web", ""),
            true,
        ),
        (
            "patch is not get",
            &pods_read,
            attrs("PATCH", "/api/v1/namespaces/a/pods/web", ""),
            false,
        ),
        (
            "pods is not pods/eviction",
            &pods_read,
            evict.clone(),
            false,
        ),
        (
            "pods/eviction is not pods",
            &eviction,
            attrs("GET", "/api/v1/namespaces/a/pods/web", ""),
            false,
        ),
        (
            "the group must match",
            &pods_read,
            attrs("GET", "/apis/apps/v1/namespaces/a/pods", ""),
            false,
        ),
        ("pods/eviction", &eviction, evict.clone(), true),
        ("*/eviction", &any_eviction, evict.clone(), true),
        (
            "*/eviction is not pods",
            &any_eviction,
            attrs("POST", "/api/v1/namespaces/a/pods", ""),
            false,
        ),
        ("no resource/* form", &pods_slash_star, evict.clone(), false),
        ("* and *", &everything, evict.clone(), true),
        (
            "its own name",
            &lease,
            attrs("GET", &format!("{lease_path}/reloadlet-controller"), ""),
            true,
        ),
        (
            "update of its name",
            &lease,
            attrs("PUT", &format!("{lease_path}/reloadlet-controller"), ""),
            true,
        ),
        (
            "another name",
            &lease,
            attrs("GET", &format!("{lease_path}/other"), ""),
            false,
        ),
        (
            "names never match list",
            &lease,
            attrs("GET", lease_path, ""),
            false,
        ),
        (
            "names never match watch",
            &lease,
            attrs("GET", lease_path, "watch=true"),
            false,
        ),
        (
            "names match a list of that one name",
            &key_read,
            attrs("GET", secrets_path, "fieldSelector=metadata.name%3Dkey"),
            true,
        ),
        (
            "names match a watch of that one name",
            &key_read,
            attrs(
                "GET",
                secrets_path,
                "fieldSelector=metadata.name%3Dkey&watch=true",
            ),
            true,
        ),
        (
            "names never match a watch of another name",
            &key_read,
            attrs(
                "GET",
                secrets_path,
                "fieldSelector=metadata.name%3Dother&watch=true",
            ),
            false,
        ),
        (
            "names never match create",
            &rule(&["create"], &["coordination.k8s.io"], &["leases"], &["x"]),
            attrs("POST", lease_path, ""),
            false,
        ),
        (
            "a non-resource request needs a URL rule",
            &everything,
            attrs("GET", "/apis", ""),
            false,
        ),
    ];
    for (what, rule, a, want) in table {
        assert_eq!(rule_allows(a, rule).is_some(), *want, "{what}");
    }
}

#[test]
fn the_matching_entries_are_reported_as_the_rule_spells_them() {
    let r = rule(&["list", "*"], &["*"], &["*/eviction"], &[]);
    let e = rule_allows(
        &attrs("POST", "/api/v1/namespaces/a/pods/w/eviction", ""),
        &r,
    )
    .unwrap();
    assert_eq!(
        (e.verb.as_str(), e.group.as_str(), e.resource.as_str()),
        ("*", "*", "*/eviction")
    );
    let url = PolicyRule {
        verbs: vec!["get".into()],
        non_resource_urls: Some(vec!["/healthz".into(), "/apis/*".into()]),
        ..Default::default()
    };
    let e = rule_allows(&attrs("GET", "/apis/apps/v1", ""), &url).unwrap();
    assert_eq!(e.resource, "/apis/*");
    assert!(rule_allows(&attrs("GET", "/api", ""), &url).is_none());
}

fn policy() -> Policy {
    Policy::from_objects(&[
        json!({"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1",
               "metadata": {"name": "reader"},
               "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}),
        json!({"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1",
               "metadata": {"name": "patcher"},
               "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]}),
        json!({"kind": "Role", "apiVersion": "rbac.authorization.k8s.io/v1",
               "metadata": {"name": "lease", "namespace": "sys"},
               "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}]}),
        // A Role of the same name elsewhere grants nothing through sys's binding.
        json!({"kind": "Role", "apiVersion": "rbac.authorization.k8s.io/v1",
               "metadata": {"name": "lease", "namespace": "other"},
               "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
        json!({"kind": "ClusterRoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1",
               "metadata": {"name": "reader"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"},
               "subjects": [{"kind": "ServiceAccount", "name": "agent", "namespace": "sys"}]}),
        // A ClusterRole bound by a RoleBinding: only in the binding's namespace. The
        // subject's namespace defaults to the binding's.
        json!({"kind": "RoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1",
               "metadata": {"name": "patch-in-a", "namespace": "a"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "patcher"},
               "subjects": [{"kind": "ServiceAccount", "name": "agent", "namespace": "sys"},
                            {"kind": "ServiceAccount", "name": "local"}]}),
        json!({"kind": "RoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1",
               "metadata": {"name": "lease", "namespace": "sys"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease"},
               "subjects": [{"kind": "ServiceAccount", "name": "agent", "namespace": "sys"}]}),
        // A ServiceAccount without a namespace in a ClusterRoleBinding matches nobody.
        json!({"kind": "ClusterRoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1",
               "metadata": {"name": "nobody"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "patcher"},
               "subjects": [{"kind": "ServiceAccount", "name": "local"}]}),
        json!({"kind": "ClusterRoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1",
               "metadata": {"name": "group"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "patcher"},
               "subjects": [{"kind": "Group", "name": "system:serviceaccounts:grp"}]}),
        json!({"kind": "ClusterRoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1",
               "metadata": {"name": "dangling"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "missing"},
               "subjects": [{"kind": "User", "name": "alice"}]}),
        json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "ignored"}}),
    ])
    .unwrap()
}

#[test]
fn bindings_grant_in_their_scope_only() {
    let p = policy();
    let agent = User::service_account("sys", "agent");
    let local_a = User::service_account("a", "local");
    let local_b = User::service_account("b", "local");
    let grp = User::service_account("grp", "x");
    let other = User::service_account("sys", "other");
    let alice = User {
        name: "alice".into(),
        groups: vec![],
    };
    let get = |ns: &str| attrs("GET", &format!("/api/v1/namespaces/{ns}/pods/w"), "");
    let patch = |ns: &str| attrs("PATCH", &format!("/api/v1/namespaces/{ns}/pods/w"), "");
    let lease = |ns: &str| {
        attrs(
            "POST",
            &format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"),
            "",
        )
    };
    let table: Vec<(&str, &User, Attributes, bool)> = vec![
        ("ClusterRoleBinding: any namespace", &agent, get("x"), true),
        (
            "ClusterRoleBinding: the cluster scope",
            &agent,
            attrs("GET", "/api/v1/pods", ""),
            true,
        ),
        (
            "RoleBinding of a ClusterRole: its namespace",
            &agent,
            patch("a"),
            true,
        ),
        (
            "RoleBinding of a ClusterRole: not another",
            &agent,
            patch("b"),
            false,
        ),
        (
            "RoleBinding: never the cluster scope",
            &agent,
            attrs("PATCH", "/api/v1/pods/w", ""),
            false,
        ),
        (
            "RoleBinding of a Role: its namespace",
            &agent,
            lease("sys"),
            true,
        ),
        (
            "RoleBinding of a Role: not the same-named Role elsewhere",
            &agent,
            lease("other"),
            false,
        ),
        (
            "subject without namespace: the binding's",
            &local_a,
            patch("a"),
            true,
        ),
        (
            "subject without namespace: only the binding's",
            &local_b,
            patch("a"),
            false,
        ),
        (
            "no ClusterRoleBinding to a namespace-less ServiceAccount",
            &local_b,
            patch("b"),
            false,
        ),
        ("Group subject", &grp, patch("q"), true),
        (
            "a binding to a missing role grants nothing",
            &alice,
            get("a"),
            false,
        ),
        ("other users get nothing", &other, get("a"), false),
    ];
    for (what, user, a, want) in table {
        assert_eq!(p.authorize(user, &a).is_some(), want, "{what}");
    }
    let g = p.authorize(&agent, &patch("a")).unwrap();
    assert_eq!(
        g.binding,
        "RoleBinding \"patch-in-a/a\" of ClusterRole \"patcher\" to ServiceAccount \"agent/sys\""
    );
    assert_eq!(g.role.to_string(), "ClusterRole/patcher");
    assert_eq!((g.rule, g.entry.verb.as_str()), (0, "patch"));
    let g = p.authorize(&agent, &lease("sys")).unwrap();
    assert_eq!(g.role.to_string(), "Role/sys/lease");
}

#[test]
fn granted_lists_every_entry_bound_to_a_user() {
    let granted: Vec<String> = policy()
        .granted(&User::service_account("sys", "agent"))
        .into_iter()
        .map(|(role, e)| format!("{role}: {e}"))
        .collect();
    assert_eq!(
        granted,
        [
            "ClusterRole/patcher: patch \"\" pods",
            "ClusterRole/reader: get \"\" pods",
            "ClusterRole/reader: list \"\" pods",
            "Role/sys/lease: create coordination.k8s.io leases",
        ]
    );
}

#[test]
fn forbidden_answers_as_kube_apiserver() {
    let user = User::service_account("sys", "agent");
    let s = forbidden(&user, &attrs("PATCH", "/api/v1/namespaces/a/pods/x", ""));
    assert_eq!(s.code, 403);
    assert_eq!(s.reason(), Some("Forbidden"));
    assert_eq!(
        s.body["message"],
        "pods \"x\" is forbidden: User \"system:serviceaccount:sys:agent\" cannot patch resource \"pods\" in API group \"\" in the namespace \"a\""
    );
    assert_eq!(s.body["details"], json!({"name": "x", "kind": "pods"}));
    let s = forbidden(
        &user,
        &attrs("GET", "/apis/policy/v1/poddisruptionbudgets", "watch=true"),
    );
    assert_eq!(
        s.body["message"],
        "poddisruptionbudgets.policy is forbidden: User \"system:serviceaccount:sys:agent\" cannot watch resource \"poddisruptionbudgets\" in API group \"policy\" at the cluster scope"
    );
    assert_eq!(
        s.body["details"],
        json!({"group": "policy", "kind": "poddisruptionbudgets"})
    );
    let s = forbidden(
        &user,
        &attrs("POST", "/api/v1/namespaces/a/pods/x/eviction", ""),
    );
    assert_eq!(
        s.body["message"],
        "pods \"x\" is forbidden: User \"system:serviceaccount:sys:agent\" cannot create resource \"pods/eviction\" in API group \"\" in the namespace \"a\""
    );
    let s = forbidden(&user, &attrs("GET", "/apis", ""));
    assert_eq!(
        s.body["message"],
        "forbidden: User \"system:serviceaccount:sys:agent\" cannot get path \"/apis\""
    );
}
