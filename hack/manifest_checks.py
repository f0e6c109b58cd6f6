"""Assertions on reloadlet's rendered manifests (used by check_manifests.py).

Every check is a function `check_*(ctx)` that yields `Result`s. A `Context`
holds the parsed renders (kustomize and chart), the rendered monitoring folder
and the versions read from the repository, so the self-test can feed mutated
copies through the very same checks.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

NAMESPACE = "reloadlet-system"
NAME = "reloadlet"

# (apiGroup, resource, verb): everything the agent may do, nothing more.
ALLOWED_RULES = frozenset(
    [("", "pods", "get"), ("", "pods", "list"), ("", "pods", "watch")]
    # reloadlet status: the agent's reloadlet.io/applied record (docs/status.md), fenced by
    # its admission policy (AGENT_POLICY_SUFFIX) to that annotation on its own node's pods.
    + [("", "pods", "patch")]
    # action: restart, the drain readiness gate (docs/restart.md): the condition
    # reloadlet.io/restart-drain, fenced by the same policy to that condition on its own
    # node's pods that declare the gate.
    + [("", "pods/status", "patch")]
    + [("", "pods/eviction", "create")]
    + [("policy", "poddisruptionbudgets", v) for v in ("list", "watch")]
    + [("events.k8s.io", "events", "create"), ("events.k8s.io", "events", "patch")]
)
ALLOWED_CAPS = frozenset(["KILL", "DAC_READ_SEARCH"])
EXPECTED_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service", "DaemonSet"}
# The agent's admission policy and its binding (chart admissionPolicy; kustomize's
# components/agent-admission-policy): "<fullname>-agent-applied-only".
AGENT_POLICY_SUFFIX = "-agent-applied-only"
APPLIED_ANNOTATION = "reloadlet.io/applied"
# The restart grant (docs/restart.md, "The grant"): the agent writes the first and the last,
# the controller the grant.
RESTART_REQUEST = "reloadlet.io/restart-request"
RESTART_GRANT = "reloadlet.io/restart-grant"
RESTARTED = "reloadlet.io/restarted"
_RESTART_ID = "1a2b3c4d-0123456789abcdef"
_OTHER_RESTART_ID = "5e6f7a8b-fedcba9876543210"
# The controller's env restart request ids (docs/restart.md, "Env consumers"): tags of 1-9
# containers, 4 hex digits each.
_ENV_RESTART_ID = "0a1b2c3d-0123456789abcdef-1f2e"
_OTHER_ENV_RESTART_ID = "4d5e6f70-fedcba9876543210-3c4b5a69"
# The user's extra the API server sets from a pod-bound token's node claim (Kubernetes >= 1.30).
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"

# `reloadlet controller` (fast projection, docs/controller.md): its objects are named
# "<fullname>-controller", the admission policy and its binding "<fullname>-controller-nudge-only".
CONTROLLER_SUFFIX = "-controller"
POLICY_SUFFIX = "-controller-nudge-only"
CONTROLLER_KINDS = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment"]
POLICY_KINDS = ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
# API Priority and Fairness (chart controller.flowSchema, Kubernetes >= 1.29; docs/controller.md):
# the controller's requests at workload-low, its Lease at leader-election.
FLOW_SCHEMAS = {"-controller": "workload-low", "-controller-leader-election": "leader-election"}
CLUSTER_SCOPED_KINDS = {"Namespace", "ClusterRole", "ClusterRoleBinding", "FlowSchema", *POLICY_KINDS}
# Everything the controller's ClusterRole grants (src/k8s/controller.rs): metadata-only
# list/watch of ConfigMaps; pods list/watch (the watcher), patch (the nudge and the env
# baseline), get (re-read after a 404/409 on the patch). Env consumers (on by default,
# docs/env-consumers.md): get of the referenced ConfigMaps, pods/eviction create, Events.
CONTROLLER_RULES = frozenset(
    [("", "configmaps", "get"), ("", "configmaps", "list"), ("", "configmaps", "watch")]
    # reloadlet status (docs/status.md; src/controller/publish.rs): the data version of a
    # ConfigMap some pod reads, its one annotation (the admission policy keeps it to that).
    + [("", "configmaps", "patch")]
    + [("", "pods", v) for v in ("get", "list", "watch", "patch")]
    + [("", "pods/eviction", "create")]
    + [("events.k8s.io", "events", v) for v in ("create", "patch")]
    # Rollout (on by default, docs/rollout.md; src/k8s/workloads.rs): a pod's ReplicaSet
    # (get, metadata only), the workload's strategy (get) and its one template patch.
    + [("apps", "replicasets", "get")]
    + [("apps", w, v) for w in ("deployments", "statefulsets", "daemonsets") for v in ("get", "patch")]
    # on-blocked: rollout (docs/evictions-blocked.md; src/k8s/pdb_watch.rs): budgets read-only.
    + [("policy", "poddisruptionbudgets", v) for v in ("list", "watch")]
)
# controller.secrets: list/watch (metadata for nudges) and get (rollout pods reading a Secret,
# docs/rollout.md; rollout is on by default).
# patch: the Secret's reloadlet.io/data-version (docs/status.md), as for ConfigMaps.
CONTROLLER_SECRET_RULES = frozenset(
    [("", "secrets", "list"), ("", "secrets", "watch"), ("", "secrets", "get"), ("", "secrets", "patch")])
# controller.reloaderCompat (--reloader-compat, src/k8s/workload_meta.rs): the workloads'
# metadata, listed and watched.
CONTROLLER_COMPAT_RULES = frozenset(
    [("apps", w, v) for w in ("deployments", "statefulsets", "daemonsets") for v in ("list", "watch")])
# controller.rollout.argoRollouts: the Rollout's spec.restartAt (src/k8s/workloads.rs).
CONTROLLER_ARGO_RULES = frozenset([("argoproj.io", "rollouts", v) for v in ("get", "patch")])
# Leader election (src/controller/settings.rs LEASE_NAME; src/k8s/controller.rs
# KubeLeaseStore: get_opt, create, replace): create cannot be limited by resourceNames.
LEASE_NAME = "reloadlet-controller"
LEASE_RULES = {
    (("coordination.k8s.io",), ("leases",), ("create",), ()),
    (("coordination.k8s.io",), ("leases",), ("get", "update"), (LEASE_NAME,)),
}
# The controller's key (src/k8s/controller_key.rs): its one Secret read by name, or created,
# in the controller's own namespace (Role), for the env consumers' and rollouts' digests.
KEY_SECRET = "reloadlet-controller-key"
KEY_RULES = {
    (("",), ("secrets",), ("create",), ()),
    (("",), ("secrets",), ("get",), (KEY_SECRET,)),
}
# The agent follows that key (never creates it) for the data versions of its status records
# (src/k8s/controller_key.rs `follow`: a list and watch of that one name, which the API server
# authorizes by resourceNames): its Role, in its own namespace, holds this one rule.
AGENT_KEY_RULES = {(("",), ("secrets",), ("list", "watch"), (KEY_SECRET,))}
# And the controller's Lease, read by name while a restart request waits
# (src/execute/coordination.rs; src/k8s/controller.rs KubeLeaseStore::agent_reader).
AGENT_LEASE_RULES = {(("coordination.k8s.io",), ("leases",), ("get",), (LEASE_NAME,))}
AGENT_ROLE_RULES = AGENT_KEY_RULES | AGENT_LEASE_RULES
NUDGE_ANNOTATION = "reloadlet.io/projection-nudge"
BASELINE_ANNOTATION = "reloadlet.io/env-baseline"
ROLLOUT_BASELINE_ANNOTATION = "reloadlet.io/rollout-baseline"
ENV_PACING = "reloadlet.io/env-pacing"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
ROLLOUT_PACING = "reloadlet.io/rollout-pacing"
RESTARTED_FOR = "reloadlet.io/restarted-for"
# Kinds of the optional monitoring objects, and the suffix of the dashboard ConfigMap's name.
MONITORING_KINDS = {"PrometheusRule", "ConfigMap"}
DASHBOARD_SUFFIX = "-grafana-dashboard"
LINUX_SELECTOR = {"kubernetes.io/os": "linux"}
# What the "chart-knobs" render sets (hack/check-manifests.sh passes the same values).
KNOBS = {
    "fullnameOverride": "knobs-agent",
    "extraEnv": {"name": "HTTPS_PROXY", "value": "http://proxy.example:3128"},
    "seLinuxType": "spc_t",
    "serviceAccountAnnotation": ("eks.amazonaws.com/role-arn", "arn:aws:iam::111122223333:role/reloadlet"),
    "livenessPeriodSeconds": 30,
    "readinessTimeoutSeconds": 5,
    # The controller's per-object consumer counts (--status-metrics-per-object, docs/status.md).
    "statusMetricsPerObject": True,
}


def knobs_values() -> dict[str, Any]:
    """The chart values that produce KNOBS (hack/check-manifests.sh renders "chart-knobs")."""
    k, v = KNOBS["serviceAccountAnnotation"]
    return {
        "fullnameOverride": KNOBS["fullnameOverride"],
        "extraEnv": [KNOBS["extraEnv"]],
        "containerSecurityContext": {"seLinuxOptions": {"type": KNOBS["seLinuxType"]}},
        "serviceAccount": {"annotations": {k: v}},
        "livenessProbe": {"periodSeconds": KNOBS["livenessPeriodSeconds"]},
        "readinessProbe": {"timeoutSeconds": KNOBS["readinessTimeoutSeconds"]},
        "controller": {"statusMetricsPerObject": KNOBS["statusMetricsPerObject"]},
    }
FORBIDDEN_RESOURCES = ("configmaps", "secrets")

# Metric families the agent exports (the contract the dashboard and alerts rely on).
KNOWN_METRICS = frozenset(
    [
        "reloadlet_volume_swaps_total",
        "reloadlet_volume_swaps_unchanged_total",
        "reloadlet_volumes_tracked",
        "reloadlet_unwatched_volumes",
        "reloadlet_inotify_watch_limit_errors_total",
        "reloadlet_events_dropped_total",
        "reloadlet_state_write_errors_total",
        "reloadlet_actions_total",
        "reloadlet_action_latency_seconds_bucket",
        "reloadlet_action_latency_seconds_sum",
        "reloadlet_action_latency_seconds_count",
        "reloadlet_evictions_pending",
        "reloadlet_watched_pods",
        "reloadlet_watched_volumes",
        "reloadlet_inotify_watches",
        "reloadlet_inotify_overflows_total",
        "reloadlet_api_watch_restarts_total",
        # Pacing (docs/pacing.md): the agent's and the controller's (env evictions, rollouts).
        "reloadlet_pacing_deferred_actions",
        "reloadlet_pacing_held_pods",
        "reloadlet_pacing_deferrals_total",
        "reloadlet_pacing_flap_episodes_total",
        # The controller's (issue #46, docs/status.md): consumers by state, and per object
        # behind --status-metrics-per-object.
        "reloadlet_consumers",
        "reloadlet_object_consumers",
    ]
)
REQUIRED_ALERTS = {
    # alert name: (substrings its expression must contain, required `for`)
    "ReloadletEvictionBlocked": (["reloadlet_evictions_pending", "> 0"], "30m"),
    "ReloadletSignalFailed": (['increase(reloadlet_actions_total{', 'outcome="signal_failed"', "[15m]", "> 0"], None),
    "ReloadletAgentDown": (["up{", "== 0"], None),
    "ReloadletAgentNotReady": (["kube_daemonset_status_number_ready"], None),
    "ReloadletInotifyOverflow": (["reloadlet_inotify_overflows_total"], None),
}


@dataclass
class Result:
    """The outcome of one assertion. `check` names the assertion, `subject` the render."""

    check: str
    subject: str
    ok: bool
    detail: str = ""


@dataclass
class Render:
    """One rendering of the install: its parsed documents and what it must show."""

    name: str
    docs: list[dict]
    privileged: bool = False
    service_monitor: bool = False
    kubelet_root: str = "/var/lib/kubelet"
    # The names the install must use: its objects' name and namespace.
    fullname: str = NAME
    namespace: str = NAMESPACE
    # Renders the Namespace object itself (kustomize; the chart only when asked).
    owns_namespace: bool = False
    # Renders the PrometheusRule and the dashboard ConfigMap (the chart when asked).
    monitoring: bool = False
    # Rendered with the KNOBS values.
    knobs: bool = False
    # Renders `reloadlet controller` (chart controller.enabled; kustomize's components/controller).
    controller: bool = True
    # Renders its ValidatingAdmissionPolicy + binding (controller.admissionPolicy).
    admission_policy: bool = True
    # Renders the agent's ValidatingAdmissionPolicy + binding (admissionPolicy).
    agent_policy: bool = True
    # The controller also watches Secrets (controller.secrets=true).
    controller_secrets: bool = False
    # The controller understands Reloader's annotations (controller.reloaderCompat=true).
    reloader_compat: bool = False
    # The controller rolls Argo Rollouts (controller.rollout.argoRollouts=true).
    argo: bool = False
    # Renders the controller's FlowSchemas (the chart on Kubernetes >= 1.29).
    flow_schema: bool = False


@dataclass
class Context:
    """Everything the checks look at."""

    renders: dict[str, Render] = field(default_factory=dict)
    monitoring: list[dict] | None = None
    # The chart render whose PrometheusRule and dashboard the kustomize monitoring folder
    # must equal (release "reloadlet" in reloadlet-system), and the kustomize render whose
    # Service the monitoring folder's ServiceMonitor must scrape.
    monitoring_twin: str | None = None
    monitoring_install: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    # Text of repository files some checks read (Dockerfile, hack/*.sh), by path.
    files: dict[str, str] = field(default_factory=dict)
    # Renders that must agree on every security-relevant field.
    agree: tuple[str, str] | None = None


def _get(obj: Any, *path: Any, default: Any = None) -> Any:
    for key in path:
        if isinstance(obj, dict):
            obj = obj.get(key)
        elif isinstance(obj, list) and isinstance(key, int) and -len(obj) <= key < len(obj):
            obj = obj[key]
        else:
            return default
        if obj is None:
            return default
    return obj


def _of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == kind]


def _one(docs: list[dict], kind: str) -> dict:
    found = _of_kind(docs, kind)
    if len(found) != 1:
        raise CheckError(f"expected one {kind}, found {len(found)}")
    return found[0]


class CheckError(Exception):
    """A render lacks what a check needs to look at (counts as a failure)."""


def _pod(docs: list[dict]) -> dict:
    return _get(_one(docs, "DaemonSet"), "spec", "template", "spec", default={})


def _container(docs: list[dict]) -> dict:
    containers = _get(_pod(docs), "containers", default=[])
    if len(containers) != 1:
        raise CheckError(f"expected one container, found {len(containers)}")
    return containers[0]


def _named(docs: list[dict], kind: str, name: str) -> dict:
    found = [d for d in _of_kind(docs, kind) if _get(d, "metadata", "name") == name]
    if len(found) != 1:
        raise CheckError(f"expected one {kind}/{name}, found {len(found)}")
    return found[0]


def _cpod(r: Render) -> dict:
    """The controller Deployment's pod spec."""
    return _get(_named(r.docs, "Deployment", r.fullname + CONTROLLER_SUFFIX), "spec", "template", "spec", default={})


