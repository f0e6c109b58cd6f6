use super::*;
use crate::core::model::SourceKind;
use crate::core::pacing::ENV_PACING;
use crate::core::rollout::OwnerRef;
use jiff::Timestamp;

fn change(uid: &str, name: &str) -> Change {
    change_to(uid, name, "d")
}

fn change_to(uid: &str, name: &str, digest: &str) -> Change {
    Change {
        uid: uid.into(),
        source: SourceRef {
            kind: SourceKind::ConfigMap,
            name: name.into(),
        },
        digest: digest.into(),
    }
}

fn pod(uid: &str, pacing: &[(&str, &str)]) -> PodInfo {
    let mut pod = PodInfo {
        uid: uid.into(),
        namespace: "ns".into(),
        ..Default::default()
    };
    for (k, v) in pacing {
        pod.annotations.insert((*k).into(), (*v).into());
    }
    pod
}

/// A pod of the ReplicaSet `rs`.
fn owned(uid: &str, rs: &str, pacing: &[(&str, &str)]) -> PodInfo {
    PodInfo {
        controller: Some(Box::new(OwnerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: rs.into(),
            uid: String::new(),
        })),
        has_controller: true,
        ..pod(uid, pacing)
    }
}

fn acted(paced: &EnvPaced) -> Vec<String> {
    match paced {
        EnvPaced::Act(changes) => changes.iter().map(|c| c.uid.clone()).collect(),
        _ => Vec::new(),
    }
}

fn pacing(t0: Instant) -> EnvPacing {
    EnvPacing::new(
        PacingDefaults::default(),
        WallClock::new("2026-11-26T12:00:00Z".parse().unwrap(), t0),
    )
}

const FLAP: (&str, &str) = ("reloadlet.io/flap-threshold", "3/1m");

#[test]
fn an_env_eviction_waits_for_its_window_and_runs_once() {
    let t0 = Instant::now();
    // 12:00:30 UTC; the window opens at 12:01.
    let wall: Timestamp = "2026-11-26T12:00:30Z".parse().unwrap();
    let mut p = EnvPacing::new(PacingDefaults::default(), WallClock::new(wall, t0));
    p.on_pod(&pod("u1", &[("reloadlet.io/window", "1 12 * * *")]))
        .unwrap();
    let notice = p.gate(&change("u1", "a"), t0, t0);
    assert!(
        matches!(notice, EnvPaced::Held(Some(EnvNotice::Deferred { until, .. })) if until == "2026-11-26T12:01:00Z".parse().unwrap()),
        "{notice:?}"
    );
    // A second source changes meanwhile: held together, reported once.
    assert_eq!(
        p.gate(&change("u1", "b"), t0, t0 + Duration::from_secs(5)),
        EnvPaced::Held(None)
    );
    assert_eq!(p.next_deadline(), Some(t0 + Duration::from_secs(30)));
    // What the controller keeps on the pod for explain: the deferral, as it was announced.
    let record = p.record_of("u1").expect("a deferral is recorded");
    assert_eq!(
        record.describe("2026-11-26T12:00:40Z".parse().unwrap()),
        ["held: deferred until 2026-11-26T12:01:00Z (maintenance window)"]
    );
    let deferred = record.deferred.unwrap();
    assert_eq!(
        (deferred.since.to_string(), deferred.source.as_str()),
        ("2026-11-26T12:00:30Z".to_owned(), "configmap a")
    );
    assert_eq!(p.record_of("u2"), None, "another pod: nothing");
    assert!(p.take_due(t0 + Duration::from_secs(29)).is_empty());
    let due = p.take_due(t0 + Duration::from_secs(30));
    assert_eq!(p.record_of("u1"), None, "acted on: nothing held");
    assert_eq!(due.len(), 1);
    assert_eq!(
        due[0].2,
        EnvPaced::Act(vec![change("u1", "a"), change("u1", "b")])
    );
    assert_eq!(p.counts(), (0, 0));
    assert_eq!(p.next_deadline(), None);
}

#[test]
fn an_unannotated_pod_is_evicted_at_once_and_a_bad_one_never() {
    let t0 = Instant::now();
    let mut p = pacing(t0);
    assert!(!p.on_pod(&pod("plain", &[])).unwrap());
    assert_eq!(
        p.gate(&change("plain", "a"), t0, t0),
        EnvPaced::Act(vec![change("plain", "a")])
    );
    let e = p
        .on_pod(&pod("bad", &[("reloadlet.io/min-interval", "soon")]))
        .unwrap_err();
    assert!(
        e.contains("reloadlet.io/min-interval") && e.contains("soon"),
        "{e}"
    );
    assert!(matches!(
        p.gate(&change("bad", "a"), t0, t0),
        EnvPaced::Refused(_)
    ));
    // Fixed: said once, then acted on.
    assert!(p
        .on_pod(&pod("bad", &[("reloadlet.io/min-interval", "1m")]))
        .unwrap());
    assert!(!p
        .on_pod(&pod("bad", &[("reloadlet.io/min-interval", "1m")]))
        .unwrap());
    assert_eq!(
        p.gate(&change("bad", "a"), t0, t0),
        EnvPaced::Act(vec![change("bad", "a")])
    );
}

