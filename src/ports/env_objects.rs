//! The env consumers' edge: one GET of a ConfigMap or Secret (`k8s::controller::KubeEnvApi`),
//! and the names both features and the watches use for such an object.

use super::ApiError;
use crate::core::model::SourceKind;
use futures::future::BoxFuture;
use std::collections::BTreeMap;

/// A ConfigMap or Secret, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub kind: SourceKind,
    pub namespace: String,
    pub name: String,
}

/// A ConfigMap's or Secret's values, held only while the digests of its consumers are computed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectData {
    /// ConfigMap `data`.
    pub text: BTreeMap<String, String>,
    /// ConfigMap `binaryData`, Secret `data`.
    pub binary: BTreeMap<String, Vec<u8>>,
    /// A Secret: `envFrom` reads `binary` (its `data`), not `text`.
    pub secret: bool,
    /// The resourceVersion it was read at (the data version is published conditional on it).
    pub resource_version: Option<String>,
    /// The object's annotations (`--reloader-compat`: `reloader.stakater.com/ignore`,
    /// `reloader.stakater.com/match`); never part of a digest.
    pub annotations: BTreeMap<String, String>,
    /// When the data was last written at the latest, from its managedFields
    /// (`crate::core::status::data_written`); `None` when they do not tell.
    pub data_written: Option<jiff::Timestamp>,
}

#[cfg(test)]
impl ObjectData {
    /// A ConfigMap of `text` (`data`) and `binary` (`binaryData`), for tests.
    pub fn of(text: &[(&str, &str)], binary: &[(&str, &[u8])]) -> Self {
        Self {
            text: text
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            binary: binary
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_vec()))
                .collect(),
            ..Self::default()
        }
    }
}

/// The env-consumer edge: one GET of a referenced ConfigMap/Secret (its data, held only
/// while its consumers' digests are computed). The baseline annotation is written through
/// the executor.
pub trait EnvApi: Send + Sync + 'static {
    /// `Ok(None)`: the object does not exist.
    fn read(&self, key: &ObjectKey) -> BoxFuture<'_, Result<Option<ObjectData>, ApiError>>;
}
