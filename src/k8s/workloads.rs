//! The kube edges of the rollout feature (`reloadlet.io/action: rollout`): the owner of a pod
//! and of a ReplicaSet (metadata-only GETs: `PartialObjectMetadata`), a workload's update
//! strategy (one GET), what it says of its past rollouts (one GET: the template's
//! `restartedAt`, its own `reloadlet.io/rollout-pacing`), and the JSON merge patches of the
//! workload ([`crate::ports::WorkloadPatcher`]). Converted to the kube-free types
//! of `crate::core::rollout` here.

use super::controller::FIELD_MANAGER;
use super::refusals::{refused_error, report};
use crate::core::owner_chain::{Link, PodLink, WorkloadFacts};
use crate::core::pacing::ROLLOUT_PACING;
use crate::core::permission::Feature;
use crate::core::permission::Request;
use crate::core::rollout::{IntOrPercent, Strategy, WorkloadKind, WorkloadRef, RESTARTED_AT};
use crate::ports::RefusalSink;
use crate::ports::{ApiError, PatchError, RolloutHistory, WorkloadApi, WorkloadPatcher};
use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector as KubeSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::Value;
use std::collections::BTreeMap;

pub struct KubeWorkloads {
    client: Client,
    denials: RefusalSink,
}

/// The API group, resource and feature of a workload kind's requests.
fn resource_of(kind: WorkloadKind) -> (&'static str, &'static str, Feature) {
    match kind {
        WorkloadKind::Deployment => ("apps", "deployments", Feature::Rollout),
        WorkloadKind::StatefulSet => ("apps", "statefulsets", Feature::Rollout),
        WorkloadKind::DaemonSet => ("apps", "daemonsets", Feature::Rollout),
        WorkloadKind::ArgoRollout => ("argoproj.io", "rollouts", Feature::ArgoRollouts),
    }
}

fn request_on(verb: &'static str, w: &WorkloadRef) -> Request {
    let (group, resource, feature) = resource_of(w.kind);
    Request::new(feature, verb, group, resource)
}

impl KubeWorkloads {
    /// `denials`: where a refused request is reported (`crate::serve::denials`).
    pub fn new(client: Client, denials: RefusalSink) -> Self {
        Self { client, denials }
    }

    /// Reports `result` of `verb` on `w`.
    fn seen<T>(&self, verb: &'static str, w: &WorkloadRef, result: &Result<T, kube::Error>) {
        report(
            &self.denials,
            request_on(verb, w),
            Some(&w.namespace),
            result,
        );
    }

    fn argo(&self, namespace: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout");
        Api::namespaced_with(
            self.client.clone(),
            namespace,
            &ApiResource::from_gvk_with_plural(&gvk, "rollouts"),
        )
    }
}

/// `25%` or `1` (an unparsable string counts as 0, as apimachinery's
/// `GetScaledValueFromIntOrPercent` would refuse it and the API server validates it).
fn int_or_percent(v: Option<&IntOrString>, default: IntOrPercent) -> IntOrPercent {
    match v {
        None => default,
        Some(IntOrString::Int(i)) => IntOrPercent::Int(*i),
        Some(IntOrString::String(s)) => match s.strip_suffix('%') {
            Some(p) => IntOrPercent::Percent(p.trim().parse().unwrap_or(0)),
            None => IntOrPercent::Int(s.trim().parse().unwrap_or(0)),
        },
    }
}

/// A Deployment's strategy; the defaults are the API server's (kubernetes
/// `pkg/apis/apps/v1/defaults.go`, `SetDefaults_Deployment`: replicas 1, RollingUpdate,
/// maxSurge and maxUnavailable 25 %).
pub fn deployment_strategy(d: &Deployment) -> Strategy {
    let spec = d.spec.as_ref();
    let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
    let strategy = spec.and_then(|s| s.strategy.as_ref());
    if strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate") {
        return Strategy::Recreate;
    }
    let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
    Strategy::Rolling {
        replicas,
        max_surge: int_or_percent(
            rolling.and_then(|r| r.max_surge.as_ref()),
            IntOrPercent::Percent(25),
        ),
        max_unavailable: int_or_percent(
            rolling.and_then(|r| r.max_unavailable.as_ref()),
            IntOrPercent::Percent(25),
        ),
    }
}

/// A StatefulSet's: `RollingUpdate` by default (`SetDefaults_StatefulSet`).
pub fn stateful_set_strategy(s: &StatefulSet) -> Strategy {
    let kind = s
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.type_.as_deref());
    match kind {
        Some("OnDelete") => Strategy::OnDelete,
        _ => Strategy::OrderedRolling,
    }
}

