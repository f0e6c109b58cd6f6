//! The decision: given a pod and the volumes whose content changed, what to do (pure).

use crate::core::annotations::{self, Action, HttpPort, HttpSpec, PodPolicy};
use crate::core::model::{
    ContainerId, ContainerInfo, ContainerKind, CsiVolumeSpec, PodInfo, ReloadSignal, SignalCheck,
    SourceKind, SourceRef, ROOT_CA_CONFIGMAP,
};
use crate::core::outcome::ActionKind;
use crate::core::restart;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Why an action happens: the sources whose content changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    pub sources: Vec<SourceRef>,
}

impl Cause {
    /// "configmap nginx-conf changed" for `sources` (what `Display` prints), without owning
    /// them: the jobs keep only their sources and tell the cause when they report.
    pub fn text(sources: &[SourceRef]) -> String {
        let names: Vec<String> = sources.iter().map(ToString::to_string).collect();
        format!("{} changed", names.join(", "))
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&Cause::text(&self.sources))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignalTarget {
    pub container: String,
    pub container_id: Option<ContainerId>,
}

/// Where the reload request of an `http` pod goes, and what it watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpTarget {
    pub spec: HttpSpec,
    /// `reloadlet.io/http-port`, resolved (a named port: from the mounting containers).
    pub port: u16,
    /// The containers that mount the changed volumes: a restart of one of them reloads the
    /// configuration anyway, and ends a request still retrying.
    pub containers: Vec<SignalTarget>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No `reloadlet.io/action`: never touched.
    NotOptedIn,
    /// Opted in, but nothing that changed counts (token volume, narrowed away, no consumer).
    NothingToDo {
        reason: String,
    },
    /// Warning `InvalidAnnotation`, no action.
    Invalid {
        message: String,
    },
    /// Warning `SubPathNotUpdated`, no action (`action` is the one that could not be taken:
    /// `signal` or `http`).
    SubPathOnly {
        action: ActionKind,
        message: String,
    },
    Signal {
        signal: ReloadSignal,
        check: SignalCheck,
        targets: Vec<SignalTarget>,
        cause: Cause,
    },
    Evict {
        cause: Cause,
    },
    /// `reloadlet.io/action: http`: one request to the pod.
    Http {
        target: HttpTarget,
        cause: Cause,
    },
    /// Warning `EvictionRefused`: the pod has no controller and did not allow it.
    EvictRefused {
        message: String,
        cause: Cause,
    },
    /// The pod is already going away; an eviction would change nothing.
    AlreadyTerminating,
    /// `reloadlet.io/action: restart`: stop these containers' main processes; the kubelet
    /// starts them again in the same pod.
    Restart {
        targets: Vec<RestartTarget>,
        cause: Cause,
    },
    /// Warning `RestartRefused`: a restart in place cannot bring this pod its new config.
    RestartRefused {
        message: String,
        cause: Cause,
    },
}

/// One container of a restart and how it is stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartTarget {
    pub target: SignalTarget,
    pub stop: crate::core::restart::StopPlan,
}

/// What the operator lets the `http` action reach beyond the pod's own network namespace
/// (the agent's `--http-allow-host-network`). The default refuses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HttpFence {
    /// A `hostNetwork` pod may use `action: http`: its request goes to the node's own address.
    pub allow_host_network: bool,
}

/// Parses the pod's annotations and checks them against its spec (container names, sources,
/// the HTTP port), with the default [`HttpFence`] (no `hostNetwork` pod may use `http`).
/// `Ok(None)`: not opted in.
pub fn validated_policy(pod: &PodInfo) -> CheckedPolicy {
    validated_policy_with(pod, HttpFence::default())
}

