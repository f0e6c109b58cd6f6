//! The grant section of an `action: restart` pod in `reloadlet explain` (docs/restart.md,
//! "The grant"): who grants (the controller's Lease), what is pending on the pod (request,
//! grant, restarted), and the owner's budget, with a warning ahead of a moment without a
//! Ready pod. Pure: the Lease's verdict and the budgets come from the caller.

use crate::core::disruption_budgets::Coverage;
use crate::core::lease_holder::Coordination;
use crate::core::model::PodInfo;
use crate::core::restart_grant::{id_of, GRANT, REQUEST, RESTARTED};
use crate::ports::{ApiError, LeaseError};
use std::fmt::Write;

/// What `explain` read of the controller's Lease: its `namespace/name` and who holds it, or
/// why it could not be read.
pub type LeaseSeen = Result<(String, Coordination), LeaseError>;

pub(super) fn lines(
    w: &mut String,
    pod: &PodInfo,
    lease: Option<&LeaseSeen>,
    budgets: Option<&Result<Coverage, ApiError>>,
) {
    match lease {
        None => {}
        Some(Err(e)) => {
            let _ = writeln!(
                w,
                "  grant: the controller's Lease could not be read ({e}): who grants is not known"
            );
        }
        Some(Ok((name, Coordination::Held { holder }))) => {
            let _ = writeln!(
                w,
                "  grant: by the controller {holder} (holder of the Lease {name})"
            );
        }
        Some(Ok((name, other))) => {
            let why = other.why(name).unwrap_or_default();
            let _ = writeln!(
                w,
                "  grant: no controller holds the Lease: nothing will be granted ({why}); a request waits with Warning RestartUncoordinated"
            );
        }
    }
    let request = id_of(&pod.annotations, REQUEST);
    let grant = id_of(&pod.annotations, GRANT);
    let restarted = id_of(&pod.annotations, RESTARTED);
    let pending = match request {
        None => "nothing requested".to_owned(),
        Some(r) if restarted == Some(r) => {
            if pod.ready {
                format!("done: restarted for request {r}")
            } else {
                format!("restarted for request {r}, not Ready yet: the owner's next restart waits for it")
            }
        }
        Some(r) if grant == Some(r) => {
            format!("granted: request {r} is being restarted ({RESTARTED} not written yet)")
        }
        Some(r) => match grant {
            Some(g) => format!(
                "requested and waiting: request {r} (the grant {g} is of an earlier request)"
            ),
            None => format!("requested and waiting: request {r}, no grant yet"),
        },
    };
    let _ = writeln!(w, "  pending: {pending}");
    let Some(budgets) = budgets else {
        return;
    };
    let allowed = match budgets {
        Err(e) => {
            let _ = writeln!(w, "  budget: PodDisruptionBudgets could not be read: {e}");
            return;
        }
        Ok(Coverage::None) => {
            let _ = writeln!(
                w,
                "  budget: no PodDisruptionBudget: one pod of the owner at a time"
            );
            None
        }
        Ok(Coverage::One { name, status }) => {
            let allowed = status.map_or(0, |s| s.disruptions_allowed);
            match status {
                Some(_) => {
                    let _ = writeln!(w, "  budget: PodDisruptionBudget {name} allows {allowed} disruption(s) now (status.disruptionsAllowed): as many pods of the owner at once");
                }
                None => {
                    let _ = writeln!(w, "  budget: PodDisruptionBudget {name} has no status yet: counted as 0 until the disruption controller writes it");
                }
            }
            Some(allowed)
        }
        Ok(Coverage::Several(names)) => {
            let _ = writeln!(w, "  budget: PodDisruptionBudgets {}: the smallest status.disruptionsAllowed of them applies", names.join(", "));
            None
        }
    };
    if allowed.is_some_and(|a| a <= 0) {
        let _ = writeln!(w, "  WARNING (RestartBlocked): the budget allows no disruption now: nothing is granted until it does; with one replica, or a budget that never allows one, a restart means a moment without a Ready pod");
    }
}

