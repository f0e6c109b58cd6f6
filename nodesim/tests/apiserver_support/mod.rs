//! Helpers shared by the API server tests: a real kube client, fixtures (waiting is the
//! `test-support` crate's).
#![allow(dead_code)]

use k8s_openapi::api::core::v1::{
    Container, Pod, PodCondition, PodSpec, PodStatus, PodTemplateSpec,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Client, Config};
use nodesim::apiserver::ApiServer;
use std::collections::BTreeMap;

/// A real kube client on the server, with kube's own retry layer off (so a 429 or 503
/// reaches the test at once).
pub fn client(server: &ApiServer) -> Client {
    let mut cfg = Config::new(server.url().parse().expect("server url"));
    cfg.default_retry = false;
    Client::try_from(cfg).expect("kube client")
}

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn spec(node: &str) -> PodSpec {
    PodSpec {
        node_name: Some(node.into()),
        containers: vec![Container {
            name: "app".into(),
            image: Some("example/app:1".into()),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// An unowned pod bound to `node`.
pub fn pod(ns: &str, name: &str, node: &str, l: &[(&str, &str)]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(labels(l)),
            ..Default::default()
        },
        spec: Some(spec(node)),
        status: None,
    }
}

/// A ReplicaSet pod template with these labels.
pub fn template(l: &[(&str, &str)]) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels(l)),
            ..Default::default()
        }),
        spec: Some(spec("")),
    }
}

/// What the kubelet reports for a running pod, Ready or not.
pub fn running(ready: bool) -> PodStatus {
    PodStatus {
        phase: Some("Running".into()),
        conditions: Some(vec![PodCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// Marks every pod of the namespace Running and Ready.
pub fn make_all_ready(server: &ApiServer, ns: &str) {
    for p in server.list_pods() {
        if p.metadata.namespace.as_deref() == Some(ns) {
            server.set_pod_status(
                ns,
                p.metadata.name.as_deref().unwrap_or_default(),
                running(true),
            );
        }
    }
}

pub fn pdb(
    ns: &str,
    name: &str,
    sel: &[(&str, &str)],
    min: Option<IntOrString>,
    max: Option<IntOrString>,
) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: min,
            max_unavailable: max,
            selector: Some(LabelSelector {
                match_labels: Some(labels(sel)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    }
}
