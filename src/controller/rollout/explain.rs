//! The `explain` lines of the rollout feature: whether a change rolls the pod's owner, which
//! workload that is, what its strategy does (and whether it surges), or why nothing would
//! roll. Reads the owner chain and the strategy through [`WorkloadApi`].

use super::refs::{self, Mode};
use crate::controller::api::WorkloadApi;
use crate::core::annotations::{self, Action};
use crate::core::model::PodInfo;
use crate::core::rollout::{on_blocked, workload_of, ON_BLOCKED};

/// The section, empty when the pod neither asks for rollouts nor sets `on-blocked`.
pub async fn explain(pod: &PodInfo, workloads: &dyn WorkloadApi) -> String {
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
        Ok(_) => {
            out.push_str("    nothing: on-blocked: rollout applies to action evict only; on-blocked: wait keeps retrying the eviction\n");
            return out;
        }
    };
    if refs::mode(pod).is_none() {
        out.push_str("    nothing now: the pod is not running (or is terminating)\n");
    } else if let Some(Mode::Now | Mode::AfterBlocked(_)) = refs::mode(pod) {
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
    let owner = match workloads.pod_owner(&pod.namespace, &pod.name).await {
        Ok(o) => o,
        Err(e) => {
            out.push_str(&format!("    the pod's owner could not be read: {e}\n"));
            return out;
        }
    };
    let mut rs_owner = None;
    if let Some(o) = owner.as_ref().filter(|o| o.kind == "ReplicaSet") {
        match workloads.replica_set_owner(&pod.namespace, &o.name).await {
            Ok(found) => rs_owner = found,
            Err(e) => {
                out.push_str(&format!(
                    "    ReplicaSet {} could not be read: {e}\n",
                    o.name
                ));
                return out;
            }
        }
    }
    let workload = match workload_of(&pod.namespace, owner.as_ref(), |_| rs_owner) {
        Ok(w) => w,
        Err(why) => {
            out.push_str(&format!("    WARNING (RolloutUnsupported): {why}\n"));
            return out;
        }
    };
    let name = format!(
        "{} {}/{}",
        workload.kind.as_str(),
        workload.namespace,
        workload.name
    );
    match workloads.strategy(&workload).await {
        Ok(Some(strategy)) => match strategy.facts(workload.kind, &workload.name) {
            Ok(facts) => out.push_str(&format!(
                "    rolls {name}: {}; surges: {}; downtime: {}\n",
                facts.note,
                if facts.surges { "yes" } else { "no" },
                if facts.downtime { "yes" } else { "no" }
            )),
            Err(why) => out.push_str(&format!("    WARNING (RolloutUnsupported): {why}\n")),
        },
        Ok(None) => out.push_str(&format!("    {name} does not exist\n")),
        Err(e) => out.push_str(&format!("    {name} could not be read: {e}\n")),
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
}
