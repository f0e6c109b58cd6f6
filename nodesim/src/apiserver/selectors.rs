//! Label and field selectors as the API server parses them from query strings, and the
//! `metav1.LabelSelector` of PodDisruptionBudgets.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;

/// A selector that could not be parsed (answered as 400 BadRequest).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The text is not a selector.
    #[error("unable to parse requirement: {0}")]
    Syntax(String),
    /// A field selector names a field pods do not support.
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelRequirement {
    /// `key=value`, `key==value`
    Equals(String, String),
    /// `key!=value` (also true when the key is absent)
    NotEquals(String, String),
    /// `key in (a,b)`
    In(String, Vec<String>),
    /// `key notin (a,b)` (also true when the key is absent)
    NotIn(String, Vec<String>),
    /// `key`
    Exists(String),
    /// `!key`
    DoesNotExist(String),
}

impl LabelRequirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Self::Equals(k, v) => labels.get(k) == Some(v),
            Self::NotEquals(k, v) => labels.get(k) != Some(v),
            Self::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Self::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Self::Exists(k) => labels.contains_key(k),
            Self::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

/// A parsed label selector: all requirements must hold (an empty selector matches everything).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelQuery(pub Vec<LabelRequirement>);

impl LabelQuery {
    /// Parses the `labelSelector` query parameter.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for part in split_top_level(text) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            reqs.push(parse_label_requirement(part)?);
        }
        Ok(Self(reqs))
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| r.matches(labels))
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn parse_label_requirement(part: &str) -> Result<LabelRequirement, SelectorError> {
    let err = || SelectorError::Syntax(part.to_string());
    if let Some(key) = part.strip_prefix('!') {
        let key = key.trim();
        return if valid_key(key) {
            Ok(LabelRequirement::DoesNotExist(key.to_string()))
        } else {
            Err(err())
        };
    }
    for (op, neg) in [("!=", true), ("==", false), ("=", false)] {
        if let Some((k, v)) = part.split_once(op) {
            let (k, v) = (k.trim(), v.trim());
            if !valid_key(k) || !valid_value(v) {
                return Err(err());
            }
            return Ok(if neg {
                LabelRequirement::NotEquals(k.into(), v.into())
            } else {
                LabelRequirement::Equals(k.into(), v.into())
            });
        }
    }
    let mut words = part.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or_default().trim();
    let rest = words.next().unwrap_or_default().trim();
    if rest.is_empty() {
        return if valid_key(key) {
            Ok(LabelRequirement::Exists(key.to_string()))
        } else {
            Err(err())
        };
    }
    let (op, list) = if let Some(l) = rest.strip_prefix("notin") {
        ("notin", l)
    } else if let Some(l) = rest.strip_prefix("in") {
        ("in", l)
    } else {
        return Err(err());
    };
    let list = list.trim();
    let inner = list
        .strip_prefix('(')
        .and_then(|l| l.strip_suffix(')'))
        .ok_or_else(err)?;
    let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    if !valid_key(key) || values.iter().any(|v| !valid_value(v)) {
        return Err(err());
    }
    Ok(if op == "in" {
        LabelRequirement::In(key.into(), values)
    } else {
        LabelRequirement::NotIn(key.into(), values)
    })
}

/// The pod fields a field selector may name.
const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "metadata.name",
    "metadata.namespace",
    "status.phase",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.podIP",
];

/// One `field=value` / `field!=value` requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    /// e.g. `spec.nodeName`
    pub field: String,
    /// The value compared with.
    pub value: String,
    /// `!=`
    pub negated: bool,
}

/// A parsed pod field selector (comma = AND; empty matches everything).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldQuery(pub Vec<FieldRequirement>);

impl FieldQuery {
    /// Parses the `fieldSelector` query parameter for pods.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (field, value, negated) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, false)
            } else {
                return Err(SelectorError::Syntax(part.to_string()));
            };
            let field = field.trim();
            if !POD_FIELDS.contains(&field) {
                return Err(SelectorError::UnsupportedField(field.to_string()));
            }
            reqs.push(FieldRequirement {
                field: field.to_string(),
                value: value.trim().to_string(),
                negated,
            });
        }
        Ok(Self(reqs))
    }

    /// Whether the pod satisfies every requirement.
    pub fn matches(&self, pod: &Pod) -> bool {
        self.0.iter().all(|r| {
            let actual = pod_field(pod, &r.field);
            (actual == r.value) != r.negated
        })
    }
}

/// A pod field's value as the API server's field-set conversion gives it (missing = "").
fn pod_field(pod: &Pod, field: &str) -> String {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let s = |o: Option<&String>| o.cloned().unwrap_or_default();
    match field {
        "spec.nodeName" => s(spec.and_then(|x| x.node_name.as_ref())),
        "metadata.name" => s(pod.metadata.name.as_ref()),
        "metadata.namespace" => s(pod.metadata.namespace.as_ref()),
        "status.phase" => s(status.and_then(|x| x.phase.as_ref())),
        "spec.restartPolicy" => s(spec.and_then(|x| x.restart_policy.as_ref())),
        "spec.schedulerName" => s(spec.and_then(|x| x.scheduler_name.as_ref())),
        "spec.serviceAccountName" => s(spec.and_then(|x| x.service_account_name.as_ref())),
        "status.podIP" => s(status.and_then(|x| x.pod_ip.as_ref())),
        _ => String::new(),
    }
}

