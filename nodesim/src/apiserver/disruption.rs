//! The disruption controller's arithmetic (kubernetes `pkg/controller/disruption`), pure:
//! given a PDB, the pods it selects and the scale of their controllers, its new status.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::collections::BTreeMap;

/// How long an eviction stays in `disruptedPods` without the pod going away.
pub const DELETION_TIMEOUT: SignedDuration = SignedDuration::from_mins(2);

/// A PDB whose budget cannot be computed (the controller leaves its status alone).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// `minAvailable` / `maxUnavailable` is a string that is not `<int>%`.
    #[error("invalid value for IntOrString: invalid value {0:?}")]
    BadIntOrPercent(String),
}

/// Whether the pod's `Ready` condition is `True`.
pub fn pod_is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether the pod has a `deletionTimestamp`.
pub fn pod_is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// `intstr.GetScaledValueFromIntOrPercent(v, total, roundUp=true)`.
pub fn scaled_value(v: &IntOrString, total: i32) -> Result<i32, BudgetError> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let pct: i64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| BudgetError::BadIntOrPercent(s.clone()))?;
            let total = i64::from(total);
            Ok(i32::try_from((pct * total + 99) / 100).unwrap_or(i32::MAX))
        }
    }
}

/// `(expectedPods, desiredHealthy)` as `getExpectedPodCount` computes them.
/// `matching` is the number of pods the PDB selects; `scale` the summed replica count of
/// their controllers (unowned pods count one each).
pub fn expected_and_desired(
    pdb: &PodDisruptionBudget,
    matching: i32,
    scale: i32,
) -> Result<(i32, i32), BudgetError> {
    let spec = pdb.spec.as_ref();
    if let Some(max_unavailable) = spec.and_then(|s| s.max_unavailable.as_ref()) {
        let max = scaled_value(max_unavailable, scale)?;
        return Ok((scale, (scale - max).max(0)));
    }
    match spec.and_then(|s| s.min_available.as_ref()) {
        Some(IntOrString::Int(n)) => Ok((matching, *n)),
        Some(pct @ IntOrString::String(_)) => Ok((scale, scaled_value(pct, scale)?)),
        None => Ok((0, 0)),
    }
}

