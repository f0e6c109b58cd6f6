//! The `explain` lines of the env consumers feature: each env reference of the pod and what a
//! change of it does ([`super::hash`]), and what the controller holds for the pod now, from the
//! record it keeps on it (`reloadlet.io/env-pacing`, [`super::pacing`]).

use super::hash::{decide, env_eligible, EnvDecision};
use crate::controller::consumed::env_refs::references as counted;
use crate::core::model::{EnvKeys, PodInfo, SourceKind, SourceRef};
use crate::core::pacing::{PacingRecord, ENV_PACING};
use jiff::Timestamp;

/// Both sections.
pub fn explain(pod: &PodInfo, now: Timestamp) -> String {
    let mut out = references(pod);
    out.push_str(&held(pod, now));
    out
}

/// The `explain` lines: each env reference and what a change of it would do.
pub fn references(pod: &PodInfo) -> String {
    let mut out = String::from("  env consumers (reloadlet controller):\n");
    if pod.env.is_empty() {
        out.push_str("    no env or envFrom reference to a ConfigMap or Secret\n");
        return out;
    }
    for r in &pod.env {
        let what = match &r.keys {
            EnvKeys::Key(k) => format!("key {k:?}"),
            EnvKeys::All { prefix } if prefix.is_empty() => "envFrom (every key)".to_owned(),
            EnvKeys::All { prefix } => format!("envFrom (every key, prefix {prefix:?})"),
        };
        let optional = if r.optional { ", optional" } else { "" };
        out.push_str(&format!(
            "    container {}: {} {what}{optional}\n",
            r.container, r.source
        ));
    }
    let verdict = |source: &SourceRef| -> String {
        if let Err(why) = env_eligible(pod) {
            return format!("nothing: {why}");
        }
        if !counted(pod, true, true).contains_key(source) {
            return "nothing: reloadlet.io/configmaps / reloadlet.io/secrets leave it out".into();
        }
        let when = match source.kind {
            SourceKind::ConfigMap => "",
            SourceKind::Secret => " (if the controller runs with --env-consumers-secrets)",
            SourceKind::SecretProviderClass
            | SourceKind::CsiVolume
            | SourceKind::PodCertificate => "",
        };
        match decide(pod, source) {
            EnvDecision::Evict => format!("the pod is evicted (PDB-respecting){when}"),
            EnvDecision::Refused(_) => format!(
                "EvictionRefused{when}: no controller owns the pod (reloadlet.io/evict-unowned: \"true\" allows it)"
            ),
            EnvDecision::Restart(containers) => format!(
                "{} restarted in place{when} (the controller's request, granted one pod of the owner at a time or as its PodDisruptionBudget allows; the kubelet reads env again)",
                containers.join(", ")
            ),
            EnvDecision::RestartRefused(why) => format!("Warning RestartRefused{when}: {why}"),
            EnvDecision::Covered(why) => format!("nothing from the controller: {why}"),
            EnvDecision::NotReloaded(_) => format!(
                "Warning EnvNotReloaded{when} (reloadlet.io/env-action: restart or evict acts instead)"
            ),
        }
    };
    let mut sources: Vec<&SourceRef> = pod.env.iter().map(|r| &r.source).collect();
    sources.dedup();
    for source in sources {
        out.push_str(&format!(
            "    a change of {source} (a key it reads): {}\n",
            verdict(source)
        ));
    }
    out
}

/// `explain`'s lines for what the controller holds for the pod, from the record it keeps on it
/// (`reloadlet.io/env-pacing`); empty when there is none.
pub fn held(pod: &PodInfo, now: Timestamp) -> String {
    let Some(value) = pod.annotations.get(ENV_PACING) else {
        return String::new();
    };
    let lines = match PacingRecord::parse(value) {
        Ok(record) => record.describe(now),
        Err(e) => vec![format!("{ENV_PACING} unreadable ({e}); ignored")],
    };
    if lines.is_empty() {
        return "    env eviction: nothing held now (the controller's last deferral has passed)\n"
            .to_owned();
    }
    lines
        .iter()
        .map(|line| format!("    env eviction {line} (reloadlet controller, {ENV_PACING})\n"))
        .collect()
}
