//! The controller's grant of restarts in place (issue #45 §2, docs/restart.md, "The grant"):
//! the three annotations the protocol lives in, what a valid id is, and the pure decision of
//! which pods of one owner may be granted now. No kube, no clock: the caller says how long a
//! restarted pod has been unready.
//!
//! - `reloadlet.io/restart-request: <id>` — written by the agent of the pod's node for a
//!   change it saw and decided `restart` for;
//! - `reloadlet.io/restart-grant: <id>` — written by the Lease-holding controller, the
//!   request it lets go ahead;
//! - `reloadlet.io/restarted: <id>` — written by the agent once it stopped the containers
//!   for that grant.

use super::model::PodInfo;
use super::rollout::OwnerRef;
use std::time::Duration;

pub const REQUEST: &str = "reloadlet.io/restart-request";
pub const GRANT: &str = "reloadlet.io/restart-grant";
pub const RESTARTED: &str = "reloadlet.io/restarted";
/// The three, for the lists of annotations reloadlet writes itself.
pub const ANNOTATIONS: [&str; 3] = [REQUEST, GRANT, RESTARTED];
/// The longest id (the admission policies bound the values by it too).
pub const MAX_ID_LEN: usize = 64;

/// An id the agent could have written: 1–64 of `[0-9a-z-]`. Anything else on a pod (a
/// hostile or mangled value) is treated as absent.
pub fn valid_id(id: &str) -> bool {
    (1..=MAX_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-')
}

/// One annotation's value when it is a valid id.
pub fn id_of<'a>(
    annotations: &'a std::collections::BTreeMap<String, String>,
    key: &str,
) -> Option<&'a str> {
    annotations
        .get(key)
        .map(String::as_str)
        .filter(|v| valid_id(v))
}

/// What the agent does with a pod's annotations when it holds no request of its own (after
/// its restart): the request to perform, when the request is granted, not yet restarted,
/// and one the agent can verify it wrote (`mine`).
pub fn granted_not_restarted(
    annotations: &std::collections::BTreeMap<String, String>,
    mine: impl Fn(&str) -> bool,
) -> Option<&str> {
    let request = id_of(annotations, REQUEST)?;
    let grant = id_of(annotations, GRANT)?;
    (grant == request && id_of(annotations, RESTARTED) != Some(request) && mine(request))
        .then_some(request)
}

/// One pod of an owner as the controller sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Member<'a> {
    pub name: &'a str,
    pub request: Option<&'a str>,
    pub grant: Option<&'a str>,
    pub restarted: Option<&'a str>,
    /// Its `Ready` condition is `True`.
    pub ready: bool,
    /// How long it has been seen granted and not Ready (`None`: it is Ready, or not granted):
    /// from the drain or the stop until the restarted container is Ready again.
    pub unready_for: Option<Duration>,
    /// `reloadlet.io/restart-timeout`.
    pub timeout: Duration,
}

impl Member<'_> {
    /// Granted and not yet back: its grant not restarted yet, or restarted and not Ready.
    pub fn in_flight(&self) -> bool {
        self.grant.is_some() && (self.restarted != self.grant || !self.ready)
    }

    /// Granted and not Ready for longer than its timeout: restarted and not Ready again, or
    /// stopped and its container never running again (no `restarted` for the grant then).
    pub fn stuck(&self) -> bool {
        self.grant.is_some() && !self.ready && self.unready_for.is_some_and(|d| d >= self.timeout)
    }

    /// Asks for a grant it does not have (and is not in flight).
    fn wants(&self) -> bool {
        self.request.is_some() && self.request != self.grant && !self.in_flight()
    }
}

/// What one owner's budget allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allowed {
    /// No PodDisruptionBudget selects its pods: one at a time.
    NoBudget,
    /// The selecting budget's `status.disruptionsAllowed` (the smallest, when several).
    Budget(i32),
}

impl Allowed {
    fn cap(self) -> usize {
        match self {
            Self::NoBudget => 1,
            Self::Budget(n) => usize::try_from(n).unwrap_or(0),
        }
    }
}

/// The decision for one owner: indices into the members given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// Grant these now (their request).
    pub grant: Vec<usize>,
    /// Restarted and not Ready past their timeout: the owner's sequence stops.
    pub stuck: Vec<usize>,
    /// Requests that wait because the budget allows no disruption at all.
    pub blocked_by_budget: Vec<usize>,
    /// Pods in flight now.
    pub in_flight: usize,
}