def _ccontainer(r: Render) -> dict:
    containers = _get(_cpod(r), "containers", default=[])
    if len(containers) != 1:
        raise CheckError(f"controller: expected one container, found {len(containers)}")
    return containers[0]


def _bindings_of(docs: list[dict], sa: str, namespace: str) -> list[dict]:
    """Every (Cluster)RoleBinding with the ServiceAccount namespace/sa among its subjects."""
    return [
        b
        for b in _of_kind(docs, "ClusterRoleBinding") + _of_kind(docs, "RoleBinding")
        for s in b.get("subjects") or []
        if s.get("kind") == "ServiceAccount" and s.get("name") == sa and s.get("namespace") == namespace
    ]


def _role_of(docs: list[dict], binding: dict) -> dict | None:
    ref = binding.get("roleRef") or {}
    ns = _get(binding, "metadata", "namespace") if ref.get("kind") == "Role" else None
    for d in _of_kind(docs, ref.get("kind", "")):
        if _get(d, "metadata", "name") == ref.get("name") and (ns is None or _get(d, "metadata", "namespace") == ns):
            return d
    return None


def _bound_roles(docs: list[dict], sa: str, namespace: str) -> list[dict]:
    """The roles that the ServiceAccount gets through any binding of the render."""
    roles = [_role_of(docs, b) for b in _bindings_of(docs, sa, namespace)]
    return [r for r in roles if r is not None]


def _role_id(role: dict) -> str:
    return f"{role.get('kind')}/{_get(role, 'metadata', 'name')}"


def _rule_triples(rule: dict) -> set[tuple[str, str, str]]:
    return {
        (g, r, v)
        for g in rule.get("apiGroups") or [""]
        for r in rule.get("resources") or []
        for v in rule.get("verbs") or []
    }


def _rbac_rules(docs: list[dict]) -> list[dict]:
    rules = []
    for role in _of_kind(docs, "ClusterRole") + _of_kind(docs, "Role"):
        rules.extend(role.get("rules") or [])
    return rules


CheckFn = Callable[[Context], Iterator[Result]]
RENDER_CHECKS: list[tuple[str, Callable[[Render], tuple[bool, str] | None]]] = []


def render_check(name: str):
    """Registers a per-render assertion; it returns (ok, detail), or None where it does not apply."""

    def register(fn: Callable[[Render], tuple[bool, str]]):
        RENDER_CHECKS.append((name, fn))
        return fn

    return register


@render_check("objects: exactly the expected kinds and names")
def _objects(r: Render) -> tuple[bool, str]:
    def name_of(kind: str) -> str:
        if kind == "Namespace":
            return r.namespace
        return r.fullname + (DASHBOARD_SUFFIX if kind == "ConfigMap" else "")

    want = [(k, name_of(k)) for k in EXPECTED_KINDS]
    want += [("Namespace", r.namespace)] if r.owns_namespace else []
    want += [("ServiceMonitor", r.fullname)] if r.service_monitor else []
    want += [(k, name_of(k)) for k in sorted(MONITORING_KINDS)] if r.monitoring else []
    want += [(k, r.fullname + CONTROLLER_SUFFIX) for k in CONTROLLER_KINDS] if r.controller else []
    want += [(k, r.fullname + POLICY_SUFFIX) for k in POLICY_KINDS] if r.admission_policy else []
    want += [(k, r.fullname + AGENT_POLICY_SUFFIX) for k in POLICY_KINDS] if r.agent_policy else []
    want += [("FlowSchema", r.fullname + suffix) for suffix in FLOW_SCHEMAS] if r.flow_schema else []
    seen = sorted((d.get("kind", "?"), str(_get(d, "metadata", "name"))) for d in r.docs)
    if seen != sorted(want):
        extra = sorted(set(seen) - set(want))
        missing = sorted(set(want) - set(seen))
        return False, f"unexpected {extra}, missing {missing}" if extra or missing else f"duplicates in {seen}"
    bad = [
        f"{d['kind']}/{_get(d, 'metadata', 'name')} in {_get(d, 'metadata', 'namespace')!r}"
        for d in r.docs
        if d["kind"] not in CLUSTER_SCOPED_KINDS and _get(d, "metadata", "namespace") != r.namespace
    ]
    return not bad, ", ".join(bad)


@render_check("flowschemas: the controller's ServiceAccount, at workload-low and leader-election")
def _flow_schemas(r: Render) -> tuple[bool, str]:
    bad = []
    for d in r.docs:
        if d.get("kind") != "FlowSchema":
            continue
        name = str(_get(d, "metadata", "name"))
        level = FLOW_SCHEMAS.get(name[len(r.fullname):]) if name.startswith(r.fullname) else None
        if _get(d, "spec", "priorityLevelConfiguration", "name") != level:
            bad.append(f"{name}: level {_get(d, 'spec', 'priorityLevelConfiguration', 'name')!r}")
        # Before the default `service-accounts` (9000), after the system's own (< 200 would
        # outrank kube-apiserver's leader-election schemas).
        if not 200 <= int(_get(d, "spec", "matchingPrecedence") or 0) < 9000:
            bad.append(f"{name}: matchingPrecedence")
        want = {"name": r.fullname + CONTROLLER_SUFFIX, "namespace": r.namespace}
        for rule in _get(d, "spec", "rules") or []:
            for subject in rule.get("subjects") or []:
                if subject.get("kind") != "ServiceAccount" or subject.get("serviceAccount") != want:
                    bad.append(f"{name}: subject {subject}")
    return not bad, ", ".join(bad)


@render_check("objects: cluster-scoped objects carry no metadata.namespace")
def _cluster_scoped(r: Render) -> tuple[bool, str]:
    # kustomize's namespace transformer adds one to kinds it does not know to be
    # cluster-scoped (kubernetes-sigs/kustomize#6051: ValidatingAdmissionPolicy[Binding]).
    bad = [
        f"{d['kind']}/{_get(d, 'metadata', 'name')} in {_get(d, 'metadata', 'namespace')!r}"
        for d in r.docs
        if d.get("kind") in CLUSTER_SCOPED_KINDS and "namespace" in (d.get("metadata") or {})
    ]
    return not bad, ", ".join(bad)


def _agent_rules(r: Render) -> list[dict]:
    """Rules of the agent's ClusterRole and of every role bound to the agent's ServiceAccount."""
    roles = _bound_roles(r.docs, r.fullname, r.namespace)
    own = [d for d in _of_kind(r.docs, "ClusterRole") if _get(d, "metadata", "name") == r.fullname]
    return [rule for role in own + [x for x in roles if x not in own] for rule in role.get("rules") or []]


@render_check("rbac: no ConfigMap or Secret access")
def _no_cm_secret(r: Render) -> tuple[bool, str]:
    """The agent's: the controller's ConfigMap (and Secret) rules are its own."""
    bad = []
    for rule in _agent_rules(r):
        if _rule_set(rule) in AGENT_KEY_RULES:
            continue  # the controller's key, by name, read only (checked by "rbac: exactly ...")
        for res in rule.get("resources") or []:
            base = res.split("/")[0]
            if base in FORBIDDEN_RESOURCES or base == "*":
                bad.append(res)
    return not bad, f"agent rules grant {sorted(set(bad))}" if bad else ""


@render_check("rbac: no wildcard in apiGroups, resources, verbs")
def _no_wildcards(r: Render) -> tuple[bool, str]:
    bad = []
    for rule in _rbac_rules(r.docs):
        for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            bad += [f"{key}: {v}" for v in rule.get(key) or [] if "*" in v]
    return not bad, "; ".join(bad)


def _rule_set(rule: dict) -> tuple:
    """A rule as (apiGroups, resources, sorted verbs, resourceNames), for exact comparison."""
    return (tuple(rule.get("apiGroups") or []), tuple(rule.get("resources") or []),
            tuple(sorted(rule.get("verbs") or [])), tuple(rule.get("resourceNames") or []))


@render_check("rbac: exactly the allowed rules")
def _exact_rules(r: Render) -> tuple[bool, str]:
    """The agent's ServiceAccount gets exactly its ClusterRole, which grants exactly ALLOWED_RULES,
    and its Role in its own namespace, which grants exactly AGENT_ROLE_RULES."""
    problems = []
    bound = _bound_roles(r.docs, r.fullname, r.namespace)
    if sorted(_role_id(d) for d in bound) != [f"ClusterRole/{r.fullname}", f"Role/{r.fullname}"]:
        problems.append(f"agent ServiceAccount bound to {[_role_id(d) for d in bound]}")
    key_role = _named(r.docs, "Role", r.fullname)
    if _get(key_role, "metadata", "namespace") != r.namespace:
        problems.append(f"agent Role in {_get(key_role, 'metadata', 'namespace')!r}")
    key_rules = {_rule_set(x) for x in key_role.get("rules") or []}
    if key_rules != AGENT_ROLE_RULES or len(key_role.get("rules") or []) != len(AGENT_ROLE_RULES):
        problems.append(f"agent Role rules {sorted(key_rules)}, want {sorted(AGENT_ROLE_RULES)}")
    role = _named(r.docs, "ClusterRole", r.fullname)
    granted: set[tuple[str, str, str]] = set()
    for d in [role, *[x for x in bound if x is not role and x is not key_role]]:
        if d.get("aggregationRule"):
            problems.append("aggregationRule present")
        for rule in d.get("rules") or []:
            if rule.get("resourceNames") or rule.get("nonResourceURLs"):
                problems.append(f"unexpected rule fields {sorted(rule)}")
            granted |= _rule_triples(rule)
    extra, missing = granted - ALLOWED_RULES, ALLOWED_RULES - granted
    if extra:
        problems.append(f"extra {sorted(extra)}")
    if missing:
        problems.append(f"missing {sorted(missing)}")
    return not problems, "; ".join(problems)


