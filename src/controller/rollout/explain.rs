//! The `explain` lines of the rollout feature: whether a change rolls the pod's owner, which
//! workload that is, what its strategy does (and whether it surges), or why nothing would
//! roll; and whether Stakater Reloader's annotations on the pod's workload would roll it
//! (`--reloader-compat`, [`super::compat`]); the workload's rollout pacing as the controller
//! recorded it on the workload (its last rollouts, a deferral or a flapping episode). Reads
//! the owner chain, the strategy and the workload's own annotations through [`WorkloadApi`].

use super::compat;
use super::refs::{self, Mode};
use crate::core::annotations::{self, Action, ACTION};
use crate::core::model::PodInfo;
use crate::core::pacing::{PacingRecord, ROLLOUT_PACING};
use crate::core::rollout::{on_blocked, workload_of, Unsupported, WorkloadRef, ON_BLOCKED};
use crate::ports::WorkloadApi;

/// The rollout sections: the pod's own (`action: rollout`, `on-blocked`) and Reloader's
/// annotations; empty when neither applies.
pub async fn explain(pod: &PodInfo, workloads: &dyn WorkloadApi) -> String {
    let mut out = own(pod, workloads).await;
    out.push_str(&reloader(pod, workloads).await);
    out
}

/// The pod's workload through its owner (and ReplicaSet); `Err`: a read failed.
async fn resolve(
    pod: &PodInfo,
    workloads: &dyn WorkloadApi,
) -> Result<Result<WorkloadRef, Unsupported>, crate::core::invalid::Invalid> {
    let owner = workloads
        .pod(&pod.namespace, &pod.name)
        .await
        .map_err(|e| format!("the pod's owner could not be read: {e}"))?
        .and_then(|p| p.owner);
    let mut rs_owner = None;
    if let Some(o) = owner.as_ref().filter(|o| o.kind == "ReplicaSet") {
        rs_owner = workloads
            .replica_set(&pod.namespace, &o.name)
            .await
            .map_err(|e| format!("ReplicaSet {} could not be read: {e}", o.name))?
            .and_then(|rs| rs.owner);
    }
    Ok(workload_of(&pod.namespace, owner.as_ref(), |_| rs_owner))
}

/// Reloader's annotations on the pod's workload (or its template): what
/// `--reloader-compat` makes of them. Empty when there are none.
async fn reloader(pod: &PodInfo, workloads: &dyn WorkloadApi) -> String {
    let Ok(Ok(workload)) = resolve(pod, workloads).await else {
        return String::new();
    };
    let Ok(Some(own)) = workloads.annotations(&workload).await else {
        return String::new();
    };
    if !compat::relevant(&own) && !compat::relevant(&pod.annotations) {
        return String::new();
    }
    let mut out = String::from(
        "  Reloader's annotations (reloadlet controller --reloader-compat, Helm controller.reloaderCompat; off by default: nothing rolls):\n",
    );
    if pod.annotations.contains_key(ACTION) {
        out.push_str("    not followed for this pod: its own reloadlet.io/action wins\n");
    } else {
        out.push_str(&format!(
            "    {}\n",
            compat::explain_line(&workload, &own, &pod.annotations, None)
        ));
    }
    out
}