/// The warning ahead of a restart of the only pod of its owner (docs/restart.md, "One
/// replica without a budget"): what the controller does instead with `on-blocked: rollout`,
/// and what it costs without.
pub(super) fn only_pod(w: &mut String, pod: &PodInfo, only: Option<&Result<bool, ApiError>>) {
    let owner = pod
        .controller
        .as_deref()
        .map(|o| format!("{} {}", o.kind, o.name))
        .unwrap_or_default();
    match only {
        None | Some(Ok(false)) => {}
        Some(Err(e)) => {
            let _ = writeln!(w, "  replicas: the pods of namespace {} could not be read ({e}): whether this is the only pod of {owner} is not known", pod.namespace);
        }
        Some(Ok(true)) => {
            let rolls = matches!(
                crate::core::rollout::on_blocked(&pod.annotations),
                Ok((crate::core::rollout::OnBlocked::Rollout, _))
            );
            let then = if rolls {
                "reloadlet.io/on-blocked is rollout: the controller grants nothing and rolls the workload instead (surge-first; Normal RestartHandedOff; a controller with --rollout=false grants it instead); an agent with --restart-without-grant asks for such a pod too, and leaves it to the controller"
            } else {
                "it is granted and restarted all the same (an agent with --restart-without-grant restarts it at once, without asking); reloadlet.io/on-blocked: rollout has the controller roll the workload instead (surge-first), in either mode"
            };
            let _ = writeln!(
                w,
                "  WARNING: the only pod of {owner}: a restart means a moment without a Ready pod; {then}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::disruption_budgets::BudgetStatus;

    fn pod(annotations: &[(&str, &str)], ready: bool) -> PodInfo {
        PodInfo {
            annotations: annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .chain([("reloadlet.io/action".to_owned(), "restart".to_owned())])
                .collect(),
            ready,
            ..Default::default()
        }
    }

    /// (what, annotations, ready, Lease, budgets, in the text, not in it)
    type Case<'a> = (
        &'a str,
        &'a [(&'a str, &'a str)],
        bool,
        &'a LeaseSeen,
        Result<Coverage, ApiError>,
        &'a [&'a str],
        &'a [&'a str],
    );

    fn budget(allowed: Option<i32>) -> Result<Coverage, ApiError> {
        Ok(Coverage::One {
            name: "web".into(),
            status: allowed.map(|a| BudgetStatus {
                expected_pods: 3,
                desired_healthy: 2,
                current_healthy: 3,
                disruptions_allowed: a,
            }),
        })
    }

    fn text(
        pod: &PodInfo,
        lease: Option<&LeaseSeen>,
        budgets: Option<&Result<Coverage, ApiError>>,
    ) -> String {
        let mut w = String::new();
        lines(&mut w, pod, lease, budgets);
        w
    }

    #[test]
    fn who_grants_what_is_pending_and_the_owners_budget() {
        let lease = "reloadlet-system/reloadlet-controller";
        let held = Ok((
            lease.to_owned(),
            Coordination::Held {
                holder: "c-1".into(),
            },
        ));
        let none = Ok((lease.to_owned(), Coordination::NoLease));
        let expired = Ok((
            lease.to_owned(),
            Coordination::Expired {
                holder: "c-1".into(),
            },
        ));
        let unread: LeaseSeen = Err(LeaseError::Other(ApiError {
            status: Some(403),
            message: "forbidden".into(),
        }));
        let cases: &[Case<'_>] = &[
            ("held, nothing requested, no budget", &[], true, &held, Ok(Coverage::None),
             &["grant: by the controller c-1 (holder of the Lease reloadlet-system/reloadlet-controller)",
               "pending: nothing requested", "no PodDisruptionBudget: one pod of the owner at a time"],
             &["WARNING", "nothing will be granted"]),
            ("no Lease, requested", &[(REQUEST, "r1")], true, &none, budget(Some(1)),
             &["no controller holds the Lease: nothing will be granted (the Lease reloadlet-system/reloadlet-controller does not exist)",
               "requested and waiting: request r1, no grant yet", "PodDisruptionBudget web allows 1 disruption(s) now"],
             &["WARNING", "by the controller"]),
            ("expired, granted", &[(REQUEST, "r1"), (GRANT, "r1")], true, &expired, budget(Some(2)),
             &["of c-1 expired", "granted: request r1 is being restarted"], &["WARNING"]),
            ("a newer request after an earlier grant", &[(REQUEST, "r2"), (GRANT, "r1"), (RESTARTED, "r1")], true, &held, budget(Some(1)),
             &["requested and waiting: request r2 (the grant r1 is of an earlier request)"], &["done"]),
            ("done", &[(REQUEST, "r1"), (GRANT, "r1"), (RESTARTED, "r1")], true, &held, Ok(Coverage::None),
             &["pending: done: restarted for request r1"], &["not Ready"]),
            ("restarted, not Ready yet", &[(REQUEST, "r1"), (GRANT, "r1"), (RESTARTED, "r1")], false, &held, Ok(Coverage::None),
             &["restarted for request r1, not Ready yet"], &["done"]),
            ("a budget of 0", &[(REQUEST, "r1")], true, &held, budget(Some(0)),
             &["allows 0 disruption(s)", "WARNING (RestartBlocked): the budget allows no disruption now", "a moment without a Ready pod"], &[]),
            ("a budget without status", &[(REQUEST, "r1")], true, &held, budget(None),
             &["has no status yet", "WARNING (RestartBlocked)"], &[]),
            ("several budgets", &[], true, &held, Ok(Coverage::Several(vec!["a".into(), "b".into()])),
             &["PodDisruptionBudgets a, b: the smallest"], &["WARNING"]),
            ("the Lease unread", &[], true, &unread, Ok(Coverage::None),
             &["the controller's Lease could not be read (forbidden)"], &["nothing will be granted"]),
        ];
        for (what, annotations, ready, lease, budgets, has, lacks) in cases {
            let t = text(&pod(annotations, *ready), Some(lease), Some(budgets));
            for part in *has {
                assert!(t.contains(part), "{what}: {part:?} in\n{t}");
            }
            for part in *lacks {
                assert!(!t.contains(part), "{what}: no {part:?} in\n{t}");
            }
        }
        // in the report of a restart pod, after what the restart does
        let scope = crate::core::filters::Scope::default();
        let mut ctx = super::super::Context::new(&scope);
        ctx.lease = Some(none.clone());
        ctx.budgets = Some(budget(Some(0)));
        let report = super::super::report(&pod(&[(REQUEST, "r1")], true), &ctx, &[], &|_| {
            Err(super::super::MainPidError::NoContainerId)
        });
        let at = |part: &str| {
            report
                .find(part)
                .unwrap_or_else(|| panic!("{part:?} in\n{report}"))
        };
        assert!(at("action: restart in place") < at("grant: no controller holds the Lease"));
        assert!(at("pending: requested and waiting: request r1") < at("WARNING (RestartBlocked)"));
        // and not in that of another action
        let mut signal = pod(&[], true);
        signal
            .annotations
            .insert("reloadlet.io/action".into(), "signal".into());
        let report = super::super::report(&signal, &ctx, &[], &|_| {
            Err(super::super::MainPidError::NoContainerId)
        });
        assert!(
            !report.contains("grant:") && !report.contains("pending:"),
            "{report}"
        );
        // hostile values count as absent
        let t = text(&pod(&[(REQUEST, "A/../b")], true), None, None);
        assert_eq!(t, "  pending: nothing requested\n");
    }

    #[test]
    fn the_only_pod_of_its_owner_is_warned_about_ahead_of_a_restart() {
        let mut p = pod(&[], true);
        p.namespace = "shop".into();
        p.controller = Some(Box::new(crate::core::rollout::OwnerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "web-1".into(),
            uid: "u".into(),
        }));
        let mut rolled = p.clone();
        rolled
            .annotations
            .insert("reloadlet.io/on-blocked".into(), "rollout".into());
        let say = |pod: &PodInfo, only: Option<Result<bool, ApiError>>| {
            let mut w = String::new();
            only_pod(&mut w, pod, only.as_ref());
            w
        };
        assert_eq!(say(&p, None), "");
        assert_eq!(say(&p, Some(Ok(false))), "");
        let alone = say(&p, Some(Ok(true)));
        assert!(
            alone.contains("WARNING: the only pod of ReplicaSet web-1: a restart means a moment without a Ready pod; it is granted and restarted all the same"),
            "{alone}"
        );
        let handed = say(&rolled, Some(Ok(true)));
        assert!(
            handed.contains("reloadlet.io/on-blocked is rollout: the controller grants nothing and rolls the workload instead")
                && handed.contains("an agent with --restart-without-grant asks for such a pod too, and leaves it to the controller"),
            "{handed}"
        );
        assert!(
            alone.contains(
                "an agent with --restart-without-grant restarts it at once, without asking"
            ),
            "{alone}"
        );
        let unread = say(
            &p,
            Some(Err(ApiError {
                status: Some(403),
                message: "forbidden".into(),
            })),
        );
        assert!(
            unread.contains("the pods of namespace shop could not be read")
                && unread.contains("is not known"),
            "{unread}"
        );
    }
}