@render_check("rbac: the role is bound to the agent's ServiceAccount only")
def _binding(r: Render) -> tuple[bool, str]:
    crb = _named(r.docs, "ClusterRoleBinding", r.fullname)
    pod = _pod(r.docs)
    want_subject = [{"kind": "ServiceAccount", "name": r.fullname, "namespace": r.namespace}]
    problems = []
    if crb.get("subjects") != want_subject:
        problems.append(f"subjects {crb.get('subjects')}")
    if _get(crb, "roleRef", "name") != r.fullname or _get(crb, "roleRef", "kind") != "ClusterRole":
        problems.append(f"roleRef {crb.get('roleRef')}")
    if pod.get("serviceAccountName") != r.fullname:
        problems.append(f"pod serviceAccountName {pod.get('serviceAccountName')!r}")
    rb = _named(r.docs, "RoleBinding", r.fullname)
    if rb.get("subjects") != want_subject:
        problems.append(f"RoleBinding subjects {rb.get('subjects')}")
    if rb.get("roleRef") != {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": r.fullname}:
        problems.append(f"RoleBinding roleRef {rb.get('roleRef')}")
    others = [
        f"{b['kind']}/{_get(b, 'metadata', 'name')}"
        for b in _of_kind(r.docs, "ClusterRoleBinding") + _of_kind(r.docs, "RoleBinding")
        if b is not crb and b is not rb and (b in _bindings_of(r.docs, r.fullname, r.namespace)
                             or (_get(b, "roleRef", "kind") == "ClusterRole" and _get(b, "roleRef", "name") == r.fullname))
    ]
    if others:
        problems.append(f"other bindings of the agent's role or ServiceAccount: {others}")
    return not problems, "; ".join(problems)


@render_check("pod: hostPath of the kubelet's pods read-only with HostToContainer")
def _host_paths(r: Render) -> tuple[bool, str]:
    pod, c = _pod(r.docs), _container(r.docs)
    mounts = {m.get("name"): m for m in c.get("volumeMounts") or []}
    problems = []
    kubelet_pods = 0
    for vol in pod.get("volumes") or []:
        hp = vol.get("hostPath")
        if not hp:
            continue
        path, m = hp.get("path", ""), mounts.get(vol.get("name"), {})
        if path.rstrip("/").endswith("/pods"):
            kubelet_pods += 1
            if m.get("readOnly") is not True:
                problems.append(f"{path} mounted read-write")
            if m.get("mountPropagation") != "HostToContainer":
                problems.append(f"{path} propagation {m.get('mountPropagation')!r}")
            if m.get("mountPath") != path:
                problems.append(f"{path} mounted at {m.get('mountPath')!r}")
        elif path == "/var/lib/reloadlet":
            if hp.get("type") != "DirectoryOrCreate":
                problems.append(f"state dir type {hp.get('type')!r}")
        else:
            problems.append(f"unexpected hostPath {path}")
    if kubelet_pods != 1:
        problems.append(f"{kubelet_pods} kubelet pods hostPaths")
    problems += [
        f"{m.get('name')} propagation Bidirectional"
        for m in c.get("volumeMounts") or []
        if m.get("mountPropagation") == "Bidirectional"
    ]
    return not problems, "; ".join(problems)


@render_check("kubelet root: RELOADLET_KUBELET_ROOT, hostPath and mount agree")
def _kubelet_root(r: Render) -> tuple[bool, str]:
    pod, c = _pod(r.docs), _container(r.docs)
    env = {e.get("name"): e.get("value") for e in c.get("env") or []}
    vol = next((v for v in pod.get("volumes") or [] if v.get("name") == "kubelet-pods"), {})
    mount = next((m for m in c.get("volumeMounts") or [] if m.get("name") == "kubelet-pods"), {})
    seen = (env.get("RELOADLET_KUBELET_ROOT"), _get(vol, "hostPath", "path"), mount.get("mountPath"))
    want = (r.kubelet_root, f"{r.kubelet_root}/pods", f"{r.kubelet_root}/pods")
    return seen == want, f"env, hostPath, mountPath {seen}, want {want}"


@render_check("container: capabilities drop ALL, add exactly KILL and DAC_READ_SEARCH")
def _caps(r: Render) -> tuple[bool, str]:
    caps = _get(_container(r.docs), "securityContext", "capabilities", default={})
    drop, add = caps.get("drop") or [], caps.get("add") or []
    ok = drop == ["ALL"] and len(add) == len(set(add)) and set(add) == ALLOWED_CAPS
    return ok, "" if ok else f"drop {drop}, add {add}"


@render_check("container: privileged only when asked for")
def _privileged(r: Render) -> tuple[bool, str]:
    sc = _get(_container(r.docs), "securityContext", default={})
    priv, ape = sc.get("privileged"), sc.get("allowPrivilegeEscalation")
    if r.privileged:
        # The API server rejects privileged: true with allowPrivilegeEscalation: false.
        ok = priv is True and ape is not False
    else:
        ok = priv is False and ape is False
    return ok, "" if ok else f"privileged {priv!r}, allowPrivilegeEscalation {ape!r}"


@render_check("container: runs as UID 0 (runAsNonRoot false)")
def _root(r: Render) -> tuple[bool, str]:
    sc = _get(_container(r.docs), "securityContext", default={})
    ok = sc.get("runAsUser") == 0 and sc.get("runAsNonRoot") is False
    return ok, "" if ok else f"runAsUser {sc.get('runAsUser')!r}, runAsNonRoot {sc.get('runAsNonRoot')!r}"


@render_check("container: readOnlyRootFilesystem")
def _ro_root(r: Render) -> tuple[bool, str]:
    v = _get(_container(r.docs), "securityContext", "readOnlyRootFilesystem")
    return v is True, f"readOnlyRootFilesystem {v!r}"


@render_check("container: seccomp RuntimeDefault")
def _seccomp(r: Render) -> tuple[bool, str]:
    own = _get(_container(r.docs), "securityContext", "seccompProfile", "type")
    pod = _get(_pod(r.docs), "securityContext", "seccompProfile", "type")
    effective = own or pod
    ok = effective == "RuntimeDefault" and pod in (None, "RuntimeDefault")
    return ok, "" if ok else f"container {own!r}, pod {pod!r}"


@render_check("pod: hostPID, no hostNetwork or hostIPC")
def _host_ns(r: Render) -> tuple[bool, str]:
    pod = _pod(r.docs)
    ok = pod.get("hostPID") is True and not pod.get("hostNetwork") and not pod.get("hostIPC")
    return ok, "" if ok else f"hostPID {pod.get('hostPID')!r}, hostNetwork {pod.get('hostNetwork')!r}, hostIPC {pod.get('hostIPC')!r}"


@render_check("container: NODE_NAME from fieldRef spec.nodeName")
def _node_name(r: Render) -> tuple[bool, str]:
    env = [e for e in _container(r.docs).get("env") or [] if e.get("name") == "NODE_NAME"]
    ok = len(env) == 1 and _get(env[0], "valueFrom", "fieldRef", "fieldPath") == "spec.nodeName" and "value" not in env[0]
    return ok, "" if ok else f"NODE_NAME {env}"


@render_check("container: liveness /healthz and readiness /readyz on port metrics (9102)")
def _probes(r: Render) -> tuple[bool, str]:
    c = _container(r.docs)
    problems = []
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
    if ports.get("metrics") != 9102:
        problems.append(f"ports {ports}")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = _get(c, probe, "httpGet", default={})
        if get.get("path") != path or get.get("port") not in ("metrics", 9102):
            problems.append(f"{probe} {get or c.get(probe)}")
    return not problems, "; ".join(problems)


@render_check("pod: priorityClassName system-node-critical")
def _priority(r: Render) -> tuple[bool, str]:
    v = _pod(r.docs).get("priorityClassName")
    return v == "system-node-critical", f"priorityClassName {v!r}"


@render_check("pod: tolerates every taint, 10% maxUnavailable, 30s grace")
def _scheduling(r: Render) -> tuple[bool, str]:
    ds = _one(r.docs, "DaemonSet")
    pod = _pod(r.docs)
    problems = []
    if {"operator": "Exists"} not in (pod.get("tolerations") or []):
        problems.append(f"tolerations {pod.get('tolerations')}")
    mu = _get(ds, "spec", "updateStrategy", "rollingUpdate", "maxUnavailable")
    if _get(ds, "spec", "updateStrategy", "type", default="RollingUpdate") != "RollingUpdate" or mu != "10%":
        problems.append(f"updateStrategy {_get(ds, 'spec', 'updateStrategy')}")
    if pod.get("terminationGracePeriodSeconds") != 30:
        problems.append(f"terminationGracePeriodSeconds {pod.get('terminationGracePeriodSeconds')!r}")
    return not problems, "; ".join(problems)


@render_check("container: requests 10m CPU / 24Mi, limit 64Mi memory, no CPU limit")
def _resources(r: Render) -> tuple[bool, str]:
    res = _container(r.docs).get("resources") or {}
    want = {"requests": {"cpu": "10m", "memory": "24Mi"}, "limits": {"memory": "64Mi"}}
    return res == want, f"resources {res}"


@render_check("service: headless, port metrics, selects the agent pods")
def _service(r: Render) -> tuple[bool, str]:
    svc = _one(r.docs, "Service")
    ds = _one(r.docs, "DaemonSet")
    pod_labels = _get(ds, "spec", "template", "metadata", "labels", default={})
    sel = _get(svc, "spec", "selector", default={})
    ports = _get(svc, "spec", "ports", default=[])
    problems = []
    if _get(svc, "spec", "clusterIP") != "None":
        problems.append(f"clusterIP {_get(svc, 'spec', 'clusterIP')!r}")
    if not sel or any(pod_labels.get(k) != v for k, v in sel.items()):
        problems.append(f"selector {sel} does not match pod labels")
    if [(p.get("name"), p.get("targetPort")) for p in ports] != [("metrics", "metrics")]:
        problems.append(f"ports {ports}")
    return not problems, "; ".join(problems)


@render_check("namespace: owned only when asked for, Pod Security level privileged")
def _namespace(r: Render) -> tuple[bool, str]:
    # A chart that renders the Namespace owns it: `helm uninstall` deletes it with whatever
    # else lives there. Only on request (createNamespace); kustomize's base does own it.
    namespaces = _of_kind(r.docs, "Namespace")
    if not r.owns_namespace:
        return not namespaces, f"renders {[_get(n, 'metadata', 'name') for n in namespaces]}" if namespaces else ""
    labels = _get(_one(r.docs, "Namespace"), "metadata", "labels", default={})
    v = labels.get("pod-security.kubernetes.io/enforce")
    return v == "privileged", f"enforce label {v!r}"


@render_check("pod: Linux nodes only (nodeSelector kubernetes.io/os: linux)")
def _linux_only(r: Render) -> tuple[bool, str]:
    sel = _pod(r.docs).get("nodeSelector") or {}
    ok = all(sel.get(k) == v for k, v in LINUX_SELECTOR.items())
    return ok, "" if ok else f"nodeSelector {sel}"


def _arch_pins(pod: dict) -> list[str]:
    """Where a pod spec names kubernetes.io/arch (or the beta label): the image is built for
    amd64 and arm64, and a DaemonSet must run on every node of both."""
    scheduling = json.dumps([pod.get("nodeSelector"), pod.get("affinity")])
    return [label for label in ("kubernetes.io/arch", "beta.kubernetes.io/arch") if label in scheduling]


@render_check("pod: no architecture pin (amd64 and arm64 nodes alike)")
def _no_arch_pin(r: Render) -> tuple[bool, str]:
    pins = _arch_pins(_pod(r.docs))
    if r.controller:
        pins += [f"controller: {p}" for p in _arch_pins(_cpod(r))]
    return not pins, f"pins {pins}" if pins else ""


@render_check("chart knobs: fullnameOverride, extraEnv, containerSecurityContext, serviceAccount annotations, probes, controller.statusMetricsPerObject")
def _knobs(r: Render) -> tuple[bool, str]:
    c, sa = _container(r.docs), _named(r.docs, "ServiceAccount", r.fullname)
    seen = {
        "fullnameOverride": _get(_one(r.docs, "DaemonSet"), "metadata", "name"),
        "extraEnv": next((e for e in c.get("env") or [] if e.get("name") == KNOBS["extraEnv"]["name"]), None),
        "seLinuxType": _get(c, "securityContext", "seLinuxOptions", "type"),
        "serviceAccountAnnotation": next(
            ((k, v) for k, v in (_get(sa, "metadata", "annotations", default={}) or {}).items()
             if k == KNOBS["serviceAccountAnnotation"][0]), None),
        "livenessPeriodSeconds": _get(c, "livenessProbe", "periodSeconds"),
        "readinessTimeoutSeconds": _get(c, "readinessProbe", "timeoutSeconds"),
        "statusMetricsPerObject": r.controller and "--status-metrics-per-object" in (_ccontainer(r).get("args") or []),
    }
    if r.knobs:
        bad = {k: v for k, v in seen.items() if v != KNOBS[k]}
    else:  # the knobs' values must not leak into any other render
        bad = {k: v for k, v in seen.items() if v == KNOBS[k]}
    return not bad, f"{'unexpected' if r.knobs else 'leaked'}: {bad}" if bad else ""


@render_check("servicemonitor: scrapes port metrics of the Service")
def _service_monitor(r: Render) -> tuple[bool, str]:
    sms = _of_kind(r.docs, "ServiceMonitor")
    if not r.service_monitor:
        return not sms, "ServiceMonitor rendered although disabled" if sms else ""
    if len(sms) != 1:
        return False, f"{len(sms)} ServiceMonitors"
    sm = sms[0]
    svc_labels = _get(_one(r.docs, "Service"), "metadata", "labels", default={})
    match = _get(sm, "spec", "selector", "matchLabels", default={})
    ports = [e.get("port") for e in _get(sm, "spec", "endpoints", default=[])]
    ok = bool(match) and all(svc_labels.get(k) == v for k, v in match.items()) and ports == ["metrics"]
    return ok, "" if ok else f"selector {match}, ports {ports}"


# --- reloadlet controller (fast projection) -----------------------------------------
# Each returns None (no result) on renders without the controller (or its policy): the
# objects check above proves that none of its objects is there.


def _controller_sa(r: Render) -> list[dict]:
    return [{"kind": "ServiceAccount", "name": r.fullname + CONTROLLER_SUFFIX, "namespace": r.namespace}]


@render_check("controller rbac: ClusterRole exactly configmaps get/list/watch/patch, pods get/list/watch/patch, pods/eviction create, events create/patch, replicasets get, deployments/statefulsets/daemonsets get/patch, poddisruptionbudgets list/watch (+ secrets get/list/watch/patch with controller.secrets)")
def _controller_rules(r: Render) -> tuple[bool, str]:
    if not r.controller:
        return None
    name = r.fullname + CONTROLLER_SUFFIX
    problems = []
    bound = sorted(_role_id(d) for d in _bound_roles(r.docs, name, r.namespace))
    if bound != sorted([f"ClusterRole/{name}", f"Role/{name}"]):
        problems.append(f"controller ServiceAccount bound to {bound}")
    role = _named(r.docs, "ClusterRole", name)
    if role.get("aggregationRule"):
        problems.append("aggregationRule present")
    granted: set[tuple[str, str, str]] = set()
    for rule in role.get("rules") or []:
        if rule.get("resourceNames") or rule.get("nonResourceURLs"):
            problems.append(f"unexpected rule fields {sorted(rule)}")
        granted |= _rule_triples(rule)
    want = CONTROLLER_RULES | (CONTROLLER_SECRET_RULES if r.controller_secrets else frozenset())
    want |= CONTROLLER_COMPAT_RULES if r.reloader_compat else frozenset()
    want |= CONTROLLER_ARGO_RULES if r.argo else frozenset()
    extra, missing = granted - want, want - granted
    if extra:
        problems.append(f"extra {sorted(extra)}")
    if missing:
        problems.append(f"missing {sorted(missing)}")
    return not problems, "; ".join(problems)


@render_check("controller: Secrets list/watch and --secrets only with controller.secrets")
def _controller_secrets(r: Render) -> tuple[bool, str]:
    if not r.controller:
        return None
    name = r.fullname + CONTROLLER_SUFFIX
    # The namespaced Role's Secret rules are the controller's own key (checked with the
    # Lease rules below), not the tenants' Secrets.
    rules = [rule for d in _bound_roles(r.docs, name, r.namespace) if d.get("kind") != "Role"
             for rule in d.get("rules") or []]
    grants = sorted({t for rule in rules for t in _rule_triples(rule) if t[1].split("/")[0] in ("secrets", "*")})
    c = _ccontainer(r)
    flag = "--secrets" in (c.get("args") or []) or any(
        e.get("name") == "RELOADLET_CONTROLLER_SECRETS" and str(e.get("value", "")).lower() not in ("", "false")
        for e in c.get("env") or [])
    if r.controller_secrets:
        ok = set(grants) == CONTROLLER_SECRET_RULES and flag
    else:
        ok = not grants and not flag
    return ok, "" if ok else f"secrets rules {grants}, --secrets {flag}, want {'on' if r.controller_secrets else 'off'}"


@render_check("controller: workloads list/watch and --reloader-compat only with controller.reloaderCompat")
def _controller_reloader_compat(r: Render) -> tuple[bool, str]:
    if not r.controller:
        return None
    name = r.fullname + CONTROLLER_SUFFIX
    rules = [rule for d in _bound_roles(r.docs, name, r.namespace) for rule in d.get("rules") or []]
    grants = {t for rule in rules for t in _rule_triples(rule) if t[2] in ("list", "watch")
              and t[1] in ("deployments", "statefulsets", "daemonsets", "rollouts", "*")}
    c = _ccontainer(r)
    flag = "--reloader-compat" in (c.get("args") or []) or any(
        e.get("name") == "RELOADLET_RELOADER_COMPAT" and str(e.get("value", "")).lower() not in ("", "false")
        for e in c.get("env") or [])
    ok = (grants == CONTROLLER_COMPAT_RULES and flag) if r.reloader_compat else (not grants and not flag)
    return ok, "" if ok else f"workload list/watch {sorted(grants)}, --reloader-compat {flag}, want {'on' if r.reloader_compat else 'off'}"


@render_check("controller rbac: leases create, get/update on its own Lease, through a Role in its namespace")
def _controller_lease(r: Render) -> tuple[bool, str]:
    # The same Role holds the controller's key Secret rules (KEY_RULES): exactly these.
    if not r.controller:
        return None
    name = r.fullname + CONTROLLER_SUFFIX
    problems = []
    role = _named(r.docs, "Role", name)
    rb = _named(r.docs, "RoleBinding", name)
    if _get(role, "metadata", "namespace") != r.namespace or _get(rb, "metadata", "namespace") != r.namespace:
        problems.append(f"Role in {_get(role, 'metadata', 'namespace')!r}, RoleBinding in {_get(rb, 'metadata', 'namespace')!r}")
    rules = {
        (tuple(x.get("apiGroups") or []), tuple(x.get("resources") or []), tuple(sorted(x.get("verbs") or [])),
         tuple(x.get("resourceNames") or []))
        for x in role.get("rules") or []
    }
    want = LEASE_RULES | KEY_RULES
    if rules != want or len(role.get("rules") or []) != len(want):
        problems.append(f"rules {sorted(rules)}, want {sorted(want)}")
    if rb.get("roleRef") != {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}:
        problems.append(f"roleRef {rb.get('roleRef')}")
    if rb.get("subjects") != _controller_sa(r):
        problems.append(f"subjects {rb.get('subjects')}")
    cluster_leases = [_role_id(d) for d in _of_kind(r.docs, "ClusterRole")
                      for rule in d.get("rules") or [] if "leases" in (rule.get("resources") or [])]
    if cluster_leases:
        problems.append(f"leases granted cluster-wide by {cluster_leases}")
    return not problems, "; ".join(problems)


@render_check("controller rbac: bound to the controller's ServiceAccount only")
def _controller_binding(r: Render) -> tuple[bool, str]:
    if not r.controller:
        return None
    name = r.fullname + CONTROLLER_SUFFIX
    crb = _named(r.docs, "ClusterRoleBinding", name)
    problems = []
    if crb.get("roleRef") != {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}:
        problems.append(f"roleRef {crb.get('roleRef')}")
    if crb.get("subjects") != _controller_sa(r):
        problems.append(f"subjects {crb.get('subjects')}")
    if _cpod(r).get("serviceAccountName") != name:
        problems.append(f"Deployment serviceAccountName {_cpod(r).get('serviceAccountName')!r}")
    if _cpod(r).get("automountServiceAccountToken") is False:
        problems.append("automountServiceAccountToken false (the controller needs its token)")
    others = [
        f"{b['kind']}/{_get(b, 'metadata', 'name')}"
        for b in _of_kind(r.docs, "ClusterRoleBinding") + _of_kind(r.docs, "RoleBinding")
        if _get(b, "metadata", "name") != name
        and (b in _bindings_of(r.docs, name, r.namespace) or _get(b, "roleRef", "name") == name)
    ]
    if others:
        problems.append(f"other bindings of the controller's roles or ServiceAccount: {others}")
    return not problems, "; ".join(problems)


@render_check("controller pod: non-root, read-only root fs, no privilege escalation, no added capabilities, seccomp RuntimeDefault")
def _controller_sc(r: Render) -> tuple[bool, str]:
    if not r.controller:
        return None
    pod, c = _cpod(r), _ccontainer(r)
    psc, csc = pod.get("securityContext") or {}, c.get("securityContext") or {}
    problems = []
    non_root = csc.get("runAsNonRoot", psc.get("runAsNonRoot"))
    uid = csc.get("runAsUser", psc.get("runAsUser"))
    if non_root is not True or uid in (None, 0):
        problems.append(f"runAsNonRoot {non_root!r}, runAsUser {uid!r}")
    if csc.get("readOnlyRootFilesystem") is not True:
        problems.append(f"readOnlyRootFilesystem {csc.get('readOnlyRootFilesystem')!r}")
    if csc.get("allowPrivilegeEscalation") is not False or csc.get("privileged") not in (None, False):
        problems.append(f"allowPrivilegeEscalation {csc.get('allowPrivilegeEscalation')!r}, privileged {csc.get('privileged')!r}")
    caps = csc.get("capabilities") or {}
    if caps.get("drop") != ["ALL"] or caps.get("add"):
        problems.append(f"capabilities {caps}")
    seccomp = _get(csc, "seccompProfile", "type") or _get(psc, "seccompProfile", "type")
    if seccomp != "RuntimeDefault" or _get(psc, "seccompProfile", "type") not in (None, "RuntimeDefault"):
        problems.append(f"seccomp {seccomp!r}")
    return not problems, "; ".join(problems)


@render_check("controller pod: no hostPID, hostNetwork, hostIPC or hostPath")
def _controller_host(r: Render) -> tuple[bool, str]:
    if not r.controller:
        return None
    pod = _cpod(r)
    problems = [f"{k} {pod.get(k)!r}" for k in ("hostPID", "hostNetwork", "hostIPC") if pod.get(k)]
    problems += [f"hostPath volume {v.get('name')}" for v in pod.get("volumes") or [] if "hostPath" in v]
    return not problems, "; ".join(problems)


@render_check("controller pod: POD_NAME and POD_NAMESPACE from the downward API")
def _controller_downward(r: Render) -> tuple[bool, str]:
    if not r.controller:
        return None
    env = _ccontainer(r).get("env") or []
    problems = []
    for var, path in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")):
        found = [e for e in env if e.get("name") == var]
        if len(found) != 1 or _get(found[0], "valueFrom", "fieldRef", "fieldPath") != path or "value" in found[0]:
            problems.append(f"{var} {found}")
    return not problems, "; ".join(problems)


@render_check("controller pod: liveness /healthz and readiness /readyz on port metrics")
def _controller_probes(r: Render) -> tuple[bool, str]:
    if not r.controller:
        return None
    c = _ccontainer(r)
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
    problems = [] if ports.get("metrics") else [f"ports {ports}"]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = _get(c, probe, "httpGet", default={})
        if get.get("path") != path or get.get("port") not in ("metrics", ports.get("metrics")):
            problems.append(f"{probe} {get or c.get(probe)}")
    return not problems, "; ".join(problems)


@render_check("controller pod: CPU and memory requests, a memory limit")
def _controller_resources(r: Render) -> tuple[bool, str]:
    if not r.controller:
        return None
    res = _ccontainer(r).get("resources") or {}
    ok = bool(_get(res, "requests", "cpu")) and bool(_get(res, "requests", "memory")) and bool(_get(res, "limits", "memory"))
    return ok, "" if ok else f"resources {res}"


@render_check("controller pod: Linux nodes only (nodeSelector kubernetes.io/os: linux)")
def _controller_linux(r: Render) -> tuple[bool, str]:
    if not r.controller:
        return None
    sel = _cpod(r).get("nodeSelector") or {}
    ok = all(sel.get(k) == v for k, v in LINUX_SELECTOR.items())
    return ok, "" if ok else f"nodeSelector {sel}"


@render_check("controller pod: agent and controller selectors never match each other's pods")
def _controller_selectors(r: Render) -> tuple[bool, str]:
    if not r.controller:
        return None
    dep = _named(r.docs, "Deployment", r.fullname + CONTROLLER_SUFFIX)
    ds, svc = _one(r.docs, "DaemonSet"), _one(r.docs, "Service")
    ctrl_labels = _get(dep, "spec", "template", "metadata", "labels", default={})
    agent_labels = _get(ds, "spec", "template", "metadata", "labels", default={})

    def matches(sel: dict, labels: dict) -> bool:
        return bool(sel) and all(labels.get(k) == v for k, v in sel.items())

    problems = []
    if matches(_get(ds, "spec", "selector", "matchLabels", default={}), ctrl_labels):
        problems.append("the DaemonSet selects controller pods")
    if matches(_get(svc, "spec", "selector", default={}), ctrl_labels):
        problems.append("the agent Service selects controller pods")
    dsel = _get(dep, "spec", "selector", "matchLabels", default={})
    if matches(dsel, agent_labels) or not matches(dsel, ctrl_labels):
        problems.append(f"Deployment selector {dsel}")
    return not problems, "; ".join(problems)


# --- the ValidatingAdmissionPolicy ---------------------------------------------------


def _policy(r: Render) -> tuple[dict, dict]:
    name = r.fullname + POLICY_SUFFIX
    return _named(r.docs, "ValidatingAdmissionPolicy", name), _named(r.docs, "ValidatingAdmissionPolicyBinding", name)


@render_check("admission policy: bound with Deny, failurePolicy Fail, on pod UPDATEs")
def _policy_binding(r: Render) -> tuple[bool, str]:
    if not r.admission_policy:
        return None
    vap, vapb = _policy(r)
    spec, bspec = vap.get("spec") or {}, vapb.get("spec") or {}
    problems = []
    if bspec.get("policyName") != _get(vap, "metadata", "name"):
        problems.append(f"binding policyName {bspec.get('policyName')!r}")
    if "Deny" not in (bspec.get("validationActions") or []):
        problems.append(f"validationActions {bspec.get('validationActions')}")
    if bspec.get("paramRef") or spec.get("paramKind") or bspec.get("matchResources"):
        problems.append("params or binding matchResources narrow the policy")
    if spec.get("failurePolicy") != "Fail":
        problems.append(f"failurePolicy {spec.get('failurePolicy')!r}")
    rules = _get(spec, "matchConstraints", "resourceRules", default=[])
    if not any("" in (x.get("apiGroups") or []) and "pods" in (x.get("resources") or [])
               and "UPDATE" in (x.get("operations") or []) for x in rules):
        problems.append(f"matchConstraints {rules}")
    if not spec.get("validations"):
        problems.append("no validations")
    return not problems, "; ".join(problems)


def _cel_env():
    """cel-expr-python (the CEL project's Python wrapper of cel-cpp) with the optional-types
    and strings extensions, as Kubernetes enables them for admission policies since 1.28
    (k8s.io/apiserver/pkg/cel/environment/base.go: cel.OptionalTypes, ext.Strings)."""
    from cel_expr_python import cel  # type: ignore[import-not-found]
    from cel_expr_python.ext import ext_optional, ext_strings  # type: ignore[import-not-found]

    names = ("object", "oldObject", "request", "variables", "params", "namespaceObject", "authorizer")
    return cel.NewEnv(variables={n: cel.Type.DYN for n in names},
                      extensions=[ext_optional.ExtOptional(), ext_strings.ExtStrings()])


class _Policy:
    """A ValidatingAdmissionPolicy compiled with CEL; decides a request as the API server does."""

    def __init__(self, vap: dict):
        env = _cel_env()
        spec = vap.get("spec") or {}
        compile_ = lambda what, e: (what, env.compile(e))  # noqa: E731
        self.conditions = [compile_(f"matchCondition {c.get('name')}", c["expression"]) for c in spec.get("matchConditions") or []]
        self.variables = [(v["name"], env.compile(v["expression"])) for v in spec.get("variables") or []]
        self.validations = [compile_(f"validation {i}", v["expression"]) for i, v in enumerate(spec.get("validations") or [])]

    def matches(self, request: dict) -> bool:
        data = {"request": request, "object": request.get("object"), "oldObject": request.get("oldObject")}
        return all(e.eval(data=data).value() is True for _, e in self.conditions)

    def admits(self, request: dict) -> bool:
        """False when any validation is false (or fails to evaluate: failurePolicy Fail)."""
        data = {"request": request, "object": request.get("object"), "oldObject": request.get("oldObject")}
        computed: dict = {}
        for name, e in self.variables:
            computed[name] = e.eval(data={**data, "variables": computed}).plain_value()
        data["variables"] = computed
        for _, e in self.validations:
            try:
                if e.eval(data=data).value() is not True:
                    return False
            except Exception:  # noqa: BLE001 -- an evaluation error denies (failurePolicy Fail)
                return False
        return True


def _sample_pod() -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web-0", "namespace": "apps", "uid": "3f0c", "resourceVersion": "100",
            "labels": {"app": "web"},
            "annotations": {"reloadlet.io/action": "signal:SIGHUP", "team": "a"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "9a1"}],
        },
        "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                                 "volumeMounts": [{"name": "cfg", "mountPath": "/etc/web"}]}],
                 "volumes": [{"name": "cfg", "configMap": {"name": "app-cfg"}}]},
    }


