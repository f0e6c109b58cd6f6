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
            EnvDecision::Refused(m) => {
                assert!(m.contains("configmap app-env (env) changed"), "{m}");
                "refused"
            }
            EnvDecision::NotReloaded(m) => {
                assert!(
                    m.contains("configmap app-env") && m.contains("reloadlet.io/env-action: evict"),
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
            ("reloadlet.io/env-action", "restart"),
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