/// Five changes of one ConfigMap, 10 s apart, reaching a ReplicaSet's three pods (each round's
/// evictions replace them with new UIDs under the same owner), with `flap-threshold: 3/1m`.
#[test]
fn a_replica_sets_pods_are_evicted_three_times_then_held_until_quiet_then_once() {
    let t0 = Instant::now();
    let mut p = pacing(t0);
    let mut pods: Vec<String> = (0..3).map(|i| format!("r0-{i}")).collect();
    for uid in &pods {
        p.on_pod(&owned(uid, "web-1", &[FLAP])).unwrap();
    }
    let mut rounds = 0;
    let mut notices = Vec::new();
    for n in 1..=5u64 {
        let now = t0 + Duration::from_secs(10 * n);
        let digest = format!("v{n}");
        let mut evicted = Vec::new();
        for uid in &pods {
            match p.gate(&change_to(uid, "app-env", &digest), now, now) {
                EnvPaced::Act(changes) => evicted.extend(changes.into_iter().map(|c| c.uid)),
                EnvPaced::Held(notice) => notices.extend(notice),
                EnvPaced::Refused(e) => panic!("{e}"),
            }
        }
        if !evicted.is_empty() {
            assert_eq!(evicted, pods, "change {n}: every pod, once");
            rounds += 1;
            // Replaced: the old pods go, new ones come (baselined on the new content).
            let next: Vec<String> = (0..3).map(|i| format!("r{n}-{i}")).collect();
            for (old, new) in pods.iter().zip(&next) {
                p.on_pod(&owned(new, "web-1", &[FLAP])).unwrap();
                p.forget(old, now);
            }
            pods = next;
        }
    }
    assert_eq!(
        rounds, 3,
        "the 4th change would be the 4th action within 1m"
    );
    assert_eq!(
        notices.len(),
        1,
        "one ReloadFlapping per episode: {notices:?}"
    );
    let EnvNotice::Flapping(report) = &notices[0] else {
        panic!("{notices:?}")
    };
    assert_eq!(
        (report.source.as_str(), report.changes, report.within),
        ("configmap app-env", 4, Duration::from_secs(60))
    );
    assert_eq!(p.counts(), (0, 1), "one owner held");
    assert_eq!(p.owner_label("r3-0"), Some("ReplicaSet web-1"));
    // Each held pod's record names the episode (it began with the 4th change, at 40 s).
    for uid in &pods {
        let record = p.record_of(uid).expect("held as flapping");
        assert_eq!(
            record.describe("2026-11-26T12:01:00Z".parse().unwrap()),
            ["held: flapping since 2026-11-26T12:00:40Z (configmap app-env changed 4 times)"]
        );
    }

    // Quiet for a minute after the 5th change (at 50 s): one round, on the latest content.
    let quiet = t0 + Duration::from_secs(110);
    assert_eq!(p.next_deadline(), Some(quiet));
    assert!(p.take_due(quiet - Duration::from_secs(1)).is_empty());
    let due = p.take_due(quiet);
    let mut evicted: Vec<Change> = due
        .into_iter()
        .flat_map(|(_, _, paced)| match paced {
            EnvPaced::Act(changes) => changes,
            other => panic!("{other:?}"),
        })
        .collect();
    evicted.sort_by(|a, b| a.uid.cmp(&b.uid));
    let latest: Vec<Change> = pods
        .iter()
        .map(|uid| change_to(uid, "app-env", "v5"))
        .collect();
    assert_eq!(evicted, latest);
    assert!(pods.iter().all(|uid| p.record_of(uid).is_none()));
    assert_eq!(p.counts(), (0, 0), "the episode closed");
    assert_eq!(p.next_deadline(), None);
}

