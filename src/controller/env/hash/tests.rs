//! Table tests of the env consumers' pure part: which pods are followed, what a change does.

use super::*;
use crate::controller::consumed::tests::pod;
use crate::core::model::SourceKind;

#[test]
fn decisions() {
    let cm = SourceRef {
        kind: SourceKind::ConfigMap,
        name: "app-env".into(),
    };
    let cases: Vec<(&str, PodInfo, &str)> = vec![
        (
            "evict, owned",
            pod(&[("reloadlet.io/action", "evict")], true),
            "evict",
        ),
        (
            "evict, unowned",
            pod(&[("reloadlet.io/action", "evict")], false),
            "refused",
        ),
        (
            "evict, unowned but allowed",
            pod(
                &[
                    ("reloadlet.io/action", "evict"),
                    ("reloadlet.io/evict-unowned", "true"),
                ],
                false,
            ),
            "evict",
        ),
        (
            "signal",
            pod(&[("reloadlet.io/action", "signal")], true),
            "warn",
        ),
        (
            "signal with env-action evict",
            pod(
                &[
                    ("reloadlet.io/action", "signal"),
                    ("reloadlet.io/env-action", "evict"),
                ],
                true,
            ),
            "evict",
        ),
        (
            "signal with env-action evict, unowned",
            pod(
                &[
                    ("reloadlet.io/action", "signal"),
                    ("reloadlet.io/env-action", "evict"),
                ],
                false,
            ),
            "refused",
        ),
    ];
    for (what, p, want) in cases {
        let got = match decide(&p, &cm) {
            EnvDecision::Evict => "evict",
            d @ (EnvDecision::Restart(_)
            | EnvDecision::RestartRefused(_)
            | EnvDecision::Covered(_)) => panic!("{what}: {d:?}"),
            EnvDecision::Refused(m) => {
                assert!(m.contains("configmap app-env (env) changed"), "{m}");
                "refused"
            }
            EnvDecision::NotReloaded(m) => {
                assert!(
                    m.contains("configmap app-env")
                        && m.contains("reloadlet.io/env-action: restart")
                        && m.contains("reloadlet.io/env-action: evict"),
                    "{m}"
                );
                "warn"
            }
        };
        assert_eq!(got, want, "{what}");
    }
    assert_eq!(cause(&cm), "configmap app-env (env) changed");
}

#[test]
fn eligibility_and_an_invalid_env_action() {
    assert!(env_eligible(&pod(&[("reloadlet.io/action", "signal")], true)).is_ok());
    assert!(env_eligible(&pod(&[], true)).is_err());
    let bad = pod(
        &[
            ("reloadlet.io/action", "signal"),
            ("reloadlet.io/env-action", "reboot"),
        ],
        true,
    );
    let e = env_eligible(&bad).unwrap_err();
    assert!(e.contains("reloadlet.io/env-action"), "{e}");
    let mut pending = pod(&[("reloadlet.io/action", "signal")], true);
    pending.phase = "Pending".into();
    assert!(env_eligible(&pending).is_err());
}

#[test]
fn explain_lists_each_reference_and_its_consequence() {
    let text = crate::controller::env::explain::references(&pod(
        &[("reloadlet.io/action", "signal")],
        true,
    ));
    assert!(
        text.contains("container app: configmap app-env key \"LOG\""),
        "{text}"
    );
    assert!(
        text.contains("configmap shared envFrom (every key, prefix \"S_\")"),
        "{text}"
    );
    assert!(
        text.contains("a change of configmap app-env (a key it reads): Warning EnvNotReloaded"),
        "{text}"
    );
    assert!(
        text.contains("a change of secret db (a key it reads): Warning EnvNotReloaded (if the controller runs with --env-consumers-secrets)"),
        "{text}"
    );
    let evict = crate::controller::env::explain::references(&pod(
        &[("reloadlet.io/action", "evict")],
        true,
    ));
    assert!(
        evict.contains("the pod is evicted (PDB-respecting)"),
        "{evict}"
    );
}

