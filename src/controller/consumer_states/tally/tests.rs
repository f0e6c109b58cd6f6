use super::*;
use crate::core::outcome::ActionKind;
use crate::core::status::applied::{Entry, Recorded};
use crate::core::status::data_version::version_of_files;
use crate::core::volume_digest::HashKey;
use crate::status::{report, ObjectMeta, PodFacts};
use jiff::Timestamp;

fn source(kind: SourceKind, name: &str) -> SourceRef {
    SourceRef {
        kind,
        name: name.into(),
    }
}

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_764_406_800 + s).unwrap()
}

/// A pod of `namespace` mounting `object` whole, started at `t(0)`.
fn pod(namespace: &str, name: &str, object: &SourceRef, annotations: &[(&str, String)]) -> PodInfo {
    PodInfo {
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        started: Some(t(0)),
        ..crate::core::model::test_pods::mounting(namespace, name, object.clone())
    }
}

fn key(kind: SourceKind, namespace: &str, name: &str) -> ObjectKey {
    ObjectKey {
        kind,
        namespace: namespace.into(),
        name: name.into(),
    }
}

#[test]
fn consumers_are_counted_by_namespace_and_state_as_the_cli_derives_them() {
    let hash = HashKey::from_bytes([1; 32]);
    let app = source(SourceKind::ConfigMap, "app");
    let data: [(&str, &[u8]); 1] = [("k", b"new")];
    let version = version_of_files(&hash, "web", &app, data);
    let record = |result| {
        let mut a = Applied::default();
        a.record(Entry::new(
            &app,
            Some(&version),
            t(120),
            "agent",
            ActionKind::Signal,
            result,
        ));
        ("reloadlet.io/applied", a.render())
    };
    let signal = [("reloadlet.io/action", "signal".to_owned())];
    let mut finished = pod("web", "done", &app, &signal);
    finished.phase = "Succeeded".into();
    let mut restarted = pod("web", "restarted", &app, &signal);
    restarted.started = Some(t(200));
    let secret = source(SourceKind::Secret, "tls");
    let pods = vec![
        pod(
            "web",
            "signalled",
            &app,
            &[signal[0].clone(), record(Recorded::Applied)],
        ),
        pod(
            "web",
            "failing",
            &app,
            &[signal[0].clone(), record(Recorded::Failed)],
        ),
        pod("web", "waiting", &app, &signal),
        pod("web", "plain", &app, &[]),
        restarted,
        finished,
        // Not published in `shop` (the data version is per namespace): pending.
        pod("shop", "elsewhere", &app, &signal),
        // A Secret: counted only when Secrets are followed.
        pod("web", "secret-reader", &secret, &signal),
    ];
    let published = Published::of(&hash, "web", &app, data, t(100));
    let versions = HashMap::from([(key(SourceKind::ConfigMap, "web", "app"), published.clone())]);

    let configmaps_only = tally(&pods, |k| k == SourceKind::ConfigMap, &versions, false);
    // current: signalled, restarted; pending: waiting; failed; not_reloaded: plain.
    assert_eq!(configmaps_only.by_namespace["web"], [2, 1, 1, 1, 0, 0]);
    assert_eq!(configmaps_only.by_namespace["shop"], [0, 1, 0, 0, 0, 0]);
    assert!(
        configmaps_only.by_object.is_empty(),
        "per object only when asked"
    );

    // The same states as the CLI's rows for the same pods.
    let facts: Vec<PodFacts> = pods
        .iter()
        .filter(|p| p.namespace == "web")
        .map(|p| PodFacts {
            info: p.clone(),
            node: None,
            started: p.started,
        })
        .collect();
    let objects = [("web".to_string(), ObjectMeta::Found(Ok(published)))].into();
    let rows = report(&app, &facts, &objects).rows;
    let mut cli = Counts::default();
    for r in &rows {
        cli[index(&r.state)] += 1;
    }
    assert_eq!(cli, configmaps_only.by_namespace["web"]);

    let with_secrets = tally(&pods, |_| true, &versions, true);
    // The Secret reader: no data version published for it, pending.
    assert_eq!(with_secrets.by_namespace["web"], [2, 2, 1, 1, 0, 0]);
    assert_eq!(
        with_secrets.by_object[&key(SourceKind::ConfigMap, "web", "app")],
        [2, 1, 1, 1, 0, 0]
    );
    assert_eq!(
        with_secrets.by_object[&key(SourceKind::Secret, "web", "tls")],
        [0, 1, 0, 0, 0, 0]
    );
    assert_eq!(
        with_secrets.by_object.len(),
        3,
        "{:?}",
        with_secrets.by_object
    );
}

#[test]
fn state_labels_follow_the_cli_names() {
    let states = [
        State::Current {
            since: None,
            by: "signal".into(),
        },
        State::Pending(crate::core::status::state::Pending::Budget),
        State::Failed { error: "e".into() },
        State::NotReloaded { fix: "f".into() },
        State::Cannot { why: "w".into() },
        State::Unknown { why: "w".into() },
    ];
    for s in &states {
        assert_eq!(STATES[index(s)], s.name().replace(' ', "_"));
    }
}