/// One controller pass over a PDB: the new status. `pods` are the pods the PDB selects,
/// `scale` their controllers' expected replica count.
pub fn compute_status(
    pdb: &PodDisruptionBudget,
    pods: &[&Pod],
    scale: i32,
    now: Timestamp,
) -> Result<PodDisruptionBudgetStatus, BudgetError> {
    let old = pdb.status.clone().unwrap_or_default();
    let matching = i32::try_from(pods.len()).unwrap_or(i32::MAX);
    let (expected, desired) = expected_and_desired(pdb, matching, scale)?;

    // buildDisruptedPodMap: keep entries of live, non-terminating pods younger than the timeout.
    let old_disrupted = old.disrupted_pods.clone().unwrap_or_default();
    let mut disrupted: BTreeMap<String, Time> = BTreeMap::new();
    for pod in pods {
        let Some(name) = pod.metadata.name.as_ref() else {
            continue;
        };
        if pod_is_terminating(pod) {
            continue;
        }
        if let Some(t) = old_disrupted.get(name) {
            if t.0 + DELETION_TIMEOUT > now {
                disrupted.insert(name.clone(), t.clone());
            }
        }
    }

    let current = pods
        .iter()
        .filter(|p| !pod_is_terminating(p))
        .filter(|p| {
            p.metadata
                .name
                .as_ref()
                .is_none_or(|n| !disrupted.contains_key(n))
        })
        .filter(|p| pod_is_ready(p))
        .count();
    let current = i32::try_from(current).unwrap_or(i32::MAX);
    let allowed = (current - desired).max(0);

    let (cond_status, reason) = if allowed > 0 {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    let old_cond = old
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionAllowed");
    let last_transition_time = match old_cond {
        Some(c) if c.status == cond_status => c.last_transition_time.clone(),
        _ => Time(now),
    };
    let condition = Condition {
        type_: "DisruptionAllowed".into(),
        status: cond_status.into(),
        reason: reason.into(),
        message: String::new(),
        last_transition_time,
        observed_generation: pdb.metadata.generation,
    };

    Ok(PodDisruptionBudgetStatus {
        conditions: Some(vec![condition]),
        current_healthy: current,
        desired_healthy: desired,
        disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
        disruptions_allowed: allowed,
        expected_pods: expected,
        observed_generation: pdb.metadata.generation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::store::now_ts;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pdb(min: Option<IntOrString>, max: Option<IntOrString>) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some("pdb".into()),
                generation: Some(3),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                min_available: min,
                max_unavailable: max,
                ..Default::default()
            }),
            status: None,
        }
    }

    fn pod(name: &str, ready: bool, terminating: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                deletion_timestamp: terminating.then(|| Time(now_ts())),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn int(i: i32) -> Option<IntOrString> {
        Some(IntOrString::Int(i))
    }
    fn pct(s: &str) -> Option<IntOrString> {
        Some(IntOrString::String(s.into()))
    }

    #[test]
    fn budget_arithmetic_table() {
        // (minAvailable, maxUnavailable, matching pods, controller scale, ready pods,
        //  expected, desired, allowed)
        type Row = (
            Option<IntOrString>,
            Option<IntOrString>,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
        );
        let table: Vec<Row> = vec![
            (int(2), None, 3, 3, 3, 3, 2, 1),
            (int(2), None, 2, 2, 2, 2, 2, 0),
            (int(2), None, 3, 5, 3, 3, 2, 1), // int minAvailable counts pods, not scale
            (int(0), None, 1, 1, 0, 1, 0, 0),
            (int(5), None, 3, 3, 3, 3, 5, 0),
            (pct("50%"), None, 3, 3, 3, 3, 2, 1), // 1.5 rounds up
            (pct("50%"), None, 4, 4, 4, 4, 2, 2),
            (pct("100%"), None, 4, 4, 4, 4, 4, 0),
            (pct("34%"), None, 3, 3, 3, 3, 2, 1), // 1.02 rounds up
            (None, int(1), 3, 3, 3, 3, 2, 1),
            (None, int(1), 3, 3, 2, 3, 2, 0),
            (None, int(5), 3, 3, 3, 3, 0, 3), // desired never negative
            (None, pct("25%"), 3, 4, 3, 4, 3, 0), // maxUnavailable 1 of scale 4
            (None, pct("50%"), 3, 3, 3, 3, 1, 2), // 1.5 → 2 unavailable
            (None, pct("0%"), 2, 2, 2, 2, 2, 0),
        ];
        for (i, (min, max, matching, scale, ready, exp, des, allowed)) in
            table.into_iter().enumerate()
        {
            let p = pdb(min, max);
            let pods: Vec<Pod> = (0..matching)
                .map(|n| pod(&format!("p{n}"), n < ready, false))
                .collect();
            let refs: Vec<&Pod> = pods.iter().collect();
            let s = compute_status(&p, &refs, scale, now_ts()).unwrap();
            assert_eq!(
                (s.expected_pods, s.desired_healthy, s.disruptions_allowed),
                (exp, des, allowed),
                "row {i}"
            );
            assert_eq!(s.current_healthy, ready, "row {i}");
            assert_eq!(s.observed_generation, Some(3), "row {i}");
        }
    }

    #[test]
    fn terminating_and_disrupted_pods_are_not_healthy() {
        let mut p = pdb(int(1), None);
        let now = now_ts();
        let mut disrupted = BTreeMap::new();
        disrupted.insert(
            "fresh".to_string(),
            Time(now - SignedDuration::from_secs(10)),
        );
        disrupted.insert(
            "stale".to_string(),
            Time(now - SignedDuration::from_mins(3)),
        );
        disrupted.insert("gone".to_string(), Time(now));
        p.status = Some(PodDisruptionBudgetStatus {
            disrupted_pods: Some(disrupted),
            ..Default::default()
        });
        let pods = [
            pod("fresh", true, false),
            pod("stale", true, false),
            pod("dying", true, true),
            pod("ok", true, false),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let s = compute_status(&p, &refs, 4, now).unwrap();
        // "fresh" is still counted as disrupted; "stale" expired; "gone" has no pod.
        assert_eq!(s.current_healthy, 2);
        let kept: Vec<&String> = s.disrupted_pods.as_ref().unwrap().keys().collect();
        assert_eq!(kept, vec!["fresh"]);
        assert_eq!(s.disruptions_allowed, 1);
    }

    #[test]
    fn bad_percentage_is_an_error() {
        let p = pdb(pct("half"), None);
        assert!(compute_status(&p, &[], 1, now_ts()).is_err());
        assert_eq!(scaled_value(&IntOrString::String("10%".into()), 0), Ok(0));
    }
}
