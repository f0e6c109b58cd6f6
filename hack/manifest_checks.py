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
    + [("", "pods/eviction", "create")]
    + [("policy", "poddisruptionbudgets", v) for v in ("get", "list", "watch")]
    + [("events.k8s.io", "events", "create"), ("events.k8s.io", "events", "patch")]
)
ALLOWED_CAPS = frozenset(["KILL", "DAC_READ_SEARCH"])
EXPECTED_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service", "DaemonSet"}
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
RENDER_CHECKS: list[tuple[str, Callable[[Render], tuple[bool, str]]]] = []


def render_check(name: str):
    """Registers a per-render assertion; it returns (ok, detail)."""

    def register(fn: Callable[[Render], tuple[bool, str]]):
        RENDER_CHECKS.append((name, fn))
        return fn

    return register


@render_check("objects: exactly the expected kinds and names")
def _objects(r: Render) -> tuple[bool, str]:
    kinds = sorted(d.get("kind", "?") for d in r.docs)
    want = sorted(
        list(EXPECTED_KINDS)
        + (["Namespace"] if r.owns_namespace else [])
        + (["ServiceMonitor"] if r.service_monitor else [])
        + (sorted(MONITORING_KINDS) if r.monitoring else [])
    )
    if kinds != want:
        return False, f"kinds {kinds}, want {want}"

    def want_name(kind: str) -> str:
        if kind == "Namespace":
            return r.namespace
        return r.fullname + (DASHBOARD_SUFFIX if kind == "ConfigMap" else "")

    bad = [
        f"{d['kind']}/{_get(d, 'metadata', 'name')} (want {want_name(d['kind'])})"
        for d in r.docs
        if _get(d, "metadata", "name") != want_name(d["kind"])
    ]
    bad += [
        f"{d['kind']}/{_get(d, 'metadata', 'name')} in {_get(d, 'metadata', 'namespace')!r}"
        for d in r.docs
        if d["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding")
        and _get(d, "metadata", "namespace") != r.namespace
    ]
    return not bad, ", ".join(bad)


@render_check("rbac: no ConfigMap or Secret access")
def _no_cm_secret(r: Render) -> tuple[bool, str]:
    bad = []
    for rule in _rbac_rules(r.docs):
        for res in rule.get("resources") or []:
            base = res.split("/")[0]
            if base in FORBIDDEN_RESOURCES or base == "*":
                bad.append(res)
    return not bad, f"rules grant {sorted(set(bad))}" if bad else ""


@render_check("rbac: no wildcard in apiGroups, resources, verbs")
def _no_wildcards(r: Render) -> tuple[bool, str]:
    bad = []
    for rule in _rbac_rules(r.docs):
        for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            bad += [f"{key}: {v}" for v in rule.get(key) or [] if "*" in v]
    return not bad, "; ".join(bad)


@render_check("rbac: exactly the allowed rules")
def _exact_rules(r: Render) -> tuple[bool, str]:
    roles = _of_kind(r.docs, "ClusterRole") + _of_kind(r.docs, "Role")
    problems = []
    if [d["kind"] for d in roles] != ["ClusterRole"]:
        problems.append(f"roles {[d['kind'] + '/' + _get(d, 'metadata', 'name', default='?') for d in roles]}")
    granted: set[tuple[str, str, str]] = set()
    for role in roles:
        if role.get("aggregationRule"):
            problems.append("aggregationRule present")
        for rule in role.get("rules") or []:
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
    crb = _one(r.docs, "ClusterRoleBinding")
    role = _one(r.docs, "ClusterRole")
    sa = _one(r.docs, "ServiceAccount")
    pod = _pod(r.docs)
    want_subject = [{"kind": "ServiceAccount", "name": _get(sa, "metadata", "name"), "namespace": r.namespace}]
    problems = []
    if crb.get("subjects") != want_subject:
        problems.append(f"subjects {crb.get('subjects')}")
    if _get(crb, "roleRef", "name") != _get(role, "metadata", "name") or _get(crb, "roleRef", "kind") != "ClusterRole":
        problems.append(f"roleRef {crb.get('roleRef')}")
    if pod.get("serviceAccountName") != _get(sa, "metadata", "name"):
        problems.append(f"pod serviceAccountName {pod.get('serviceAccountName')!r}")
    if _of_kind(r.docs, "RoleBinding"):
        problems.append("unexpected RoleBinding")
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


@render_check("chart knobs: fullnameOverride, extraEnv, containerSecurityContext, serviceAccount annotations, probes")
def _knobs(r: Render) -> tuple[bool, str]:
    c, sa = _container(r.docs), _one(r.docs, "ServiceAccount")
    seen = {
        "fullnameOverride": _get(_one(r.docs, "DaemonSet"), "metadata", "name"),
        "extraEnv": next((e for e in c.get("env") or [] if e.get("name") == KNOBS["extraEnv"]["name"]), None),
        "seLinuxType": _get(c, "securityContext", "seLinuxOptions", "type"),
        "serviceAccountAnnotation": next(
            ((k, v) for k, v in (_get(sa, "metadata", "annotations", default={}) or {}).items()
             if k == KNOBS["serviceAccountAnnotation"][0]), None),
        "livenessPeriodSeconds": _get(c, "livenessProbe", "periodSeconds"),
        "readinessTimeoutSeconds": _get(c, "readinessProbe", "timeoutSeconds"),
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


def check_renders(ctx: Context) -> Iterator[Result]:
    """Runs every per-render assertion on every render."""
    for r in ctx.renders.values():
        for name, fn in RENDER_CHECKS:
            try:
                ok, detail = fn(r)
            except CheckError as e:
                ok, detail = False, str(e)
            yield Result(name, r.name, ok, "" if ok else detail)


def security_view(docs: list[dict]) -> dict[str, Any]:
    """The fields of an install that decide what it may do, keyed by a readable path."""
    pod, c = _pod(docs), _container(docs)
    crb = _one(docs, "ClusterRoleBinding")
    svc = _one(docs, "Service")
    ds = _one(docs, "DaemonSet")
    env = sorted(json.dumps(e, sort_keys=True) for e in c.get("env") or [])
    view = {
        # The Namespace differs by design: kustomize's base owns it, the chart by default not.
        "objects": sorted(
            f"{d.get('kind')}/{_get(d, 'metadata', 'namespace', default='')}/{_get(d, 'metadata', 'name')}"
            for d in docs
            if d.get("kind") not in ("ServiceMonitor", "Namespace")
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
    return view


def check_agreement(ctx: Context) -> Iterator[Result]:
    """The kustomize base and the chart's default render agree on every security field."""
    if not ctx.agree:
        return
    a, b = ctx.agree
    name = "agree: security-relevant fields identical"
    try:
        va, vb = security_view(ctx.renders[a].docs), security_view(ctx.renders[b].docs)
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
