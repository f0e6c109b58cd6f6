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
}
