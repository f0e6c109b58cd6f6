use super::*;
use crate::core::pacing::spec::{PacingDefaults, WINDOW};
use crate::core::pacing::window::MaintenanceWindow;
use std::collections::BTreeMap;

fn t(s: u64) -> Timestamp {
    // 2026-11-26T12:00:00Z plus `s` seconds.
    add(
        Timestamp::from_second(1_795_694_400).expect("ts"),
        Duration::from_secs(s),
    )
}

fn at(s: &str) -> Timestamp {
    s.parse().expect("a timestamp")
}

fn spec() -> PacingSpec {
    PacingSpec::from_defaults(&PacingDefaults {
        flap: None,
        ..Default::default()
    })
}

/// Drives a pacer like the caller would: each change, then polls until nothing is due,
/// acting when told. Returns the times acted and every report.
#[derive(Default)]
struct Run {
    pacer: Pacer,
    acted: Vec<Timestamp>,
    flap_reports: Vec<FlapReport>,
    deferrals: Vec<(Timestamp, Deferral)>,
}

impl Run {
    fn poll(&mut self, spec: &PacingSpec, class: ActionClass, now: Timestamp) -> Step {
        let step = self.pacer.poll(spec, class, now);
        match &step {
            Step::Act => {
                self.pacer.acted(now);
                self.acted.push(now);
            }
            Step::Flapping {
                report: Some(r), ..
            } => self.flap_reports.push(r.clone()),
            Step::Defer {
                until,
                why,
                report: true,
            } => self.deferrals.push((*until, *why)),
            _ => {}
        }
        step
    }
}

#[test]
fn nothing_pending_is_idle() {
    let mut p = Pacer::default();
    assert_eq!(p.poll(&spec(), ActionClass::InPlace, t(0)), Step::Idle);
}

#[test]
fn debounce_waits_for_quiet_then_acts_once() {
    let mut s = spec();
    s.debounce = Duration::from_secs(2);
    let mut r = Run::default();
    r.pacer.changed(t(0), "configmap/a");
    assert_eq!(
        r.poll(&s, ActionClass::InPlace, t(1)),
        Step::Wait { at: t(2) }
    );
    r.pacer.changed(t(1), "configmap/b");
    assert_eq!(
        r.poll(&s, ActionClass::InPlace, t(2)),
        Step::Wait { at: t(3) }
    );
    assert_eq!(r.poll(&s, ActionClass::InPlace, t(3)), Step::Act);
    assert_eq!(r.poll(&s, ActionClass::InPlace, t(4)), Step::Idle);
    assert_eq!(r.acted, vec![t(3)]);
}

#[test]
fn min_interval_defers_to_its_end_and_reports_once() {
    let mut s = spec();
    s.min_interval = Duration::from_secs(60);
    let mut r = Run::default();
    r.pacer.changed(t(0), "configmap/a");
    assert_eq!(r.poll(&s, ActionClass::InPlace, t(0)), Step::Act);
    r.pacer.changed(t(10), "configmap/a");
    r.poll(&s, ActionClass::InPlace, t(10));
    r.pacer.changed(t(20), "configmap/a");
    assert_eq!(
        r.poll(&s, ActionClass::InPlace, t(20)),
        Step::Defer {
            until: t(60),
            why: Deferral::MinInterval,
            report: false
        }
    );
    assert_eq!(r.poll(&s, ActionClass::InPlace, t(60)), Step::Act);
    assert_eq!(r.acted, vec![t(0), t(60)]);
    assert_eq!(r.deferrals, vec![(t(60), Deferral::MinInterval)]);
}

#[test]
fn five_rapid_changes_with_three_per_minute_act_three_times_then_once_after_quiet() {
    let mut s = spec();
    s.flap = Some(FlapThreshold {
        count: 3,
        window: Duration::from_secs(60),
    });
    let mut r = Run::default();
    for i in 0..5 {
        r.pacer.changed(t(i), "secret/tls");
        r.poll(&s, ActionClass::InPlace, t(i));
    }
    assert_eq!(r.acted, vec![t(0), t(1), t(2)]);
    assert_eq!(
        r.flap_reports,
        vec![FlapReport {
            source: "secret/tls".into(),
            changes: 4,
            within: Duration::from_secs(60)
        }]
    );
    assert!(r.pacer.is_flapping());
    // Still held one second before the sources have been quiet for the window.
    assert_eq!(
        r.poll(&s, ActionClass::InPlace, t(63)),
        Step::Flapping {
            until: t(64),
            report: None
        }
    );
    assert_eq!(r.poll(&s, ActionClass::InPlace, t(64)), Step::Act);
    assert!(!r.pacer.is_flapping());
    assert_eq!(r.acted.len(), 4);
    assert_eq!(r.flap_reports.len(), 1, "one report per episode");
    // A fresh change after the episode acts at once: the old actions left the window.
    r.pacer.changed(t(200), "secret/tls");
    assert_eq!(r.poll(&s, ActionClass::InPlace, t(200)), Step::Act);
}

