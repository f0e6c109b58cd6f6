//! A pod's QoS class, as `GetPodQOS` (kubelet `pkg/apis/core/v1/helper/qos`) computes it
//! from the cpu and memory requests and limits of all its containers.

use crate::flavor::QosClass;
use k8s_openapi::api::core::v1::PodSpec;
use std::collections::BTreeMap;

const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// The QoS class of `spec`. A limit without a request counts as that request (API defaulting).
pub fn qos_class(spec: &PodSpec) -> QosClass {
    let mut requests: BTreeMap<&str, f64> = BTreeMap::new();
    let mut limits: BTreeMap<&str, f64> = BTreeMap::new();
    let mut guaranteed = true;
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let res = c.resources.as_ref();
        let lim = res.and_then(|r| r.limits.as_ref());
        let req = res.and_then(|r| r.requests.as_ref());
        let mut limited = 0;
        for name in QOS_RESOURCES {
            let limit = lim
                .and_then(|l| l.get(name))
                .and_then(|q| parse_quantity(&q.0))
                .filter(|v| *v > 0.0);
            let request = req
                .and_then(|r| r.get(name))
                .and_then(|q| parse_quantity(&q.0))
                .or(limit)
                .filter(|v| *v > 0.0);
            if let Some(v) = request {
                *requests.entry(name).or_default() += v;
            }
            if let Some(v) = limit {
                *limits.entry(name).or_default() += v;
                limited += 1;
            }
        }
        if limited != QOS_RESOURCES.len() {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return QosClass::BestEffort;
    }
    let equal = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
    if guaranteed
        && requests.len() == limits.len()
        && requests
            .iter()
            .all(|(k, v)| limits.get(k).is_some_and(|l| equal(*l, *v)))
    {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

/// A Kubernetes quantity (`100m`, `1.5`, `128Mi`, `1G`, `1e3`) as a number of units.
pub fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let value: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exp if exp.starts_with(['e', 'E']) => 10f64.powi(exp[1..].parse().ok()?),
        _ => return None,
    };
    Some(value * factor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn container(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        let map = |kv: &[(&str, &str)]| {
            (!kv.is_empty()).then(|| {
                kv.iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        Container {
            resources: Some(ResourceRequirements {
                requests: map(requests),
                limits: map(limits),
                claims: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn classes_follow_requests_and_limits() {
        let cases = [
            (vec![container(&[], &[])], QosClass::BestEffort),
            (
                vec![container(&[], &[("cpu", "1"), ("memory", "1Gi")])],
                QosClass::Guaranteed,
            ),
            (
                vec![container(
                    &[("cpu", "1000m"), ("memory", "1024Mi")],
                    &[("cpu", "1"), ("memory", "1Gi")],
                )],
                QosClass::Guaranteed,
            ),
            (
                vec![container(
                    &[("cpu", "500m")],
                    &[("cpu", "1"), ("memory", "1Gi")],
                )],
                QosClass::Burstable,
            ),
            (
                vec![container(&[("cpu", "100m")], &[])],
                QosClass::Burstable,
            ),
            (vec![container(&[], &[("cpu", "1")])], QosClass::Burstable),
            (
                vec![
                    container(&[], &[("cpu", "1"), ("memory", "1Gi")]),
                    container(&[], &[]),
                ],
                QosClass::Burstable,
            ),
            (
                vec![container(&[("ephemeral-storage", "1Gi")], &[])],
                QosClass::BestEffort,
            ),
        ];
        for (containers, want) in cases {
            let spec = PodSpec {
                containers: containers.clone(),
                ..Default::default()
            };
            assert_eq!(qos_class(&spec), want, "{containers:?}");
        }
    }

    #[test]
    fn quantities_parse() {
        for (s, want) in [
            ("100m", 0.1),
            ("2", 2.0),
            ("1Ki", 1024.0),
            ("1G", 1e9),
            ("1.5", 1.5),
            ("1e3", 1000.0),
        ] {
            assert_eq!(parse_quantity(s), Some(want), "{s}");
        }
        assert_eq!(parse_quantity("1X"), None);
        assert_eq!(parse_quantity(""), None);
    }
}