/// [`validated_policy`] under the operator's `fence`.
pub fn validated_policy_with(pod: &PodInfo, fence: HttpFence) -> CheckedPolicy {
    let Some(policy) = annotations::parse(&pod.annotations).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    if let Some(names) = &policy.containers {
        for name in names {
            let known = pod
                .containers
                .iter()
                .any(|c| &c.name == name && c.kind != ContainerKind::Init);
            if !known {
                return Err(crate::invalid!(
                    "{}: the pod has no container {name:?} (known: {})",
                    annotations::CONTAINERS,
                    pod.containers
                        .iter()
                        .filter(|c| c.kind != ContainerKind::Init)
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    }
    if let Action::Http(spec) = &policy.action {
        check_http(pod, &policy, spec, fence)?;
    }
    if let Action::Restart(spec) = &policy.action {
        restart::check_names(pod, spec)?;
    }
    for (kind, names) in [
        (SourceKind::ConfigMap, &policy.configmaps),
        (SourceKind::Secret, &policy.secrets),
    ] {
        for name in names.iter().flatten() {
            let mounted = pod
                .volumes
                .iter()
                .flat_map(|v| &v.sources)
                .any(|s| s.kind == kind && &s.name == name);
            if !mounted {
                return Err(crate::invalid!(
                    "{}s: no volume of the pod projects {} {name:?} (a ConfigMap/Secret used only as \
                     environment variables never changes in a running container)",
                    annotations::PREFIX.to_owned() + kind.as_str(),
                    kind.as_str()
                ));
            }
        }
    }
    validate_csi_lists(pod, &policy)?;
    validate_pod_certificates(pod, &policy)?;
    Ok(Some(policy))
}

/// What an `http` pod may reach: only a port one of its containers declares
/// (`ports[].containerPort` by number, `ports[].name` by name), and only its own network
/// namespace unless the operator allows `hostNetwork` pods (whose IP is the node's: the
/// request would go to a service of the node itself, sent by a privileged agent).
fn check_http(
    pod: &PodInfo,
    policy: &PodPolicy,
    spec: &HttpSpec,
    fence: HttpFence,
) -> Result<(), crate::core::invalid::Invalid> {
    if pod.host_network && !fence.allow_host_network {
        return Err(crate::invalid!(
            "{}: http is refused on a hostNetwork pod: its IP is the node's own address, so the \
             request would go to a service of the node; the operator has not allowed that \
             (agent flag --http-allow-host-network)",
            annotations::ACTION
        ));
    }
    let declared = || {
        let ports: Vec<String> = pod
            .containers
            .iter()
            .flat_map(|c| &c.ports)
            .map(ToString::to_string)
            .collect();
        if ports.is_empty() {
            "none".to_owned()
        } else {
            ports.join(", ")
        }
    };
    match &spec.port {
        HttpPort::Number(n) => {
            let found = pod
                .containers
                .iter()
                .flat_map(|c| &c.ports)
                .any(|p| p.number == *n);
            if !found {
                return Err(crate::invalid!(
                    "{}: {n} is not a port any container of the pod declares (declared: {})",
                    annotations::HTTP_PORT,
                    declared()
                ));
            }
        }
        HttpPort::Named(name) => {
            let found = pod
                .containers
                .iter()
                .filter(|c| c.kind != ContainerKind::Init)
                .filter(|c| selected(policy, c))
                .any(|c| c.ports.iter().any(|p| p.name.as_ref() == Some(name)));
            if !found {
                return Err(crate::invalid!(
                    "{}: no container declares a port named {name:?} (declared: {})",
                    annotations::HTTP_PORT,
                    declared()
                ));
            }
        }
    }
    Ok(())
}

/// `reloadlet.io/secretproviderclasses` and `reloadlet.io/csi-volumes` name CSI volumes of the
/// pod (a name that matches none is a typo: nothing would ever trigger).
fn validate_csi_lists(
    pod: &PodInfo,
    policy: &PodPolicy,
) -> Result<(), crate::core::invalid::Invalid> {
    let csi: Vec<(&str, &CsiVolumeSpec)> = pod
        .volumes
        .iter()
        .filter_map(|v| v.csi.as_ref().map(|c| (v.name.as_str(), c)))
        .collect();
    for class in policy.secret_provider_classes.iter().flatten() {
        if !csi
            .iter()
            .any(|(_, c)| c.class.as_deref() == Some(class.as_str()))
        {
            return Err(crate::invalid!(
                "{}: no CSI volume of the pod uses SecretProviderClass {class:?} \
                 (csi.volumeAttributes.secretProviderClass)",
                annotations::SECRET_PROVIDER_CLASSES
            ));
        }
    }
    for volume in policy.csi_volumes.iter().flatten() {
        if !csi.iter().any(|(name, _)| name == volume) {
            return Err(crate::invalid!(
                "{}: the pod has no CSI volume {volume:?}",
                annotations::CSI_VOLUMES
            ));
        }
    }
    Ok(())
}

/// `reloadlet.io/pod-certificates` names signers of the pod's projected `podCertificate`
/// sources (a signer that matches none is a typo: nothing would ever trigger).
fn validate_pod_certificates(
    pod: &PodInfo,
    policy: &PodPolicy,
) -> Result<(), crate::core::invalid::Invalid> {
    for signer in policy.pod_certificates.iter().flatten() {
        let projected = pod.volumes.iter().any(|v| {
            v.sources
                .iter()
                .any(|s| s.kind == SourceKind::PodCertificate && s.name == *signer)
        });
        if !projected {
            return Err(crate::invalid!(
                "{}: no projected volume of the pod has a podCertificate source with signerName {signer:?}",
                annotations::POD_CERTIFICATES
            ));
        }
    }
    Ok(())
}

/// The volumes whose content changed, each with the sources whose files changed (`None`: any
/// of its sources may have).
pub type ChangedVolumes = BTreeMap<String, Option<BTreeSet<SourceRef>>>;

/// Decides what to do for `pod` now that the volumes named in `changed` have new content
/// (in any of their sources).
pub fn decide(pod: &PodInfo, changed: &BTreeSet<String>) -> Decision {
    decide_changes(pod, &changed.iter().map(|v| (v.clone(), None)).collect())
}

/// A pod's annotations parsed and checked against its spec ([`validated_policy`]); `Ok(None)`:
/// not opted in.
pub type CheckedPolicy = Result<Option<PodPolicy>, crate::core::invalid::Invalid>;

/// Decides what to do for `pod` given which sources of which volumes changed. The cause names
/// only those sources (and only those that count for the pod).
pub fn decide_changes(pod: &PodInfo, changed: &ChangedVolumes) -> Decision {
    decide_with(pod, &validated_policy(pod), changed)
}

/// [`decide_changes`] with the pod's policy checked already: `policy` is
/// [`validated_policy`] of this very `pod` (the agent parses it once per pod version, when
/// the version arrives, not on the path of a swap: `agent::decisions`).
pub fn decide_with(pod: &PodInfo, policy: &CheckedPolicy, changed: &ChangedVolumes) -> Decision {
    let policy = match policy {
        Ok(None) => return Decision::NotOptedIn,
        Ok(Some(p)) => p,
        Err(message) => {
            return Decision::Invalid {
                message: message.to_string(),
            }
        }
    };
    let triggering = triggering_volumes(pod, policy, changed);
    if triggering.is_empty() {
        return Decision::NothingToDo {
            reason: "no changed volume has a ConfigMap/Secret source that counts for this pod"
                .into(),
        };
    }
    let mut sources: Vec<SourceRef> = Vec::new();
    for (_, srcs) in &triggering {
        for s in srcs {
            if !sources.contains(s) {
                sources.push(s.clone());
            }
        }
    }
    sources.sort();
    let cause = Cause { sources };
    let volumes: BTreeSet<&str> = triggering.iter().map(|(v, _)| *v).collect();

    match policy.action {
        Action::Signal { signal, check } => {
            decide_signal(pod, policy, &volumes, (signal, check), cause)
        }
        Action::Http(ref spec) => decide_http(pod, policy, &volumes, spec, cause),
        Action::Restart(ref spec) => decide_restart(pod, spec, &volumes, cause),
        Action::Rollout => Decision::NothingToDo {
            reason: format!(
                "action rollout: reloadlet controller rolls the owning workload ({cause}); the node agent never signals, evicts or calls this pod"
            ),
        },
        Action::Evict { allow_unowned } => {
            if pod.terminating {
                return Decision::AlreadyTerminating;
            }
            let consumed = pod
                .containers
                .iter()
                .filter(|c| c.kind != ContainerKind::Init)
                .any(|c| c.mounts.iter().any(|m| volumes.contains(m.volume.as_str())));
            if !consumed {
                return Decision::NothingToDo {
                    reason: "no running container mounts the changed volume".into(),
                };
            }
            if !pod.has_controller && !allow_unowned {
                return Decision::EvictRefused {
                    message: format!(
                        "the pod has no controller, so nothing would recreate it after an eviction; \
                         set {}: \"true\" to allow it ({cause})",
                        annotations::EVICT_UNOWNED
                    ),
                    cause,
                };
            }
            Decision::Evict { cause }
        }
    }
}

/// Whether `reloadlet.io/containers` (if set) names `c`.
fn selected(policy: &PodPolicy, c: &ContainerInfo) -> bool {
    policy
        .containers
        .as_ref()
        .is_none_or(|names| names.contains(&c.name))
}

/// The selected containers that mount one of `volumes` (not only through subPath), or the
/// decision when there is none.
fn mounting<'a>(
    pod: &'a PodInfo,
    policy: &PodPolicy,
    volumes: &BTreeSet<&str>,
    cause: &Cause,
) -> Result<Vec<&'a ContainerInfo>, Box<Decision>> {
    let mut targets = Vec::new();
    let mut sub_path_only = Vec::new();
    for c in pod
        .containers
        .iter()
        .filter(|c| c.kind != ContainerKind::Init)
        .filter(|c| selected(policy, c))
    {
        let mounts: Vec<_> = c
            .mounts
            .iter()
            .filter(|m| volumes.contains(m.volume.as_str()))
            .collect();
        if mounts.iter().any(|m| !m.sub_path) {
            targets.push(c);
        } else if !mounts.is_empty() {
            sub_path_only.push(c.name.as_str());
        }
    }
    if !targets.is_empty() {
        return Ok(targets);
    }
    if !sub_path_only.is_empty() {
        return Err(Box::new(Decision::SubPathOnly {
            action: match policy.action {
                Action::Http(_) => ActionKind::Http,
                _ => ActionKind::Signal,
            },
            message: format!(
                "{cause}, but container(s) {} mount it only through subPath, which the kubelet never \
                 updates; use reloadlet.io/action: restart (a container start prepares its subPath \
                 mounts again), mount the whole volume, or use reloadlet.io/action: evict",
                sub_path_only.join(", ")
            ),
        }));
    }
    Err(Box::new(Decision::NothingToDo {
        reason: "no selected container mounts the changed volume".into(),
    }))
}

/// A granted restart the agent performs after its own restart, when it no longer knows which
/// volumes changed (issue #45 §2): the containers `reloadlet.io/restart-containers` names,
/// else those that mount any of the pod's ConfigMap/Secret volumes. Only for a pod that asks
/// `reloadlet.io/action: restart` (anything else: `NotOptedIn`).
pub fn recovered_restart(pod: &PodInfo) -> Decision {
    let restarts = pod
        .annotations
        .get(crate::core::annotations::ACTION)
        .is_some_and(|a| a.trim().eq_ignore_ascii_case("restart"));
    if !restarts {
        return Decision::NotOptedIn;
    }
    let spec = match restart::parse(&pod.annotations) {
        Ok(spec) => spec,
        Err(e) => {
            return Decision::Invalid {
                message: e.to_string(),
            }
        }
    };
    let config: Vec<&crate::core::model::VolumeSpec> = pod
        .volumes
        .iter()
        .filter(|v| !v.sources.is_empty())
        .collect();
    let volumes: BTreeSet<&str> = config.iter().map(|v| v.name.as_str()).collect();
    let mut sources: Vec<SourceRef> = config.iter().flat_map(|v| v.sources.clone()).collect();
    sources.sort();
    sources.dedup();
    decide_restart(pod, &spec, &volumes, Cause { sources })
}

/// The containers a restart stops: those that mount a changed volume (through subPath too: a
/// container start prepares its subPath mounts again), or those `reloadlet.io/restart-containers`
/// names; classic init containers never.
fn decide_restart(
    pod: &PodInfo,
    spec: &restart::RestartSpec,
    volumes: &BTreeSet<&str>,
    cause: Cause,
) -> Decision {
    if pod.terminating {
        return Decision::AlreadyTerminating;
    }
    if let Some(why) = restart::refusal(pod) {
        return Decision::RestartRefused {
            message: format!("not restarted: {why} ({cause})"),
            cause,
        };
    }
    let chosen: Vec<&ContainerInfo> = pod
        .containers
        .iter()
        .filter(|c| c.kind != ContainerKind::Init)
        .filter(|c| match &spec.containers {
            restart::RestartContainers::All => true,
            restart::RestartContainers::Named(names) => names.contains(&c.name),
            restart::RestartContainers::Changed => {
                c.mounts.iter().any(|m| volumes.contains(m.volume.as_str()))
            }
        })
        .collect();
    if chosen.is_empty() {
        return Decision::NothingToDo {
            reason: "no selected container mounts the changed volume".into(),
        };
    }
    let mut targets = Vec::new();
    for c in chosen {
        match restart::stop_plan(pod, spec, &c.name) {
            Ok(stop) => targets.push(RestartTarget {
                target: target(c),
                stop,
            }),
            Err(why) => {
                return Decision::RestartRefused {
                    message: format!("not restarted: {why} ({cause})"),
                    cause,
                }
            }
        }
    }
    Decision::Restart { targets, cause }
}

fn target(c: &ContainerInfo) -> SignalTarget {
    SignalTarget {
        container: c.name.clone(),
        container_id: c.container_id.clone(),
    }
}

fn decide_signal(
    pod: &PodInfo,
    policy: &PodPolicy,
    volumes: &BTreeSet<&str>,
    (signal, check): (ReloadSignal, SignalCheck),
    cause: Cause,
) -> Decision {
    match mounting(pod, policy, volumes, &cause) {
        Ok(containers) => Decision::Signal {
            signal,
            check,
            targets: containers.into_iter().map(target).collect(),
            cause,
        },
        Err(decision) => *decision,
    }
}

/// One request per pod, whichever of its containers mount the change. A named port is
/// looked up in the mounting containers (the endpoint that reloads is the one that reads
/// the files).
fn decide_http(
    pod: &PodInfo,
    policy: &PodPolicy,
    volumes: &BTreeSet<&str>,
    spec: &HttpSpec,
    cause: Cause,
) -> Decision {
    let containers = match mounting(pod, policy, volumes, &cause) {
        Ok(c) => c,
        Err(decision) => return *decision,
    };
    let port = match &spec.port {
        HttpPort::Number(n) => *n,
        HttpPort::Named(name) => {
            let found = containers.iter().find_map(|c| {
                c.ports
                    .iter()
                    .find(|p| p.name.as_ref() == Some(name))
                    .map(|p| p.number)
            });
            match found {
                Some(p) => p,
                None => {
                    let names: Vec<&str> = containers.iter().map(|c| c.name.as_str()).collect();
                    return Decision::Invalid {
                        message: format!(
                            "{}: no container that mounts the changed volume ({}) declares a port named {name:?}",
                            annotations::HTTP_PORT,
                            names.join(", ")
                        ),
                    };
                }
            }
        }
    };
    Decision::Http {
        target: HttpTarget {
            spec: spec.clone(),
            port,
            containers: containers.into_iter().map(target).collect(),
        },
        cause,
    }
}

/// The changed volumes that count, with their counting sources that changed. A projected
/// volume with a serviceAccountToken or downwardAPI source counts like any other: those files
/// are not hashed, so a change means a ConfigMap/Secret file changed.
fn triggering_volumes<'a>(
    pod: &'a PodInfo,
    policy: &PodPolicy,
    changed: &'a ChangedVolumes,
) -> Vec<(&'a str, Vec<SourceRef>)> {
    let mut out = Vec::new();
    for (name, sources) in changed {
        let Some(spec) = pod.volume(name) else {
            continue;
        };
        if let Some(csi) = &spec.csi {
            // The driver writes the whole volume: one source, whatever files changed.
            if csi_counts(policy, name, csi) {
                out.push((name.as_str(), vec![SourceRef::csi(name, csi)]));
            }
            continue;
        }
        let counted: Vec<SourceRef> = spec
            .sources
            .iter()
            .filter(|s| counts(policy, s))
            .filter(|s| sources.as_ref().is_none_or(|changed| changed.contains(*s)))
            .cloned()
            .collect();
        if !counted.is_empty() {
            out.push((name.as_str(), counted));
        }
    }
    out
}

/// Whether a change of `source` can trigger the pod's action (its annotations name it, or
/// name nothing; `kube-root-ca.crt` only by name). `false` when the pod has no valid policy.
pub fn source_counts(pod: &PodInfo, source: &SourceRef) -> bool {
    matches!(validated_policy(pod), Ok(Some(p)) if counts(&p, source))
}

/// Whether a change of the CSI volume `volume` can trigger the pod's action: no narrowing list
/// is set, or `reloadlet.io/csi-volumes` names the volume, or
/// `reloadlet.io/secretproviderclasses` names its class.
pub fn csi_counts(policy: &PodPolicy, volume: &str, csi: &CsiVolumeSpec) -> bool {
    if !policy.narrowed() {
        return true;
    }
    let named = |list: &Option<Vec<String>>, item: Option<&str>| {
        list.as_ref()
            .is_some_and(|l| item.is_some_and(|i| l.iter().any(|x| x == i)))
    };
    named(&policy.csi_volumes, Some(volume))
        || named(&policy.secret_provider_classes, csi.class.as_deref())
}

fn counts(policy: &PodPolicy, source: &SourceRef) -> bool {
    let named =
        |list: &Option<Vec<String>>| list.as_ref().is_some_and(|l| l.contains(&source.name));
    if source.kind == SourceKind::ConfigMap && source.name == ROOT_CA_CONFIGMAP {
        // A cluster CA rotation changes it in every pod at once: only when asked for by name.
        return named(&policy.configmaps);
    }
    if source.kind == SourceKind::PodCertificate {
        // Rewritten at every rotation (about daily with the `kubernetes.io` signers): only
        // for a pod that names the signer, whatever else it narrows to.
        return named(&policy.pod_certificates);
    }
    if !policy.narrowed() {
        return true;
    }
    let list = match source.kind {
        SourceKind::ConfigMap => &policy.configmaps,
        SourceKind::Secret => &policy.secrets,
        // Counted by volume and class ([`csi_counts`]), never by this name; pod certificates
        // above.
        SourceKind::SecretProviderClass | SourceKind::CsiVolume | SourceKind::PodCertificate => {
            return false
        }
    };
    named(list)
}

#[cfg(test)]
mod tests;