#[test]
fn a_pod_without_an_owner_keeps_its_own_breaker() {
    let t0 = Instant::now();
    let mut p = pacing(t0);
    p.on_pod(&pod("solo", &[FLAP])).unwrap();
    p.on_pod(&pod("other", &[FLAP])).unwrap();
    for n in 1..=3u64 {
        let now = t0 + Duration::from_secs(n);
        let c = change_to("solo", "app-env", &format!("v{n}"));
        assert_eq!(acted(&p.gate(&c, now, now)), ["solo"], "change {n}");
    }
    let now = t0 + Duration::from_secs(4);
    let held = p.gate(&change_to("solo", "app-env", "v4"), now, now);
    assert!(
        matches!(held, EnvPaced::Held(Some(EnvNotice::Flapping(_)))),
        "{held:?}"
    );
    assert_eq!(p.owner_label("solo"), None);
    // Another pod reading the same source is not its owner: acted on at once.
    let c = change_to("other", "app-env", "v4");
    assert_eq!(acted(&p.gate(&c, now, now)), ["other"]);
    // The pod goes: nothing of it is kept.
    p.forget("solo", now);
    assert_eq!(p.counts(), (0, 0));
    assert_eq!(p.next_deadline(), None);
}

#[test]
fn two_owners_are_independent() {
    let t0 = Instant::now();
    let mut p = pacing(t0);
    p.on_pod(&owned("a", "web-1", &[FLAP])).unwrap();
    p.on_pod(&owned("b", "api-1", &[FLAP])).unwrap();
    // web-1's source flaps: four changes, the fourth held.
    for n in 1..=4u64 {
        let now = t0 + Duration::from_secs(n);
        let paced = p.gate(&change_to("a", "web-env", &format!("v{n}")), now, now);
        if n < 4 {
            assert_eq!(acted(&paced), ["a"]);
        } else {
            assert!(matches!(paced, EnvPaced::Held(Some(_))), "{paced:?}");
        }
    }
    // api-1 is not held, and its first change counts for itself only.
    let now = t0 + Duration::from_secs(5);
    assert_eq!(
        acted(&p.gate(&change_to("b", "api-env", "v1"), now, now)),
        ["b"]
    );
    assert_eq!(p.counts(), (0, 1));
}

/// A flapping owner's evictions released outside the pods' maintenance window wait for it.
#[test]
fn a_released_eviction_still_waits_for_the_window() {
    let t0 = Instant::now();
    let mut p = pacing(t0);
    // Open from 12:00 for 2 minutes, then from 13:00.
    let pacing = [
        FLAP,
        ("reloadlet.io/window", "0 * * * *"),
        ("reloadlet.io/window-duration", "2m"),
    ];
    p.on_pod(&owned("a", "web-1", &pacing)).unwrap();
    for n in 1..=4u64 {
        let now = t0 + Duration::from_secs(n);
        let paced = p.gate(&change_to("a", "web-env", &format!("v{n}")), now, now);
        assert_eq!(acted(&paced).len(), usize::from(n < 4), "{n}: {paced:?}");
    }
    // Quiet a minute after 12:00:04: 12:01:04, inside the window: acted on then.
    let due = p.take_due(t0 + Duration::from_secs(64));
    assert_eq!(due.len(), 1);
    assert_eq!(acted(&due[0].2), ["a"]);

    // Again, flapping until 12:01:50: quiet at 12:02:50, after the window closed.
    for n in 0..4u64 {
        let now = t0 + Duration::from_secs(80 + 10 * n);
        p.gate(&change_to("a", "web-env", &format!("w{n}")), now, now);
    }
    let quiet = t0 + Duration::from_secs(170);
    let due = p.take_due(quiet);
    assert_eq!(due.len(), 1);
    assert!(
        matches!(&due[0].2, EnvPaced::Held(Some(EnvNotice::Deferred { until, .. })) if *until == "2026-11-26T13:00:00Z".parse::<Timestamp>().unwrap()),
        "{:?}",
        due[0].2
    );
    let at_13 = t0 + Duration::from_secs(3600);
    assert_eq!(p.next_deadline(), Some(at_13));
    let due = p.take_due(at_13);
    assert_eq!(
        due.iter().map(|d| &d.2).collect::<Vec<_>>(),
        [&EnvPaced::Act(vec![change_to("a", "web-env", "w3")])]
    );
}

/// A one-replica ReplicaSet whose evicted pod is gone before its replacement comes: the
/// owner's count carries over; once it has no pods and its window has passed, it is dropped.
#[test]
fn an_owner_without_pods_keeps_its_count_for_the_window_then_is_dropped() {
    let t0 = Instant::now();
    let mut p = pacing(t0);
    p.on_pod(&owned("r0", "web-1", &[FLAP])).unwrap();
    let mut current = "r0".to_string();
    for n in 1..=3u64 {
        let now = t0 + Duration::from_secs(n);
        let c = change_to(&current, "app-env", &format!("v{n}"));
        assert_eq!(
            acted(&p.gate(&c, now, now)),
            [current.clone()],
            "change {n}"
        );
        // The old pod goes first, then its replacement comes.
        p.forget(&current, now);
        current = format!("r{n}");
        p.on_pod(&owned(&current, "web-1", &[FLAP])).unwrap();
    }
    let now = t0 + Duration::from_secs(4);
    let held = p.gate(&change_to(&current, "app-env", "v4"), now, now);
    assert!(
        matches!(held, EnvPaced::Held(Some(EnvNotice::Flapping(_)))),
        "{held:?}"
    );
    // Released after a quiet minute; then the ReplicaSet is scaled to zero.
    let due = p.take_due(t0 + Duration::from_secs(64));
    assert_eq!(acted(&due[0].2), [current.clone()]);
    assert_eq!(p.owners_len(), 1);
    p.forget(&current, t0 + Duration::from_secs(65));
    assert_eq!(p.owners_len(), 1, "its last action is within the window");
    // Another pod's departure after the window sweeps it.
    p.on_pod(&pod("bare", &[])).unwrap();
    p.forget("bare", t0 + Duration::from_secs(125));
    assert_eq!(p.owners_len(), 0);
}

