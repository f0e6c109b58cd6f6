//! The Argo Rollout object as the server stores it (`argoproj.io/v1alpha1` `Rollout`): the
//! type and what k8s-openapi needs to serve it. Its controller is `super::argo`.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// An Argo Rollout: the fields the simulator acts on, the rest of `spec` kept as given.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rollout {
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<RolloutSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
}

/// `spec` of a Rollout.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default)]
    pub selector: LabelSelector,
    #[serde(default)]
    pub template: PodTemplateSpec,
    /// Pods created before this instant are restarted once it has passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_at: Option<Time>,
    /// `strategy` and everything else, kept as given.
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}

impl k8s_openapi::Resource for Rollout {
    const API_VERSION: &'static str = "argoproj.io/v1alpha1";
    const GROUP: &'static str = "argoproj.io";
    const KIND: &'static str = "Rollout";
    const VERSION: &'static str = "v1alpha1";
    const URL_PATH_SEGMENT: &'static str = "rollouts";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for Rollout {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