/// A DaemonSet's: `RollingUpdate`, maxSurge 0, maxUnavailable 1 by default
/// (`SetDefaults_DaemonSet`).
pub fn daemon_set_strategy(d: &DaemonSet) -> Strategy {
    let strategy = d.spec.as_ref().and_then(|s| s.update_strategy.as_ref());
    if strategy.and_then(|u| u.type_.as_deref()) == Some("OnDelete") {
        return Strategy::OnDelete;
    }
    let surge = strategy
        .and_then(|u| u.rolling_update.as_ref())
        .and_then(|r| r.max_surge.as_ref());
    Strategy::DaemonSetRolling {
        max_surge: int_or_percent(surge, IntOrPercent::Int(0)),
    }
}

/// What an Argo Rollout's restart (`spec.restartAt`) does: no new ReplicaSet and no surge —
/// the Rollout controller deletes the pods created before `restartAt`, as many at a time as
/// `maxUnavailable` allows (one when it is 0), blueGreen or canary alike (argo-rollouts
/// docs/features/restart.md; `maxUnavailable` defaults to 25 %: `utils/defaults/defaults.go`,
/// `GetMaxUnavailableOrDefault`).
pub fn argo_strategy(spec: &Value) -> Strategy {
    let replicas = spec
        .get("replicas")
        .and_then(Value::as_i64)
        .and_then(|r| i32::try_from(r).ok())
        .unwrap_or(1);
    let strategy = spec.get("strategy");
    let unavailable = ["canary", "blueGreen"]
        .iter()
        .filter_map(|k| strategy.and_then(|s| s.get(*k)))
        .find_map(|s| s.get("maxUnavailable"))
        .and_then(|v| serde_json::from_value::<IntOrString>(v.clone()).ok());
    Strategy::Rolling {
        replicas,
        max_surge: IntOrPercent::Int(0),
        max_unavailable: int_or_percent(unavailable.as_ref(), IntOrPercent::Percent(25)),
    }
}

/// A workload's or ReplicaSet's selector; `None` when empty (apps/v1 refuses an empty one)
/// or not one the API server would accept.
fn selector(sel: &KubeSelector) -> Option<crate::core::label_selector::LabelSelector> {
    super::pdb_watch::label_selector(sel).filter(|s| !s.is_empty())
}

/// The workload's own `reloadlet.io/rollout-pacing` annotation.
fn pacing_of(meta: &ObjectMeta) -> Option<String> {
    meta.annotations.as_ref()?.get(ROLLOUT_PACING).cloned()
}

impl WorkloadApi for KubeWorkloads {
    fn pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodLink>, ApiError>> {
        Box::pin(async move {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
            let meta = api.get_metadata_opt(name).await;
            report(
                &self.denials,
                Request::new(Feature::Rollout, "get", "", "pods"),
                Some(namespace),
                &meta,
            );
            let meta = meta.map_err(|e| {
                refused_error(
                    &e,
                    Request::new(Feature::Rollout, "get", "", "pods"),
                    Some(namespace),
                )
            })?;
            Ok(meta.map(|m| PodLink {
                uid: m.metadata.uid.clone().unwrap_or_default(),
                owner: super::pod_convert::controller_of(&m.metadata),
                labels: m.metadata.labels.unwrap_or_default(),
                annotations: m.metadata.annotations.unwrap_or_default(),
            }))
        })
    }

