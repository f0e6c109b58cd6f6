"""Deliberately widened copies of the renders, one per way an install can go wrong.

`check_manifests.py --self-test` applies each mutation to a fresh copy of the
real renders and requires the named assertion to fail; it also requires every
assertion to be the target of at least one mutation, so no check can silently
stop being able to fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from manifest_checks import Context, _container, _named, _of_kind, _one, _pod

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
    """The agent's ClusterRole."""
    return _named(_docs(ctx, render), "ClusterRole", ctx.renders[render].fullname)


def _agent(ctx: Context, render: str, kind: str) -> dict:
    return _named(_docs(ctx, render), kind, ctx.renders[render].fullname)


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
    Mutation("the controller's FlowSchema at the exempt level",
             lambda c: next(d for d in _docs(c, CR) if d.get("kind") == "FlowSchema")["spec"]["priorityLevelConfiguration"].update(name="exempt"),
             "flowschemas: the controller's ServiceAccount, at workload-low and leader-election", CR),
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
    Mutation("the agent reads any Lease (no resourceNames)",
             lambda c: next(r for r in _agent(c, K, "Role")["rules"] if "leases" in r["resources"]).pop("resourceNames"),
             "rbac: exactly the allowed rules", K),
    Mutation("the agent cannot read the controller's Lease",
             lambda c: _agent(c, CD, "Role").update(rules=[r for r in _agent(c, CD, "Role")["rules"] if "leases" not in r["resources"]]),
             "rbac: exactly the allowed rules", CD),
    Mutation("pods delete instead of eviction",
             lambda c: _role(c, CD)["rules"][1].update(resources=["pods"], verbs=["delete"]),
             "rbac: exactly the allowed rules", CD),
    Mutation("binding to the default ServiceAccount",
             lambda c: _agent(c, K, "ClusterRoleBinding")["subjects"][0].update(name="default"),
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
             lambda c: _agent(c, CR, "ClusterRoleBinding")["subjects"][0].update(namespace="reloadlet-system"),
             "rbac: the role is bound to the agent's ServiceAccount only", CR),
    Mutation("no OS node selector (pods land on Windows nodes)",
             lambda c: _pod(_docs(c, K)).pop("nodeSelector"),
             "pod: Linux nodes only (nodeSelector kubernetes.io/os: linux)", K),
    Mutation("chart nodeSelector replaced instead of merged",
             lambda c: _pod(_docs(c, CK)).update(nodeSelector={"pool": "a"}),
             "pod: Linux nodes only (nodeSelector kubernetes.io/os: linux)", CK),
    Mutation("agent pinned to amd64 nodes (arm64 nodes get no agent)",
             lambda c: _pod(_docs(c, K))["nodeSelector"].update({"kubernetes.io/arch": "amd64"}),
             "pod: no architecture pin (amd64 and arm64 nodes alike)", K),
    Mutation("chart affinity requires amd64",
             lambda c: _pod(_docs(c, CD)).update(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                 "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}}),
             "pod: no architecture pin (amd64 and arm64 nodes alike)", CD),
    Mutation("no PodDisruptionBudget read access",
             lambda c: _role(c, K).update(rules=[r for r in _role(c, K)["rules"] if "poddisruptionbudgets" not in r["resources"]]),
             "rbac: exactly the allowed rules", K),
    Mutation("extraEnv ignored",
             lambda c: _container(_docs(c, CK)).update(env=[e for e in _container(_docs(c, CK))["env"] if e["name"] != "HTTPS_PROXY"]),
             "chart knobs: fullnameOverride, extraEnv, containerSecurityContext, serviceAccount annotations, probes, controller.statusMetricsPerObject", CK),
    Mutation("containerSecurityContext override ignored",
             lambda c: _sc(c, CK).pop("seLinuxOptions"),
             "chart knobs: fullnameOverride, extraEnv, containerSecurityContext, serviceAccount annotations, probes, controller.statusMetricsPerObject", CK),
    Mutation("probe override ignored",
             lambda c: _container(_docs(c, CK))["livenessProbe"].update(periodSeconds=10),
             "chart knobs: fullnameOverride, extraEnv, containerSecurityContext, serviceAccount annotations, probes, controller.statusMetricsPerObject", CK),
    Mutation("serviceAccount annotations ignored",
             lambda c: _agent(c, CK, "ServiceAccount")["metadata"].pop("annotations"),
             "chart knobs: fullnameOverride, extraEnv, containerSecurityContext, serviceAccount annotations, probes, controller.statusMetricsPerObject", CK),
    Mutation("fullnameOverride ignored by the DaemonSet",
             lambda c: _one(_docs(c, CK), "DaemonSet")["metadata"].update(name="knobs-reloadlet"),
             "chart knobs: fullnameOverride, extraEnv, containerSecurityContext, serviceAccount annotations, probes, controller.statusMetricsPerObject", CK),
    Mutation("a knob's value set by default",
             lambda c: _sc(c, CD).update(seLinuxOptions={"type": "spc_t"}),
             "chart knobs: fullnameOverride, extraEnv, containerSecurityContext, serviceAccount annotations, probes, controller.statusMetricsPerObject", CD),
    Mutation("ServiceMonitor on the wrong port",
             lambda c: _of_kind(_docs(c, CF), "ServiceMonitor")[0]["spec"]["endpoints"][0].update(port="http"),
             "servicemonitor: scrapes port metrics of the Service", CF),
    Mutation("chart passes --dry-run by default",
             lambda c: _container(_docs(c, CD)).setdefault("args", []).append("--dry-run"),
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


# --- reloadlet controller and its admission policy ----------------------------------
CS, CNP, CNC, KNP = "chart-secrets", "chart-no-policy", "chart-no-controller", "kustomize-no-policy"
OBJECTS = "objects: exactly the expected kinds and names"
CLUSTER_SCOPED = "objects: cluster-scoped objects carry no metadata.namespace"
C_RULES = ("controller rbac: ClusterRole exactly configmaps get/list/watch/patch, pods get/list/watch/patch,"
           " pods/eviction create, events create/patch, replicasets get, deployments/statefulsets/daemonsets"
           " get/patch, poddisruptionbudgets list/watch (+ secrets get/list/watch/patch with controller.secrets)")
C_SECRETS = "controller: Secrets list/watch and --secrets only with controller.secrets"
C_LEASE = "controller rbac: leases create, get/update on its own Lease, through a Role in its namespace"
C_BINDING = "controller rbac: bound to the controller's ServiceAccount only"
C_SC = "controller pod: non-root, read-only root fs, no privilege escalation, no added capabilities, seccomp RuntimeDefault"
C_HOST = "controller pod: no hostPID, hostNetwork, hostIPC or hostPath"
C_DOWNWARD = "controller pod: POD_NAME and POD_NAMESPACE from the downward API"
C_PROBES = "controller pod: liveness /healthz and readiness /readyz on port metrics"
C_RESOURCES = "controller pod: CPU and memory requests, a memory limit"
C_LINUX = "controller pod: Linux nodes only (nodeSelector kubernetes.io/os: linux)"
C_SELECTORS = "controller pod: agent and controller selectors never match each other's pods"
P_BINDING = "admission policy: bound with Deny, failurePolicy Fail, on pod UPDATEs"
P_CEL = "admission policy: CEL compiles; a nudge-only update by the controller passes, any other change is rejected"
P_WORKLOADS = ("admission policy: a workload update by the controller may change only the restartedAt and restarted-for"
               " template annotations and its rollout-pacing annotation, of a workload that asks")
P_DATA_VERSION = ("admission policy: a ConfigMap/Secret update by the controller may change only its"
                  " reloadlet.io/data-version annotation, in its format")
P_USER = "admission policy: applies to the controller's ServiceAccount (system:serviceaccount:<ns>:<name>) only"
AGREE = "agree: security-relevant fields identical"


def _c(ctx: Context, render: str, kind: str) -> dict:
    """The controller's object of this kind."""
    return _named(_docs(ctx, render), kind, ctx.renders[render].fullname + "-controller")


def _cpod_of(ctx: Context, render: str) -> dict:
    return _c(ctx, render, "Deployment")["spec"]["template"]["spec"]


def _cc(ctx: Context, render: str) -> dict:
    return _cpod_of(ctx, render)["containers"][0]


def _csc(ctx: Context, render: str) -> dict:
    return _cc(ctx, render).setdefault("securityContext", {})


def _env(ctx: Context, render: str, name: str) -> dict:
    return next(e for e in _cc(ctx, render)["env"] if e["name"] == name)


def _vap(ctx: Context, render: str, kind: str = "ValidatingAdmissionPolicy") -> dict:
    return _named(_docs(ctx, render), kind, ctx.renders[render].fullname + "-controller-nudge-only")


def _validation(ctx: Context, render: str, needle: str) -> dict:
    return next(v for v in _vap(ctx, render)["spec"]["validations"] if needle in v["expression"])


def _replace_in(obj: dict, key: str, old: str, new: str) -> None:
    assert old in obj[key], old
    obj[key] = obj[key].replace(old, new)


def _rm_rule(role: dict, resource: str) -> None:
    role["rules"] = [r for r in role["rules"] if resource not in r["resources"]]


def _drop_args(c: dict, arg: str) -> None:
    assert arg in c["args"], arg
    c["args"] = [a for a in c["args"] if a != arg]


def _bind_controller_role_to_agent(ctx: Context) -> None:
    _docs(ctx, K).append({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "reloadlet-extra"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reloadlet-controller"},
        "subjects": [{"kind": "ServiceAccount", "name": "reloadlet", "namespace": "reloadlet-system"}],
    })


MUTATIONS += [
    Mutation("the ValidatingAdmissionPolicy keeps kustomize's namespace",
             lambda c: _vap(c, K)["metadata"].update(namespace="reloadlet-system"),
             CLUSTER_SCOPED, K),
    Mutation("the policy binding of release 'prod' in apps-prod",
             lambda c: _vap(c, CR, "ValidatingAdmissionPolicyBinding")["metadata"].update(namespace="apps-prod"),
             CLUSTER_SCOPED, CR),
    Mutation("the admission policy rendered although controller.admissionPolicy=false",
             lambda c: _docs(c, CNP).append(_vap(c, CD)),
             OBJECTS, CNP),
    Mutation("a controller Deployment although controller.enabled=false",
             lambda c: _docs(c, CNC).append(_c(c, CD, "Deployment")),
             OBJECTS, CNC),
    Mutation("controller Deployment named like the agent",
             lambda c: _c(c, K, "Deployment")["metadata"].update(name="reloadlet"),
             OBJECTS, K),
    Mutation("the controller's ClusterRole also bound to the agent's ServiceAccount",
             _bind_controller_role_to_agent,
             "rbac: no ConfigMap or Secret access", K),
    Mutation("the agent's ServiceAccount added to the controller's binding",
             lambda c: _c(c, CD, "ClusterRoleBinding")["subjects"].append(
                 {"kind": "ServiceAccount", "name": "reloadlet", "namespace": "reloadlet-system"}),
             "rbac: the role is bound to the agent's ServiceAccount only", CD),
    Mutation("controller ClusterRole may delete Events",
             lambda c: _c(c, CD, "ClusterRole")["rules"].append(
                 {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["delete"]}),
             C_RULES, CD),
    Mutation("controller may delete pods",
             lambda c: _c(c, K, "ClusterRole")["rules"].append({"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}),
             C_RULES, K),
    Mutation("controller cannot re-read a pod after a 404/409 (no pods get)",
             lambda c: next(r for r in _c(c, CR, "ClusterRole")["rules"] if "pods" in r["resources"])["verbs"].remove("get"),
             C_RULES, CR),
    Mutation("controller may update ConfigMaps",
             lambda c: next(r for r in _c(c, K, "ClusterRole")["rules"] if "configmaps" in r["resources"])["verbs"].append("update"),
             C_RULES, K),
    Mutation("controller cannot evict (env consumers) without pods/eviction create",
             lambda c: _c(c, K, "ClusterRole").update(rules=[r for r in _c(c, K, "ClusterRole")["rules"] if "pods/eviction" not in r["resources"]]),
             C_RULES, K),
    Mutation("leases granted cluster-wide",
             lambda c: _c(c, CD, "ClusterRole")["rules"].append(
                 {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]}),
             C_LEASE, CD),
    Mutation("secrets list/watch without controller.secrets",
             lambda c: _c(c, K, "ClusterRole")["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]}),
             C_SECRETS, K),
    Mutation("--secrets passed without controller.secrets",
             lambda c: _cc(c, CD)["args"].append("--secrets"),
             C_SECRETS, CD),
    Mutation("controller.secrets=true without the --secrets flag",
             lambda c: _drop_args(_cc(c, CS), "--secrets"),
             C_SECRETS, CS),
    Mutation("controller.secrets=true without the secrets rule",
             lambda c: _rm_rule(_c(c, CS, "ClusterRole"), "secrets"),
             C_SECRETS, CS),
    Mutation("Lease get/update on any Lease of the namespace",
             lambda c: next(r for r in _c(c, K, "Role")["rules"] if r.get("resourceNames")).pop("resourceNames"),
             C_LEASE, K),
    Mutation("Lease delete",
             lambda c: _c(c, CD, "Role")["rules"][0]["verbs"].append("delete"),
             C_LEASE, CD),
    Mutation("the Lease RoleBinding in reloadlet-system for release 'prod' in apps-prod",
             lambda c: _c(c, CR, "RoleBinding")["subjects"][0].update(namespace="reloadlet-system"),
             C_LEASE, CR),
    Mutation("controller binding to the default ServiceAccount",
             lambda c: _c(c, K, "ClusterRoleBinding")["subjects"][0].update(name="default"),
             C_BINDING, K),
    Mutation("controller pods run as the agent's ServiceAccount",
             lambda c: _cpod_of(c, CD).update(serviceAccountName="reloadlet"),
             C_BINDING, CD),
    Mutation("controller runs as root",
             lambda c: _cpod_of(c, K)["securityContext"].update(runAsNonRoot=False, runAsUser=0),
             C_SC, K),
    Mutation("controller with a writable root filesystem",
             lambda c: _csc(c, CD).update(readOnlyRootFilesystem=False),
             C_SC, CD),
    Mutation("controller adds NET_ADMIN",
             lambda c: _csc(c, CR)["capabilities"].update(add=["NET_ADMIN"]),
             C_SC, CR),
    Mutation("controller allows privilege escalation",
             lambda c: _csc(c, K).pop("allowPrivilegeEscalation"),
             C_SC, K),
    Mutation("controller on the host network",
             lambda c: _cpod_of(c, K).update(hostNetwork=True),
             C_HOST, K),
    Mutation("controller mounts a hostPath",
             lambda c: _cpod_of(c, CD).update(volumes=[{"name": "run", "hostPath": {"path": "/var/run"}}]),
             C_HOST, CD),
    Mutation("POD_NAMESPACE as a literal (the Lease would follow a renamed namespace nowhere)",
             lambda c: (_env(c, K, "POD_NAMESPACE").pop("valueFrom"), _env(c, K, "POD_NAMESPACE").update(value="reloadlet-system")),
             C_DOWNWARD, K),
    Mutation("no POD_NAME (two replicas would share the hostname-less identity)",
             lambda c: _cc(c, CD).update(env=[e for e in _cc(c, CD)["env"] if e["name"] != "POD_NAME"]),
             C_DOWNWARD, CD),
    Mutation("controller liveness on /metrics",
             lambda c: _cc(c, K)["livenessProbe"]["httpGet"].update(path="/metrics"),
             C_PROBES, K),
    Mutation("controller without a readiness probe",
             lambda c: _cc(c, CD).pop("readinessProbe"),
             C_PROBES, CD),
    Mutation("controller without a memory limit",
             lambda c: _cc(c, K)["resources"].pop("limits"),
             C_RESOURCES, K),
    Mutation("controller may land on Windows nodes",
             lambda c: _cpod_of(c, K).pop("nodeSelector"),
             C_LINUX, K),
    Mutation("controller pods labelled app.kubernetes.io/name: reloadlet (the agent's Service scrapes them)",
             lambda c: _c(c, K, "Deployment")["spec"]["template"]["metadata"]["labels"].update({"app.kubernetes.io/name": "reloadlet"}),
             C_SELECTORS, K),
    Mutation("policy binding only warns",
             lambda c: _vap(c, K, "ValidatingAdmissionPolicyBinding")["spec"].update(validationActions=["Warn"]),
             P_BINDING, K),
    Mutation("policy failurePolicy Ignore",
             lambda c: _vap(c, CD)["spec"].update(failurePolicy="Ignore"),
             P_BINDING, CD),
    Mutation("binding names another policy",
             lambda c: _vap(c, CR, "ValidatingAdmissionPolicyBinding")["spec"].update(policyName="reloadlet-controller-nudge-only"),
             P_BINDING, CR),
    Mutation("policy ignores label changes",
             lambda c: _replace_in(_validation(c, K, "labels"), "expression",
                                   "object.metadata.?labels.orValue({}) == oldObject.metadata.?labels.orValue({}) &&", ""),
             P_CEL, K),
    Mutation("policy compares annotation keys only, not values",
             lambda c: _replace_in(_validation(c, CR, "variables.oldAnnotations.all"), "expression",
                                   "&& variables.oldAnnotations[k] == variables.newAnnotations[k]", ""),
             P_CEL, CR),
    Mutation("policy lets the spec change",
             lambda c: _replace_in(_validation(c, CD, "object.spec"), "expression", "object.spec == oldObject.spec &&", ""),
             P_CEL, CD),
    Mutation("controller may update (not only patch) Deployments",
             lambda c: next(r for r in _c(c, CD, "ClusterRole")["rules"] if "deployments" in r["resources"])["verbs"].append("update"),
             C_RULES, CD),
    Mutation("controller cannot follow PodDisruptionBudgets (on-blocked: rollout waits for its timeout)",
             lambda c: _c(c, CD, "ClusterRole").update(rules=[r for r in _c(c, CD, "ClusterRole")["rules"] if "poddisruptionbudgets" not in r["resources"]]),
             C_RULES, CD),
    Mutation("controller may change PodDisruptionBudgets",
             lambda c: next(r for r in _c(c, K, "ClusterRole")["rules"] if "poddisruptionbudgets" in r["resources"])["verbs"].append("patch"),
             C_RULES, K),
    Mutation("controller may delete pods through the rollout's workload rule",
             lambda c: _c(c, K, "ClusterRole")["rules"].append({"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["delete"]}),
             C_RULES, K),
    Mutation("policy lets a workload's replicas change",
             lambda c: _replace_in(_validation(c, K, "object.spec.?replicas"), "expression",
                                   "object.spec.?replicas == oldObject.spec.?replicas &&", ""),
             P_WORKLOADS, K),
    Mutation("policy lets any pod template annotation change",
             lambda c: _replace_in(_validation(c, CD, "variables.newTemplate.all"), "expression",
                                   "&& variables.oldTemplate[k] == variables.newTemplate[k]", ""),
             P_WORKLOADS, CD),
    Mutation("policy rolls any workload (no template grant)",
             lambda c: _replace_in(_validation(c, K, "variables.rollGranted"), "expression",
                                   "variables.rollGranted", "true"),
             P_WORKLOADS, K),
    Mutation("policy takes Reloader's annotations without --reloader-compat",
             lambda c: next(v for v in _vap(c, CD)["spec"]["variables"] if v["name"] == "reloaderCompat").update(expression="true"),
             P_WORKLOADS, CD),
    Mutation("policy takes reloadlet.io/action: evict alone as a grant",
             lambda c: _replace_in(next(v for v in _vap(c, K)["spec"]["variables"] if v["name"] == "rollGranted"), "expression",
                                   "variables.templateAction == 'evict' && variables.templateOnBlocked == 'rollout'",
                                   "variables.templateAction == 'evict'"),
             P_WORKLOADS, K),
    Mutation("policy takes a baseline without the controller's MAC",
             lambda c: _replace_in(_validation(c, CD, "mac="), "expression", ";mac=[0-9a-f]{32}$", "(;mac=[0-9a-f]{32})?$"),
             P_CEL, CD),
    Mutation("policy does not match StatefulSets",
             lambda c: [r["resources"].remove(x) for r in _vap(c, CR)["spec"]["matchConstraints"]["resourceRules"]
                        for x in ("statefulsets", "statefulsets/*") if x in r["resources"]],
             P_WORKLOADS, CR),
    Mutation("policy accepts any restartedAt",
             lambda c: _replace_in(_validation(c, K, "variables.restartedAt].matches"), "expression",
                                   "variables.newTemplate[variables.restartedAt].matches(", "true || variables.newTemplate[variables.restartedAt].matches("),
             P_WORKLOADS, K),
    Mutation("policy lets any of a workload's own annotations change",
             lambda c: _replace_in(_validation(c, K, "k == variables.rolloutPacing"), "expression",
                                   "variables.oldAnnotations[k] == variables.newAnnotations[k]", "true"),
             P_WORKLOADS, K),
    Mutation("policy accepts any rollout-pacing value",
             lambda c: _replace_in(_validation(c, CD, "rolloutPacing].size()"), "expression",
                                   "variables.newAnnotations[variables.rolloutPacing].size() <= 4096 &&", "true ||"),
             P_WORKLOADS, CD),
    Mutation("policy accepts any env-pacing value",
             lambda c: _replace_in(_validation(c, K, "envPacing].size()"), "expression",
                                   "variables.newAnnotations[variables.envPacing].size() <= 4096 &&", "true ||"),
             P_CEL, K),
    Mutation("policy accepts a restart grant that is not the pod's request",
             lambda c: _replace_in(_validation(c, K, "variables.restartRequest in variables.newAnnotations"), "expression",
                                   "variables.newAnnotations[variables.restartRequest] == variables.newAnnotations[variables.restartGrant]",
                                   "true"),
             P_CEL, K),
    Mutation("policy lets the controller remove a restart grant",
             lambda c: _replace_in(_validation(c, CD, "variables.restartRequest in variables.newAnnotations"), "expression",
                                   "!(variables.restartGrant in variables.oldAnnotations))", "true)"),
             P_CEL, CD),
    Mutation("policy accepts any restart request id from the controller",
             lambda c: _replace_in(_validation(c, K, "variables.envRestarts &&"), "expression",
                                   "variables.newAnnotations[variables.restartRequest].matches(", "true || variables.newAnnotations[variables.restartRequest].matches("),
             P_CEL, K),
    Mutation("policy lets the controller request a restart of any pod",
             lambda c: _replace_in(_validation(c, CD, "variables.envRestarts &&"), "expression",
                                   "variables.envRestarts &&", ""),
             P_CEL, CD),
    Mutation("policy lets the controller remove a restart request",
             lambda c: _replace_in(_validation(c, K, "variables.envRestarts &&"), "expression",
                                   "!(variables.restartRequest in variables.oldAnnotations))", "true)"),
             P_CEL, K),
    Mutation("policy lets the controller change a ConfigMap's data",
             lambda c: _replace_in(_validation(c, K, "object.?data == oldObject.?data"), "expression",
                                   "object.?data == oldObject.?data &&", ""),
             P_DATA_VERSION, K),
    Mutation("policy lets the controller change any annotation of a ConfigMap/Secret",
             lambda c: _replace_in(_validation(c, CD, "k == variables.dataVersion ||"), "expression",
                                   "variables.oldAnnotations[k] == variables.newAnnotations[k]", "true"),
             P_DATA_VERSION, CD),
    Mutation("policy accepts any data-version value",
             lambda c: _replace_in(_validation(c, CR, "variables.dataVersion].matches"), "expression",
                                   "variables.newAnnotations[variables.dataVersion].matches(",
                                   "true || variables.newAnnotations[variables.dataVersion].matches("),
             P_DATA_VERSION, CR),
    Mutation("controller cannot publish data versions (no configmaps patch)",
             lambda c: next(r for r in _c(c, K, "ClusterRole")["rules"] if "configmaps" in r["resources"])["verbs"].remove("patch"),
             C_RULES, K),
    Mutation("policy lets the controller remove any pod annotation",
             lambda c: _replace_in(_validation(c, CD, "variables.oldAnnotations.all(k, k == variables.nudge"), "expression",
                                   "k == variables.applied || k in variables.newAnnotations)", "true)"),
             P_CEL, CD),
    Mutation("policy without the subresource rule",
             lambda c: _vap(c, K)["spec"].update(validations=[v for v in _vap(c, K)["spec"]["validations"]
                                                              if "subResource" not in v["expression"]]),
             P_CEL, K),
    Mutation("a CEL syntax error",
             lambda c: _replace_in(_validation(c, CD, "matches"), "expression", "matches(", "matches(("),
             P_CEL, CD),
    Mutation("a CEL field that requests do not have (request.subresource)",
             lambda c: _replace_in(_validation(c, K, "subResource"), "expression", "request.subResource", "request.subresource"),
             P_CEL, K),
    Mutation("release 'prod' in apps-prod: the policy matches reloadlet-system's ServiceAccount",
             lambda c: _replace_in(_vap(c, CR)["spec"]["matchConditions"][0], "expression", ":apps-prod:", ":reloadlet-system:"),
             P_USER, CR),
    Mutation("policy matches every ServiceAccount",
             lambda c: _vap(c, K)["spec"]["matchConditions"][0].update(
                 expression="request.userInfo.username.startsWith('system:serviceaccount:')"),
             P_USER, K),
    Mutation("chart controller privileged, kustomize's not",
             lambda c: _csc(c, CD).update(privileged=True),
             AGREE, f"{K} vs {CD}"),
    Mutation("chart admission policy message drifts from kustomize's",
             lambda c: _vap(c, CD)["spec"]["validations"][0].update(message="no"),
             AGREE, f"{K} vs {CD}"),
]


# --- controller.reloaderCompat and controller.rollout.argoRollouts --------------------
CC, CA = "chart-compat", "chart-argo"
C_COMPAT = "controller: workloads list/watch and --reloader-compat only with controller.reloaderCompat"
P_ARGO = ("admission policy: with Argo Rollouts, an update of a Rollout by the controller may change only"
          " spec.restartAt (and never restartAt of another workload)")

MUTATIONS += [
    Mutation("deployments list/watch without controller.reloaderCompat",
             lambda c: _c(c, CD, "ClusterRole")["rules"].append(
                 {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"]}),
             C_COMPAT, CD),
    Mutation("controller.reloaderCompat, but the policy refuses Reloader's workloads",
             lambda c: next(v for v in _vap(c, CC)["spec"]["variables"] if v["name"] == "reloaderCompat").update(expression="false"),
             "admission policy: a workload update by the controller may change only the restartedAt and restarted-for"
             " template annotations and its rollout-pacing annotation, of a workload that asks", CC),
    Mutation("controller.reloaderCompat without --reloader-compat",
             lambda c: _drop_args(_cc(c, CC), "--reloader-compat"),
             C_COMPAT, CC),
    Mutation("a Rollout's workloadRef left open",
             lambda c: _replace_in(_validation(c, CA, "workloadRef"), "expression",
                                   "object.spec.?workloadRef == oldObject.spec.?workloadRef", "true"),
             P_ARGO, CA),
    Mutation("spec.restartAt allowed on every workload",
             lambda c: _replace_in(_validation(c, K, "variables.isArgoRollout ||"), "expression",
                                   "variables.isArgoRollout ||", "true ||"),
             P_ARGO, K),
]


# --- the agent's admission policy (its reloadlet.io/applied record) --------------------
A_BINDING = "agent admission policy: bound with Deny, failurePolicy Fail, on pod UPDATEs and their subresources"
A_CEL = ("agent admission policy: CEL compiles; a record on its own node's pod passes, another node's pod,"
         " another annotation, a label or a spec change is rejected; through pods/status only the drain"
         " gate's condition, True or False, on a pod that declares it")


def _avap(ctx: Context, render: str, kind: str = "ValidatingAdmissionPolicy") -> dict:
    return _named(_docs(ctx, render), kind, ctx.renders[render].fullname + "-agent-applied-only")


def _avalidation(ctx: Context, render: str, needle: str) -> dict:
    return next(v for v in _avap(ctx, render)["spec"]["validations"] if needle in v["expression"])


MUTATIONS += [
    Mutation("agent policy binding only warns",
             lambda c: _avap(c, K, "ValidatingAdmissionPolicyBinding")["spec"].update(validationActions=["Warn"]),
             A_BINDING, K),
    Mutation("agent policy failurePolicy Ignore",
             lambda c: _avap(c, CD)["spec"].update(failurePolicy="Ignore"),
             A_BINDING, CD),
    Mutation("agent policy does not see pod subresources",
             lambda c: _avap(c, CD)["spec"]["matchConstraints"]["resourceRules"][0].update(resources=["pods"]),
             A_BINDING, CD),
    Mutation("agent policy lets another node's pods be written",
             lambda c: _replace_in(_avalidation(c, K, "tokenNode"), "expression",
                                   "oldObject.spec.?nodeName.orValue('') == variables.tokenNode[0]", "true"),
             A_CEL, K),
    Mutation("agent policy lets the spec change",
             lambda c: _replace_in(_avalidation(c, CD, "object.spec"), "expression", "object.spec == oldObject.spec &&", ""),
             A_CEL, CD),
    Mutation("agent policy compares annotation keys only, not values",
             lambda c: _replace_in(_avalidation(c, K, "variables.oldAnnotations.all"), "expression",
                                   "&& variables.oldAnnotations[k] == variables.newAnnotations[k]", ""),
             A_CEL, K),
    Mutation("agent policy takes a record of any length",
             lambda c: _replace_in(_avalidation(c, CD, "8192"), "expression",
                                   "variables.newAnnotations[variables.applied].size() <= 8192 &&", ""),
             A_CEL, CD),
    Mutation("agent policy applies to every user",
             lambda c: _avap(c, K)["spec"]["matchConditions"][0].update(expression="true"),
             A_CEL, K),
]
