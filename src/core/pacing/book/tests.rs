use super::*;
use crate::core::pacing::spec::{MIN_INTERVAL, WINDOW};

fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

fn book(wall: &str, t0: Instant) -> PacingBook<String, Vec<&'static str>> {
    PacingBook::new(WallClock::new(wall.parse().unwrap(), t0))
}

fn merge(what: &'static str) -> impl FnOnce(Option<Vec<&'static str>>) -> Vec<&'static str> {
    move |held| {
        let mut all = held.unwrap_or_default();
        all.push(what);
        all
    }
}

#[test]
fn specs_are_read_once_per_key_and_a_bad_one_is_refused_by_name() {
    let mut specs = PacingSpecs::<String>::new(PacingDefaults::default(), true);
    let k = "a".to_string();
    assert!(specs.get(&k).is_ok_and(|s| s.debounce.is_zero()));
    specs
        .read(&k, &annotations(&[(DEBOUNCE, "5s"), (MIN_INTERVAL, "1m")]))
        .unwrap();
    let spec = specs.get(&k).unwrap();
    assert_eq!(spec.debounce, Duration::from_secs(5));
    assert_eq!(spec.min_interval, Duration::from_secs(60));
    assert!(specs.own_debounce(&k));
    // Without its own debounce, a key whose debounce is applied elsewhere waits for none.
    specs
        .read(&k, &annotations(&[(MIN_INTERVAL, "1m")]))
        .unwrap();
    assert!(specs.get(&k).unwrap().debounce.is_zero());
    assert!(!specs.own_debounce(&k));
    let e = specs
        .read(&k, &annotations(&[(MIN_INTERVAL, "soon")]))
        .unwrap_err();
    assert!(e.contains(MIN_INTERVAL) && e.contains("soon"), "{e}");
    assert_eq!(specs.get(&k).unwrap_err(), e.as_str());
    specs.forget(&k);
    assert!(specs.get(&k).is_ok());
}

#[test]
fn held_work_merges_comes_due_once_and_is_counted() {
    let t0 = Instant::now();
    // 12:00:30 UTC; the window opens at 12:01.
    let mut b = book("2026-11-26T12:00:30Z", t0);
    let mut specs = PacingSpecs::<String>::new(PacingDefaults::default(), false);
    let k = "web".to_string();
    specs
        .read(&k, &annotations(&[(WINDOW, "1 12 * * *")]))
        .unwrap();
    let spec = specs.get(&k).unwrap().clone();
    let gate = b.gate(
        &k,
        &spec,
        ActionClass::Disruptive,
        true,
        t0,
        || "cm/a".into(),
        merge("a"),
    );
    assert!(
        matches!(&gate, Gate::Held(Some(Notice::Deferred { until, .. })) if *until == "2026-11-26T12:01:00Z".parse::<Timestamp>().unwrap()),
        "{gate:?}"
    );
    // A second change meanwhile: held together, told once.
    let later = t0 + Duration::from_secs(5);
    let gate = b.gate(
        &k,
        &spec,
        ActionClass::Disruptive,
        true,
        later,
        || "cm/b".into(),
        merge("b"),
    );
    assert_eq!(gate, Gate::Held(None));
    assert_eq!(b.counts(), (1, 0));
    assert!(b.is_held(&k));
    assert_eq!(b.next_deadline(), Some(t0 + Duration::from_secs(30)));
    assert!(b.take_due(t0 + Duration::from_secs(29)).is_empty());
    let due = b.take_due(t0 + Duration::from_secs(30));
    assert_eq!(due, vec![(k.clone(), vec!["a", "b"])]);
    let open = t0 + Duration::from_secs(30);
    let gate = b.gate(
        &k,
        &spec,
        ActionClass::Disruptive,
        false,
        open,
        String::new,
        |_| vec![],
    );
    assert_eq!(
        gate,
        Gate::Act {
            closed_episode: false,
            held: None
        }
    );
    assert_eq!(b.counts(), (0, 0));
    // Signals are not held by a default window.
    let gate = b.gate(
        &k,
        &spec,
        ActionClass::InPlace,
        true,
        t0 + Duration::from_secs(3600),
        String::new,
        |_| vec![],
    );
    assert_eq!(
        gate,
        Gate::Act {
            closed_episode: false,
            held: None
        }
    );
}

#[test]
fn a_forgotten_target_loses_its_work_and_history_and_snapshots_keep_what_matters() {
    let t0 = Instant::now();
    let mut b = book("2026-11-26T12:00:00Z", t0);
    let mut specs = PacingSpecs::<String>::new(PacingDefaults::default(), false);
    let (a, plain) = ("a".to_string(), "plain".to_string());
    specs
        .read(&a, &annotations(&[(MIN_INTERVAL, "1m")]))
        .unwrap();
    let spec = specs.get(&a).unwrap().clone();
    assert_eq!(
        b.gate(
            &a,
            &spec,
            ActionClass::Disruptive,
            true,
            t0,
            String::new,
            merge("1")
        ),
        Gate::Act {
            closed_episode: false,
            held: None
        }
    );
    let soon = t0 + Duration::from_secs(10);
    assert!(matches!(
        b.gate(
            &a,
            &spec,
            ActionClass::Disruptive,
            true,
            soon,
            String::new,
            merge("2")
        ),
        Gate::Held(Some(Notice::Deferred {
            why: Deferral::MinInterval,
            ..
        }))
    ));
    let plain_spec = specs.get(&plain).unwrap().clone();
    b.gate(
        &plain,
        &plain_spec,
        ActionClass::InPlace,
        true,
        t0,
        String::new,
        merge("x"),
    );
    // Both acted within the flap window: both matter; the interval keeps "a" anyway.
    let saved = b.snapshot(soon, |k| specs.get_or_plain(k));
    assert_eq!(saved.keys().collect::<Vec<_>>(), [&a, &plain]);
    assert!(b.forget(&a));
    assert!(!b.is_held(&a) && b.pacer(&a).is_none());
    let mut again = book("2026-11-26T12:00:00Z", t0);
    again.restore(saved);
    assert!(again.pacer(&a).is_some_and(|p| p.last_action().is_some()));
}

#[test]
fn a_fresh_action_takes_the_held_work_with_it_so_it_never_acts_twice() {
    let t0 = Instant::now();
    let mut b = book("2026-11-26T12:00:00Z", t0);
    let mut specs = PacingSpecs::<String>::new(PacingDefaults::default(), false);
    let k = "web".to_string();
    specs
        .read(&k, &annotations(&[(MIN_INTERVAL, "1m")]))
        .unwrap();
    let spec = specs.get(&k).unwrap().clone();
    let gate = |b: &mut PacingBook<String, Vec<&'static str>>, fresh, s: u64, what| {
        let now = t0 + Duration::from_secs(s);
        b.gate(
            &k,
            &spec,
            ActionClass::Disruptive,
            fresh,
            now,
            String::new,
            merge(what),
        )
    };
    assert!(matches!(
        gate(&mut b, true, 0, "a"),
        Gate::Act { held: None, .. }
    ));
    assert!(matches!(gate(&mut b, true, 10, "b"), Gate::Held(Some(_))));
    // The interval ended; a fresh change is gated before the held one is taken: one action
    // for both, and nothing left to come due.
    assert_eq!(
        gate(&mut b, true, 60, "c"),
        Gate::Act {
            closed_episode: false,
            held: Some(vec!["b"])
        }
    );
    assert!(b.take_due(t0 + Duration::from_secs(3600)).is_empty());
    assert_eq!(b.next_deadline(), None);
}