/// The pod's own section, empty when the pod neither asks for rollouts nor sets
/// `on-blocked`.
async fn own(pod: &PodInfo, workloads: &dyn WorkloadApi) -> String {
    let policy = annotations::parse(&pod.annotations).ok().flatten();
    let rollout = policy.as_ref().is_some_and(|p| p.action == Action::Rollout);
    if !rollout && !pod.annotations.contains_key(ON_BLOCKED) {
        return String::new();
    }
    let mut out = String::from("  rollout (reloadlet controller):\n");
    let when = match on_blocked(&pod.annotations) {
        Err(e) => {
            out.push_str(&format!(
                "    INVALID: {e}; the controller rolls nothing for this pod\n"
            ));
            return out;
        }
        Ok(_) if rollout => "a change of data the pod reads rolls its owner at once".to_owned(),
        Ok((crate::core::rollout::OnBlocked::Rollout, timeout))
            if policy
                .as_ref()
                .is_some_and(|p| matches!(p.action, Action::Evict { .. })) =>
        {
            format!(
                "on-blocked: rollout — on a structural budget block (known from the PodDisruptionBudget) its owner is rolled at once; when the pod still runs {} after a change (a transient block that lasted), too",
                humantime::format_duration(timeout)
            )
        }
        Ok((crate::core::rollout::OnBlocked::Rollout, _))
            if policy
                .as_ref()
                .is_some_and(|p| matches!(p.action, Action::Restart(_))) =>
        {
            "on-blocked: rollout — on a structural budget block (a PodDisruptionBudget that allows no disruption while the workload keeps its size, e.g. one replica under minAvailable: 1) nothing is restarted and its owner is rolled at once, surge-first (no moment without a Ready pod); otherwise the restart waits for the controller's grant".to_owned()
        }
        Ok((crate::core::rollout::OnBlocked::Rollout, _)) if refs::env_restart_only(pod) => {
            "on-blocked: rollout with env-action: restart — for a change of a source the pod reads through env: when the pod is the only one of its owner (or a PodDisruptionBudget structurally blocks the restart) nothing is restarted and its owner is rolled at once, surge-first (no moment without a Ready pod); otherwise the env restart waits for the controller's grant; its volume changes are its action's, never rolled".to_owned()
        }
        Ok(_) => {
            out.push_str("    nothing: on-blocked: rollout applies to action evict and restart (and env-action restart) only; on-blocked: wait keeps retrying the eviction, or waits for the restart's grant\n");
            return out;
        }
    };
    if refs::mode(pod).is_none() {
        out.push_str("    nothing now: the pod is not running (or is terminating)\n");
    } else if let Some(Mode::Now | Mode::AfterBlocked(_) | Mode::WhenStructurallyBlocked) =
        refs::mode(pod)
    {
        let sources: Vec<String> = refs::references(pod, true, true)
            .keys()
            .map(ToString::to_string)
            .collect();
        out.push_str(&format!(
            "    {when}; it reads: {}\n",
            if sources.is_empty() {
                "nothing that counts".to_owned()
            } else {
                sources.join(", ")
            }
        ));
    }
    let workload = match resolve(pod, workloads).await {
        Ok(Ok(w)) => w,
        Ok(Err(why)) => {
            out.push_str(&format!("    WARNING (RolloutUnsupported): {why}\n"));
            return out;
        }
        Err(e) => {
            out.push_str(&format!("    {e}\n"));
            return out;
        }
    };
    let name = format!(
        "{} {}/{}",
        workload.kind.as_str(),
        workload.namespace,
        workload.name
    );
    match workloads.workload(&workload).await {
        Ok(Some(read)) => {
            let granted = crate::core::owner_chain::granted(
                &pod.annotations,
                workload.kind,
                &workload.name,
                &read,
                |_, _| false,
            );
            match (granted, read.strategy.facts(workload.kind, &workload.name)) {
                (Err(why), _) => {
                    out.push_str(&format!("    WARNING (RolloutNotGranted): {why}\n"));
                }
                (Ok(()), Ok(facts)) => out.push_str(&format!(
                    "    rolls {name}: {}; surges: {}; downtime: {}\n",
                    facts.note,
                    if facts.surges { "yes" } else { "no" },
                    if facts.downtime { "yes" } else { "no" }
                )),
                (Ok(()), Err(why)) => {
                    out.push_str(&format!("    WARNING (RolloutUnsupported): {why}\n"))
                }
            }
        }
        Ok(None) => out.push_str(&format!("    {name} does not exist\n")),
        Err(e) => out.push_str(&format!("    {name} could not be read: {e}\n")),
    }
    out.push_str(&pacing(&workload, workloads).await);
    out
}