/// A held change whose source went back to what the pod runs is not acted on when the
/// episode closes; the other pods' are.
#[test]
fn a_settled_change_is_dropped_when_the_episode_closes() {
    let t0 = Instant::now();
    let mut p = pacing(t0);
    for uid in ["a", "b"] {
        p.on_pod(&owned(uid, "web-1", &[FLAP])).unwrap();
    }
    for n in 1..=3u64 {
        let now = t0 + Duration::from_secs(n);
        for uid in ["a", "b"] {
            let c = change_to(uid, "app-env", &format!("v{n}"));
            assert_eq!(acted(&p.gate(&c, now, now)), [uid]);
        }
    }
    let now = t0 + Duration::from_secs(4);
    for uid in ["a", "b"] {
        let paced = p.gate(&change_to(uid, "app-env", "v4"), now, now);
        assert!(matches!(paced, EnvPaced::Held(_)), "{paced:?}");
    }
    p.settle(&change_to("a", "app-env", "v3"));
    let due = p.take_due(t0 + Duration::from_secs(64));
    let evicted: Vec<String> = due.iter().flat_map(|d| acted(&d.2)).collect();
    assert_eq!(evicted, ["b"]);
    assert_eq!(p.counts(), (0, 0), "the episode closed");
    // A later change of the settled pod is acted on again.
    let later = t0 + Duration::from_secs(200);
    let c = change_to("a", "app-env", "v5");
    assert_eq!(acted(&p.gate(&c, later, later)), ["a"]);
}

/// Leadership lost: nothing is held here any more (the gauge says so), and the new leader
/// builds the owners' history afresh.
#[test]
fn leadership_lost_drops_what_is_held_and_the_owners_history() {
    let t0 = Instant::now();
    let mut p = pacing(t0);
    p.on_pod(&owned("a", "web-1", &[FLAP])).unwrap();
    for n in 1..=4u64 {
        let now = t0 + Duration::from_secs(n);
        p.gate(&change_to("a", "app-env", &format!("v{n}")), now, now);
    }
    assert_eq!(p.counts(), (0, 1));
    p.clear_held();
    assert_eq!(p.counts(), (0, 0));
    assert_eq!(p.next_deadline(), None);
    // Leading again: the next change is the first action of a fresh history.
    let now = t0 + Duration::from_secs(10);
    let c = change_to("a", "app-env", "v5");
    assert_eq!(acted(&p.gate(&c, now, now)), ["a"]);
    assert_eq!(p.owner_label("a"), Some("ReplicaSet web-1"));
}

#[test]
fn explain_reads_the_record_on_the_pod() {
    use crate::controller::env::explain::held as explain;
    let now: Timestamp = "2026-11-26T12:05:00Z".parse().unwrap();
    assert_eq!(explain(&pod("u1", &[]), now), "", "no record: no line");
    let held = pod(
        "u1",
        &[(
            ENV_PACING,
            r#"{"deferred":{"until":"2026-11-26T12:10:00Z","why":"maintenance window","since":"2026-11-26T12:04:00Z","source":"configmap app-env"}}"#,
        )],
    );
    assert_eq!(
        explain(&held, now),
        "    env eviction held: deferred until 2026-11-26T12:10:00Z (maintenance window) (reloadlet controller, reloadlet.io/env-pacing)\n"
    );
    let later: Timestamp = "2026-11-26T12:11:00Z".parse().unwrap();
    assert!(explain(&held, later).contains("nothing held now"));
    let flapping = pod(
        "u1",
        &[(
            ENV_PACING,
            r#"{"flapping":{"since":"2026-11-26T12:04:00Z","source":"configmap app-env","changes":4}}"#,
        )],
    );
    assert!(explain(&flapping, now)
        .contains("env eviction held: flapping since 2026-11-26T12:04:00Z (configmap app-env changed 4 times)"));
    assert!(explain(&pod("u1", &[(ENV_PACING, "{not json")]), now).contains("unreadable"));
}
