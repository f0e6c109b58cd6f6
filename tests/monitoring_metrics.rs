//! The dashboard, the alert rules and the docs name only metrics reloadlet really exports.

use prometheus_client::registry::Registry;
use reloadlet::metrics::{ActionKind, Metrics, Outcome, PluginLabels};
use std::collections::BTreeSet;

fn exported() -> BTreeSet<String> {
    let mut reg = Registry::with_prefix("reloadlet");
    let m = Metrics::new(&mut reg);
    m.action(ActionKind::Signal, Outcome::Signaled);
    m.observe_latency(ActionKind::Signal, 0.001);
    m.swaps
        .get_or_create(&PluginLabels {
            plugin: "configmap",
        })
        .inc();
    m.swaps_unchanged
        .get_or_create(&PluginLabels {
            plugin: "configmap",
        })
        .inc();
    reloadlet::metrics::encode(&reg)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

fn referenced(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(pos) = text[i..].find("reloadlet_") {
        let start = i + pos;
        let before_ok =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let end = text[start..]
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .map_or(text.len(), |e| start + e);
        let name = &text[start..end];
        if before_ok && name.len() > "reloadlet_".len() {
            out.insert(name.to_owned());
        }
        i = end;
    }
    out
}

#[test]
fn monitoring_and_docs_use_real_metric_names() {
    let exported = exported();
    assert!(exported.contains("reloadlet_actions_total"), "{exported:?}");
    let base = |n: &str| {
        let n = n
            .trim_end_matches("_bucket")
            .trim_end_matches("_sum")
            .trim_end_matches("_count");
        exported.iter().any(|e| {
            e == n || e.trim_end_matches("_bucket") == n || e.starts_with(&format!("{n}_"))
        })
    };
    for file in [
        "deploy/monitoring/grafana-dashboard.json",
        "deploy/monitoring/prometheusrule.yaml",
        "docs/install.md",
    ] {
        let text = std::fs::read_to_string(file).unwrap();
        let names = referenced(&text);
        assert!(!names.is_empty(), "{file} names no metric");
        let unknown: Vec<_> = names.iter().filter(|n| !base(n)).collect();
        assert!(
            unknown.is_empty(),
            "{file} uses metrics reloadlet does not export: {unknown:?}"
        );
    }
}