/// Whether a `metav1.LabelSelector` matches `labels` (matchLabels AND matchExpressions).
/// An empty selector matches everything; unknown operators match nothing.
pub fn label_selector_matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let exprs_ok = sel.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        let req = match e.operator.as_str() {
            "In" => LabelRequirement::In(e.key.clone(), values),
            "NotIn" => LabelRequirement::NotIn(e.key.clone(), values),
            "Exists" => LabelRequirement::Exists(e.key.clone()),
            "DoesNotExist" => LabelRequirement::DoesNotExist(e.key.clone()),
            _ => return false,
        };
        req.matches(labels)
    });
    labels_ok && exprs_ok
}

/// Whether a `metav1.LabelSelector` has no requirement at all.
pub fn label_selector_is_empty(sel: &LabelSelector) -> bool {
    sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && sel.match_expressions.as_ref().is_none_or(|m| m.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta};

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selector_table() {
        let app_web = labels(&[("app", "web"), ("tier", "front")]);
        let app_db = labels(&[("app", "db")]);
        let none = labels(&[]);
        // (selector, matches app_web, matches app_db, matches none)
        let table: &[(&str, bool, bool, bool)] = &[
            ("", true, true, true),
            ("app=web", true, false, false),
            ("app==web", true, false, false),
            ("app = web", true, false, false),
            ("app!=web", false, true, true),
            ("app in (web,db)", true, true, false),
            ("app in (web, cache)", true, false, false),
            ("app notin (web)", false, true, true),
            ("app", true, true, false),
            ("tier", true, false, false),
            ("!tier", false, true, true),
            ("app=web,tier=front", true, false, false),
            ("app in (web,db),!tier", false, true, false),
            ("app notin (a,b),tier", true, false, false),
            ("example.com/role", false, false, false),
        ];
        for (sel, web, db, empty) in table {
            let q = LabelQuery::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(q.matches(&app_web), *web, "{sel} on app_web");
            assert_eq!(q.matches(&app_db), *db, "{sel} on app_db");
            assert_eq!(q.matches(&none), *empty, "{sel} on no labels");
        }
    }

    #[test]
    fn label_selector_parse_shapes() {
        assert_eq!(
            LabelQuery::parse("a in (x,y),b notin (z),!c,d,e!=f,g==h").unwrap(),
            LabelQuery(vec![
                LabelRequirement::In("a".into(), vec!["x".into(), "y".into()]),
                LabelRequirement::NotIn("b".into(), vec!["z".into()]),
                LabelRequirement::DoesNotExist("c".into()),
                LabelRequirement::Exists("d".into()),
                LabelRequirement::NotEquals("e".into(), "f".into()),
                LabelRequirement::Equals("g".into(), "h".into()),
            ])
        );
    }

    #[test]
    fn label_selector_rejects_garbage() {
        for bad in ["a in x", "a in (x", "a b", "a=(x)", "!", "a=b c", "=x"] {
            assert!(LabelQuery::parse(bad).is_err(), "{bad} should not parse");
        }
    }

    fn pod(name: &str, ns: &str, node: &str, phase: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                ..Default::default()
            }),
            status: phase.map(|p| PodStatus {
                phase: Some(p.into()),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn field_selector_table() {
        let a = pod("web-1", "default", "node-a", Some("Running"));
        let b = pod("web-2", "prod", "node-b", None);
        let table: &[(&str, bool, bool)] = &[
            ("", true, true),
            ("spec.nodeName=node-a", true, false),
            ("spec.nodeName==node-a", true, false),
            ("spec.nodeName!=node-a", false, true),
            ("metadata.name=web-2", false, true),
            ("metadata.namespace=prod", false, true),
            ("status.phase=Running", true, false),
            ("status.phase=", false, true),
            ("status.phase!=Running,spec.nodeName=node-b", false, true),
            ("spec.nodeName=node-a,metadata.name=web-2", false, false),
        ];
        for (sel, ma, mb) in table {
            let q = FieldQuery::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(q.matches(&a), *ma, "{sel} on a");
            assert_eq!(q.matches(&b), *mb, "{sel} on b");
        }
    }

    #[test]
    fn field_selector_rejects_unknown_fields_and_syntax() {
        assert_eq!(
            FieldQuery::parse("spec.foo=bar"),
            Err(SelectorError::UnsupportedField("spec.foo".into()))
        );
        assert!(matches!(
            FieldQuery::parse("spec.nodeName"),
            Err(SelectorError::Syntax(_))
        ));
    }

    #[test]
    fn metav1_label_selector() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let sel = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "In".into(),
                values: Some(vec!["front".into()]),
            }]),
        };
        assert!(label_selector_matches(&sel, &l));
        let sel = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "DoesNotExist".into(),
                values: None,
            }]),
            ..Default::default()
        };
        assert!(!label_selector_matches(&sel, &l));
        assert!(label_selector_is_empty(&LabelSelector::default()));
        assert!(!label_selector_is_empty(&sel));
    }
}