#[test]
fn flap_breaker_off_never_holds() {
    let s = spec();
    let mut r = Run::default();
    for i in 0..50 {
        r.pacer.changed(t(i), "configmap/a");
        r.poll(&s, ActionClass::InPlace, t(i));
    }
    assert_eq!(r.acted.len(), 50);
}

fn nightly(zone: &str) -> PacingSpec {
    let ann: BTreeMap<String, String> = [(WINDOW.to_string(), "0 2 * * *".to_string())].into();
    PacingSpec::parse(
        &ann,
        &PacingDefaults {
            flap: None,
            time_zone: zone.into(),
            ..Default::default()
        },
    )
    .expect("valid")
}

#[test]
fn a_window_holds_disruptive_actions_until_it_opens() {
    let s = nightly("UTC");
    let mut r = Run::default();
    r.pacer.changed(at("2026-11-26T12:00:00Z"), "configmap/a");
    // A signal is not held by default...
    assert_eq!(
        r.pacer
            .clone()
            .poll(&s, ActionClass::InPlace, at("2026-11-26T12:00:00Z")),
        Step::Act
    );
    // ...an eviction is, until 02:00.
    let step = r.poll(&s, ActionClass::Disruptive, at("2026-11-26T12:00:00Z"));
    assert_eq!(
        step,
        Step::Defer {
            until: at("2026-11-27T02:00:00Z"),
            why: Deferral::Window,
            report: true
        }
    );
    r.pacer.changed(at("2026-11-26T18:00:00Z"), "configmap/a");
    r.poll(&s, ActionClass::Disruptive, at("2026-11-26T18:00:00Z"));
    assert_eq!(r.deferrals.len(), 1, "the same deferral is reported once");
    assert_eq!(
        r.poll(&s, ActionClass::Disruptive, at("2026-11-27T02:00:00Z")),
        Step::Act
    );
    assert_eq!(r.acted, vec![at("2026-11-27T02:00:00Z")]);
}

#[test]
fn window_actions_all_holds_signals_too() {
    let mut s = nightly("UTC");
    if let Some((_, actions)) = &mut s.window {
        *actions = WindowActions::All;
    }
    let mut p = Pacer::default();
    p.changed(at("2026-11-26T12:00:00Z"), "configmap/a");
    assert!(matches!(
        p.poll(&s, ActionClass::InPlace, at("2026-11-26T12:00:00Z")),
        Step::Defer {
            why: Deferral::Window,
            ..
        }
    ));
}

#[test]
fn max_defer_forces_the_action() {
    let mut s = nightly("UTC");
    s.max_defer = Some(Duration::from_secs(3600));
    let mut r = Run::default();
    r.pacer.changed(at("2026-11-26T12:00:00Z"), "configmap/a");
    assert_eq!(
        r.poll(&s, ActionClass::Disruptive, at("2026-11-26T12:30:00Z")),
        Step::Defer {
            until: at("2026-11-26T13:00:00Z"),
            why: Deferral::Window,
            report: true
        }
    );
    assert_eq!(
        r.poll(&s, ActionClass::Disruptive, at("2026-11-26T13:00:00Z")),
        Step::Act
    );
}

#[test]
fn a_flapping_source_inside_a_window_waits_for_quiet_and_then_the_next_window() {
    // Open 02:00-03:00 UTC; 2 actions per 10 minutes.
    let mut s = nightly("UTC");
    s.flap = Some(FlapThreshold {
        count: 2,
        window: Duration::from_secs(600),
    });
    let mut r = Run::default();
    let base = at("2026-11-27T02:50:00Z");
    for i in 0..4 {
        let now = add(base, Duration::from_secs(i * 60));
        r.pacer.changed(now, "secret/cert");
        r.poll(&s, ActionClass::Disruptive, now);
    }
    assert_eq!(r.acted.len(), 2);
    assert_eq!(r.flap_reports.len(), 1);
    // Quiet from 02:53 to 03:03: the window closed meanwhile, so the held change waits for
    // the next one instead of acting outside it.
    assert_eq!(
        r.poll(&s, ActionClass::Disruptive, at("2026-11-27T03:03:00Z")),
        Step::Defer {
            until: at("2026-11-28T02:00:00Z"),
            why: Deferral::Window,
            report: true
        }
    );
    assert_eq!(
        r.poll(&s, ActionClass::Disruptive, at("2026-11-28T02:00:00Z")),
        Step::Act
    );
    assert!(!r.pacer.is_flapping());
    assert_eq!(r.acted.len(), 3);
}