    fn replica_set<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Link>, ApiError>> {
        Box::pin(async move {
            let api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), namespace);
            let rs = api.get_opt(name).await;
            report(
                &self.denials,
                Request::new(Feature::Rollout, "get", "apps", "replicasets"),
                Some(namespace),
                &rs,
            );
            let rs = rs.map_err(|e| {
                let request = Request::new(Feature::Rollout, "get", "apps", "replicasets");
                refused_error(&e, request, Some(namespace))
            })?;
            Ok(rs.map(|rs| Link {
                uid: rs.metadata.uid.clone().unwrap_or_default(),
                owner: super::pod_convert::controller_of(&rs.metadata),
                selector: rs.spec.as_ref().and_then(|s| selector(&s.selector)),
            }))
        })
    }

    fn workload<'a>(
        &'a self,
        w: &'a WorkloadRef,
    ) -> BoxFuture<'a, Result<Option<WorkloadFacts>, ApiError>> {
        Box::pin(async move {
            let c = self.client.clone();
            let ns = w.namespace.as_str();
            let facts =
                |meta: &ObjectMeta,
                 strategy: Strategy,
                 sel: Option<&KubeSelector>,
                 template: Option<&PodTemplateSpec>| WorkloadFacts {
                    strategy,
                    link: Link {
                        uid: meta.uid.clone().unwrap_or_default(),
                        owner: None,
                        selector: sel.and_then(selector),
                    },
                    annotations: meta.annotations.clone().unwrap_or_default(),
                    template_annotations: template
                        .and_then(|t| t.metadata.as_ref())
                        .and_then(|m| m.annotations.clone())
                        .unwrap_or_default(),
                };
            let found = match w.kind {
                WorkloadKind::Deployment => Api::<Deployment>::namespaced(c, ns)
                    .get_opt(&w.name)
                    .await
                    .map(|d| {
                        d.map(|d| {
                            let spec = d.spec.as_ref();
                            facts(
                                &d.metadata,
                                deployment_strategy(&d),
                                spec.map(|s| &s.selector),
                                spec.map(|s| &s.template),
                            )
                        })
                    }),
                WorkloadKind::StatefulSet => Api::<StatefulSet>::namespaced(c, ns)
                    .get_opt(&w.name)
                    .await
                    .map(|s| {
                        s.map(|s| {
                            let spec = s.spec.as_ref();
                            facts(
                                &s.metadata,
                                stateful_set_strategy(&s),
                                spec.map(|s| &s.selector),
                                spec.map(|s| &s.template),
                            )
                        })
                    }),
                WorkloadKind::DaemonSet => Api::<DaemonSet>::namespaced(c, ns)
                    .get_opt(&w.name)
                    .await
                    .map(|d| {
                        d.map(|d| {
                            let spec = d.spec.as_ref();
                            facts(
                                &d.metadata,
                                daemon_set_strategy(&d),
                                spec.map(|s| &s.selector),
                                spec.map(|s| &s.template),
                            )
                        })
                    }),
                WorkloadKind::ArgoRollout => self.argo(ns).get_opt(&w.name).await.map(|r| {
                    r.map(|r| {
                        let spec = &r.data["spec"];
                        let sel: Option<KubeSelector> =
                            serde_json::from_value(spec["selector"].clone()).ok();
                        // A Rollout with `workloadRef` has no template of its own: nothing
                        // in it grants a rollout (docs/security.md).
                        let template: Option<PodTemplateSpec> =
                            serde_json::from_value(spec["template"].clone()).ok();
                        facts(
                            &r.metadata,
                            argo_strategy(spec),
                            sel.as_ref(),
                            template.as_ref(),
                        )
                    })
                }),
            };
            self.seen("get", w, &found);
            found.map_err(|e| refused_error(&e, request_on("get", w), Some(&w.namespace)))
        })
    }

    fn annotations<'a>(
        &'a self,
        w: &'a WorkloadRef,
    ) -> BoxFuture<'a, Result<Option<BTreeMap<String, String>>, ApiError>> {
        Box::pin(async move {
            let c = self.client.clone();
            let ns = w.namespace.as_str();
            // Metadata-only GETs (`as=PartialObjectMetadata`): no pod template is read.
            let meta = match w.kind {
                WorkloadKind::Deployment => Api::<Deployment>::namespaced(c, ns)
                    .get_metadata_opt(&w.name)
                    .await
                    .map(|o| o.map(|o| o.metadata)),
                WorkloadKind::StatefulSet => Api::<StatefulSet>::namespaced(c, ns)
                    .get_metadata_opt(&w.name)
                    .await
                    .map(|o| o.map(|o| o.metadata)),
                WorkloadKind::DaemonSet => Api::<DaemonSet>::namespaced(c, ns)
                    .get_metadata_opt(&w.name)
                    .await
                    .map(|o| o.map(|o| o.metadata)),
                WorkloadKind::ArgoRollout => self
                    .argo(ns)
                    .get_metadata_opt(&w.name)
                    .await
                    .map(|o| o.map(|o| o.metadata)),
            };
            self.seen("get", w, &meta);
            meta.map(|m| m.map(|m| m.annotations.unwrap_or_default()))
                .map_err(|e| refused_error(&e, request_on("get", w), Some(&w.namespace)))
        })
    }

    fn rollout_history<'a>(
        &'a self,
        w: &'a WorkloadRef,
    ) -> BoxFuture<'a, Result<Option<RolloutHistory>, ApiError>> {
        Box::pin(async move {
            let c = self.client.clone();
            let ns = w.namespace.as_str();
            let history = |meta: &ObjectMeta, t: Option<&PodTemplateSpec>| RolloutHistory {
                restarted_at: t
                    .and_then(|t| t.metadata.as_ref())
                    .and_then(|m| m.annotations.as_ref())
                    .and_then(|a| a.get(RESTARTED_AT).cloned()),
                pacing: pacing_of(meta),
            };
            let found = match w.kind {
                WorkloadKind::Deployment => Api::<Deployment>::namespaced(c, ns)
                    .get_opt(&w.name)
                    .await
                    .map(|d| d.map(|d| history(&d.metadata, d.spec.as_ref().map(|s| &s.template)))),
                WorkloadKind::StatefulSet => Api::<StatefulSet>::namespaced(c, ns)
                    .get_opt(&w.name)
                    .await
                    .map(|s| s.map(|s| history(&s.metadata, s.spec.as_ref().map(|s| &s.template)))),
                WorkloadKind::DaemonSet => Api::<DaemonSet>::namespaced(c, ns)
                    .get_opt(&w.name)
                    .await
                    .map(|d| d.map(|d| history(&d.metadata, d.spec.as_ref().map(|s| &s.template)))),
                WorkloadKind::ArgoRollout => self.argo(ns).get_opt(&w.name).await.map(|r| {
                    r.map(|r| RolloutHistory {
                        restarted_at: r.data["spec"]["restartAt"].as_str().map(str::to_owned),
                        pacing: pacing_of(&r.metadata),
                    })
                }),
            };
            self.seen("get", w, &found);
            found.map_err(|e| refused_error(&e, request_on("get", w), Some(&w.namespace)))
        })
    }
}

