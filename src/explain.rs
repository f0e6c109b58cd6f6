//! `reloadlet explain --pod NS/NAME`: what reloadlet would do for a pod, and why (pure report;
//! the caller supplies the main PIDs it could find, the node, and the PDBs).

use crate::core::annotations::Action;
use crate::core::disposition::{decide, describe, SignalStatus, Verdict};
use crate::core::disruption_budgets::{Block, Coverage};
use crate::core::filters::Scope;
use crate::core::model::{ContainerKind, PodInfo, SourceRef};
use crate::core::policy::{self, Decision};
use crate::ports::{ApiError, ProcessError};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

mod restart_grant;
pub use restart_grant::LeaseSeen;

/// What `explain` knows beyond the pod itself.
pub struct Context<'a> {
    /// The agent's filters and `--dry-run`, read from the same flags/environment as the agent.
    pub scope: &'a Scope,
    /// `spec.nodeName` of the pod.
    pub pod_node: Option<&'a str>,
    /// Set when the pod runs on another node than this agent's.
    pub other_node: Option<OtherNode>,
    /// The PodDisruptionBudgets that select the pod (with their status), or why they could
    /// not be read; `None`: not looked up.
    pub budgets: Option<Result<Coverage, ApiError>>,
    /// The controller's Lease (who grants `action: restart`); `None`: not looked up.
    pub lease: Option<LeaseSeen>,
    /// Whether the pod is the only pod of its owner (`action: restart`: a restart leaves no
    /// Ready pod), or why the namespace's pods could not be read; `None`: not looked up.
    pub only_pod: Option<Result<bool, ApiError>>,
}

impl<'a> Context<'a> {
    /// Nothing known but the filters.
    pub fn new(scope: &'a Scope) -> Self {
        Self {
            scope,
            pod_node: None,
            other_node: None,
            budgets: None,
            lease: None,
            only_pod: None,
        }
    }
}

