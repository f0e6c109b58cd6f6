//! Where reloadlet may act: `--namespaces` / `--exclude-namespaces` (exclusion wins).
//! The label selector (`--pod-selector`) is applied by the API server on the pod watch.

use std::collections::BTreeSet;

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

#[cfg(test)]
mod tests {
    use super::*;

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
