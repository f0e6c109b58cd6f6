//! The dashboard, the alert rules and the docs name only metrics reloadlet really exports.

use prometheus_client::registry::Registry;
use reloadlet::serve::metrics::{ActionKind, Metrics, Outcome, PluginLabels};
use std::collections::BTreeSet;

fn exported() -> BTreeSet<String> {
    let mut reg = Registry::with_prefix("reloadlet");
    let m = Metrics::new(&mut reg);
    m.action(ActionKind::Signal, Outcome::Signaled);
    m.observe_latency(ActionKind::Signal, 0.001);
    // Created per mode at start (a family without a series prints nothing).
    m.handler_panics_series("agent", "act");
    m.watch
        .swaps
        .get_or_create(&PluginLabels {
            plugin: "configmap",
        })
        .inc();
    m.watch
        .swaps_unchanged
        .get_or_create(&PluginLabels {
            plugin: "configmap",
        })
        .inc();
    // The controller's counts of `reloadlet status` (the dashboard shows them), with a series.
    let mut consumers =
        reloadlet::controller::consumer_states::metrics::ConsumerMetrics::new(&mut reg, true);
    let mut tally = reloadlet::controller::consumer_states::tally::Tally::default();
    tally.by_namespace.insert("shop".into(), [1, 0, 0, 0, 0, 0]);
    tally.by_object.insert(
        reloadlet::ports::ObjectKey {
            kind: reloadlet::core::model::SourceKind::ConfigMap,
            namespace: "shop".into(),
            name: "app".into(),
        },
        [1, 0, 0, 0, 0, 0],
    );
    consumers.show(tally);
    reloadlet::serve::metrics::encode(&reg)
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
        "deploy/chart/reloadlet/templates/prometheusrule.yaml",
        "deploy/chart/reloadlet/dashboards/reloadlet.json",
        "docs/monitoring.md",
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

/// GET /metrics from the agent's real router on loopback, with an optional Accept header;
/// returns (content type, body).
async fn scrape(accept: Option<&str>) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut reg = Registry::with_prefix("reloadlet");
    let _m = Metrics::new(&mut reg);
    let health = std::sync::Arc::new(reloadlet::serve::health::Health::default());
    let app = reloadlet::serve::health::router(health, std::sync::Arc::new(reg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    let request = format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{accept}Connection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        s.read_to_string(&mut response),
    )
    .await
    .expect("no response within 10 s")
    .unwrap();
    server.abort();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let ctype = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_default();
    (ctype, body.to_owned())
}

/// Prometheus picks its parser by the response's content type (prometheus/prometheus,
/// model/textparse/interface.go, `New`): the body prometheus-client writes is OpenMetrics
/// (`# TYPE reloadlet_actions counter` over `reloadlet_actions_total` samples, `# EOF`), so
/// the header must say OpenMetrics, whatever the scraper's Accept header asked for.
#[tokio::test]
async fn metrics_content_type_matches_the_openmetrics_body() {
    for accept in [
        None,
        Some("text/plain;version=0.0.4;q=0.9,*/*;q=0.1"),
        Some("application/openmetrics-text;version=1.0.0;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
    ] {
        let (ctype, body) = scrape(accept).await;
        assert_eq!(
            ctype, "application/openmetrics-text; version=1.0.0; charset=utf-8",
            "Accept {accept:?}"
        );
        assert!(body.ends_with("# EOF\n"), "not OpenMetrics: {body}");
        assert!(body.contains("# TYPE reloadlet_actions counter\n"), "{body}");
        // Pre-created: the first failure is an increase from 0, visible to increase().
        assert!(
            body.contains("reloadlet_actions_total{action=\"signal\",outcome=\"signal_failed\"} 0\n"),
            "{body}"
        );
    }
}
