//! An object's `metadata.managedFields` read into the plain entries of
//! [`crate::core::status::data_written`], which bounds when its data was last written.

use crate::core::status::data_written::{self, FieldsEntry};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// When the data of the object with `meta` was last written at the latest (`None` when its
/// managedFields do not tell).
pub fn data_written(meta: &ObjectMeta) -> Option<jiff::Timestamp> {
    let entries: Vec<FieldsEntry> = meta
        .managed_fields
        .iter()
        .flatten()
        .map(|e| FieldsEntry {
            time: e.time.as_ref().map(|t| t.0),
            fields_type: e.fields_type.clone(),
            fields_v1: e.fields_v1.as_ref().map(|f| f.0.clone()),
        })
        .collect();
    data_written::data_written(&entries)
}
