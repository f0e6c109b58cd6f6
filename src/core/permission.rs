//! Refused API requests (HTTP 401/403), by feature: what is missing, the exact RBAC rule that
//! grants it, and the readiness reason while it lasts. Pure: the kube edges report each
//! refusal and each success ([`crate::serve::denials`] logs, counts, publishes the Event and
//! sets `/readyz`).
//!
//! One entry per (feature, verb, group, resource): the keys come from reloadlet's own code
//! paths, never from a tenant, so the book is bounded by what the code calls. The namespace
//! and the API server's message are the last refusal's (the message is cut to
//! [`MAX_MESSAGE`] characters).

use std::collections::BTreeMap;
use std::fmt;

/// The API server's message is kept up to this many characters.
pub const MAX_MESSAGE: usize = 300;

/// A feature of reloadlet that needs API permissions, as `/readyz` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    /// The agent's (or the controller's) pod watch: nothing works without it.
    Pods,
    /// Events about pods and workloads (events.k8s.io).
    Events,
    /// The agent's evictions, and the controller's of env consumers (pods/eviction).
    Evictions,
    /// The agent's and the controller's PodDisruptionBudget watch.
    Budgets,
    /// The controller's ConfigMap watch (fast projection).
    Nudges,
    /// The controller's pod annotation writes (nudges, baselines) and re-reads.
    PodAnnotations,
    /// `--secrets`: the Secret watch of fast projection.
    Secrets,
    /// Env consumers of ConfigMaps (`--env-consumers`).
    EnvConsumers,
    /// `--env-consumers-secrets`.
    EnvConsumersSecrets,
    /// `action: rollout` and `on-blocked: rollout`.
    Rollout,
    /// `--reloader-compat`: the workloads' metadata watches.
    ReloaderCompat,
    /// `--argo-rollouts`.
    ArgoRollouts,
    /// `--leader-elect`: the Lease.
    LeaderElection,
    /// The controller's key (a Secret in its own namespace).
    Key,
    /// `reloadlet status` (docs/status.md): the controller's GET of each ConfigMap (with
    /// `--secrets`, Secret) a pod reads and its write of `reloadlet.io/data-version` on it.
    DataVersions,
    /// The agent's `reloadlet.io/applied` record on the pods it acts on (pods/patch), and the
    /// controller's key it reads to compute data versions and to verify the controller's env
    /// restart requests (a Secret in its own namespace).
    StatusRecord,
    /// The drain readiness gate of `action: restart` (pods/status patch of the condition
    /// `reloadlet.io/restart-drain`, docs/restart.md).
    RestartDrain,
    /// `action: restart`: the agent's read of the controller's Lease while a restart request
    /// waits (a Warning when no controller holds it, docs/restart.md).
    RestartCoordination,
}

impl Feature {
    /// The name `/readyz`, the log and the Event use.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Pods => "pod-watch",
            Feature::Events => "events",
            Feature::Evictions => "evictions",
            Feature::Budgets => "disruption-budgets",
            Feature::Nudges => "fast-projection",
            Feature::PodAnnotations => "pod-annotations",
            Feature::Secrets => "secrets (--secrets)",
            Feature::EnvConsumers => "env-consumers (--env-consumers)",
            Feature::EnvConsumersSecrets => "env-consumers-secrets (--env-consumers-secrets)",
            Feature::Rollout => "rollout (--rollout)",
            Feature::ReloaderCompat => "reloader-compat (--reloader-compat)",
            Feature::ArgoRollouts => "argo-rollouts (--argo-rollouts)",
            Feature::LeaderElection => "leader-election (--leader-elect)",
            Feature::Key => "controller-key",
            Feature::DataVersions => "data-version publishing",
            Feature::StatusRecord => "status-record",
            Feature::RestartDrain => "restart-drain",
            Feature::RestartCoordination => "restart-coordination",
        }
    }

    /// Where the shipped manifests grant this feature's rules, when they are optional.
    pub fn granted_by(self) -> Option<&'static str> {
        match self {
            Feature::Secrets => Some(
                "kustomize component deploy/components/controller-secrets, or Helm controller.secrets=true",
            ),
            Feature::EnvConsumersSecrets => Some(
                "kustomize component deploy/components/controller-env-consumers-secrets, or Helm controller.envConsumersSecrets=true",
            ),
            Feature::ReloaderCompat => Some(
                "kustomize component deploy/components/controller-reloader-compat, or Helm controller.reloaderCompat=true",
            ),
            Feature::ArgoRollouts => Some(
                "kustomize component deploy/components/controller-argo-rollouts, or Helm controller.rollout.argoRollouts=true",
            ),
            _ => None,
        }
    }
}