def _edit(pod: dict, fn) -> dict:
    import copy as _copy

    new = _copy.deepcopy(pod)
    fn(new)
    new["metadata"]["resourceVersion"] = "101"  # as every update changes it
    return new


def _ann(key: str, value: str | None):
    def fn(p: dict) -> None:
        anns = p["metadata"].setdefault("annotations", {})
        if value is None:
            anns.pop(key, None)
        else:
            anns[key] = value
    return fn


def _both(*fns):
    def fn(p: dict) -> None:
        for f in fns:
            f(p)
    return fn


# The MAC suffix the controller writes after a baseline's digests (issue #43 §2).
_MAC = ";mac=0123456789abcdef0123456789abcdef"

# What the controller records on a pod whose env eviction a budget blocks (docs/status.md).
_CONTROLLER_RECORD = '{"v":1,"objects":[{"object":"configmap/app-env","version":"v1:93bbc560a3f2f34722daa27f","at":"2026-11-29T09:36:50Z","by":"controller","action":"evict","result":"blocked"}]}'

# (description, edit of the old pod, subresource, allowed?)
POLICY_CASES = [
    ("sets the nudge annotation", _ann(NUDGE_ANNOTATION, "configmap/app-cfg@1234"), "", True),
    ("re-nudges with a #n suffix", _ann(NUDGE_ANNOTATION, "secret/db.creds@99#3"), "", True),
    ("changes another annotation", _both(_ann(NUDGE_ANNOTATION, "configmap/app-cfg@1234"), _ann("team", "b")), "", False),
    ("adds another annotation", _ann("x", "1"), "", False),
    ("removes another annotation", _ann("reloadlet.io/action", None), "", False),
    ("changes a label", _both(_ann(NUDGE_ANNOTATION, "configmap/app-cfg@1234"), lambda p: p["metadata"]["labels"].update(app="evil")), "", False),
    ("adds a label", lambda p: p["metadata"]["labels"].update(extra="1"), "", False),
    ("changes the spec", _both(_ann(NUDGE_ANNOTATION, "configmap/app-cfg@1234"), lambda p: p["spec"]["containers"][0].update(image="evil:1")), "", False),
    ("adds a finalizer", lambda p: p["metadata"].update(finalizers=["x.io/hold"]), "", False),
    ("drops the ownerReferences", lambda p: p["metadata"].pop("ownerReferences"), "", False),
    ("writes a malformed nudge", _ann(NUDGE_ANNOTATION, "configmap/app-cfg"), "", False),
    ("writes the nudge through the status subresource", _ann(NUDGE_ANNOTATION, "configmap/app-cfg@1234"), "status", False),
    ("sets the env baseline", _ann(BASELINE_ANNOTATION, "configmap/app-env=0123456789abcdef,secret/db=fedcba9876543210" + _MAC), "", True),
    ("writes an env baseline without the controller's MAC", _ann(BASELINE_ANNOTATION, "configmap/app-env=0123456789abcdef"), "", False),
    ("writes an env baseline with a short MAC", _ann(BASELINE_ANNOTATION, "configmap/app-env=0123456789abcdef" + _MAC[:-1]), "", False),
    ("writes an env baseline with an upper-case MAC", _ann(BASELINE_ANNOTATION, "configmap/app-env=0123456789abcdef" + _MAC.upper().replace("MAC", "mac")), "", False),
    ("writes a malformed env baseline", _ann(BASELINE_ANNOTATION, "configmap/app-env=xyz"), "", False),
    ("sets the env baseline and changes another annotation", _both(_ann(BASELINE_ANNOTATION, "configmap/app-env=0123456789abcdef" + _MAC), _ann("team", "b")), "", False),
    ("sets the rollout baseline", _ann(ROLLOUT_BASELINE_ANNOTATION, "configmap/app-cfg=0123456789abcdef" + _MAC), "", True),
    ("writes a rollout baseline without the controller's MAC", _ann(ROLLOUT_BASELINE_ANNOTATION, "configmap/app-cfg=0123456789abcdef"), "", False),
    ("writes a malformed rollout baseline", _ann(ROLLOUT_BASELINE_ANNOTATION, "configmap/app-cfg"), "", False),
    ("sets the rollout annotations on the pod itself", _ann(RESTARTED_AT, "2026-11-26T12:00:00Z"), "", False),
    ("records an env consumer's held eviction", _ann(ENV_PACING, '{"flapping":{"since":"2026-11-26T12:00:00Z","source":"configmap app-env","changes":4}}'), "", True),
    ("writes an env pacing that is no JSON object", _ann(ENV_PACING, "everything"), "", False),
    ("writes an env pacing over 4 KiB", _ann(ENV_PACING, "{" + "x" * 4096 + "}"), "", False),
    ("records an env pacing and changes another annotation", _both(_ann(ENV_PACING, "{}"), _ann("team", "b")), "", False),
    ("grants a restart on a pod that requested none", _ann(RESTART_GRANT, _RESTART_ID), "", False),
    ("writes the agent's restart request", _ann(RESTART_REQUEST, _RESTART_ID), "", False),
    ("writes the agent's restarted record", _ann(RESTARTED, _RESTART_ID), "", False),
    ("records a blocked env eviction (reloadlet status)", _ann(APPLIED_ANNOTATION, _CONTROLLER_RECORD), "", True),
    ("writes a status record that is no JSON object", _ann(APPLIED_ANNOTATION, "pending"), "", False),
    ("writes a status record over 8192 characters", _ann(APPLIED_ANNOTATION, "{" + "x" * 8192 + "}"), "", False),
    ("records a status and changes another annotation", _both(_ann(APPLIED_ANNOTATION, _CONTROLLER_RECORD), _ann("team", "b")), "", False),
    ("records a status and changes a label", _both(_ann(APPLIED_ANNOTATION, _CONTROLLER_RECORD), lambda p: p["metadata"]["labels"].update(app="evil")), "", False),
]


