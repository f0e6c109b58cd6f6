use super::*;
use crate::core::pacing::pacer::{ActionClass, Deferral, FlapReport, Step};
use crate::core::pacing::spec::{PacingDefaults, PacingSpec};
use std::time::Duration;

fn t(s: i64) -> Timestamp {
    // 2026-11-26T12:00:00Z plus `s` seconds.
    Timestamp::from_second(1_795_694_400 + s).expect("ts")
}

fn flap(count: u32, secs: u64) -> Option<FlapThreshold> {
    Some(FlapThreshold {
        count,
        window: Duration::from_secs(secs),
    })
}

fn spec(flap: Option<FlapThreshold>, min_interval: u64) -> PacingSpec {
    let mut s = PacingSpec::from_defaults(&PacingDefaults {
        flap,
        ..Default::default()
    });
    s.min_interval = Duration::from_secs(min_interval);
    s
}

/// A pacer that acted at each of `times`.
fn acted_at(times: &[i64]) -> Pacer {
    let mut p = Pacer::default();
    for s in times {
        p.changed(t(*s), "configmap cfg");
        p.acted(t(*s));
    }
    p
}

#[test]
fn keeps_the_last_count_rollouts_and_round_trips() {
    let p = acted_at(&[0, 10, 20, 30]);
    let r = PacingRecord::after_action(&p, flap(3, 600));
    assert_eq!(r.rollouts, [t(10), t(20), t(30)]);
    let value = r.to_value();
    assert_eq!(
        value,
        r#"{"rollouts":["2026-11-26T12:00:10Z","2026-11-26T12:00:20Z","2026-11-26T12:00:30Z"]}"#
    );
    assert_eq!(PacingRecord::parse(&value).unwrap(), r);
    // The breaker off: no history to keep.
    assert!(PacingRecord::after_action(&p, None).rollouts.is_empty());
    // A huge threshold is capped.
    let many: Vec<i64> = (0..100).collect();
    let r = PacingRecord::after_action(&acted_at(&many), flap(1000, 3600));
    assert_eq!(r.rollouts.len(), MAX_ROLLOUTS);
    assert_eq!(r.rollouts.last(), Some(&t(99)));
}

#[test]
fn garbled_values_are_errors_and_unknown_fields_are_ignored() {
    for bad in ["", "x", "{\"rollouts\":[\"yesterday\"]}", "42"] {
        assert!(PacingRecord::parse(bad).is_err(), "{bad}");
    }
    let r = PacingRecord::parse(r#"{"later":1,"rollouts":["2026-11-26T12:00:00Z"]}"#).unwrap();
    assert_eq!(r.rollouts, [t(0)]);
}

#[test]
fn a_restored_history_trips_the_breaker_without_a_new_count() {
    // Two rollouts before the restart, threshold 2 per 10 minutes.
    let before = PacingRecord::after_action(&acted_at(&[0, 30]), flap(2, 600));
    let mut p = Pacer::default();
    before.restore(&mut p, Some(t(30)), t(60));
    assert_eq!(p.last_action(), Some(t(30)));
    p.changed(t(60), "configmap cfg");
    let s = spec(flap(2, 600), 0);
    match p.poll(&s, ActionClass::Disruptive, t(60)) {
        Step::Flapping {
            report: Some(FlapReport { changes: 3, .. }),
            ..
        } => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_open_episode_stays_open_and_is_not_reported_again() {
    let mut p = acted_at(&[0, 10]);
    p.changed(t(20), "configmap cfg");
    let s = spec(flap(2, 600), 0);
    let Step::Flapping {
        report: Some(report),
        ..
    } = p.poll(&s, ActionClass::Disruptive, t(20))
    else {
        panic!("not flapping")
    };
    let r = PacingRecord::on_hold(None, &p, s.flap, &Notice::Flapping(report));
    assert_eq!(
        r.flapping,
        Some(Episode {
            since: t(20),
            source: "configmap cfg".into(),
            changes: 3
        })
    );
    let r = PacingRecord::parse(&r.to_value()).unwrap();
    // A new leader finds the change again at 12:01: held, no second report, until quiet.
    let mut fresh = Pacer::default();
    r.restore(&mut fresh, Some(t(10)), t(60));
    assert!(fresh.is_flapping());
    fresh.changed(t(60), "configmap cfg");
    assert_eq!(
        fresh.poll(&s, ActionClass::Disruptive, t(60)),
        Step::Flapping {
            until: t(660),
            report: None
        }
    );
    assert_eq!(fresh.poll(&s, ActionClass::Disruptive, t(660)), Step::Act);
    // Restarted by someone after the episode began: it is over.
    let mut other = Pacer::default();
    r.restore(&mut other, Some(t(30)), t(60));
    assert!(!other.is_flapping());
}

#[test]
fn a_deferral_keeps_its_time_and_is_not_announced_again() {
    let mut p = acted_at(&[0]);
    p.changed(t(20), "configmap cfg");
    let s = spec(None, 600);
    let Step::Defer {
        until,
        why,
        report: true,
    } = p.poll(&s, ActionClass::Disruptive, t(20))
    else {
        panic!("not deferred")
    };
    assert_eq!((until, why), (t(600), Deferral::MinInterval));
    let r = PacingRecord::on_hold(None, &p, s.flap, &Notice::Deferred { until, why });
    let d = r.deferred.clone().unwrap();
    assert_eq!((d.since, d.why.as_str()), (t(20), "minimum interval"));
    assert_eq!(
        r.describe(t(30)),
        ["held: deferred until 2026-11-26T12:10:00Z (minimum interval)"]
    );
    // The interval needs the last rollout: the template's restartedAt gives it.
    let mut fresh = Pacer::default();
    fresh.seed(t(0));
    r.restore(&mut fresh, Some(t(0)), t(60));
    fresh.changed(t(60), "configmap cfg");
    assert_eq!(
        fresh.poll(&s, ActionClass::Disruptive, t(60)),
        Step::Defer {
            until: t(600),
            why: Deferral::MinInterval,
            report: false
        }
    );
    assert_eq!(fresh.pending_since(), Some(t(20)), "first seen before");
    // Past its time, a deferral is nothing to restore.
    let mut late = Pacer::default();
    r.restore(&mut late, None, t(601));
    assert!(!late.is_pending());
    assert!(r.describe(t(601)).is_empty());
}

#[test]
fn describes_history_and_episode() {
    let r = PacingRecord {
        rollouts: (0..7).map(|s| t(s * 10)).collect(),
        flapping: Some(Episode {
            since: t(70),
            source: "configmap cfg".into(),
            changes: 11,
        }),
        deferred: None,
    };
    assert_eq!(
        r.describe(t(80)),
        [
            "last rollouts (newest first): 2026-11-26T12:01:00Z, 2026-11-26T12:00:50Z, 2026-11-26T12:00:40Z, 2026-11-26T12:00:30Z, 2026-11-26T12:00:20Z and 2 earlier within the flap window",
            "held: flapping since 2026-11-26T12:01:10Z (configmap cfg changed 11 times)",
        ]
    );
}