/// One refused request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    pub feature: Feature,
    /// `get`, `list`, `watch`, `create`, `patch`, `update`.
    pub verb: &'static str,
    /// The API group (`""` for the core group).
    pub group: &'static str,
    /// The resource, with its subresource where there is one (`pods/eviction`).
    pub resource: &'static str,
    /// The one object the request is for, when the shipped rule grants only it
    /// (`resourceNames`): the rule to add names it too, never the whole resource.
    pub name: Option<&'static str>,
    /// `None`: a cluster-wide request.
    pub namespace: Option<String>,
    /// 401 (credentials refused) or 403 (not authorized).
    pub code: u16,
    /// The API server's message.
    pub message: String,
}

impl Denied {
    /// `deployments.apps`, `pods`.
    pub fn resource_name(&self) -> String {
        resource_name(self.group, self.resource)
    }

    /// The RBAC rule that grants the request, as it is written in a (Cluster)Role. A watch
    /// needs both `list` and `watch` (it relists), so a refusal of either names both.
    pub fn rule(&self) -> String {
        let verbs = match self.verb {
            "list" | "watch" => "\"list\", \"watch\"".to_string(),
            v => format!("\"{v}\""),
        };
        let names = self
            .name
            .map(|n| format!("resourceNames: [\"{n}\"], "))
            .unwrap_or_default();
        format!(
            "{{apiGroups: [\"{}\"], resources: [\"{}\"], {names}verbs: [{verbs}]}}",
            self.group, self.resource
        )
    }

    fn scope(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("in namespace {ns}"),
            None => "cluster-wide".into(),
        }
    }

    /// The one line `/readyz`, the log and the Event carry.
    pub fn explanation(&self) -> String {
        let f = self.feature.name();
        let named = self.name.map(|n| format!(" {n}")).unwrap_or_default();
        let what = format!(
            "{} {}{named} {}",
            self.verb,
            self.resource_name(),
            self.scope()
        );
        let message: String = self.message.chars().take(MAX_MESSAGE).collect();
        if self.code == 401 {
            return format!(
                "feature {f}: the API server does not accept the ServiceAccount's credentials (HTTP 401) to {what}: is the token mounted and unexpired? ({message})"
            );
        }
        let place = match &self.namespace {
            Some(ns) => {
                format!("to the ServiceAccount's ClusterRole (or a Role in namespace {ns})")
            }
            None => "to the ServiceAccount's ClusterRole".into(),
        };
        let shipped = self
            .feature
            .granted_by()
            .map(|g| format!("; shipped as the {g}"))
            .unwrap_or_default();
        format!(
            "feature {f}: forbidden to {what} (HTTP 403): add the rule {} {place}{shipped} ({message})",
            self.rule()
        )
    }
}

/// `deployments.apps`, `pods`: the resource as kubectl names it.
pub fn resource_name(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

type Key = (Feature, &'static str, &'static str, &'static str);

/// The refusals that still stand.
#[derive(Debug, Default)]
pub struct Book {
    standing: BTreeMap<Key, Denied>,
}

impl Book {
    /// Records a refusal; `true` when it is new (not already standing), so the caller tells
    /// the operator once, not at every retry.
    pub fn denied(&mut self, d: Denied) -> bool {
        let key = (d.feature, d.verb, d.group, d.resource);
        self.standing.insert(key, d).is_none()
    }

    /// The same request succeeded: its refusal no longer stands. `true` when one did.
    pub fn allowed(
        &mut self,
        feature: Feature,
        verb: &'static str,
        group: &'static str,
        resource: &'static str,
    ) -> bool {
        self.standing
            .remove(&(feature, verb, group, resource))
            .is_some()
    }

    /// `Some(reason)` while a refusal stands: one line each, in a stable order.
    pub fn readiness(&self) -> Option<String> {
        if self.standing.is_empty() {
            return None;
        }
        Some(
            self.standing
                .values()
                .map(Denied::explanation)
                .collect::<Vec<_>>()
                .join("\n"),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.standing.is_empty()
    }

    /// One short line for an Event's note (at most 1,000 characters are published): every
    /// standing refusal with its rule, compact. kube's event recorder folds the Events of one
    /// pod with one reason into a series that shows the latest note, so each note says all.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .standing
            .values()
            .map(|d| {
                format!(
                    "{} {} {} for {} (rule {})",
                    d.verb,
                    d.resource_name(),
                    d.scope(),
                    d.feature.name(),
                    d.rule().replace('"', "")
                )
            })
            .collect();
        format!(
            "refused: {}; /readyz and the log say where to add them",
            parts.join("; ")
        )
    }

    /// The refusals that stand, in a stable order.
    pub fn standing(&self) -> Vec<Denied> {
        self.standing.values().cloned().collect()
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.explanation())
    }
}

/// One kind of request an edge makes, as the edges report it (`ports::Refusals::outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub feature: Feature,
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    /// [`Denied::name`].
    pub name: Option<&'static str>,
}

impl Request {
    pub const fn new(
        feature: Feature,
        verb: &'static str,
        group: &'static str,
        resource: &'static str,
    ) -> Self {
        Self {
            feature,
            verb,
            group,
            resource,
            name: None,
        }
    }

