//! When a ConfigMap's or Secret's data was last written, at the latest, from its
//! `metadata.managedFields` (issue #46, docs/status.md "The data version"): the bound the
//! controller publishes as `since` instead of the time it first saw the data, so that pods
//! started before the controller but after the data's last write read `current`.
//!
//! What the API server keeps (kubernetes `staging/src/k8s.io/apimachinery/pkg/util/managedfields/internal`):
//!
//! - `managedfieldsupdater.go` `managedFieldsUpdater.Update`: a create, update or patch is
//!   first tracked under a placeholder manager; "if the current operation took any fields from
//!   anything, it means the object changed", so its fields are merged into the request's
//!   manager's entry and that entry's `time` is set to now. The fields it takes are the ones
//!   the write *added or modified* (structured-merge-diff `merge/update.go`
//!   `Updater.Update`: `Union(compare.Modified).Union(compare.Added)`), and every other
//!   manager loses them (`Updater.update`). So whoever last added or changed a data key owns
//!   it with a `time` at or after that write;
//! - `managedFieldsUpdater.Apply`: a server-side apply that changes the object sets the
//!   applier's `time`;
//! - `capmanagers.go` `capUpdateManagers`: past 10 update managers the oldest are merged into
//!   an `ancient-changes` entry that takes the newest merged `time`;
//! - `fieldmanager.go` `decodeLiveOrNew`: a client that may update the object may also write
//!   its managedFields (or reset them to `[]`).
//!
//! So the latest `time` of the entries that own `f:data`, `f:binaryData` (or `f:stringData`,
//! which an apply of a Secret's `stringData` records) is at or after the last *addition or
//! change* of a data key. It is **not** after a key's **removal** by an update or patch: the
//! write takes no field (structured-merge-diff `typed.Compare` puts a removed key in
//! `Removed` only), so no `time` moves; nor after an apply's removal when its applier is left
//! owning no data key. The controller covers what it can see of that (a key of
//! the previous publication gone: `crate::controller::data_version::to_publish` uses its own
//! clock); a removal before the controller first saw the object is not visible here.
//!
//! `metav1.Time` is written to the second (RFC 3339 without fractions), so the write happened
//! within the second after `time`: the bound is that second's end. Pure: the Kubernetes types
//! are read into [`FieldsEntry`] by `crate::k8s::managed_fields`.

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

/// The fields of one managedFields entry this bound reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldsEntry {
    /// `time`.
    pub time: Option<Timestamp>,
    /// `fieldsType` (only `FieldsV1` exists).
    pub fields_type: Option<String>,
    /// `fieldsV1`: `{"f:data": {"f:app.conf": {}}, "f:metadata": {…}}`.
    pub fields_v1: Option<Value>,
}

/// The top-level fields that hold a ConfigMap's or Secret's data.
const DATA_FIELDS: [&str; 3] = ["f:data", "f:binaryData", "f:stringData"];

/// Whether an entry owns some data.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Owns {
    Data,
    Other,
    /// No `fieldsV1` (or another type): it may own data.
    Unknown,
}

fn owns(entry: &FieldsEntry) -> Owns {
    if entry
        .fields_type
        .as_deref()
        .is_some_and(|t| t != "FieldsV1")
    {
        return Owns::Unknown;
    }
    match &entry.fields_v1 {
        Some(Value::Object(fields)) => {
            if DATA_FIELDS.iter().any(|f| fields.contains_key(*f)) {
                Owns::Data
            } else {
                Owns::Other
            }
        }
        _ => Owns::Unknown,
    }
}

