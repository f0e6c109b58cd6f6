//! The RBAC objects reloadlet's Helm chart renders (release `reloadlet` in
//! `reloadlet-system`), per chart value combination: `nodesim/fixtures/rbac-chart.json`,
//! written by `hack/render-rbac.sh`, whose `--check` (run by `hack/check-manifests.sh`) fails
//! when the chart and the fixture differ; the same script checks that the kustomize base
//! renders the chart's defaults.

use super::rbac::{Policy, PolicyError};
use serde_json::Value;

const FIXTURE: &str = include_str!("../../fixtures/rbac-chart.json");

/// The agent's ServiceAccount: namespace and name.
pub const AGENT: (&str, &str) = ("reloadlet-system", "reloadlet");
/// The controller's ServiceAccount.
pub const CONTROLLER: (&str, &str) = ("reloadlet-system", "reloadlet-controller");

/// One render: its `--set` values (sorted; empty for the defaults) and its RBAC objects.
#[derive(Clone, Debug)]
pub struct Render {
    pub values: Vec<String>,
    pub policy: Policy,
}

/// Every render in the fixture.
pub fn renders() -> Result<Vec<Render>, PolicyError> {
    let doc: Value = serde_json::from_str(FIXTURE).map_err(|e| PolicyError::new(e.to_string()))?;
    let mut out = Vec::new();
    for r in doc["renders"].as_array().into_iter().flatten() {
        let values = r["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        let objects = r["objects"].as_array().cloned().unwrap_or_default();
        out.push(Render {
            values,
            policy: Policy::from_objects(&objects)?,
        });
    }
    Ok(out)
}

/// The render for these `--set` values (in any order), `None` when the fixture has none:
/// add the combination to `hack/render-rbac.sh`.
pub fn policy(values: &[String]) -> Option<Policy> {
    let mut want = values.to_vec();
    want.sort();
    want.dedup();
    renders()
        .ok()?
        .into_iter()
        .find(|r| r.values == want)
        .map(|r| r.policy)
}

/// The render for these `--set` values with `verb` taken out of the grants of `resource` in
/// API `group` (an older chart's ClusterRole, or one trimmed by hand): what a feature that
/// needs that rule meets. `None` when the fixture has no such render.
pub fn policy_without(
    values: &[String],
    group: &str,
    resource: &str,
    verb: &str,
) -> Option<Policy> {
    let mut want = values.to_vec();
    want.sort();
    want.dedup();
    let doc: Value = serde_json::from_str(FIXTURE).ok()?;
    let render = doc["renders"].as_array()?.iter().find(|r| {
        let values: Vec<String> = r["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        values == want
    })?;
    let mut objects = render["objects"].as_array()?.clone();
    let has = |list: &Value, item: &str| {
        list.as_array()
            .is_some_and(|l| l.iter().any(|v| v.as_str() == Some(item)))
    };
    for object in &mut objects {
        let Some(rules) = object.get_mut("rules").and_then(Value::as_array_mut) else {
            continue;
        };
        let mut split = Vec::new();
        for rule in rules.iter_mut() {
            if !has(&rule["apiGroups"], group)
                || !has(&rule["resources"], resource)
                || !has(&rule["verbs"], verb)
            {
                continue;
            }
            // The other resources of the rule keep the verb: `resource` gets a rule of its own.
            let mut own = rule.clone();
            own["resources"] = Value::from(vec![resource]);
            if let Some(verbs) = own["verbs"].as_array_mut() {
                verbs.retain(|v| v.as_str() != Some(verb));
            }
            if let Some(resources) = rule["resources"].as_array_mut() {
                resources.retain(|r| r.as_str() != Some(resource));
            }
            split.push(own);
        }
        rules.retain(|r| r["resources"].as_array().is_some_and(|l| !l.is_empty()));
        rules.extend(split);
    }
    Policy::from_objects(&objects).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::rbac::User;

    #[test]
    fn the_fixture_holds_the_defaults_and_grants_both_service_accounts() {
        let all = renders().unwrap();
        assert!(all.iter().any(|r| r.values.is_empty()));
        let p = policy(&[]).unwrap();
        let granted = |sa: (&str, &str)| p.granted(&User::service_account(sa.0, sa.1));
        assert!(granted(AGENT)
            .iter()
            .any(|(_, e)| e.verb == "watch" && e.resource == "pods"));
        assert!(granted(CONTROLLER)
            .iter()
            .any(|(r, e)| r.kind == "Role" && e.resource == "leases"));
        assert!(policy(&["no.such=value".into()]).is_none());
    }

    #[test]
    fn a_render_without_one_verb_keeps_every_other_grant() {
        let controller = |p: &Policy| {
            let mut g: Vec<(String, String)> = p
                .granted(&User::service_account(CONTROLLER.0, CONTROLLER.1))
                .into_iter()
                .filter(|(_, e)| e.group.is_empty() && e.resource == "configmaps")
                .map(|(_, e)| (e.resource, e.verb))
                .collect();
            g.sort();
            g
        };
        let full = controller(&policy(&[]).unwrap());
        assert!(
            full.contains(&("configmaps".into(), "patch".into())),
            "{full:?}"
        );
        let trimmed = controller(&policy_without(&[], "", "configmaps", "patch").unwrap());
        let expected: Vec<(String, String)> =
            full.into_iter().filter(|(_, v)| v != "patch").collect();
        assert_eq!(trimmed, expected);
        assert!(policy_without(&["no.such=value".into()], "", "configmaps", "patch").is_none());
    }
}