/// Whether `pod` is the only pod of its owner (issue #45 §2: "one replica … a restart means
/// a moment without a Ready pod"): it has an owner (its controller ownerRef) and no other
/// pod of that owner among `namespace_pods` exists, not terminating. Ready or not does not
/// count: the rollout side decides at the change and the grant side at the request, and
/// both must come to the same answer (a sibling turning unready in between would split
/// them, and the change would be lost). A pod without an owner has no workload to roll
/// instead: `false`.
pub fn only_pod_of_owner<'a>(
    pod: &PodInfo,
    namespace_pods: impl IntoIterator<Item = &'a PodInfo>,
) -> bool {
    let Some(owner) = pod.controller.as_deref() else {
        return false;
    };
    let same = |o: &OwnerRef| o.kind == owner.kind && o.name == owner.name && o.uid == owner.uid;
    !namespace_pods
        .into_iter()
        .any(|p| p.uid != pod.uid && !p.terminating && p.controller.as_deref().is_some_and(same))
}

/// Which pods of one owner may be granted now: while a pod is stuck, none; else, in name
/// order, as many as keep the pods in flight below what `allowed` allows. A budget that
/// allows 0 grants nothing and names the waiting requests (their Warning).
pub fn decide(members: &[Member<'_>], allowed: Allowed) -> Decision {
    let in_flight = members.iter().filter(|m| m.in_flight()).count();
    let stuck: Vec<usize> = (0..members.len()).filter(|&i| members[i].stuck()).collect();
    let mut wanting: Vec<usize> = (0..members.len()).filter(|&i| members[i].wants()).collect();
    wanting.sort_by_key(|&i| members[i].name);
    let mut decision = Decision {
        in_flight,
        ..Decision::default()
    };
    if !stuck.is_empty() {
        decision.stuck = stuck;
        return decision;
    }
    if allowed == Allowed::Budget(0) || matches!(allowed, Allowed::Budget(n) if n < 0) {
        decision.blocked_by_budget = wanting;
        return decision;
    }
    let room = allowed.cap().saturating_sub(in_flight);
    decision.grant = wanting.into_iter().take(room).collect();
    decision
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const T: Duration = Duration::from_secs(300);

    fn m<'a>(
        name: &'a str,
        request: Option<&'a str>,
        grant: Option<&'a str>,
        restarted: Option<&'a str>,
        ready: bool,
    ) -> Member<'a> {
        Member {
            name,
            request,
            grant,
            restarted,
            ready,
            unready_for: None,
            timeout: T,
        }
    }

    #[test]
    fn ids_are_bounded_lowercase_tokens() {
        assert!(valid_id("a1b2-c3"));
        for bad in ["", "A1", "a b", "a/b", "é", &"a".repeat(65)] {
            assert!(!valid_id(bad), "{bad:?}");
        }
        assert!(valid_id(&"a".repeat(64)));
    }

    #[test]
    fn the_grant_decision_table() {
        use Allowed::*;
        // (what, members, allowed, granted, in flight)
        type Case<'a> = (&'a str, Vec<Member<'a>>, Allowed, Vec<usize>, usize);
        let cases: Vec<Case> = vec![
            (
                "no budget: one at a time, in name order",
                vec![
                    m("web-b", Some("x"), None, None, true),
                    m("web-a", Some("x"), None, None, true),
                ],
                NoBudget,
                vec![1],
                0,
            ),
            (
                "one granted, not restarted yet: in flight, nothing more",
                vec![
                    m("web-a", Some("x"), Some("x"), None, true),
                    m("web-b", Some("x"), None, None, true),
                ],
                Budget(1),
                vec![],
                1,
            ),
            (
                "restarted but not Ready yet: still in flight",
                vec![
                    m("web-a", Some("x"), Some("x"), Some("x"), false),
                    m("web-b", Some("x"), None, None, true),
                ],
                Budget(1),
                vec![],
                1,
            ),
            (
                "restarted and Ready again: the next",
                vec![
                    m("web-a", Some("x"), Some("x"), Some("x"), true),
                    m("web-b", Some("x"), None, None, true),
                    m("web-c", Some("x"), None, None, true),
                ],
                Budget(1),
                vec![1],
                0,
            ),
            (
                "a budget of two: two at once",
                vec![
                    m("web-a", Some("x"), None, None, true),
                    m("web-b", Some("x"), None, None, true),
                    m("web-c", Some("x"), None, None, true),
                ],
                Budget(2),
                vec![0, 1],
                0,
            ),
            (
                "a newer request of a pod in flight waits for its restart to end",
                vec![m("web-a", Some("y"), Some("x"), None, true)],
                Budget(3),
                vec![],
                1,
            ),
            (
                "a newer request after a finished restart is granted",
                vec![m("web-a", Some("y"), Some("x"), Some("x"), true)],
                Budget(3),
                vec![0],
                0,
            ),
            (
                "an unready pod that was never granted is not in flight (the budget counts it)",
                vec![m("web-a", Some("x"), None, None, false)],
                NoBudget,
                vec![0],
                0,
            ),
            (
                "nothing requested, nothing granted",
                vec![m("web-a", None, None, None, true)],
                NoBudget,
                vec![],
                0,
            ),
        ];
        for (what, members, allowed, grant, in_flight) in cases {
            let d = decide(&members, allowed);
            assert_eq!(d.grant, grant, "{what}");
            assert_eq!(d.in_flight, in_flight, "{what}");
            assert!(
                d.stuck.is_empty() && d.blocked_by_budget.is_empty(),
                "{what}"
            );
        }
    }

    #[test]
    fn a_budget_that_allows_no_disruption_grants_nothing_and_names_the_waiting() {
        let members = [
            m("web-a", Some("x"), None, None, true),
            m("web-b", None, None, None, true),
        ];
        for allowed in [Allowed::Budget(0), Allowed::Budget(-1)] {
            let d = decide(&members, allowed);
            assert!(d.grant.is_empty());
            assert_eq!(d.blocked_by_budget, [0]);
        }
    }

    #[test]
    fn a_stuck_pod_stops_the_owners_sequence_until_it_is_ready() {
        let mut stuck = m("web-a", Some("x"), Some("x"), Some("x"), false);
        stuck.unready_for = Some(T);
        let waiting = m("web-b", Some("x"), None, None, true);
        let d = decide(&[stuck.clone(), waiting.clone()], Allowed::Budget(5));
        assert_eq!((d.stuck, d.grant), (vec![0], vec![]));
        // just under its timeout: in flight, not stuck; the budget has room for the next
        stuck.unready_for = Some(T - Duration::from_secs(1));
        let d = decide(&[stuck.clone(), waiting.clone()], Allowed::Budget(5));
        assert_eq!((d.stuck, d.grant), (vec![], vec![1]));
        // Ready again: not in flight
        stuck.ready = true;
        stuck.unready_for = None;
        assert_eq!(
            decide(&[stuck, waiting.clone()], Allowed::Budget(1)).grant,
            [1]
        );
        // stopped and its container never running again: no `restarted` for the grant, stuck
        // all the same once past its timeout
        let mut never_back = m("web-a", Some("x"), Some("x"), None, false);
        never_back.unready_for = Some(T);
        let d = decide(&[never_back, waiting], Allowed::Budget(5));
        assert_eq!((d.stuck, d.grant), (vec![0], vec![]));
    }

    #[test]
    fn the_agent_performs_after_its_restart_only_a_granted_unrestarted_request_it_wrote() {
        let a = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let mine = |id: &str| id.ends_with("-ok");
        let cases = [
            (a(&[(REQUEST, "c1-ok"), (GRANT, "c1-ok")]), Some("c1-ok")),
            (
                a(&[(REQUEST, "c1-ok"), (GRANT, "c1-ok"), (RESTARTED, "c1-ok")]),
                None,
            ),
            (
                a(&[(REQUEST, "c1-ok"), (GRANT, "c1-ok"), (RESTARTED, "c0-ok")]),
                Some("c1-ok"),
            ),
            // a forged request (not the agent's) granted by its author
            (a(&[(REQUEST, "c1-no"), (GRANT, "c1-no")]), None),
            (a(&[(REQUEST, "c2-ok"), (GRANT, "c1-ok")]), None),
            (a(&[(GRANT, "c1-ok")]), None),
            (a(&[(REQUEST, "C1-OK"), (GRANT, "C1-OK")]), None),
        ];
        for (annotations, want) in cases {
            assert_eq!(
                granted_not_restarted(&annotations, mine),
                want,
                "{annotations:?}"
            );
        }
    }

    #[test]
    fn the_only_pod_of_its_owner_is_one_with_no_sibling_that_stays() {
        let owned = |uid: &str, owner: &str, ready: bool, terminating: bool| PodInfo {
            uid: uid.into(),
            ready,
            terminating,
            controller: (!owner.is_empty()).then(|| {
                Box::new(OwnerRef {
                    api_version: "apps/v1".into(),
                    kind: "ReplicaSet".into(),
                    name: owner.into(),
                    uid: format!("{owner}-uid"),
                })
            }),
            ..PodInfo::default()
        };
        let me = owned("a", "web-1", true, false);
        let cases: [(&str, Vec<PodInfo>, bool); 6] = [
            ("the only pod", vec![me.clone()], true),
            (
                "a Ready sibling",
                vec![me.clone(), owned("b", "web-1", true, false)],
                false,
            ),
            (
                "an unready sibling",
                vec![me.clone(), owned("b", "web-1", false, false)],
                false,
            ),
            (
                "a terminating sibling",
                vec![me.clone(), owned("b", "web-1", true, true)],
                true,
            ),
            (
                "another owner's pod",
                vec![me.clone(), owned("b", "db-1", true, false)],
                true,
            ),
            (
                "a bare pod's neighbour",
                vec![me.clone(), owned("b", "", true, false)],
                true,
            ),
        ];
        for (what, pods, want) in cases {
            assert_eq!(only_pod_of_owner(&me, &pods), want, "{what}");
        }
        let bare = owned("c", "", true, false);
        assert!(
            !only_pod_of_owner(&bare, std::slice::from_ref(&bare)),
            "no owner: nothing to roll"
        );
    }
}