def _sample_deployment() -> dict:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "apps", "uid": "d1", "resourceVersion": "100",
                     "labels": {"app": "web"}, "annotations": {"deployment.kubernetes.io/revision": "3"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {
                "metadata": {"labels": {"app": "web"}, "annotations": {"reloadlet.io/action": "rollout"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    }


def _tmpl(key: str, value: str | None):
    def fn(d: dict) -> None:
        anns = d["spec"]["template"]["metadata"].setdefault("annotations", {})
        if value is None:
            anns.pop(key, None)
        else:
            anns[key] = value
    return fn


def _own(key: str, value: str):
    def fn(d: dict) -> None:
        d["metadata"].setdefault("annotations", {})[key] = value
    return fn


_ROLL = _both(_tmpl(RESTARTED_AT, "2026-11-26T12:00:00.123Z"), _tmpl(RESTARTED_FOR, "configmap/app-cfg,secret/db"))

# (description, edit of the old Deployment, subresource, allowed?)
WORKLOAD_CASES = [
    ("writes restartedAt and restarted-for", _ROLL, "", True),
    ("writes restartedAt only (kubectl rollout restart's patch)", _tmpl(RESTARTED_AT, "2026-11-26T12:00:00+02:00"), "", True),
    ("changes the replicas", _both(_ROLL, lambda d: d["spec"].update(replicas=0)), "", False),
    ("changes the image", _both(_ROLL, lambda d: d["spec"]["template"]["spec"]["containers"][0].update(image="evil:1")), "", False),
    ("changes the strategy", lambda d: d["spec"].update(strategy={"type": "Recreate"}), "", False),
    ("pauses the Deployment", lambda d: d["spec"].update(paused=True), "", False),
    ("changes a template label", lambda d: d["spec"]["template"]["metadata"]["labels"].update(app="evil"), "", False),
    ("adds another template annotation", _both(_ROLL, _tmpl("x", "1")), "", False),
    ("removes a template annotation", _tmpl("reloadlet.io/action", None), "", False),
    ("changes another template annotation's value", _both(_ROLL, _tmpl("reloadlet.io/action", "signal")), "", False),
    ("changes the workload's own annotations", lambda d: d["metadata"]["annotations"].update(x="1"), "", False),
    ("records its rollout pacing with the rollout", _both(_ROLL, _own(ROLLOUT_PACING, '{"rollouts":["2026-11-26T12:00:00Z"]}')), "", True),
    ("records its rollout pacing alone (a hold begins)", _own(ROLLOUT_PACING, '{"deferred":{"until":"2026-11-26T13:00:00Z"}}'), "", True),
    ("writes a rollout pacing that is no JSON object", _own(ROLLOUT_PACING, "everything"), "", False),
    ("writes a rollout pacing over 4 KiB", _own(ROLLOUT_PACING, "{" + "x" * 4096 + "}"), "", False),
    ("records its rollout pacing and rewrites another annotation's value", _both(_own(ROLLOUT_PACING, "{}"), _own("deployment.kubernetes.io/revision", "1")), "", False),
    ("records its rollout pacing and removes another annotation", _both(_own(ROLLOUT_PACING, "{}"), lambda d: d["metadata"]["annotations"].pop("deployment.kubernetes.io/revision")), "", False),
    ("records its rollout pacing and changes another annotation", _both(_own(ROLLOUT_PACING, "{}"), lambda d: d["metadata"]["annotations"].update(x="1")), "", False),
    ("changes the workload's labels", lambda d: d["metadata"]["labels"].update(x="1"), "", False),
    ("writes a restartedAt that is no time", _tmpl(RESTARTED_AT, "now"), "", False),
    ("writes a malformed restarted-for", _tmpl(RESTARTED_FOR, "everything"), "", False),
    ("scales through the scale subresource", lambda d: d["spec"].update(replicas=5), "scale", False),
    ("adds a finalizer", _both(_ROLL, lambda d: d["metadata"].update(finalizers=["x.io/hold"])), "", False),
    ("adds an owner reference", _both(_ROLL, lambda d: d["metadata"].update(
        ownerReferences=[{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"}])), "", False),
    ("marks it deleted", _both(_ROLL, lambda d: d["metadata"].update(deletionTimestamp="2026-11-26T12:00:00Z")), "", False),
]


def _granting(key: str | None, value: str = "", own: bool = False):
    """A Deployment whose template (or, own=True, itself) carries key: value instead of
    reloadlet.io/action: rollout (key None: nothing)."""
    d = _sample_deployment()
    d["spec"]["template"]["metadata"]["annotations"].pop("reloadlet.io/action")
    if key is not None:
        (d["metadata"] if own else d["spec"]["template"]["metadata"]).setdefault("annotations", {})[key] = value
    return d


def _evict_on_blocked(value: str) -> dict:
    d = _granting("reloadlet.io/action", "evict")
    d["spec"]["template"]["metadata"]["annotations"]["reloadlet.io/on-blocked"] = value
    return d


# (description, old Deployment, allowed without --reloader-compat, allowed with it): the
# rollout (restartedAt, restarted-for) written to a workload that asks, or does not ask, for it.
GRANT_CASES = [
    ("whose template asks for action: rollout", _sample_deployment(), True, True),
    ("whose template asks for ' Rollout ' (trimmed, any case)", _granting("reloadlet.io/action", " Rollout "), True, True),
    ("whose template asks for evict with on-blocked: rollout", _evict_on_blocked("rollout"), True, True),
    ("whose template asks for evict, on-blocked: wait", _evict_on_blocked("wait"), False, False),
    ("whose template asks for signal", _granting("reloadlet.io/action", "signal"), False, False),
    ("whose template never opted in", _granting(None), False, False),
    ("that asks for action: rollout on itself, not its template", _granting("reloadlet.io/action", "rollout", own=True), False, False),
    ("with reloader.stakater.com/auto on itself", _granting("reloader.stakater.com/auto", "true", own=True), False, True),
    ("with configmap.reloader.stakater.com/reload in its template", _granting("configmap.reloader.stakater.com/reload", "app-cfg"), False, True),
    ("with secret.reloader.stakater.com/auto on itself", _granting("secret.reloader.stakater.com/auto", "true", own=True), False, True),
    ("with reloader.stakater.com/search in its template", _granting("reloader.stakater.com/search", "true"), False, True),
    ("with Reloader's annotation but action: signal in its template",
     _edit(_granting("reloadlet.io/action", "signal"), _own("reloader.stakater.com/auto", "true")), False, False),
]


def _compiled(vap: dict):
    """The admission policy compiled for evaluation, or why it cannot be."""
    try:
        return _Policy(vap), None
    except ImportError:
        return None, "cel-expr-python not installed (hack/install-manifest-tools.sh)"
    except Exception as e:  # noqa: BLE001 -- the wrapper raises RuntimeError on syntax and type errors
        return None, f"does not compile: {' '.join(str(e).split())[:300]}"


def _verdicts(policy, user: str, name: str, cases, what: str) -> list[str]:
    """Each case (description, edit, subresource, admitted?, old object) as an UPDATE by `user`:
    the cases whose verdict is not the one expected."""
    problems = []
    for desc, fn, sub, allowed, old in cases:
        req = {"operation": "UPDATE", "subResource": sub, "namespace": "apps", "name": name,
               "userInfo": {"username": user}, "object": _edit(old, fn), "oldObject": old}
        try:
            got = not policy.matches(req) or policy.admits(req)
        except Exception as e:  # noqa: BLE001
            problems.append(f"{desc}: evaluation failed: {e}")
            continue
        if got != allowed:
            problems.append(f"{what} that {desc} is {'admitted' if got else 'rejected'}")
    return problems


@render_check("admission policy: CEL compiles; a nudge-only update by the controller passes, any other change is rejected")
def _policy_cel(r: Render) -> tuple[bool, str]:
    if not r.admission_policy:
        return None
    vap, _ = _policy(r)
    policy, error = _compiled(vap)
    if error:
        return False, error
    user = f"system:serviceaccount:{r.namespace}:{r.fullname}{CONTROLLER_SUFFIX}"
    old = _sample_pod()
    bare = _edit(old, lambda p: p["metadata"].pop("annotations"))
    held = _edit(old, _ann(ENV_PACING, '{"deferred":{"until":"2026-11-26T13:00:00Z"}}'))
    requested = _edit(old, _ann(RESTART_REQUEST, _RESTART_ID))
    granted = _edit(requested, _ann(RESTART_GRANT, _RESTART_ID))
    # The agent replaced its request after the grant (a newer change): the grant stays.
    renewed = _edit(granted, _ann(RESTART_REQUEST, _OTHER_RESTART_ID))
    # Pods that ask for an env restart in place, and one whose env consumers are evicted.
    env_restart = _edit(old, _ann("reloadlet.io/env-action", " Restart"))
    restart_action = _edit(old, _ann("reloadlet.io/action", "restart"))
    env_evict = _edit(restart_action, _ann("reloadlet.io/env-action", "evict"))
    env_requested = _edit(env_restart, _ann(RESTART_REQUEST, _ENV_RESTART_ID))
    cases = [(*c, old) for c in POLICY_CASES] + [
        ("sets the nudge on a pod without annotations", _ann(NUDGE_ANNOTATION, "configmap/app-cfg@7"), "", True, bare),
        ("removes its env pacing record (the hold ended)", _ann(ENV_PACING, None), "", True, held),
        ("removes its env pacing record and another annotation", _both(_ann(ENV_PACING, None), _ann("team", None)), "", False, held),
        ("grants a restart (the pod's request)", _ann(RESTART_GRANT, _RESTART_ID), "", True, requested),
        ("grants a restart that is not the pod's request", _ann(RESTART_GRANT, _OTHER_RESTART_ID), "", False, requested),
        ("writes a grant id that is too long", _ann(RESTART_GRANT, "a" * 65), "", False, requested),
        ("writes a grant id with other characters", _ann(RESTART_GRANT, "A/../b"), "", False, requested),
        ("grants a restart and changes another annotation", _both(_ann(RESTART_GRANT, _RESTART_ID), _ann("team", "b")), "", False, requested),
        ("grants the pod's new request", _ann(RESTART_GRANT, _OTHER_RESTART_ID), "", True, renewed),
        ("moves a grant off the pod's request", _ann(RESTART_GRANT, _OTHER_RESTART_ID), "", False, granted),
        ("removes a grant", _ann(RESTART_GRANT, None), "", False, granted),
        ("records a status on a pod whose grant is an older request", _ann(APPLIED_ANNOTATION, _CONTROLLER_RECORD), "", True, renewed),
        ("requests an env restart (env-action: restart)", _ann(RESTART_REQUEST, _ENV_RESTART_ID), "", True, env_restart),
        ("requests an env restart (action: restart)", _ann(RESTART_REQUEST, _OTHER_ENV_RESTART_ID), "", True, restart_action),
        ("requests an env restart of a pod whose env-action is evict", _ann(RESTART_REQUEST, _ENV_RESTART_ID), "", False, env_evict),
        ("requests an env restart of a pod that asks for none", _ann(RESTART_REQUEST, _ENV_RESTART_ID), "", False, old),
        ("requests an env restart with an id of no tags", _ann(RESTART_REQUEST, _RESTART_ID), "", False, env_restart),
        ("requests an env restart with an id of ten tags", _ann(RESTART_REQUEST, "0a1b2c3d-0123456789abcdef-" + "1f2e" * 10), "", False, env_restart),
        ("requests an env restart and changes another annotation", _both(_ann(RESTART_REQUEST, _ENV_RESTART_ID), _ann("team", "b")), "", False, env_restart),
        ("replaces its waiting env restart request", _ann(RESTART_REQUEST, _OTHER_ENV_RESTART_ID), "", True, env_requested),
        ("removes a restart request", _ann(RESTART_REQUEST, None), "", False, env_requested)]
    problems = _verdicts(policy, user, "web-0", cases, "an update")
    return not problems, "; ".join(problems)


DATA_VERSION = "reloadlet.io/data-version"
_DV = "v1 since=2026-11-29T09:36:45Z app.conf=0f3c9a1e5b7d2c48 logo.png=00112233445566ff"


@render_check("admission policy: a ConfigMap/Secret update by the controller may change only its reloadlet.io/data-version annotation, in its format")
def _policy_data_version(r: Render) -> tuple[bool, str]:
    if not r.admission_policy:
        return None
    vap, _ = _policy(r)
    policy, error = _compiled(vap)
    if error:
        return False, error
    user = f"system:serviceaccount:{r.namespace}:{r.fullname}{CONTROLLER_SUFFIX}"
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "app", "namespace": "apps", "resourceVersion": "100",
                       "labels": {"app": "web"}, "annotations": {"team": "shop"}},
          "data": {"app.conf": "x=1"}}
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": "db", "namespace": "apps", "resourceVersion": "100"},
              "data": {"password": "aHVudGVyMg=="}}
    published = _edit(cm, _ann(DATA_VERSION, _DV))

    def data(key: str, value):
        def fn(o: dict) -> None:
            o["data"][key] = value
        return fn

    def label(o: dict) -> None:
        o["metadata"]["labels"]["app"] = "other"

    cases = [
        ("sets the data version", _ann(DATA_VERSION, _DV), "", True, cm),
        ("replaces the data version", _ann(DATA_VERSION, _DV.replace("0f3c", "1f3c")), "", True, published),
        ("sets the data version of a Secret", _ann(DATA_VERSION, "v1 since=2026-11-29T09:36:45.5Z password=0123456789abcdef"), "", True, secret),
        ("sets an over-limit data version", _ann(DATA_VERSION, "v1 since=2026-11-29T09:36:45Z keys=over-limit"), "", True, cm),
        ("changes the data", _both(_ann(DATA_VERSION, _DV), data("app.conf", "x=2")), "", False, cm),
        ("changes a Secret's data", data("password", "b3RoZXI="), "", False, secret),
        ("changes a label", _both(_ann(DATA_VERSION, _DV), label), "", False, cm),
        ("changes another annotation", _both(_ann(DATA_VERSION, _DV), _ann("team", "bank")), "", False, cm),
        ("removes another annotation", _ann("team", None), "", False, published),
        ("writes a data version of another format", _ann(DATA_VERSION, "v1 since=yesterday app.conf=zz"), "", False, cm),
        ("writes a data version with a line break", _ann(DATA_VERSION, _DV + "\nx"), "", False, cm),
    ]
    problems = _verdicts(policy, user, "app", cases, "an update")
    return not problems, "; ".join(problems)


@render_check("admission policy: a workload update by the controller may change only the restartedAt and restarted-for template annotations and its rollout-pacing annotation, of a workload that asks")
def _policy_workloads(r: Render) -> tuple[bool, str]:
    if not r.admission_policy:
        return None
    vap, _ = _policy(r)
    rules = _get(vap, "spec", "matchConstraints", "resourceRules", default=[])
    problems = []
    for res in ("deployments", "statefulsets", "daemonsets"):
        if not any("apps" in (x.get("apiGroups") or []) and res in (x.get("resources") or [])
                   and f"{res}/*" in (x.get("resources") or []) and "UPDATE" in (x.get("operations") or [])
                   for x in rules):
            problems.append(f"{res} (and its subresources) not matched on UPDATE")
    policy, error = _compiled(vap)
    if error:
        return False, error
    user = f"system:serviceaccount:{r.namespace}:{r.fullname}{CONTROLLER_SUFFIX}"
    old = _sample_deployment()
    problems += _verdicts(policy, user, "web", [(*c, old) for c in WORKLOAD_CASES], "a workload update")
    # Issue #43 §2: only a workload that asks is rolled (under --reloader-compat, also one
    # that carries Reloader's annotations): the rollout patch of each sample.
    grants = [(f"rolls a Deployment {desc}", _ROLL, "", compat if r.reloader_compat else plain, d)
              for desc, d, plain, compat in GRANT_CASES]
    problems += _verdicts(policy, user, "web", grants, "a workload update")
    return not problems, "; ".join(problems)


def _sample_rollout() -> dict:
    return {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "web", "namespace": "apps", "uid": "r1", "resourceVersion": "100",
                     "labels": {"app": "web"}, "annotations": {"rollout.argoproj.io/revision": "2"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"canary": {"maxSurge": "25%", "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": "web"}, "annotations": {"reloadlet.io/action": "rollout"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    }


def _spec(key: str, value: Any):
    def fn(d: dict) -> None:
        d["spec"][key] = value
    return fn


# (description, edit of the old Rollout, subresource, allowed?)
ARGO_CASES = [
    ("writes spec.restartAt (Argo Rollouts' restart)", _spec("restartAt", "2026-11-26T12:00:00Z"), "", True),
    ("writes a restartAt that is no time", _spec("restartAt", "now"), "", False),
    ("writes restartAt and changes the replicas", _both(_spec("restartAt", "2026-11-26T12:00:00Z"), _spec("replicas", 0)), "", False),
    ("changes the canary strategy", _spec("strategy", {"canary": {"maxUnavailable": 2}}), "", False),
    ("points the Rollout at another workload", _spec("workloadRef", {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"}), "", False),
    ("adds analysis", _spec("analysis", {"successfulRunHistoryLimit": 1}), "", False),
    ("writes the rollout annotations into its template", _tmpl(RESTARTED_AT, "2026-11-26T12:00:00Z"), "", True),
    ("changes another template annotation", _tmpl("x", "1"), "", False),
    ("pauses the Rollout", _spec("paused", True), "", False),
    ("writes restartAt through the status subresource", _spec("restartAt", "2026-11-26T12:00:00Z"), "status", False),
]


@render_check("admission policy: with Argo Rollouts, an update of a Rollout by the controller may change only spec.restartAt (and never restartAt of another workload)")
def _policy_argo(r: Render) -> tuple[bool, str]:
    if not r.admission_policy:
        return None
    vap, _ = _policy(r)
    rules = _get(vap, "spec", "matchConstraints", "resourceRules", default=[])
    matched = any("argoproj.io" in (x.get("apiGroups") or []) and "rollouts" in (x.get("resources") or [])
                  and "rollouts/*" in (x.get("resources") or []) and "UPDATE" in (x.get("operations") or [])
                  for x in rules)
    problems = []
    if matched != r.argo:
        problems.append(f"Rollouts {'not ' if r.argo else ''}matched on UPDATE")
    policy, error = _compiled(vap)
    if error:
        return False, error
    user = f"system:serviceaccount:{r.namespace}:{r.fullname}{CONTROLLER_SUFFIX}"
    cases = [(*c, _sample_rollout()) for c in ARGO_CASES] if r.argo else []
    cases.append(("writes spec.restartAt on a Deployment", _spec("restartAt", "2026-11-26T12:00:00Z"), "", False,
                  _sample_deployment()))
    problems += _verdicts(policy, user, "web", cases, "an update")
    return not problems, "; ".join(problems)


@render_check("admission policy: applies to the controller's ServiceAccount (system:serviceaccount:<ns>:<name>) only")
def _policy_user(r: Render) -> tuple[bool, str]:
    if not r.admission_policy:
        return None
    vap, _ = _policy(r)
    policy, error = _compiled(vap)
    if error:
        return False, error
    sa = r.fullname + CONTROLLER_SUFFIX
    pod = _sample_pod()
    want = {
        f"system:serviceaccount:{r.namespace}:{sa}": True,
        f"system:serviceaccount:{r.namespace}:{r.fullname}": False,
        f"system:serviceaccount:{r.namespace}-other:{sa}": False,
        "kubernetes-admin": False,
    }
    problems = []
    for user, should in want.items():
        req = {"operation": "UPDATE", "subResource": "", "userInfo": {"username": user},
               "object": _edit(pod, _ann("x", "1")), "oldObject": pod}
        try:
            got = policy.matches(req)
        except Exception as e:  # noqa: BLE001
            problems.append(f"{user}: {e}")
            continue
        if got != should:
            problems.append(f"{'matches' if got else 'does not match'} {user}")
    if not policy.conditions:
        problems.append("no matchConditions: the policy would apply to every user")
    return not problems, "; ".join(problems)


# --- the agent's ValidatingAdmissionPolicy ------------------------------------------------


def _agent_policy(r: Render) -> tuple[dict, dict]:
    name = r.fullname + AGENT_POLICY_SUFFIX
    return _named(r.docs, "ValidatingAdmissionPolicy", name), _named(r.docs, "ValidatingAdmissionPolicyBinding", name)


@render_check("agent admission policy: bound with Deny, failurePolicy Fail, on pod UPDATEs and their subresources")
def _agent_policy_binding(r: Render) -> tuple[bool, str]:
    if not r.agent_policy:
        return None
    vap, vapb = _agent_policy(r)
    spec, bspec = vap.get("spec") or {}, vapb.get("spec") or {}
    problems = []
    if bspec.get("policyName") != _get(vap, "metadata", "name"):
        problems.append(f"binding policyName {bspec.get('policyName')!r}")
    if "Deny" not in (bspec.get("validationActions") or []):
        problems.append(f"validationActions {bspec.get('validationActions')}")
    if bspec.get("paramRef") or spec.get("paramKind") or bspec.get("matchResources"):
        problems.append("params or binding matchResources narrow the policy")
    if spec.get("failurePolicy") != "Fail":
        problems.append(f"failurePolicy {spec.get('failurePolicy')!r}")
    rules = _get(spec, "matchConstraints", "resourceRules", default=[])
    if not any("" in (x.get("apiGroups") or []) and {"pods", "pods/*"} <= set(x.get("resources") or [])
               and "UPDATE" in (x.get("operations") or []) for x in rules):
        problems.append(f"matchConstraints {rules}")
    if not spec.get("validations"):
        problems.append("no validations")
    return not problems, "; ".join(problems)


_RECORD = '{"v":1,"objects":[{"object":"configmap/app-cfg","version":"v1:93bbc560a3f2f34722daa27f","at":"2026-11-29T09:36:50Z","by":"agent","action":"signal","result":"applied"}]}'


def _on_node(node: str):
    def fn(p: dict) -> None:
        p["spec"]["nodeName"] = node
    return fn


# (description, edit of the old pod, subresource, the token's node extra, allowed?); the old
# pod runs on node-a.
AGENT_POLICY_CASES = [
    ("records on a pod of its own node", _ann(APPLIED_ANNOTATION, _RECORD), "", ["node-a"], True),
    ("records again (the record replaced)", _ann(APPLIED_ANNOTATION, '{"v":1,"objects":[]}'), "", ["node-a"], True),
    ("records on a pod of another node", _ann(APPLIED_ANNOTATION, _RECORD), "", ["node-b"], False),
    ("records with a token bound to no node", _ann(APPLIED_ANNOTATION, _RECORD), "", None, False),
    ("records with an empty node name", _ann(APPLIED_ANNOTATION, _RECORD), "", [""], False),
    ("records with two node names", _ann(APPLIED_ANNOTATION, _RECORD), "", ["node-a", "node-b"], False),
    ("moves the pod to its own node", _both(_ann(APPLIED_ANNOTATION, _RECORD), _on_node("node-b")), "", ["node-b"], False),
    ("changes another annotation", _both(_ann(APPLIED_ANNOTATION, _RECORD), _ann("team", "b")), "", ["node-a"], False),
    ("sets the controller's nudge", _ann(NUDGE_ANNOTATION, "configmap/app-cfg@1234"), "", ["node-a"], False),
    ("removes another annotation", _ann("reloadlet.io/action", None), "", ["node-a"], False),
    ("changes a label", _both(_ann(APPLIED_ANNOTATION, _RECORD), lambda p: p["metadata"]["labels"].update(app="evil")), "", ["node-a"], False),
    ("changes the spec", _both(_ann(APPLIED_ANNOTATION, _RECORD), lambda p: p["spec"]["containers"][0].update(image="evil:1")), "", ["node-a"], False),
    ("adds a finalizer", lambda p: p["metadata"].update(finalizers=["x.io/hold"]), "", ["node-a"], False),
    ("drops the ownerReferences", lambda p: p["metadata"].pop("ownerReferences"), "", ["node-a"], False),
    ("writes a record that is no JSON object", _ann(APPLIED_ANNOTATION, "current"), "", ["node-a"], False),
    ("writes a record over 8192 characters", _ann(APPLIED_ANNOTATION, "{" + "x" * 8192 + "}"), "", ["node-a"], False),
    ("writes the record through the status subresource", _ann(APPLIED_ANNOTATION, _RECORD), "status", ["node-a"], False),
    ("writes another subresource", lambda p: None, "ephemeralcontainers", ["node-a"], False),
    ("requests a restart on a pod of its own node", _ann(RESTART_REQUEST, _RESTART_ID), "", ["node-a"], True),
    ("records a restart on a pod of its own node", _ann(RESTARTED, _RESTART_ID), "", ["node-a"], True),
    ("requests a restart on a pod of another node", _ann(RESTART_REQUEST, _RESTART_ID), "", ["node-b"], False),
    ("records a restart on a pod of another node", _ann(RESTARTED, _RESTART_ID), "", ["node-b"], False),
    ("grants itself the restart (the controller's annotation)", _ann(RESTART_GRANT, _RESTART_ID), "", ["node-a"], False),
    ("writes a request id that is too long", _ann(RESTART_REQUEST, "a" * 65), "", ["node-a"], False),
    ("writes a request id with other characters", _ann(RESTART_REQUEST, "A/../b"), "", ["node-a"], False),
    ("writes an empty restarted id", _ann(RESTARTED, ""), "", ["node-a"], False),
]

DRAIN_GATE = "reloadlet.io/restart-drain"


def _gated_pod() -> dict:
    """A pod of node-a that declares the drain readiness gate, its condition True."""
    def fn(p: dict) -> None:
        p["spec"]["nodeName"] = "node-a"
        p["spec"]["readinessGates"] = [{"conditionType": DRAIN_GATE}]
        p["status"] = {"phase": "Running", "podIP": "10.0.0.7", "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": DRAIN_GATE, "status": "True", "reason": "Serving", "message": "x"}],
            "containerStatuses": [{"name": "web", "ready": True, "restartCount": 0}]}
    return _edit(_sample_pod(), fn)


def _gate(status: str, message: str = "reloadlet drains the pod", type_: str = DRAIN_GATE):
    def fn(p: dict) -> None:
        conds = [c for c in p["status"]["conditions"] if c["type"] != type_]
        p["status"]["conditions"] = conds + [{"type": type_, "status": status, "reason": "RestartDrain", "message": message}]
    return fn


# (description, edit of the gated pod, subresource, the token's node extra, allowed?)
AGENT_DRAIN_CASES = [
    ("sets the drain gate False on its own node", _gate("False"), "status", ["node-a"], True),
    ("sets the drain gate True again", _gate("True"), "status", ["node-a"], True),
    ("sets the drain gate on another node's pod", _gate("False"), "status", ["node-b"], False),
    ("sets the drain gate with a token bound to no node", _gate("False"), "status", None, False),
    ("sets the drain gate to Unknown", _gate("Unknown"), "status", ["node-a"], False),
    ("writes a drain message over 256 characters", _gate("False", "x" * 257), "status", ["node-a"], False),
    ("sets Ready False itself", _gate("False", type_="Ready"), "status", ["node-a"], False),
    ("adds another condition", _gate("True", type_="example.com/other"), "status", ["node-a"], False),
    ("changes the phase", lambda p: p["status"].update(phase="Failed"), "status", ["node-a"], False),
    ("changes the pod IP", lambda p: p["status"].update(podIP="10.9.9.9"), "status", ["node-a"], False),
    ("changes a container status", lambda p: p["status"]["containerStatuses"][0].update(ready=False), "status", ["node-a"], False),
    ("writes an annotation through pods/status", _both(_gate("False"), _ann("team", "b")), "status", ["node-a"], False),
    ("writes the record through pods/status", _both(_gate("False"), _ann(APPLIED_ANNOTATION, _RECORD)), "status", ["node-a"], False),
    ("adds a label through pods/status", lambda p: p["metadata"]["labels"].update(app="evil"), "status", ["node-a"], False),
]


@render_check("agent admission policy: CEL compiles; a record on its own node's pod passes, another node's pod, another annotation, a label or a spec change is rejected; through pods/status only the drain gate's condition, True or False, on a pod that declares it")
def _agent_policy_cel(r: Render) -> tuple[bool, str]:
    if not r.agent_policy:
        return None
    vap, _ = _agent_policy(r)
    policy, error = _compiled(vap)
    if error:
        return False, error
    user = f"system:serviceaccount:{r.namespace}:{r.fullname}"
    old = _edit(_sample_pod(), _on_node("node-a"))
    bare = _edit(old, lambda p: p["metadata"].pop("annotations"))
    gated = _gated_pod()
    ungated = _edit(gated, lambda p: p["spec"].pop("readinessGates"))
    cases = [(*c, old) for c in AGENT_POLICY_CASES] + [
        ("records on a pod without annotations", _ann(APPLIED_ANNOTATION, _RECORD), "", ["node-a"], True, bare),
        ("sets the drain gate on a pod that does not declare it", _gate("False"), "status", ["node-a"], False, ungated),
    ] + [(*c, gated) for c in AGENT_DRAIN_CASES]
    problems = []
    for desc, fn, sub_, node, allowed, base in cases:
        info: dict = {"username": user}
        if node is not None:
            info["extra"] = {NODE_NAME_EXTRA: node}
        req = {"operation": "UPDATE", "subResource": sub_, "namespace": "apps", "name": "web-0",
               "userInfo": info, "object": _edit(base, fn), "oldObject": base}
        try:
            got = not policy.matches(req) or policy.admits(req)
        except Exception as e:  # noqa: BLE001
            problems.append(f"{desc}: evaluation failed: {e}")
            continue
        if got != allowed:
            problems.append(f"an update that {desc} is {'admitted' if got else 'rejected'}")
    # It applies to the agent's ServiceAccount only.
    for other, should in {user: True, f"{user}{CONTROLLER_SUFFIX}": False,
                          f"system:serviceaccount:{r.namespace}-other:{r.fullname}": False, "kubernetes-admin": False}.items():
        req = {"operation": "UPDATE", "subResource": "", "userInfo": {"username": other},
               "object": _edit(old, _ann("x", "1")), "oldObject": old}
        if policy.matches(req) != should:
            problems.append(f"{'matches' if not should else 'does not match'} {other}")
    return not problems, "; ".join(problems)


def check_renders(ctx: Context) -> Iterator[Result]:
    """Runs every per-render assertion on every render."""
    for r in ctx.renders.values():
        for name, fn in RENDER_CHECKS:
            try:
                got = fn(r)
                if got is None:
                    continue
                ok, detail = got
            except CheckError as e:
                ok, detail = False, str(e)
            yield Result(name, r.name, ok, "" if ok else detail)


def security_view(r: Render) -> dict[str, Any]:
    """The fields of an install that decide what it may do, keyed by a readable path."""
    docs = r.docs
    pod, c = _pod(docs), _container(docs)
    crb = _named(docs, "ClusterRoleBinding", r.fullname)
    svc = _one(docs, "Service")
    ds = _one(docs, "DaemonSet")
    env = sorted(json.dumps(e, sort_keys=True) for e in c.get("env") or [])
    view = {
        # The Namespace differs by design: kustomize's base owns it, the chart by default not;
        # the FlowSchemas are the chart's (rendered by Kubernetes version; they grant nothing).
        "objects": sorted(
            f"{d.get('kind')}/{_get(d, 'metadata', 'namespace', default='')}/{_get(d, 'metadata', 'name')}"
            for d in docs
            if d.get("kind") not in ("ServiceMonitor", "Namespace", "FlowSchema")
        ),
        "rbac.rules": sorted(t for rule in _rbac_rules(docs) for t in _rule_triples(rule)),
        "rbac.binding": {"roleRef": crb.get("roleRef"), "subjects": crb.get("subjects")},
        "daemonset.updateStrategy": _get(ds, "spec", "updateStrategy"),
        "service.spec": {k: v for k, v in (svc.get("spec") or {}).items()},
        "container.env": env,
        "container.args": c.get("args"),
        "container.command": c.get("command"),
        "container.image": c.get("image"),
        "initContainers": pod.get("initContainers"),
    }
    for key in (
        "hostPID", "hostNetwork", "hostIPC", "serviceAccountName", "automountServiceAccountToken",
        "priorityClassName", "tolerations", "securityContext", "terminationGracePeriodSeconds",
        "volumes", "nodeSelector", "affinity", "runtimeClassName", "shareProcessNamespace",
    ):
        view[f"pod.{key}"] = pod.get(key)
    for key in ("securityContext", "volumeMounts", "ports", "livenessProbe", "readinessProbe", "resources"):
        view[f"container.{key}"] = c.get(key)
    if r.controller:
        name = r.fullname + CONTROLLER_SUFFIX
        cpod, cc = _cpod(r), _ccontainer(r)
        for kind in ("ClusterRole", "Role"):
            view[f"controller.{kind}.rules"] = _named(docs, kind, name).get("rules")
        for kind in ("ClusterRoleBinding", "RoleBinding"):
            b = _named(docs, kind, name)
            view[f"controller.{kind}"] = {"roleRef": b.get("roleRef"), "subjects": b.get("subjects")}
        view["controller.container.env"] = sorted(json.dumps(e, sort_keys=True) for e in cc.get("env") or [])
        for key in ("args", "command", "image", "securityContext", "ports", "livenessProbe", "readinessProbe", "resources",
                    "volumeMounts"):
            view[f"controller.container.{key}"] = cc.get(key)
        for key in ("hostPID", "hostNetwork", "hostIPC", "serviceAccountName", "automountServiceAccountToken",
                    "securityContext", "volumes", "nodeSelector", "initContainers", "tolerations", "priorityClassName"):
            view[f"controller.pod.{key}"] = cpod.get(key)
    if r.admission_policy:
        vap, vapb = _policy(r)
        view["admission policy spec"] = vap.get("spec")
        view["admission policy binding spec"] = vapb.get("spec")
    if r.agent_policy:
        vap, vapb = _agent_policy(r)
        view["agent admission policy spec"] = vap.get("spec")
        view["agent admission policy binding spec"] = vapb.get("spec")
    for kind in ("Role", "RoleBinding"):
        d = _named(docs, kind, r.fullname)
        view[f"agent.{kind}"] = {k: d.get(k) for k in ("rules", "roleRef", "subjects")}
    return view


def check_agreement(ctx: Context) -> Iterator[Result]:
    """The kustomize base and the chart's default render agree on every security field."""
    if not ctx.agree:
        return
    a, b = ctx.agree
    name = "agree: security-relevant fields identical"
    try:
        va, vb = security_view(ctx.renders[a]), security_view(ctx.renders[b])
    except (CheckError, KeyError) as e:
        yield Result(name, f"{a} vs {b}", False, str(e))
        return
    diff = [f"{k}: {va.get(k)!r} != {vb.get(k)!r}" for k in sorted(set(va) | set(vb)) if va.get(k) != vb.get(k)]
    yield Result(name, f"{a} vs {b}", not diff, "; ".join(diff))


def check_versions(ctx: Context) -> Iterator[Result]:
    """Cargo.toml's version, the chart's appVersion and every image tag agree."""
    v = ctx.versions
    if not v:
        return
    want = v.get("cargo")
    bad = {k: val for k, val in v.items() if val != want}
    yield Result("version: Cargo.toml, Chart appVersion and image tags agree", "repo", not bad and bool(want),
                 f"cargo {want!r} vs {bad}" if bad or not want else "")


METRIC_RE = re.compile(r"\breloadlet_[a-z0-9_]+")


def _rules(docs: list[dict]) -> dict[str, dict]:
    return {
        rule.get("alert") or rule.get("record"): rule
        for doc in docs
        if doc.get("kind") == "PrometheusRule"
        for group in _get(doc, "spec", "groups", default=[])
        for rule in group.get("rules") or []
    }


def _dashboards(docs: list[dict]) -> list[dict]:
    return [
        json.loads(text)
        for doc in docs
        if doc.get("kind") == "ConfigMap"
        for text in (doc.get("data") or {}).values()
    ]


def _exprs(docs: list[dict]) -> list[tuple[str, str]]:
    """(where, PromQL) for every alert rule and dashboard target."""
    out = [(f"rule {name}", str(rule.get("expr", ""))) for name, rule in _rules(docs).items()]
    for dash in _dashboards(docs):
        for panel in dash.get("panels") or []:
            for t in panel.get("targets") or []:
                out.append((f"panel {panel.get('title')!r}", t.get("expr", "")))
    return out


def _grafana_to_promql(expr: str) -> str:
    expr = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m")
    return re.sub(r"\$\{?[A-Za-z_]+\}?", "x", expr)


def _monitoring_sets(ctx: Context) -> list[tuple[str, list[dict], list[dict]]]:
    """(subject, monitoring objects, the install they watch): the kustomize monitoring
    folder with the kustomize install, and every chart render that ships monitoring."""
    sets = []
    if ctx.monitoring is not None:
        install = ctx.renders.get(ctx.monitoring_install or "")
        sets.append(("monitoring", ctx.monitoring, install.docs if install else []))
    sets += [(r.name, r.docs, r.docs) for r in ctx.renders.values() if r.monitoring]
    return sets


SELECTOR_RE = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
MATCHER_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def _alert_scope_problems(docs: list[dict], install: list[dict]) -> list[str]:
    """The alerts must select the series of the install they ship with: job = the
    Service's name (what a ServiceMonitor without jobLabel gives them), namespace = the
    install's, daemonset = the agent DaemonSet's name (kube-state-metrics)."""
    svc, ds = _one(install, "Service"), _one(install, "DaemonSet")
    want = {
        "job": _get(svc, "metadata", "name"),
        "namespace": _get(ds, "metadata", "namespace"),
        "daemonset": _get(ds, "metadata", "name"),
    }
    problems = []
    for sm in _of_kind(docs + install, "ServiceMonitor"):
        if _get(sm, "spec", "jobLabel"):
            problems.append(f"ServiceMonitor jobLabel {_get(sm, 'spec', 'jobLabel')!r} changes the job label")
    for name, rule in _rules(docs).items():
        expr = str(rule.get("expr", ""))
        selectors = SELECTOR_RE.findall(expr)
        if not selectors:
            problems.append(f"{name}: no label selector")
        for metric, body in selectors:
            matchers = {k: (op, v) for k, op, v in MATCHER_RE.findall(body)}
            keys = ["namespace", "daemonset"] if metric.startswith("kube_daemonset_") else ["job", "namespace"]
            for k in keys:
                if matchers.get(k) != ("=", want[k]):
                    problems.append(f"{name}: {metric} has {k}{''.join(matchers.get(k, ('', 'unset')))}, want {k}={want[k]!r}")
    return problems


def _servicemonitor_problems(docs: list[dict], install: list[dict]) -> list[str]:
    """A ServiceMonitor (in the monitoring objects or the install) scrapes the install's
    agent Service on port metrics, in its namespace."""
    svc = _one(install, "Service")
    labels, ns = _get(svc, "metadata", "labels", default={}), _get(svc, "metadata", "namespace")
    found = []
    for sm in _of_kind(docs + install if docs is not install else docs, "ServiceMonitor"):
        match = _get(sm, "spec", "selector", "matchLabels", default={})
        names = _get(sm, "spec", "namespaceSelector", "matchNames", default=[_get(sm, "metadata", "namespace")])
        ports = [e.get("port") for e in _get(sm, "spec", "endpoints", default=[])]
        if match and all(labels.get(k) == v for k, v in match.items()) and ns in names and "metrics" in ports:
            found.append(sm)
    return [] if len(found) == 1 else [f"{len(found)} ServiceMonitors scrape Service {ns}/{_get(svc, 'metadata', 'name')}"]


def check_monitoring(ctx: Context) -> Iterator[Result]:
    """The alerts and the dashboard: present, parseable, on the agent's metric names, on
    the names of the install they ship with; the kustomize copies equal the chart's."""
    for subject, docs, install in _monitoring_sets(ctx):
        yield from _check_monitoring_set(subject, docs, install)
    if ctx.monitoring is not None and ctx.monitoring_twin:
        twin = ctx.renders[ctx.monitoring_twin].docs
        problems = []
        for kind in ("PrometheusRule",):
            a, b = _of_kind(ctx.monitoring, kind), _of_kind(twin, kind)
            if [d.get("spec") for d in a] != [d.get("spec") for d in b]:
                problems.append(f"{kind} spec differs")
        if _dashboards(ctx.monitoring) != _dashboards(twin):
            problems.append("dashboard JSON differs")
        yield Result("monitoring: deploy/monitoring equals the chart's rules and dashboard", f"monitoring vs {ctx.monitoring_twin}",
                     not problems, "; ".join(problems))


def _check_monitoring_set(subject: str, docs: list[dict], install: list[dict]) -> Iterator[Result]:
    rules = _rules(docs)
    problems = []
    for alert, (needles, for_) in REQUIRED_ALERTS.items():
        rule = rules.get(alert)
        if not rule:
            problems.append(f"{alert} missing")
            continue
        expr = " ".join(str(rule.get("expr", "")).split())
        problems += [f"{alert}: expr lacks {n!r}" for n in needles if n not in expr]
        if for_ and rule.get("for") != for_:
            problems.append(f"{alert}: for {rule.get('for')!r}, want {for_}")
    yield Result("monitoring: required alerts", subject, not problems, "; ".join(problems))

    try:
        scope = _alert_scope_problems(docs, install)
    except CheckError as e:
        scope = [str(e)]
    yield Result("monitoring: alerts select the install's job, namespace and DaemonSet", subject, not scope, "; ".join(scope))

    try:
        sm = _servicemonitor_problems(docs, install)
    except CheckError as e:
        sm = [str(e)]
    yield Result("monitoring: a ServiceMonitor scrapes the Service the alerts select", subject, not sm, "; ".join(sm))

    exprs = _exprs(docs)
    try:
        import promql_parser  # type: ignore[import-not-found]
    except ImportError:
        promql_parser = None
    bad = []
    for where, expr in exprs:
        if not expr.strip():
            bad.append(f"{where}: empty expression")
        elif promql_parser is not None:
            try:
                promql_parser.parse(_grafana_to_promql(expr))
            except Exception as e:  # the parser raises plain exceptions
                bad.append(f"{where}: {e}")
    if promql_parser is None:
        bad.append("promql_parser not installed (hack/install-manifest-tools.sh)")
    yield Result("monitoring: every PromQL expression parses", subject, not bad and bool(exprs),
                 "; ".join(bad) or ("no expressions" if not exprs else ""))

    unknown = sorted({m for _, e in exprs for m in METRIC_RE.findall(e)} - KNOWN_METRICS)
    yield Result("monitoring: only the agent's metric names", subject, not unknown, f"unknown {unknown}")

    dashboards = _dashboards(docs)
    dproblems = []
    if len(dashboards) != 1:
        dproblems.append(f"{len(dashboards)} dashboards")
    for dash in dashboards:
        panels = dash.get("panels") or []
        ids = [p.get("id") for p in panels]
        if len(ids) != len(set(ids)):
            dproblems.append("duplicate panel ids")
        dproblems += [f"panel {p.get('title')!r} has no query" for p in panels if not p.get("targets")]
        used = {m for p in panels for t in p.get("targets") or [] for m in METRIC_RE.findall(t.get("expr", ""))}
        dproblems += [f"no panel shows {m}" for m in sorted(KNOWN_METRICS - used) if not m.endswith(("_sum", "_count"))]
    yield Result("monitoring: dashboard covers every metric", subject, not dproblems, "; ".join(dproblems))

    # Signal latency is ~ the debounce; eviction latency includes PDB waits of minutes:
    # one quantile over both hides either. Every latency query names one action.
    lproblems = []
    actions: set[str] = set()
    for dash in dashboards:
        for p in dash.get("panels") or []:
            for t in p.get("targets") or []:
                expr = t.get("expr", "")
                if "reloadlet_action_latency_seconds" not in expr:
                    continue
                m = re.search(r'action\s*=\s*"([a-z]+)"', expr)
                if not m:
                    lproblems.append(f"panel {p.get('title')!r} mixes the actions")
                else:
                    actions.add(m.group(1))
    lproblems += [f"no latency panel for action={a!r}" for a in ("signal", "evict") if a not in actions]
    yield Result("monitoring: dashboard shows signal and evict latency apart", subject, not lproblems, "; ".join(lproblems))


OCI_LABELS = ("org.opencontainers.image.source", "org.opencontainers.image.version",
              "org.opencontainers.image.licenses", "org.opencontainers.image.title",
              "org.opencontainers.image.description")
# Commands that stop or kill processes by name or service: never in a script a developer
# runs on their own machine (the tests and the demo stop only what they started).
HOST_TOUCHING = re.compile(r"^[^#\n]*\b(pkill|killall|systemctl\s+(stop|kill|restart)|service\s+\S+\s+(stop|restart)|invoke-rc\.d\s+\S+\s+stop)\b", re.M)


def check_repo(ctx: Context) -> Iterator[Result]:
    """The Dockerfile and the set-up scripts."""
    if "Dockerfile" in ctx.files:
        text = ctx.files["Dockerfile"]
        problems = []
        froms = re.findall(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)", text, re.M | re.I)
        stages = set(re.findall(r"^FROM\s+.*\s+AS\s+(\S+)", text, re.M | re.I))
        for image in froms:
            if image in stages or image == "scratch":  # a build stage, or the empty image
                continue
            ref = image.split("@", 1)[0]
            tag = ref.rsplit("/", 1)[-1].split(":", 1)[1] if ":" in ref.rsplit("/", 1)[-1] else ""
            # A version tag names a release: digits and dots (rust:1.85.0-bookworm,
            # static-debian12:nonroot is not one, neither is latest).
            if not re.match(r"^v?[0-9]+\.[0-9]+(\.[0-9]+)?([-_.][A-Za-z0-9.]+)*$", tag):
                problems.append(f"FROM {image}: not pinned to a version tag")
        if not froms:
            problems.append("no FROM")
        labels = set(re.findall(r"(org\.opencontainers\.image\.[a-z.]+)=", text))
        problems += [f"label {lbl} missing" for lbl in OCI_LABELS if lbl not in labels]
        yield Result("dockerfile: base images pinned to version tags, OCI labels", "repo", not problems, "; ".join(problems))
    scripts = {k: v for k, v in ctx.files.items() if k.startswith("hack/") and k.endswith(".sh")}
    if scripts:
        bad = [f"{path}: {m.group(0).strip()}" for path, text in sorted(scripts.items()) for m in HOST_TOUCHING.finditer(text)]
        yield Result("hack: no script stops or kills processes it did not start", "repo", not bad, "; ".join(bad))


ALL_CHECKS: list[CheckFn] = [check_renders, check_agreement, check_versions, check_monitoring, check_repo]


def run_all(ctx: Context) -> list[Result]:
    """Every assertion on `ctx`, in a stable order."""
    results: list[Result] = []
    for fn in ALL_CHECKS:
        results.extend(fn(ctx))
    return results


def results_by_key(results: Iterable[Result]) -> dict[tuple[str, str], Result]:
    """Index results by (check, subject)."""
    return {(r.check, r.subject): r for r in results}
