//! `reloadlet status` (and `kubectl reloadlet status`): its command line, kubectl-like.

use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// What to look at: configmap/NAME (cm/NAME), secret/NAME, or a workload
    /// (deployment/NAME, statefulset/NAME, daemonset/NAME, replicaset/NAME): every ConfigMap and
    /// Secret its pods consume.
    #[arg(value_parser = parse_target)]
    pub target: Target,
    /// The namespace (default: the kubeconfig context's, else "default").
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// The object of that name in every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Output format: the table (default), wide (node, data versions) or json.
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Output>,
    /// Path to the kubeconfig file (default: KUBECONFIG, ~/.kube/config, else in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long)]
    pub context: Option<String>,
    /// Wait until every consumer runs the current data (or --timeout passes).
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits (e.g. 30s, 2m).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2m")]
    pub timeout: Duration,
    /// How often --wait looks again.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s", hide = true)]
    pub interval: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Wide,
    Json,
}

/// What `status` is about: one object, or the objects a workload's pods consume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Object(crate::core::model::SourceRef),
    Workload(crate::status::Workload, String),
}

fn parse_target(s: &str) -> Result<Target, crate::core::invalid::Invalid> {
    use crate::core::model::{SourceKind, SourceRef};
    use crate::status::Workload;
    let (kind, name) = s
        .split_once('/')
        .ok_or("expected KIND/NAME, e.g. configmap/app-config, secret/db or deployment/web")?;
    enum Kind {
        Object(SourceKind),
        Workload(Workload),
    }
    let kind = match kind.to_ascii_lowercase().as_str() {
        "configmap" | "configmaps" | "cm" => Kind::Object(SourceKind::ConfigMap),
        "secret" | "secrets" => Kind::Object(SourceKind::Secret),
        "deployment" | "deployments" | "deploy" => Kind::Workload(Workload::Deployment),
        "statefulset" | "statefulsets" | "sts" => Kind::Workload(Workload::StatefulSet),
        "daemonset" | "daemonsets" | "ds" => Kind::Workload(Workload::DaemonSet),
        "replicaset" | "replicasets" | "rs" => Kind::Workload(Workload::ReplicaSet),
        other => {
            return Err(crate::invalid!(
                "unknown kind {other:?}: configmap, secret, deployment, statefulset, daemonset or replicaset"
            ))
        }
    };
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if !valid {
        return Err(crate::invalid!("{name:?} is not a valid object name"));
    }
    let name = name.to_owned();
    Ok(match kind {
        Kind::Object(kind) => Target::Object(SourceRef { kind, name }),
        Kind::Workload(w) => Target::Workload(w, name),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::SourceKind;

    #[test]
    fn targets_parse_like_kubectl() {
        use crate::core::model::SourceRef;
        assert_eq!(
            parse_target("cm/app"),
            Ok(Target::Object(SourceRef {
                kind: SourceKind::ConfigMap,
                name: "app".into()
            }))
        );
        assert!(matches!(
            parse_target("Secret/db.creds"),
            Ok(Target::Object(SourceRef {
                kind: SourceKind::Secret,
                ..
            }))
        ));
        assert_eq!(
            parse_target("deploy/web"),
            Ok(Target::Workload(
                crate::status::Workload::Deployment,
                "web".into()
            ))
        );
        for bad in ["app", "pod/x", "cm/", "cm/A", "cm/a/b", "sts/"] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
    }
}