/// The workload's rollout pacing as the controller recorded it on the workload
/// (`reloadlet.io/rollout-pacing`): its last rollouts and what holds it now.
async fn pacing(workload: &WorkloadRef, workloads: &dyn WorkloadApi) -> String {
    let Ok(Some(own)) = workloads.annotations(workload).await else {
        return String::new();
    };
    let Some(value) = own.get(ROLLOUT_PACING) else {
        return String::new();
    };
    let lines = match PacingRecord::parse(value) {
        Ok(record) => record.describe(jiff::Timestamp::now()),
        Err(e) => vec![format!("{ROLLOUT_PACING} unreadable ({e}); ignored")],
    };
    let mut out = String::new();
    for line in lines {
        out.push_str(&format!("    pacing: {line}\n"));
    }
    if out.is_empty() {
        out.push_str("    pacing: nothing held\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fake::FakeWorkloads;
    use crate::core::rollout::Strategy;

    fn pod(annotations: &[(&str, &str)]) -> PodInfo {
        PodInfo {
            uid: "u".into(),
            namespace: "ns".into(),
            name: "web-0".into(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            phase: "Running".into(),
            ..PodInfo::default()
        }
    }

    #[tokio::test]
    async fn says_what_rolls_how_and_why_not() {
        let w = FakeWorkloads::default();
        w.deployment_pod("ns", "web-0", "web", Strategy::Recreate);
        // Asked by a pod alone, its template silent: not granted, and said so.
        let text = explain(&pod(&[("reloadlet.io/action", "rollout")]), &w).await;
        assert!(
            text.contains("WARNING (RolloutNotGranted): reloadlet.io/action is \"rollout\" on the pod but absent in Deployment web's pod template"),
            "{text}"
        );
        w.templates_from(&[pod(&[("reloadlet.io/action", "rollout")])]);
        let text = explain(&pod(&[("reloadlet.io/action", "rollout")]), &w).await;
        assert!(text.contains("rolls Deployment ns/web"), "{text}");
        assert!(text.contains("surges: no; downtime: yes"), "{text}");

        let bare = FakeWorkloads::default();
        let text = explain(&pod(&[("reloadlet.io/action", "rollout")]), &bare).await;
        assert!(
            text.contains("RolloutUnsupported") && text.contains("no controlling owner"),
            "{text}"
        );

        let text = explain(
            &pod(&[
                ("reloadlet.io/action", "evict"),
                ("reloadlet.io/on-blocked", "rollout"),
                ("reloadlet.io/blocked-timeout", "2m"),
            ]),
            &w,
        )
        .await;
        assert!(text.contains("still runs 2m after a change"), "{text}");
        assert!(
            text.contains("structural budget block") && text.contains("rolled at once"),
            "{text}"
        );

        let text = explain(
            &pod(&[
                ("reloadlet.io/action", "evict"),
                ("reloadlet.io/on-blocked", "sometimes"),
            ]),
            &w,
        )
        .await;
        assert!(
            text.contains("INVALID") && text.contains("\"sometimes\""),
            "{text}"
        );
        assert!(explain(&pod(&[("reloadlet.io/action", "signal")]), &w)
            .await
            .is_empty());
    }

    #[tokio::test]
    async fn shows_the_workloads_rollout_pacing() {
        let w = FakeWorkloads::default();
        w.deployment_pod("ns", "web-0", "web", Strategy::Recreate);
        let web = WorkloadRef {
            kind: crate::core::rollout::WorkloadKind::Deployment,
            namespace: "ns".into(),
            name: "web".into(),
        };
        let record = r#"{"rollouts":["2026-11-26T12:00:00Z"],"flapping":{"since":"2026-11-26T12:00:30Z","source":"configmap cfg","changes":4},"deferred":{"until":"2099-01-01T02:00:00Z","why":"maintenance window","since":"2026-11-26T12:00:30Z","source":"configmap cfg"}}"#;
        w.annotations
            .lock()
            .unwrap()
            .insert(web.clone(), [(ROLLOUT_PACING.into(), record.into())].into());
        let text = explain(&pod(&[("reloadlet.io/action", "rollout")]), &w).await;
        assert!(
            text.contains("pacing: last rollouts (newest first): 2026-11-26T12:00:00Z"),
            "{text}"
        );
        assert!(
            text.contains("held: deferred until 2099-01-01T02:00:00Z (maintenance window)"),
            "{text}"
        );
        assert!(
            text.contains(
                "held: flapping since 2026-11-26T12:00:30Z (configmap cfg changed 4 times)"
            ),
            "{text}"
        );
        w.annotations
            .lock()
            .unwrap()
            .insert(web, [(ROLLOUT_PACING.into(), "?".into())].into());
        let text = explain(&pod(&[("reloadlet.io/action", "rollout")]), &w).await;
        assert!(text.contains("unreadable"), "{text}");
    }

    #[tokio::test]
    async fn names_the_reloader_annotation_that_applies_and_when_the_pod_wins() {
        let w = FakeWorkloads::default();
        w.deployment_pod("ns", "web-0", "web", Strategy::Recreate);
        let web = WorkloadRef {
            kind: crate::core::rollout::WorkloadKind::Deployment,
            namespace: "ns".into(),
            name: "web".into(),
        };
        w.annotations.lock().unwrap().insert(
            web,
            [("secret.reloader.stakater.com/auto".into(), "true".into())].into(),
        );
        let text = explain(&pod(&[]), &w).await;
        assert!(
            text.contains("secret.reloader.stakater.com/auto: true on Deployment ns/web")
                && text.contains("--reloader-compat")
                && text.contains("need the controller's --secrets"),
            "{text}"
        );
        let text = explain(&pod(&[("reloadlet.io/action", "signal")]), &w).await;
        assert!(text.contains("its own reloadlet.io/action wins"), "{text}");
        let plain = FakeWorkloads::default();
        plain.deployment_pod("ns", "web-0", "web", Strategy::Recreate);
        assert!(explain(&pod(&[]), &plain).await.is_empty());
    }
}
