//! `reloadlet explain --pod NS/NAME`: what reloadlet would do for a pod, and why (pure report;
//! the caller supplies the main PIDs it could find, the node, and the PDBs).

use crate::core::annotations::Action;
use crate::core::filters::Scope;
use crate::core::model::{ContainerKind, PodInfo, SourceRef};
use crate::core::policy::{self, Decision};
use crate::host::process::{decide, describe, SignalStatus, Verdict};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// What `explain` knows beyond the pod itself.
pub struct Context<'a> {
    /// The agent's filters and `--dry-run`, read from the same flags/environment as the agent.
    pub scope: &'a Scope,
    /// `spec.nodeName` of the pod.
    pub pod_node: Option<&'a str>,
    /// Set when the pod runs on another node than this agent's.
    pub other_node: Option<OtherNode>,
    /// Names of the PodDisruptionBudgets that select the pod, or why they could not be read;
    /// `None`: not looked up.
    pub budgets: Option<Result<Vec<String>, String>>,
}

impl<'a> Context<'a> {
    /// Nothing known but the filters.
    pub fn new(scope: &'a Scope) -> Self {
        Self {
            scope,
            pod_node: None,
            other_node: None,
            budgets: None,
        }
    }
}

/// The pod is on `node`; `command` reaches that node's agent.
#[derive(Clone, Debug)]
pub struct OtherNode {
    pub node: String,
    pub command: String,
}

/// The commands that find and ask the agent of `node` (`labels`: the agent pods' labels).
pub fn reach_agent_command(
    agent_namespace: &str,
    labels: &BTreeMap<String, String>,
    node: &str,
    pod: &str,
) -> String {
    let selector: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let get = format!(
        "kubectl -n {agent_namespace} get pod -l {} --field-selector spec.nodeName={node}",
        selector.join(",")
    );
    format!("{get}\n      kubectl -n {agent_namespace} exec $({get} -o name) -- reloadlet explain --pod {pod}")
}

