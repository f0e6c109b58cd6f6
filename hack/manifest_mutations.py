"""Deliberately widened copies of the renders, one per way an install can go wrong.

`check_manifests.py --self-test` applies each mutation to a fresh copy of the
real renders and requires the named assertion to fail; it also requires every
assertion to be the target of at least one mutation, so no check can silently
stop being able to fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from manifest_checks import Context, _container, _of_kind, _one, _pod

K, CD, CF, CR, CK, M = "kustomize", "chart-default", "chart-full", "chart-release", "chart-knobs", "monitoring"


@dataclass
class Mutation:
    """A change to a context and the (check, subject) that must then fail."""

    description: str
    apply: Callable[[Context], None]
    check: str
    subject: str


def _docs(ctx: Context, render: str) -> list[dict]:
    return ctx.renders[render].docs


def _sc(ctx: Context, render: str) -> dict:
    return _container(_docs(ctx, render)).setdefault("securityContext", {})


def _role(ctx: Context, render: str) -> dict:
    return _one(_docs(ctx, render), "ClusterRole")


def _kubelet_mount(ctx: Context, render: str) -> dict:
    return next(m for m in _container(_docs(ctx, render))["volumeMounts"] if m["mountPath"].endswith("/pods"))


def _rule(ctx: Context, alert: str, render: str | None = None) -> dict:
    docs = ctx.monitoring if render is None else _docs(ctx, render)
    return next(
        r
        for d in docs or []
        if d.get("kind") == "PrometheusRule"
        for g in d["spec"]["groups"]
        for r in g["rules"]
        if r.get("alert") == alert
    )


def _dashboard_edit(ctx: Context, edit: Callable[[dict], None], render: str | None = None) -> None:
    import json

    docs = ctx.monitoring if render is None else _docs(ctx, render)
    cm = next(d for d in docs or [] if d.get("kind") == "ConfigMap")
    key = next(iter(cm["data"]))
    dash = json.loads(cm["data"][key])
    edit(dash)
    cm["data"][key] = json.dumps(dash)


def _set_panel_expr(dash: dict, title_part: str, old: str, new: str) -> None:
    for p in dash["panels"]:
        if title_part in p["title"]:
            for t in p["targets"]:
                t["expr"] = t["expr"].replace(old, new)


MUTATIONS: list[Mutation] = [
    Mutation("a Secret object in the install",
             lambda c: _docs(c, K).append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "reloadlet", "namespace": "reloadlet-system"}}),
             "objects: exactly the expected kinds and names", K),
    Mutation("DaemonSet in the default namespace",
             lambda c: _one(_docs(c, CD), "DaemonSet")["metadata"].update(namespace="default"),
             "objects: exactly the expected kinds and names", CD),
    Mutation("a rule that reads Secrets",
             lambda c: _role(c, K)["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}),
             "rbac: no ConfigMap or Secret access", K),
    Mutation("a rule that lists ConfigMaps",
             lambda c: _role(c, CD)["rules"].append({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}),
             "rbac: no ConfigMap or Secret access", CD),
    Mutation("verbs: ['*'] on pods",
             lambda c: _role(c, K)["rules"][0].update(verbs=["*"]),
             "rbac: no wildcard in apiGroups, resources, verbs", K),
    Mutation("apiGroups: ['*']",
             lambda c: _role(c, CF)["rules"][2].update(apiGroups=["*"]),
             "rbac: no wildcard in apiGroups, resources, verbs", CF),
    Mutation("an extra 'nodes get' rule",
             lambda c: _role(c, K)["rules"].append({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}),
             "rbac: exactly the allowed rules", K),
    Mutation("pods delete instead of eviction",
             lambda c: _role(c, CD)["rules"][1].update(resources=["pods"], verbs=["delete"]),
             "rbac: exactly the allowed rules", CD),
    Mutation("binding to the default ServiceAccount",
             lambda c: _one(_docs(c, K), "ClusterRoleBinding")["subjects"][0].update(name="default"),
             "rbac: the role is bound to the agent's ServiceAccount only", K),
    Mutation("kubelet pods mounted read-write",
             lambda c: _kubelet_mount(c, K).update(readOnly=False),
             "pod: hostPath of the kubelet's pods read-only with HostToContainer", K),
    Mutation("kubelet pods mounted without propagation",
             lambda c: _kubelet_mount(c, CD).pop("mountPropagation"),
             "pod: hostPath of the kubelet's pods read-only with HostToContainer", CD),
    Mutation("a hostPath of /",
             lambda c: (_pod(_docs(c, K))["volumes"].append({"name": "root", "hostPath": {"path": "/"}})),
             "pod: hostPath of the kubelet's pods read-only with HostToContainer", K),
    Mutation("overlay moves the mount but not RELOADLET_KUBELET_ROOT",
             lambda c: next(e for e in _container(_docs(c, "overlay-k0s"))["env"]
                            if e["name"] == "RELOADLET_KUBELET_ROOT").update(value="/var/lib/kubelet"),
             "kubelet root: RELOADLET_KUBELET_ROOT, hostPath and mount agree", "overlay-k0s"),
    Mutation("chart kubeletRoot ignored by the hostPath",
             lambda c: next(v for v in _pod(_docs(c, CF))["volumes"]
                            if v["name"] == "kubelet-pods")["hostPath"].update(path="/var/lib/kubelet/pods"),
             "kubelet root: RELOADLET_KUBELET_ROOT, hostPath and mount agree", CF),
    Mutation("SYS_ADMIN added",
             lambda c: _sc(c, K)["capabilities"]["add"].append("SYS_ADMIN"),
             "container: capabilities drop ALL, add exactly KILL and DAC_READ_SEARCH", K),
    Mutation("nothing dropped",
             lambda c: _sc(c, CD)["capabilities"].update(drop=[]),
             "container: capabilities drop ALL, add exactly KILL and DAC_READ_SEARCH", CD),
    Mutation("privileged by default",
             lambda c: _sc(c, CD).update(privileged=True),
             "container: privileged only when asked for", CD),
    Mutation("privileged with allowPrivilegeEscalation false (rejected by the API server)",
             lambda c: _sc(c, CF).update(allowPrivilegeEscalation=False),
             "container: privileged only when asked for", CF),
    Mutation("runAsNonRoot true (capabilities would be lost)",
             lambda c: _sc(c, K).update(runAsNonRoot=True),
             "container: runs as UID 0 (runAsNonRoot false)", K),
    Mutation("writable root filesystem",
             lambda c: _sc(c, K).update(readOnlyRootFilesystem=False),
             "container: readOnlyRootFilesystem", K),
    Mutation("seccomp Unconfined",
             lambda c: _sc(c, CD).update(seccompProfile={"type": "Unconfined"}),
             "container: seccomp RuntimeDefault", CD),
    Mutation("no hostPID",
             lambda c: _pod(_docs(c, K)).pop("hostPID"),
             "pod: hostPID, no hostNetwork or hostIPC", K),
    Mutation("hostNetwork",
             lambda c: _pod(_docs(c, CD)).update(hostNetwork=True),
             "pod: hostPID, no hostNetwork or hostIPC", CD),
    Mutation("NODE_NAME as a literal",
             lambda c: next(e for e in _container(_docs(c, K))["env"] if e["name"] == "NODE_NAME").update(
                 value="node-1", valueFrom=None) or _strip_none(_container(_docs(c, K))["env"]),
             "container: NODE_NAME from fieldRef spec.nodeName", K),
    Mutation("liveness on /metrics",
             lambda c: _container(_docs(c, K))["livenessProbe"]["httpGet"].update(path="/metrics"),
             "container: liveness /healthz and readiness /readyz on port metrics (9102)", K),
    Mutation("no readiness probe",
             lambda c: _container(_docs(c, CD)).pop("readinessProbe"),
             "container: liveness /healthz and readiness /readyz on port metrics (9102)", CD),
    Mutation("no priority class",
             lambda c: _pod(_docs(c, K)).pop("priorityClassName"),
             "pod: priorityClassName system-node-critical", K),
    Mutation("no tolerations",
             lambda c: _pod(_docs(c, CD)).pop("tolerations"),
             "pod: tolerates every taint, 10% maxUnavailable, 30s grace", CD),
    Mutation("1Gi memory limit",
             lambda c: _container(_docs(c, K))["resources"]["limits"].update(memory="1Gi"),
             "container: requests 10m CPU / 24Mi, limit 64Mi memory, no CPU limit", K),
    Mutation("Service with a cluster IP",
             lambda c: _one(_docs(c, K), "Service")["spec"].pop("clusterIP"),
             "service: headless, port metrics, selects the agent pods", K),
    Mutation("namespace enforcing baseline",
             lambda c: _one(_docs(c, K), "Namespace")["metadata"]["labels"].update({"pod-security.kubernetes.io/enforce": "baseline"}),
             "namespace: owned only when asked for, Pod Security level privileged", K),
    Mutation("chart owns its namespace by default (helm uninstall would delete it)",
             lambda c: _docs(c, CD).append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "reloadlet-system"}}),
             "namespace: owned only when asked for, Pod Security level privileged", CD),
    Mutation("release 'prod' in apps-prod still names its DaemonSet 'reloadlet'",
             lambda c: _one(_docs(c, CR), "DaemonSet")["metadata"].update(name="reloadlet"),
             "objects: exactly the expected kinds and names", CR),
    Mutation("chart ignores helm install -n (Service in reloadlet-system)",
             lambda c: _one(_docs(c, CR), "Service")["metadata"].update(namespace="reloadlet-system"),
             "objects: exactly the expected kinds and names", CR),
    Mutation("binding names the ServiceAccount in another namespace",
             lambda c: _one(_docs(c, CR), "ClusterRoleBinding")["subjects"][0].update(namespace="reloadlet-system"),
             "rbac: the role is bound to the agent's ServiceAccount only", CR),
    Mutation("no OS node selector (pods land on Windows nodes)",
             lambda c: _pod(_docs(c, K)).pop("nodeSelector"),
             "pod: Linux nodes only (nodeSelector kubernetes.io/os: linux)", K),
    Mutation("chart nodeSelector replaced instead of merged",
             lambda c: _pod(_docs(c, CK)).update(nodeSelector={"pool": "a"}),
             "pod: Linux nodes only (nodeSelector kubernetes.io/os: linux)", CK),
    Mutation("no PodDisruptionBudget read access",
             lambda c: _role(c, K).update(rules=[r for r in _role(c, K)["rules"] if "poddisruptionbudgets" not in r["resources"]]),
             "rbac: exactly the allowed rules", K),
    Mutation("extraEnv ignored",
             lambda c: _container(_docs(c, CK)).update(env=[e for e in _container(_docs(c, CK))["env"] if e["name"] != "HTTPS_PROXY"]),
             "chart knobs: fullnameOverride, extraEnv, containerSecurityContext, serviceAccount annotations, probes", CK),
    Mutation("containerSecurityContext override ignored",
             lambda c: _sc(c, CK).pop("seLinuxOptions"),
             "chart knobs: fullnameOverride, extraEnv, containerSecurityContext, serviceAccount annotations, probes", CK),
    Mutation("probe override ignored",
             lambda c: _container(_docs(c, CK))["livenessProbe"].update(periodSeconds=10),
             "chart knobs: fullnameOverride, extraEnv, containerSecurityContext, serviceAccount annotations, probes", CK),
    Mutation("serviceAccount annotations ignored",
             lambda c: _one(_docs(c, CK), "ServiceAccount")["metadata"].pop("annotations"),
             "chart knobs: fullnameOverride, extraEnv, containerSecurityContext, serviceAccount annotations, probes", CK),
    Mutation("fullnameOverride ignored by the DaemonSet",
             lambda c: _one(_docs(c, CK), "DaemonSet")["metadata"].update(name="knobs-reloadlet"),
             "chart knobs: fullnameOverride, extraEnv, containerSecurityContext, serviceAccount annotations, probes", CK),
    Mutation("a knob's value set by default",
             lambda c: _sc(c, CD).update(seLinuxOptions={"type": "spc_t"}),
             "chart knobs: fullnameOverride, extraEnv, containerSecurityContext, serviceAccount annotations, probes", CD),
    Mutation("ServiceMonitor on the wrong port",
             lambda c: _of_kind(_docs(c, CF), "ServiceMonitor")[0]["spec"]["endpoints"][0].update(port="http"),
             "servicemonitor: scrapes port metrics of the Service", CF),
    Mutation("chart passes --dry-run by default",
             lambda c: _container(_docs(c, CD))["args"].append("--dry-run"),
             "agree: security-relevant fields identical", f"{K} vs {CD}"),
    Mutation("chart mounts the state dir elsewhere",
             lambda c: next(m for m in _container(_docs(c, CD))["volumeMounts"] if m["name"] == "state").update(mountPath="/state"),
             "agree: security-relevant fields identical", f"{K} vs {CD}"),
    Mutation("chart appVersion bumped alone",
             lambda c: c.versions.update({"Chart.yaml appVersion": "9.9.9"}),
             "version: Cargo.toml, Chart appVersion and image tags agree", "repo"),
    Mutation("eviction alert fires at once",
             lambda c: _rule(c, "ReloadletEvictionBlocked").pop("for"),
             "monitoring: required alerts", "monitoring"),
    Mutation("signal alert on the wrong outcome",
             lambda c: _rule(c, "ReloadletSignalFailed").update(
                 expr=_rule(c, "ReloadletSignalFailed")["expr"].replace("signal_failed", "failed")),
             "monitoring: required alerts", "monitoring"),
    Mutation("unbalanced parenthesis in an alert",
             lambda c: _rule(c, "ReloadletInotifyOverflow").update(expr="sum(increase(reloadlet_inotify_overflows_total[10m]) > 0"),
             "monitoring: every PromQL expression parses", "monitoring"),
    Mutation("dashboard on a misspelt metric",
             lambda c: _dashboard_edit(c, lambda d: _set_panel_expr(d, "Volume swaps", "reloadlet_volume_swaps_total", "reloadlet_volume_swap_total")),
             "monitoring: only the agent's metric names", "monitoring"),
    Mutation("release 'prod' alerts on job=\"reloadlet\" (never fires)",
             lambda c: _rule(c, "ReloadletSignalFailed", CR).update(
                 expr=_rule(c, "ReloadletSignalFailed", CR)["expr"].replace('job="prod-reloadlet"', 'job="reloadlet"')),
             "monitoring: alerts select the install's job, namespace and DaemonSet", CR),
    Mutation("release 'prod' absent-alert on the namespace reloadlet-system (fires forever)",
             lambda c: _rule(c, "ReloadletAgentAbsent", CR).update(
                 expr=_rule(c, "ReloadletAgentAbsent", CR)["expr"].replace('namespace="apps-prod"', 'namespace="reloadlet-system"')),
             "monitoring: alerts select the install's job, namespace and DaemonSet", CR),
    Mutation("kube-state-metrics alert on another DaemonSet name",
             lambda c: _rule(c, "ReloadletAgentNotReady").update(
                 expr=_rule(c, "ReloadletAgentNotReady")["expr"].replace('daemonset="reloadlet"', 'daemonset="reloadlet-agent"')),
             "monitoring: alerts select the install's job, namespace and DaemonSet", "monitoring"),
    Mutation("an alert without a job matcher",
             lambda c: _rule(c, "ReloadletAgentDown").update(expr='up{namespace="reloadlet-system"} == 0'),
             "monitoring: alerts select the install's job, namespace and DaemonSet", "monitoring"),
    Mutation("kustomize monitoring without its ServiceMonitor",
             lambda c: c.monitoring.remove(next(d for d in c.monitoring if d["kind"] == "ServiceMonitor")),
             "monitoring: a ServiceMonitor scrapes the Service the alerts select", "monitoring"),
    Mutation("chart ServiceMonitor selects another Service",
             lambda c: _of_kind(_docs(c, CR), "ServiceMonitor")[0]["spec"]["selector"]["matchLabels"].update({"app.kubernetes.io/instance": "reloadlet"}),
             "monitoring: a ServiceMonitor scrapes the Service the alerts select", CR),
    Mutation("kustomize rules drift from the chart's",
             lambda c: _rule(c, "ReloadletInotifyOverflow")["labels"].update(severity="warning"),
             "monitoring: deploy/monitoring equals the chart's rules and dashboard", f"{M} vs {CF}"),
    Mutation("kustomize dashboard drifts from the chart's",
             lambda c: _dashboard_edit(c, lambda d: d.update(title="reloadlet (old)")),
             "monitoring: deploy/monitoring equals the chart's rules and dashboard", f"{M} vs {CF}"),
    Mutation("one latency panel for both actions",
             lambda c: _dashboard_edit(c, lambda d: _set_panel_expr(d, "Swap to signal latency", ', action="signal"', "")),
             "monitoring: dashboard shows signal and evict latency apart", "monitoring"),
    Mutation("no eviction latency panel in the chart's dashboard",
             lambda c: _dashboard_edit(c, lambda d: d.update(panels=[p for p in d["panels"] if "eviction latency" not in p["title"]]), CR),
             "monitoring: dashboard shows signal and evict latency apart", CR),
    Mutation("Dockerfile on a floating base tag",
             lambda c: c.files.update(Dockerfile=c.files["Dockerfile"].replace("rust:1.95.0-bookworm", "rust:1-bookworm")),
             "dockerfile: base images pinned to version tags, OCI labels", "repo"),
    Mutation("Dockerfile on distroless:latest",
             lambda c: c.files.update(Dockerfile=c.files["Dockerfile"].replace("FROM scratch", "FROM gcr.io/distroless/static-debian12:latest")),
             "dockerfile: base images pinned to version tags, OCI labels", "repo"),
    Mutation("Dockerfile without the OCI source label",
             lambda c: c.files.update(Dockerfile=c.files["Dockerfile"].replace("org.opencontainers.image.source=", "source=")),
             "dockerfile: base images pinned to version tags, OCI labels", "repo"),
    Mutation("install script pkills every nginx on the host",
             lambda c: c.files.update({"hack/install-test-deps.sh": c.files["hack/install-test-deps.sh"] + "pkill -x nginx 2>/dev/null || true\n"}),
             "hack: no script stops or kills processes it did not start", "repo"),
    Mutation("install script stops the host's nginx service",
             lambda c: c.files.update({"hack/install-test-deps.sh": c.files["hack/install-test-deps.sh"] + "  systemctl stop nginx || true\n"}),
             "hack: no script stops or kills processes it did not start", "repo"),
    Mutation("dashboard without the inotify watches panel",
             lambda c: _dashboard_edit(c, lambda d: d.update(panels=[p for p in d["panels"] if "inotify watches" not in p["title"]])),
             "monitoring: dashboard covers every metric", "monitoring"),
]


def _strip_none(env: list[dict]) -> None:
    for e in env:
        for k in [k for k, v in e.items() if v is None]:
            del e[k]