/// The latest time the object's data was added to or changed, rounded up to the end of its
/// second; `None` when the entries do not tell: no entry owns data (none at all, or reset), or
/// one that owns data (or may: no `fieldsV1`) has no `time`.
pub fn data_written(entries: &[FieldsEntry]) -> Option<Timestamp> {
    let mut latest: Option<Timestamp> = None;
    let mut any_data = false;
    for entry in entries {
        match owns(entry) {
            Owns::Other => continue,
            Owns::Data => any_data = true,
            Owns::Unknown => {}
        }
        // An entry that owns data with no time: when it wrote is unknown.
        let time = entry.time?;
        latest = Some(latest.map_or(time, |l| l.max(time)));
    }
    if !any_data {
        return None;
    }
    let latest = latest?;
    let second = latest.as_second();
    Timestamp::from_second(second)
        .ok()?
        .checked_add(SignedDuration::from_secs(1))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn entry(time: Option<&str>, fields: Option<Value>) -> FieldsEntry {
        FieldsEntry {
            time: time.map(t),
            fields_type: fields.as_ref().map(|_| "FieldsV1".to_owned()),
            fields_v1: fields,
        }
    }

    #[test]
    fn the_latest_write_of_data_rounded_up_to_its_second() {
        let data = || Some(json!({"f:data": {".": {}, "f:app.conf": {}}}));
        let binary = || Some(json!({"f:binaryData": {"f:logo.png": {}}}));
        let labels = || Some(json!({"f:metadata": {"f:labels": {"f:team": {}}}}));
        let ours =
            || Some(json!({"f:metadata": {"f:annotations": {"f:reloadlet.io/data-version": {}}}}));
        let cases: Vec<(&str, Vec<FieldsEntry>, Option<&str>)> = vec![
            ("no managedFields (or reset to [])", vec![], None),
            (
                "one creator (kubectl, Update)",
                vec![entry(Some("2026-11-29T09:00:00Z"), data())],
                Some("2026-11-29T09:00:01Z"),
            ),
            (
                "several managers owning data: the latest",
                vec![
                    entry(Some("2026-11-29T09:00:00Z"), data()),
                    entry(Some("2026-11-29T09:20:00Z"), binary()),
                    entry(Some("2026-11-29T09:10:00Z"), data()),
                ],
                Some("2026-11-29T09:20:01Z"),
            ),
            (
                "a later label-only manager and the controller's own annotation do not count",
                vec![
                    entry(Some("2026-11-29T09:00:00Z"), data()),
                    entry(Some("2026-11-29T10:00:00Z"), labels()),
                    entry(Some("2026-11-29T11:00:00Z"), ours()),
                ],
                Some("2026-11-29T09:00:01Z"),
            ),
            (
                "only label managers: the data was written by no one we can see",
                vec![entry(Some("2026-11-29T10:00:00Z"), labels())],
                None,
            ),
            (
                "Apply and Update entries alike (operation does not matter)",
                vec![
                    entry(Some("2026-11-29T09:30:00Z"), data()),
                    entry(
                        Some("2026-11-29T09:40:00Z"),
                        Some(json!({"f:data": {"f:b": {}}, "f:metadata": {}})),
                    ),
                ],
                Some("2026-11-29T09:40:01Z"),
            ),
            (
                "a subresource entry that owns data counts like any other",
                vec![
                    entry(Some("2026-11-29T09:00:00Z"), data()),
                    entry(
                        Some("2026-11-29T09:05:00Z"),
                        Some(json!({"f:stringData": {"f:password": {}}})),
                    ),
                ],
                Some("2026-11-29T09:05:01Z"),
            ),
            (
                "an entry owning data without a time: unknown",
                vec![
                    entry(Some("2026-11-29T09:00:00Z"), data()),
                    entry(None, binary()),
                ],
                None,
            ),
            (
                "an entry owning only labels without a time is no matter",
                vec![
                    entry(Some("2026-11-29T09:00:00Z"), data()),
                    entry(None, labels()),
                ],
                Some("2026-11-29T09:00:01Z"),
            ),
            (
                "an entry without fieldsV1 may own data: its time counts",
                vec![
                    entry(Some("2026-11-29T09:00:00Z"), data()),
                    entry(Some("2026-11-29T09:50:00Z"), None),
                ],
                Some("2026-11-29T09:50:01Z"),
            ),
            (
                "and without fieldsV1 nor time: unknown",
                vec![
                    entry(Some("2026-11-29T09:00:00Z"), data()),
                    entry(None, None),
                ],
                None,
            ),
            (
                "only entries without fieldsV1: nothing shows data was written",
                vec![entry(Some("2026-11-29T09:00:00Z"), None)],
                None,
            ),
            (
                "another fieldsType: as without fieldsV1",
                vec![
                    entry(Some("2026-11-29T09:00:00Z"), data()),
                    FieldsEntry {
                        time: Some(t("2026-11-29T09:55:00Z")),
                        fields_type: Some("FieldsV2".into()),
                        fields_v1: data(),
                    },
                ],
                Some("2026-11-29T09:55:01Z"),
            ),
            (
                "fieldsV1 that is not an object: as without",
                vec![
                    entry(Some("2026-11-29T09:00:00Z"), data()),
                    entry(Some("2026-11-29T09:56:00Z"), Some(json!("junk"))),
                ],
                Some("2026-11-29T09:56:01Z"),
            ),
            (
                "a time with fractions (not from kube-apiserver) still bounds from above",
                vec![entry(Some("2026-11-29T09:00:00.700Z"), data())],
                Some("2026-11-29T09:00:01Z"),
            ),
        ];
        for (what, entries, want) in cases {
            assert_eq!(data_written(&entries), want.map(t), "{what}");
        }
    }
}