#[test]
fn a_min_interval_holds_across_a_restart() {
    let mut s = spec();
    s.min_interval = Duration::from_secs(300);
    let mut p = Pacer::default();
    p.changed(t(0), "configmap/a");
    assert_eq!(p.poll(&s, ActionClass::InPlace, t(0)), Step::Act);
    p.acted(t(0));
    p.changed(t(30), "configmap/a");
    // The agent saves its state and restarts.
    let saved = serde_json::to_string(&p).expect("serialises");
    let mut restored: Pacer = serde_json::from_str(&saved).expect("deserialises");
    assert_eq!(restored, p);
    assert!(matches!(
        restored.poll(&s, ActionClass::InPlace, t(60)),
        Step::Defer {
            until,
            why: Deferral::MinInterval,
            ..
        } if until == t(300)
    ));
    assert_eq!(restored.poll(&s, ActionClass::InPlace, t(300)), Step::Act);
}

#[test]
fn a_deferred_window_in_a_named_zone_on_a_dst_day() {
    // Europe/Berlin springs forward on 2027-03-28 at 02:00; a 02:30 window opens at 03:00 CEST.
    let ann: BTreeMap<String, String> = [
        (WINDOW.to_string(), "30 2 * * *".to_string()),
        (
            crate::core::pacing::spec::WINDOW_TIMEZONE.to_string(),
            "Europe/Berlin".to_string(),
        ),
    ]
    .into();
    let s = PacingSpec::parse(&ann, &PacingDefaults::default()).expect("valid");
    let mut p = Pacer::default();
    p.changed(at("2027-03-27T12:00:00Z"), "configmap/a");
    assert!(matches!(
        p.poll(&s, ActionClass::Disruptive, at("2027-03-27T12:00:00Z")),
        Step::Defer { until, .. } if until == at("2027-03-28T01:00:00Z")
    ));
    assert_eq!(
        p.poll(&s, ActionClass::Disruptive, at("2027-03-28T01:00:00Z")),
        Step::Act
    );
    let _ = MaintenanceWindow::new("30 2 * * *", "Europe/Berlin", Duration::from_secs(60))
        .expect("the same window parses directly");
}

#[test]
fn the_fast_path_acts_like_the_full_path_and_stays_bounded() {
    let three = |flap| PacingSpec { flap, ..spec() };
    let s = three(Some(FlapThreshold {
        count: 3,
        window: Duration::from_secs(60),
    }));
    let mut p = Pacer::default();
    // Three actions at once; the fourth within the minute takes the full path, which holds.
    for i in 0..3 {
        assert!(p.act_at_once(&s, t(i)), "action {i}");
    }
    assert!(!p.act_at_once(&s, t(3)));
    p.changed(t(3), "configmap/a");
    assert!(matches!(
        p.poll(&s, ActionClass::InPlace, t(3)),
        Step::Flapping {
            report: Some(FlapReport { changes: 4, .. }),
            ..
        }
    ));
    // Held: the fast path stays closed until the episode ends.
    assert!(!p.act_at_once(&s, t(100)));
    assert_eq!(p.poll(&s, ActionClass::InPlace, t(63)), Step::Act);
    assert!(p.acted(t(63)));
    // A minute later the history has aged out: the fast path is open again.
    assert!(p.act_at_once(&s, t(200)));
    assert!(p.matters(&s, t(200)));
    p.trim(s.flap, t(261));
    assert!(!p.matters(&s, t(261)));
    assert_eq!(p.last_action(), Some(t(200)));
    // Breaker off: nothing is kept but the last action.
    let off = three(None);
    let mut p = Pacer::default();
    for i in 0..100 {
        assert!(p.act_at_once(&off, t(i)));
    }
    assert!(!p.matters(&off, t(100)));
    // Any rule of its own takes the full path.
    let interval = PacingSpec {
        min_interval: Duration::from_secs(5),
        ..spec()
    };
    assert!(!Pacer::default().act_at_once(&interval, t(0)));
}

#[test]
fn an_action_read_back_after_a_restart_counts_once_and_never_moves_time_back() {
    let mut s = spec();
    s.min_interval = Duration::from_secs(60);
    let mut p = Pacer::default();
    p.seed(t(0));
    p.seed(t(0));
    assert_eq!(p.last_action(), Some(t(0)));
    p.changed(t(10), "configmap/a");
    assert!(matches!(
        p.poll(&s, ActionClass::Disruptive, t(10)),
        Step::Defer { until, why: Deferral::MinInterval, .. } if until == t(60)
    ));
    assert_eq!(p.poll(&s, ActionClass::Disruptive, t(60)), Step::Act);
    p.acted(t(60));
    // An older time read back later changes nothing.
    p.seed(t(30));
    assert_eq!(p.last_action(), Some(t(60)));
    assert_eq!(p.recent.len(), 2);
}