/// A pod as [`pod`] with its containers: `app` (reads the env sources, mounts the volume
/// `conf` of configmap app-env) and `sidecar` (reads nothing), and an init container.
fn with_containers(ann: &[(&str, &str)], mounted: bool) -> PodInfo {
    use crate::core::model::{ContainerInfo, ContainerKind, VolumeMount, VolumeSpec};
    let c = |name: &str, kind, mounts: Vec<VolumeMount>| ContainerInfo {
        name: name.into(),
        kind,
        mounts,
        container_id: None,
        running: true,
        ports: vec![],
    };
    let mut p = pod(ann, true);
    let conf = || VolumeMount {
        volume: "conf".into(),
        sub_path: false,
    };
    p.containers = vec![
        c("init", ContainerKind::Init, vec![]),
        c(
            "app",
            ContainerKind::Regular,
            if mounted { vec![conf()] } else { vec![] },
        ),
        c("sidecar", ContainerKind::Regular, vec![]),
    ];
    if mounted {
        p.volumes = vec![VolumeSpec {
            name: "conf".into(),
            sources: vec![SourceRef {
                kind: SourceKind::ConfigMap,
                name: "app-env".into(),
            }],
            ..VolumeSpec::default()
        }];
    }
    p
}

#[test]
fn restart_decisions() {
    let cm = SourceRef {
        kind: SourceKind::ConfigMap,
        name: "app-env".into(),
    };
    const A: (&str, &str) = ("reloadlet.io/action", "restart");
    const SIGNAL: (&str, &str) = ("reloadlet.io/action", "signal");
    const EVICT: (&str, &str) = ("reloadlet.io/action", "evict");
    const ENV_RESTART: (&str, &str) = ("reloadlet.io/env-action", "restart");
    const ENV_EVICT: (&str, &str) = ("reloadlet.io/env-action", "evict");
    let never = |mut p: PodInfo| {
        p.restart.restart_policy = Some("Never".into());
        p
    };
    let cases: Vec<(&str, PodInfo, &str)> = vec![
        (
            "action restart: the containers that read it",
            with_containers(&[A], false),
            "restart app",
        ),
        (
            "signal, env-action restart",
            with_containers(&[SIGNAL, ENV_RESTART], false),
            "restart app",
        ),
        (
            "evict, env-action restart wins",
            with_containers(&[EVICT, ENV_RESTART], false),
            "restart app",
        ),
        (
            "restart, env-action evict wins",
            with_containers(&[A, ENV_EVICT], false),
            "evict",
        ),
        (
            "restart-containers all (init never)",
            with_containers(&[A, ("reloadlet.io/restart-containers", "all")], false),
            "restart app,sidecar",
        ),
        (
            "restart-containers named",
            with_containers(
                &[
                    SIGNAL,
                    ENV_RESTART,
                    ("reloadlet.io/restart-containers", "sidecar"),
                ],
                false,
            ),
            "restart sidecar",
        ),
        (
            "restart-containers unknown",
            with_containers(&[A, ("reloadlet.io/restart-containers", "nope")], false),
            "refused",
        ),
        (
            "restartPolicy Never",
            never(with_containers(&[A], false)),
            "refused",
        ),
        (
            "a static pod",
            with_containers(&[A, ("kubernetes.io/config.mirror", "x")], false),
            "refused",
        ),
        (
            "bad restart-grace",
            with_containers(
                &[SIGNAL, ENV_RESTART, ("reloadlet.io/restart-grace", "soon")],
                false,
            ),
            "refused",
        ),
        (
            "action restart, mounted too: the agent's",
            with_containers(&[A], true),
            "covered",
        ),
        (
            "action restart, all, mounted too: the agent's",
            with_containers(&[A, ("reloadlet.io/restart-containers", "all")], true),
            "covered",
        ),
        (
            "signal, env-action restart, mounted too: restarted here",
            with_containers(&[SIGNAL, ENV_RESTART], true),
            "restart app",
        ),
        ("no container reads it", pod(&[A], true), "covered"),
    ];
    for (what, p, want) in cases {
        let got = match decide(&p, &cm) {
            EnvDecision::Restart(c) => format!("restart {}", c.join(",")),
            EnvDecision::RestartRefused(m) => {
                assert!(
                    m.starts_with("not restarted: ")
                        && m.contains("configmap app-env (env) changed"),
                    "{what}: {m}"
                );
                "refused".into()
            }
            EnvDecision::Covered(_) => "covered".into(),
            EnvDecision::Evict => "evict".into(),
            d => panic!("{what}: {d:?}"),
        };
        assert_eq!(got, want, "{what}");
    }
    let names: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
    let mut many = with_containers(&[A, ("reloadlet.io/restart-containers", "all")], false);
    many.containers = names
        .iter()
        .map(|n| crate::core::model::ContainerInfo {
            name: n.clone(),
            kind: crate::core::model::ContainerKind::Regular,
            mounts: vec![],
            container_id: None,
            running: true,
            ports: vec![],
        })
        .collect();
    assert!(
        matches!(decide(&many, &cm), EnvDecision::RestartRefused(m) if m.contains("at most 9"))
    );
}