/// The budget section of an evict pod: which PodDisruptionBudget, its arithmetic, whether a
/// block is structural, and what the agent will do about it (`reloadlet.io/on-blocked`).
fn budget_lines(w: &mut String, pod: &PodInfo, budgets: &Result<Coverage, ApiError>) {
    use crate::core::rollout::{on_blocked, OnBlocked};
    let (name, status) = match budgets {
        Err(e) => {
            let _ = writeln!(w, "  PodDisruptionBudgets could not be read: {e}");
            return;
        }
        Ok(Coverage::None) => {
            let _ = writeln!(
                w,
                "  WARNING (NoDisruptionBudget): {}",
                crate::core::disruption_budgets::no_budget_note()
            );
            return;
        }
        Ok(Coverage::Several(names)) => {
            let _ = writeln!(w, "  WARNING: selected by more than one PodDisruptionBudget ({}): the Eviction API refuses to evict such a pod (500) until only one selects it", names.join(", "));
            return;
        }
        Ok(Coverage::One { name, status }) => (name, status),
    };
    let _ = writeln!(w, "  protected by PodDisruptionBudget {name}");
    let Some(status) = status else {
        let _ = writeln!(w, "    status: not yet processed by the disruption controller (observedGeneration behind); evictions wait for it");
        return;
    };
    let _ = writeln!(w, "    {}", status.arithmetic());
    let Ok((mode, timeout)) = on_blocked(&pod.annotations) else {
        return; // the annotation error is printed with the policy
    };
    let timeout = humantime::format_duration(timeout);
    let then = match (status.block(), mode) {
        (None, _) => "an eviction is allowed now".to_owned(),
        (Some(Block::Structural), OnBlocked::Wait) => format!(
            "structural block: {}\n    on a change (on-blocked: wait): Warning EvictionBlocked at once, the eviction asked again every 5m until the budget or the replicas change",
            status.structural_note(name)
        ),
        (Some(Block::Structural), OnBlocked::Rollout) => format!(
            "structural block: {}\n    on a change (on-blocked: rollout): no eviction is sent; Normal EvictionHandedOff, reloadlet controller rolls the pod's workload at once (it follows the same budget; within a second of the change)",
            status.structural_note(name)
        ),
        (Some(Block::Transient), OnBlocked::Wait) => "transient block (a pod not healthy yet, or another eviction in flight): the eviction is retried with the usual backoff until it passes (on-blocked: wait)".to_owned(),
        (Some(Block::Transient), OnBlocked::Rollout) => format!("transient block (a pod not healthy yet, or another eviction in flight): the eviction is retried with the usual backoff; if the block outlasts blocked-timeout {timeout}, reloadlet controller rolls the pod's workload (on-blocked: rollout)"),
    };
    let _ = writeln!(w, "    {then}");
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
    main_pid: &dyn Fn(&str) -> Result<MainProcessView, MainPidError>,
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
        Action::Restart(spec) => {
            let _ = writeln!(
                w,
                "  action: restart in place — the node agent stops the containers' main processes (stop signal, SIGKILL after the grace; preStop hooks do not run) and the kubelet starts them again in the same pod (same UID and IP, restartCount + 1); a container restarts at most once per {} (the kubelet's crash-loop window), later changes are deferred",
                humantime::format_duration(crate::core::restart::MIN_SPACING)
            );
            let _ = writeln!(
                w,
                "  restart timeout: {} (Ready again within it)",
                humantime::format_duration(spec.timeout)
            );
            let _ = if crate::core::restart::declares_drain_gate(pod) {
                writeln!(
                    w,
                    "  drain: readiness gate {} set False {} before the stop signal (Services stop sending traffic), True again once the container is ready (docs/restart.md)",
                    crate::core::restart::DRAIN_GATE,
                    humantime::format_duration(spec.drain)
                )
            } else {
                writeln!(
                    w,
                    "  drain: none — the pod has no readiness gate {}; requests routed to it while it stops fail",
                    crate::core::restart::DRAIN_GATE
                )
            };
            if let Some(why) = crate::core::restart::refusal(pod) {
                let _ = writeln!(w, "  WARNING (RestartRefused): {why}");
            }
            let _ = writeln!(w, "  NOTE: the restarted pod is not Ready for a moment; with one replica, or a budget that allows no disruption, that is a moment without a Ready pod");
            restart_grant::lines(w, pod, ctx.lease.as_ref(), ctx.budgets.as_ref());
            restart_grant::only_pod(w, pod, ctx.only_pod.as_ref());
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
            if let Some(budgets) = &ctx.budgets {
                budget_lines(w, pod, budgets);
            }
        }
    }
    let _ = writeln!(w, "  volumes:");
    for v in &pod.volumes {
        let changed: BTreeSet<String> = [v.name.clone()].into();
        let decision = policy::decide(pod, &changed);
        let mut sources: Vec<String> = v.sources.iter().map(ToString::to_string).collect();
        if let Some(csi) = &v.csi {
            sources.push(SourceRef::csi(&v.name, csi).to_string());
        }
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
            Decision::Restart { targets, .. } => format!(
                "triggers a restart of {}",
                targets
                    .iter()
                    .map(|t| format!(
                        "{} ({}, SIGKILL after {})",
                        t.target.container,
                        t.stop.signal,
                        humantime::format_duration(t.stop.grace)
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Decision::RestartRefused { message, .. } => {
                format!("WARNING (RestartRefused): {message}")
            }
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
            if source.kind == crate::core::model::SourceKind::PodCertificate {
                let _ = if policy::source_counts(pod, source) {
                    writeln!(
                        w,
                        "      {source}: a rotation (a new key and chain) triggers the action (reloadlet.io/pod-certificates)"
                    )
                } else {
                    writeln!(
                        w,
                        "      {source}: a rotation never triggers; name the signer in reloadlet.io/pod-certificates to count it"
                    )
                };
            }
        }
        if let Some(csi) = &v.csi {
            let _ = writeln!(w, "{}", csi_note(&policy, &v.name, csi));
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

/// The pod's pacing (docs/pacing.md): what its annotations mean over the flags, and the next
/// maintenance window in its zone. The agent's live state (what is deferred, whether the pod
/// is held as flapping) is not read here: its Events and pacing metrics show it.
///
/// `saved`: the pod's pacer from the agent's state file, when it could be read (it is written
/// a second or so after each change, so it may lag the live agent a little).
pub fn pacing(
    pod: &PodInfo,
    defaults: &crate::core::pacing::PacingDefaults,
    saved: Option<&crate::core::pacing::Pacer>,
    now: jiff::Timestamp,
) -> String {
    use crate::core::pacing::{spec, PacingSpec, WindowActions};
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "  pacing:");
    let spec = match PacingSpec::parse(&pod.annotations, defaults) {
        Ok(spec) => spec,
        Err(e) => {
            let _ = writeln!(
                w,
                "    INVALID: {e}; no action on this pod until it is fixed"
            );
            return out;
        }
    };
    let human = |d: std::time::Duration| humantime::format_duration(d).to_string();
    match pod.annotations.get(spec::DEBOUNCE) {
        Some(_) => {
            let _ = writeln!(
                w,
                "    debounce: {} after the last change ({})",
                human(spec.debounce),
                spec::DEBOUNCE
            );
        }
        None => {
            let _ = writeln!(w, "    debounce: the agent's --debounce");
        }
    }
    if spec.min_interval.is_zero() {
        let _ = writeln!(w, "    minimum interval: none");
    } else {
        let _ = writeln!(
            w,
            "    minimum interval: {} between two actions",
            human(spec.min_interval)
        );
    }
    match spec.flap {
        Some(f) => {
            let _ = writeln!(
                w,
                "    flap breaker: more than {} actions within {} hold the pod until its sources are quiet for {}",
                f.count,
                human(f.window),
                human(f.window)
            );
        }
        None => {
            let _ = writeln!(w, "    flap breaker: off");
        }
    }
    match &spec.window {
        None => {
            let _ = writeln!(w, "    maintenance window: none (actions run when due)");
        }
        Some((window, actions)) => {
            let held = match actions {
                WindowActions::Disruptive => "evictions",
                WindowActions::All => "every action",
            };
            let pattern = pod.annotations.get(spec::WINDOW).map_or("", String::as_str);
            let state = match window.closes(now) {
                Some(closes) => format!("open now, until {closes}"),
                None => format!("next opens {}", window.describe_next(now)),
            };
            let _ = writeln!(
                w,
                "    maintenance window: {pattern:?} in {}, holds {held}; {state}",
                window.zone_name()
            );
            if let Some(max) = spec.max_defer {
                let _ = writeln!(
                    w,
                    "    a deferred action runs at the latest {} after its change (--max-defer)",
                    human(max)
                );
            }
        }
    }
    match saved {
        None => {
            let _ = writeln!(w, "    deferred now / held as flapping: nothing saved by this node's agent (see the pod's ReloadDeferred and ReloadFlapping Events)");
        }
        Some(pacer) => saved_state(w, pod, &spec, pacer, now),
    }
    out
}

/// What the agent's saved pacer says: what is pending and until when, an open episode.
fn saved_state(
    w: &mut String,
    pod: &PodInfo,
    spec: &crate::core::pacing::PacingSpec,
    pacer: &crate::core::pacing::Pacer,
    now: jiff::Timestamp,
) {
    use crate::core::pacing::{ActionClass, Step};
    if let Some(last) = pacer.last_action() {
        let _ = writeln!(w, "    last action: {last}");
    }
    let class = match policy::validated_policy(pod) {
        Ok(Some(p)) if matches!(p.action, Action::Evict { .. }) => ActionClass::Disruptive,
        _ => ActionClass::InPlace,
    };
    // A copy: explain changes nothing.
    let mut pacer = pacer.clone();
    let line = match pacer.poll(spec, class, now) {
        Step::Idle => "nothing deferred".to_owned(),
        Step::Act => "a change is due now".to_owned(),
        Step::Wait { at } => format!("a change waits for quiet until {at} (debounce)"),
        Step::Defer { until, why, .. } => {
            format!("a change is deferred until {until} ({})", why.as_str())
        }
        Step::Flapping { until, .. } => {
            format!("held as flapping until its sources are quiet, at the earliest {until}")
        }
    };
    let _ = writeln!(w, "    {line} (as last saved by this node's agent)");
}

/// What `explain` could learn about a container's main process.
#[derive(Debug)]
pub struct MainProcessView {
    pub pid: i32,
    /// Its `/proc/<pid>/status` signal masks, or why they could not be read.
    pub status: Result<SignalStatus, ProcessError>,
}

/// Why `explain` shows no main process for a container.
#[derive(Debug, thiserror::Error)]
pub enum MainPidError {
    /// The pod has no container of that name.
    #[error("unknown container")]
    UnknownContainer,
    /// The container has not started yet.
    #[error("no container id yet")]
    NoContainerId,
    #[error(transparent)]
    Process(#[from] ProcessError),
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

/// The lines of a CSI volume (docs/csi.md): its driver and class, whether it counts, and why
/// fast projection has no part in it.
fn csi_note(
    policy: &crate::core::annotations::PodPolicy,
    volume: &str,
    csi: &crate::core::model::CsiVolumeSpec,
) -> String {
    let class = csi
        .class
        .as_ref()
        .map(|c| format!(", SecretProviderClass {c}"))
        .unwrap_or_default();
    let counts = if policy::csi_counts(policy, volume, csi) {
        "counts"
    } else {
        "does not count: neither reloadlet.io/secretproviderclasses nor reloadlet.io/csi-volumes names it, and another narrowing list is set"
    };
    format!(
        "      CSI volume, driver {}{class}: {counts}; watched when the agent's --csi-drivers lists {} (default: {})\n      \
         fast projection does not apply: the driver, not the kubelet, decides when to write",
        csi.driver,
        csi.driver,
        crate::host::inotify::DEFAULT_CSI_DRIVERS.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{ContainerInfo, SourceKind, VolumeMount, VolumeSpec};

    #[test]
    fn explains_the_pacing_and_the_next_window() {
        let mut pod = PodInfo::default();
        let now: jiff::Timestamp = "2026-11-26T12:00:00Z".parse().unwrap();
        let defaults = crate::core::pacing::PacingDefaults::default();
        let text = pacing(&pod, &defaults, None, now);
        assert!(text.contains("the agent's --debounce"), "{text}");
        assert!(text.contains("more than 10 actions within 10m"), "{text}");
        assert!(text.contains("maintenance window: none"), "{text}");
        for (k, v) in [
            ("reloadlet.io/window", "0 2 * * *"),
            ("reloadlet.io/window-timezone", "Europe/Berlin"),
            ("reloadlet.io/min-interval", "5m"),
            ("reloadlet.io/flap-threshold", "off"),
        ] {
            pod.annotations.insert(k.into(), v.into());
        }
        let text = pacing(&pod, &defaults, None, now);
        assert!(text.contains("minimum interval: 5m"), "{text}");
        assert!(text.contains("flap breaker: off"), "{text}");
        assert!(
            text.contains("Europe/Berlin, holds evictions; next opens 2026-11-27 02:00 CET"),
            "{text}"
        );
        pod.annotations
            .insert("reloadlet.io/window-timezone".into(), "Moon/Base".into());
        let text = pacing(&pod, &defaults, None, now);
        assert!(
            text.contains("INVALID: reloadlet.io/window-timezone"),
            "{text}"
        );
        // What the agent saved: a change deferred to the window.
        pod.annotations
            .insert("reloadlet.io/window-timezone".into(), "UTC".into());
        pod.annotations
            .insert("reloadlet.io/action".into(), "evict".into());
        let mut pacer = crate::core::pacing::Pacer::default();
        pacer.changed(now, "conf");
        let text = pacing(&pod, &defaults, Some(&pacer), now);
        assert!(
            text.contains("deferred until 2026-11-27T02:00:00Z (maintenance window)"),
            "{text}"
        );
    }

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

    #[test]
    fn the_budget_section_shows_the_arithmetic_the_block_and_what_will_happen() {
        use crate::core::disruption_budgets::BudgetStatus;
        let pod = |on_blocked: &str| PodInfo {
            annotations: [
                ("reloadlet.io/action".to_string(), "evict".to_string()),
                (
                    "reloadlet.io/on-blocked".to_string(),
                    on_blocked.to_string(),
                ),
            ]
            .into(),
            ..Default::default()
        };
        let one = |expected, desired, current, allowed| {
            Ok(Coverage::One {
                name: "web".into(),
                status: Some(BudgetStatus {
                    expected_pods: expected,
                    desired_healthy: desired,
                    current_healthy: current,
                    disruptions_allowed: allowed,
                }),
            })
        };
        let lines = |on_blocked, budgets| {
            let mut w = String::new();
            budget_lines(&mut w, &pod(on_blocked), &budgets);
            w
        };
        let wait = lines("wait", one(2, 2, 2, 0));
        assert!(
            wait.contains(
                "expected pods 2, desired healthy 2, currently healthy 2, disruptions allowed 0"
            ),
            "{wait}"
        );
        assert!(
            wait.contains("structural block: PodDisruptionBudget web needs 2 of 2 pods healthy"),
            "{wait}"
        );
        assert!(wait.contains("asked again every 5m"), "{wait}");
        let rollout = lines("rollout", one(2, 2, 2, 0));
        assert!(rollout.contains("no eviction is sent"), "{rollout}");
        assert!(
            rollout.contains("reloadlet controller rolls the pod's workload at once"),
            "{rollout}"
        );
        let transient = lines("rollout", one(3, 2, 2, 0));
        assert!(transient.contains("transient block"), "{transient}");
        assert!(transient.contains("blocked-timeout 10m"), "{transient}");
        assert!(!transient.contains("structural"), "{transient}");
        assert!(lines("wait", one(3, 2, 3, 1)).contains("an eviction is allowed now"));
        let several = lines("wait", Ok(Coverage::Several(vec!["a".into(), "b".into()])));
        assert!(
            several.contains("more than one PodDisruptionBudget (a, b)"),
            "{several}"
        );
    }

    #[test]
    fn explains_csi_volumes_driver_class_counting_and_no_fast_projection() {
        let csi = |name: &str, driver: &str, class: Option<&str>| VolumeSpec {
            name: name.into(),
            csi: Some(crate::core::model::CsiVolumeSpec {
                driver: driver.into(),
                class: class.map(Into::into),
            }),
            ..Default::default()
        };
        let pod = PodInfo {
            uid: "u1".into(),
            namespace: "web".into(),
            name: "app-0".into(),
            annotations: [
                ("reloadlet.io/action".to_string(), "signal".to_string()),
                (
                    "reloadlet.io/secretproviderclasses".to_string(),
                    "vault-db".to_string(),
                ),
            ]
            .into(),
            volumes: vec![
                csi("secrets", "secrets-store.csi.k8s.io", Some("vault-db")),
                csi("certs", "csi.cert-manager.io", None),
            ],
            containers: vec![ContainerInfo {
                name: "app".into(),
                kind: ContainerKind::Regular,
                mounts: ["secrets", "certs"]
                    .map(|v| VolumeMount {
                        volume: v.into(),
                        sub_path: false,
                    })
                    .to_vec(),
                container_id: None,
                running: true,
                ports: Vec::new(),
            }],
            has_controller: true,
            ..Default::default()
        };
        let scope = Scope::default();
        let text = report(&pod, &Context::new(&scope), &[], &|_| {
            Err(MainPidError::NoContainerId)
        });
        for want in [
            "secrets [secretproviderclass vault-db (volume secrets)]: triggers SIGHUP to app",
            "CSI volume, driver secrets-store.csi.k8s.io, SecretProviderClass vault-db: counts;",
            "certs [csi volume certs (csi.cert-manager.io)]: does not trigger",
            "CSI volume, driver csi.cert-manager.io: does not count",
            "fast projection does not apply: the driver, not the kubelet, decides when to write",
        ] {
            assert!(text.contains(want), "{want:?} not in:\n{text}");
        }
    }
}
