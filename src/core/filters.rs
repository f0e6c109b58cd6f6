//! Where reloadlet may act: `--namespaces` / `--exclude-namespaces` (exclusion wins) and
//! `--pod-selector`. The agent's pod watch sends the selector to the API server; `explain`
//! applies the same [`Scope`] to the one pod it reads.

use crate::core::label_selector::LabelSelector;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceFilter {
    /// Empty: every namespace.
    pub include: BTreeSet<String>,
    pub exclude: BTreeSet<String>,
}

impl NamespaceFilter {
    /// `None` when allowed, else the reason it is not.
    pub fn check(&self, namespace: &str) -> Option<String> {
        if self.exclude.contains(namespace) {
            return Some(format!(
                "namespace {namespace} is excluded by --exclude-namespaces"
            ));
        }
        if !self.include.is_empty() && !self.include.contains(namespace) {
            return Some(format!("namespace {namespace} is not in --namespaces"));
        }
        None
    }
}

/// Every filter of the agent, and whether it acts at all (`--dry-run`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    pub namespaces: NamespaceFilter,
    pub selector: Option<LabelSelector>,
    pub dry_run: bool,
}

impl Scope {
    /// `None` when the agent acts on a pod with this namespace and these labels, else which
    /// filter excludes it and why.
    pub fn check(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Option<String> {
        if let Some(reason) = self.namespaces.check(namespace) {
            return Some(reason);
        }
        let selector = self.selector.as_ref()?;
        selector.first_mismatch(labels).map(|req| {
            format!("the pod's labels do not match --pod-selector {selector:?} (requirement {req:?} fails)",
                selector = selector.to_string(),
                req = req.to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_names_the_filter_that_excludes_a_pod() {
        let scope = Scope {
            namespaces: NamespaceFilter {
                include: set(&["shop"]),
                exclude: set(&[]),
            },
            selector: Some(LabelSelector::parse("app in (web),tier!=db").unwrap()),
            dry_run: false,
        };
        let web: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        assert_eq!(scope.check("shop", &web), None);
        assert!(scope.check("other", &web).unwrap().contains("--namespaces"));
        let db: BTreeMap<String, String> = [
            ("app".to_string(), "web".to_string()),
            ("tier".to_string(), "db".to_string()),
        ]
        .into();
        let why = scope.check("shop", &db).unwrap();
        assert!(
            why.contains("--pod-selector") && why.contains("\"tier!=db\""),
            "{why}"
        );
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn exclusion_wins_and_empty_include_means_all() {
        let f = NamespaceFilter {
            include: set(&["a", "b"]),
            exclude: set(&["b"]),
        };
        assert_eq!(f.check("a"), None);
        assert!(f.check("b").unwrap().contains("exclude"));
        assert!(f.check("c").unwrap().contains("--namespaces"));
        let all = NamespaceFilter {
            include: set(&[]),
            exclude: set(&["kube-system"]),
        };
        assert_eq!(all.check("anything"), None);
        assert!(all.check("kube-system").is_some());
    }
}