impl WorkloadPatcher for KubeWorkloads {
    fn patch<'a>(
        &'a self,
        w: &'a WorkloadRef,
        patch: &'a Value,
    ) -> BoxFuture<'a, Result<(), PatchError>> {
        Box::pin(async move {
            let c = self.client.clone();
            let ns = w.namespace.as_str();
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PatchParams::default()
            };
            let p = Patch::Merge(patch);
            let result = match w.kind {
                WorkloadKind::Deployment => Api::<Deployment>::namespaced(c, ns)
                    .patch(&w.name, &params, &p)
                    .await
                    .map(drop),
                WorkloadKind::StatefulSet => Api::<StatefulSet>::namespaced(c, ns)
                    .patch(&w.name, &params, &p)
                    .await
                    .map(drop),
                WorkloadKind::DaemonSet => Api::<DaemonSet>::namespaced(c, ns)
                    .patch(&w.name, &params, &p)
                    .await
                    .map(drop),
                WorkloadKind::ArgoRollout => {
                    self.argo(ns).patch(&w.name, &params, &p).await.map(drop)
                }
            };
            self.seen("patch", w, &result);
            result.map_err(super::controller::patch_error)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_api_servers() {
        let d: Deployment = serde_json::from_value(serde_json::json!({"spec": {
            "selector": {}, "template": {}}}))
        .unwrap();
        assert_eq!(deployment_strategy(&d), Strategy::deployment_default(1));
        let d: Deployment = serde_json::from_value(serde_json::json!({"spec": {
            "replicas": 3, "selector": {}, "template": {},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "50%"}}}}))
        .unwrap();
        assert_eq!(
            deployment_strategy(&d),
            Strategy::Rolling {
                replicas: 3,
                max_surge: IntOrPercent::Int(0),
                max_unavailable: IntOrPercent::Percent(50)
            }
        );
        let d: Deployment = serde_json::from_value(serde_json::json!({"spec": {
            "selector": {}, "template": {}, "strategy": {"type": "Recreate"}}}))
        .unwrap();
        assert_eq!(deployment_strategy(&d), Strategy::Recreate);
        let s: StatefulSet = serde_json::from_value(serde_json::json!({"spec": {
            "selector": {}, "template": {}, "serviceName": "x",
            "updateStrategy": {"type": "OnDelete"}}}))
        .unwrap();
        assert_eq!(stateful_set_strategy(&s), Strategy::OnDelete);
        let ds: DaemonSet = serde_json::from_value(serde_json::json!({"spec": {
            "selector": {}, "template": {}}}))
        .unwrap();
        assert_eq!(
            daemon_set_strategy(&ds),
            Strategy::DaemonSetRolling {
                max_surge: IntOrPercent::Int(0)
            }
        );
        assert_eq!(
            argo_strategy(
                &serde_json::json!({"replicas": 2, "strategy": {"canary": {"maxSurge": 1, "maxUnavailable": 0}}})
            ),
            Strategy::Rolling {
                replicas: 2,
                max_surge: IntOrPercent::Int(0),
                max_unavailable: IntOrPercent::Int(0)
            }
        );
    }
}