/// `env_only`: ConfigMaps/Secrets the pod uses only through env vars (they never reload).
/// `main_pid(container)`: the container's main process, or why it was not found.
pub fn report(
    pod: &PodInfo,
    ctx: &Context<'_>,
    env_only: &[SourceRef],
    main_pid: &dyn Fn(&str) -> Result<MainProcessView, String>,
) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "pod {} (uid {})", pod.full_name(), pod.uid);
    if let Some(reason) = ctx.scope.check(&pod.namespace, &pod.labels) {
        let _ = writeln!(
            w,
            "  not acted on: {reason}; reloadlet never touches this pod"
        );
        return out;
    }
    if let Some(other) = &ctx.other_node {
        let _ = writeln!(
            w,
            "  runs on node {}, not on this agent's node: its containers are not visible here; the agent of node {} acts on it. Ask it:\n      {}",
            other.node, other.node, other.command
        );
    } else if let Some(node) = ctx.pod_node {
        let _ = writeln!(w, "  node: {node}");
    } else {
        let _ = writeln!(w, "  node: not scheduled yet");
    }
    if ctx.scope.dry_run {
        let _ = writeln!(
            w,
            "  DRY-RUN (--dry-run / RELOADLET_DRY_RUN): reloadlet only logs what it would do; no signal is sent, evictions are sent with dryRun=All"
        );
    }
    let policy = match policy::validated_policy(pod) {
        Ok(None) => {
            let _ = writeln!(w, "  not opted in: no reloadlet.io/action annotation; reloadlet never touches this pod");
            return out;
        }
        Err(message) => {
            let _ = writeln!(
                w,
                "  INVALID annotation: {message}\n  no action will be taken until it is fixed"
            );
            return out;
        }
        Ok(Some(p)) => p,
    };
    match &policy.action {
        Action::Signal { signal, .. } => {
            let _ = writeln!(w, "  action: signal {signal}");
        }
        Action::Http(spec) => {
            let host = pod
                .pod_ip
                .map(crate::execute::http::host)
                .unwrap_or_else(|| "<no pod IP yet>".into());
            let _ = writeln!(
                w,
                "  action: http {} {}://{host}:{}{}{}",
                spec.method.as_str(),
                spec.scheme.as_str(),
                spec.port,
                spec.path,
                if spec.body.is_empty() {
                    String::new()
                } else {
                    format!(" with body {:?}", spec.body)
                }
            );
        }
        Action::Rollout => {
            let _ = writeln!(
                w,
                "  action: rollout — reloadlet controller patches the owning workload's pod template (kubectl.kubernetes.io/restartedAt) once per change; the node agent never signals, evicts or calls this pod"
            );
            if !pod.has_controller {
                let _ = writeln!(w, "  WARNING (RolloutUnsupported): the pod has no controlling owner; nothing will roll it");
            }
        }
        Action::Evict { allow_unowned } => {
            let _ = writeln!(
                w,
                "  action: evict through the Eviction API (PodDisruptionBudgets apply){}",
                if *allow_unowned {
                    "; unowned pods allowed"
                } else {
                    ""
                }
            );
            if !pod.has_controller && !allow_unowned {
                let _ = writeln!(w, "  WARNING: the pod has no controller; evictions will be refused (set reloadlet.io/evict-unowned: \"true\")");
            }
            match &ctx.budgets {
                Some(Ok(names)) if names.is_empty() => {
                    let _ = writeln!(
                        w,
                        "  WARNING (NoDisruptionBudget): {}",
                        crate::core::disruption_budgets::no_budget_note()
                    );
                }
                Some(Ok(names)) => {
                    let _ = writeln!(w, "  protected by PodDisruptionBudget {}", names.join(", "));
                }
                Some(Err(e)) => {
                    let _ = writeln!(w, "  PodDisruptionBudgets could not be read: {e}");
                }
                None => {}
            }
        }
    }
    let _ = writeln!(w, "  volumes:");
    for v in &pod.volumes {
        let changed: BTreeSet<String> = [v.name.clone()].into();
        let decision = policy::decide(pod, &changed);
        let sources: Vec<String> = v.sources.iter().map(ToString::to_string).collect();
        let verdict = match &decision {
            Decision::Signal {
                targets, signal, ..
            } => format!(
                "triggers {signal} to {}",
                targets
                    .iter()
                    .map(|t| t.container.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Decision::Evict { .. } => "triggers an eviction".into(),
            Decision::Http { target, .. } => format!(
                "triggers {} {} on port {}",
                target.spec.method.as_str(),
                target.spec.path,
                target.port
            ),
            Decision::EvictRefused { .. } => {
                "would trigger an eviction, refused (unowned pod)".into()
            }
            Decision::SubPathOnly { .. } => {
                "WARNING: mounted only through subPath, never updated by the kubelet".into()
            }
            Decision::NothingToDo { reason } => format!("does not trigger: {reason}"),
            other => format!("{other:?}"),
        };
        let _ = writeln!(w, "    {} [{}]: {verdict}", v.name, sources.join(", "));
        for source in &v.sources {
            if source.kind == crate::core::model::SourceKind::ConfigMap
                && source.name == crate::core::model::ROOT_CA_CONFIGMAP
                && !policy::source_counts(pod, source)
            {
                let _ = writeln!(
                    w,
                    "      {source}: never triggers (a cluster CA rotation would reload every pod at once); name it in reloadlet.io/configmaps to count it"
                );
            }
        }
        if !v.other_paths.is_empty() {
            let _ = writeln!(
                w,
                "      not hashed (downwardAPI / serviceAccountToken / clusterTrustBundle files, rewritten on a label edit or token refresh): {}",
                v.other_paths.join(", ")
            );
        }
    }
    if !env_only.is_empty() {
        let names: Vec<String> = env_only.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            w,
            "  WARNING: used only as environment variables, which never change in a running container: {}",
            names.join(", ")
        );
    }
    let _ = writeln!(w, "  containers:");
    if let Some(other) = &ctx.other_node {
        for c in pod
            .containers
            .iter()
            .filter(|c| c.kind != ContainerKind::Init)
        {
            let _ = writeln!(
                w,
                "    {}: on node {}; run explain in that node's agent to see its main process",
                c.name, other.node
            );
        }
        return out;
    }
    for c in pod
        .containers
        .iter()
        .filter(|c| c.kind != ContainerKind::Init)
    {
        let pid = match main_pid(&c.name) {
            Ok(main) => format!(
                "main pid {}{}",
                main.pid,
                signal_check_note(&policy.action, &main)
            ),
            Err(e) => format!("main process not found: {e}"),
        };
        let id = c
            .container_id
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_else(|| "no container id yet".into());
        let _ = writeln!(w, "    {} ({id}): {pid}", c.name);
    }
    out
}

/// What `explain` could learn about a container's main process.
#[derive(Clone, Debug)]
pub struct MainProcessView {
    pub pid: i32,
    /// Its `/proc/<pid>/status` signal masks, or why they could not be read.
    pub status: Result<SignalStatus, String>,
}