    pub fn denied(self, namespace: Option<&str>, code: u16, message: &str) -> Denied {
        Denied {
            feature: self.feature,
            verb: self.verb,
            group: self.group,
            resource: self.resource,
            name: self.name,
            namespace: namespace.map(str::to_string),
            code,
            message: message.chars().take(MAX_MESSAGE).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(feature: Feature, verb: &'static str, ns: Option<&str>) -> Denied {
        Denied {
            feature,
            verb,
            group: "apps",
            resource: "deployments",
            name: None,
            namespace: ns.map(str::to_string),
            code: 403,
            message: "deployments.apps is forbidden: User \"system:serviceaccount:reloadlet-system:reloadlet-controller\" cannot list resource \"deployments\" in API group \"apps\" at the cluster scope".into(),
        }
    }

    #[test]
    fn a_refusal_names_the_feature_the_request_and_the_rule_to_add() {
        let d = denied(Feature::ReloaderCompat, "list", None);
        let line = d.explanation();
        for part in [
            "feature reloader-compat (--reloader-compat)",
            "forbidden to list deployments.apps cluster-wide (HTTP 403)",
            "add the rule {apiGroups: [\"apps\"], resources: [\"deployments\"], verbs: [\"list\", \"watch\"]} to the ServiceAccount's ClusterRole",
            "deploy/components/controller-reloader-compat",
            "controller.reloaderCompat=true",
            "cannot list resource",
        ] {
            assert!(line.contains(part), "{part:?} missing from {line}");
        }
        let core = Denied {
            group: "",
            resource: "secrets",
            verb: "get",
            feature: Feature::EnvConsumersSecrets,
            namespace: Some("shop".into()),
            ..d.clone()
        };
        assert_eq!(core.resource_name(), "secrets");
        let line = core.explanation();
        assert!(
            line.contains("forbidden to get secrets in namespace shop"),
            "{line}"
        );
        assert!(
            line.contains("{apiGroups: [\"\"], resources: [\"secrets\"], verbs: [\"get\"]}"),
            "{line}"
        );
        assert!(line.contains("or a Role in namespace shop"), "{line}");
        // One object granted by name: the rule to add names it, never every Secret.
        let key = Denied {
            group: "",
            resource: "secrets",
            name: Some("reloadlet-controller-key"),
            verb: "watch",
            feature: Feature::StatusRecord,
            namespace: Some("reloadlet-system".into()),
            ..d.clone()
        };
        let line = key.explanation();
        assert!(
            line.contains(
                "forbidden to watch secrets reloadlet-controller-key in namespace reloadlet-system"
            ),
            "{line}"
        );
        assert!(
            line.contains("{apiGroups: [\"\"], resources: [\"secrets\"], resourceNames: [\"reloadlet-controller-key\"], verbs: [\"list\", \"watch\"]}"),
            "{line}"
        );
        let unauthorized = Denied { code: 401, ..d };
        assert!(unauthorized
            .explanation()
            .contains("does not accept the ServiceAccount's credentials"));
    }

    #[test]
    fn a_refusal_is_new_once_stands_until_the_same_request_succeeds() {
        let mut book = Book::default();
        assert_eq!(book.readiness(), None);
        assert!(book.denied(denied(Feature::ReloaderCompat, "list", None)));
        // The watch retries: the same refusal is not new.
        assert!(!book.denied(denied(Feature::ReloaderCompat, "list", None)));
        assert!(book.denied(denied(Feature::ReloaderCompat, "watch", None)));
        assert!(book.denied(denied(Feature::Rollout, "get", Some("a"))));
        // Another namespace: the same rule is missing, not a new refusal.
        assert!(!book.denied(denied(Feature::Rollout, "get", Some("b"))));
        let reason = book.readiness().unwrap();
        assert_eq!(reason.lines().count(), 3, "{reason}");
        assert!(
            reason.contains("in namespace b"),
            "the last namespace is shown: {reason}"
        );
        // Another verb's success clears nothing.
        assert!(!book.allowed(Feature::ReloaderCompat, "get", "apps", "deployments"));
        assert!(book.allowed(Feature::ReloaderCompat, "list", "apps", "deployments"));
        assert!(book.allowed(Feature::ReloaderCompat, "watch", "apps", "deployments"));
        assert!(book.allowed(Feature::Rollout, "get", "apps", "deployments"));
        assert!(book.is_empty());
        assert_eq!(book.readiness(), None);
        // Refused again after a success: new again, so told again.
        assert!(book.denied(denied(Feature::ReloaderCompat, "list", None)));
    }

    #[test]
    fn a_long_message_is_cut() {
        let mut d = denied(Feature::Rollout, "get", None);
        d.message = "x".repeat(10_000);
        assert!(d.explanation().len() < MAX_MESSAGE + 400);
    }
}