/// The signal-check part of a container's line: what a signal sent now would do, decided
/// exactly as the agent decides it before signalling. Empty unless the action is `signal`.
pub fn signal_check_note(action: &Action, main: &MainProcessView) -> String {
    let Action::Signal { signal, check } = *action else {
        return String::new();
    };
    let status = match &main.status {
        Ok(status) => status,
        Err(e) => return format!("\n      {signal}: cannot tell whether it is handled: {e}"),
    };
    let verdict = decide(status, signal, check);
    let what = describe(status, main.pid, signal, verdict);
    let fate = match verdict {
        Verdict::Send(_) => "sent, Event Signaled",
        Verdict::SendUnhandled(_) => "sent, Warning SignalNotHandled",
        Verdict::Withhold(_) => "NOT sent, Warning SignalNotHandled",
    };
    format!("\n      on a change: {signal} {fate}: {what}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{ContainerInfo, SourceKind, VolumeMount, VolumeSpec};

    #[test]
    fn explains_targets_warnings_and_pids() {
        let pod = PodInfo {
            uid: "u1".into(),
            namespace: "web".into(),
            name: "nginx-0".into(),
            annotations: [("reloadlet.io/action".to_string(), "signal".to_string())].into(),
            volumes: vec![
                VolumeSpec {
                    name: "conf".into(),
                    sources: vec![SourceRef {
                        kind: SourceKind::ConfigMap,
                        name: "nginx-conf".into(),
                    }],
                    service_account_token: false,
                    ..Default::default()
                },
                VolumeSpec {
                    name: "kube-api-access-1".into(),
                    sources: vec![SourceRef {
                        kind: SourceKind::ConfigMap,
                        name: "kube-root-ca.crt".into(),
                    }],
                    service_account_token: true,
                    other_paths: vec!["token".into(), "namespace".into()],
                    ..Default::default()
                },
            ],
            containers: vec![ContainerInfo {
                name: "nginx".into(),
                kind: ContainerKind::Regular,
                mounts: vec![VolumeMount {
                    volume: "conf".into(),
                    sub_path: false,
                }],
                container_id: None,
                running: false,
                ports: Vec::new(),
            }],
            has_controller: true,
            ..Default::default()
        };
        let env = [SourceRef {
            kind: SourceKind::Secret,
            name: "db".into(),
        }];
        let handler = SignalStatus {
            name: "nginx".into(),
            caught: 1,
            ns_pid: Some(1),
            ..Default::default()
        };
        let view = |status: &SignalStatus| MainProcessView {
            pid: 4242,
            status: Ok(status.clone()),
        };
        let scope = Scope::default();
        let ctx = Context::new(&scope);
        let text = report(&pod, &ctx, &env, &|_| Ok(view(&handler)));
        assert!(text.contains("action: signal SIGHUP"), "{text}");
        assert!(
            text.contains("conf [configmap nginx-conf]: triggers SIGHUP to nginx"),
            "{text}"
        );
        assert!(
            text.contains("configmap kube-root-ca.crt: never triggers (a cluster CA rotation"),
            "{text}"
        );
        assert!(
            text.contains("not hashed (downwardAPI / serviceAccountToken / clusterTrustBundle files, rewritten on a label edit or token refresh): token, namespace"),
            "{text}"
        );
        assert!(
            text.contains("environment variables") && text.contains("secret db"),
            "{text}"
        );
        assert!(text.contains("main pid 4242"), "{text}");
        assert!(
            text.contains("on a change: SIGHUP sent, Event Signaled: pid 1 (nginx) (host pid 4242) has a handler for SIGHUP"),
            "{text}"
        );
        let shared_sleep = SignalStatus {
            name: "sleep".into(),
            ns_pid: Some(7),
            ..Default::default()
        };
        let text = report(&pod, &ctx, &[], &|_| Ok(view(&shared_sleep)));
        assert!(
            text.contains("on a change: SIGHUP NOT sent, Warning SignalNotHandled: process sleep (pid 4242) has no handler for SIGHUP and is not PID 1 of its PID namespace: SIGHUP would terminate the process"),
            "{text}"
        );
        let excluded = Scope {
            namespaces: crate::core::filters::NamespaceFilter {
                exclude: ["web".to_string()].into(),
                ..Default::default()
            },
            ..Default::default()
        };
        let ctx = Context::new(&excluded);
        assert!(report(&pod, &ctx, &[], &|_| Ok(view(&handler))).contains("not acted on"));
    }
}
