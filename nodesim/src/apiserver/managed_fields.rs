//! `metadata.managedFields` of ConfigMaps and Secrets, kept as kube-apiserver keeps them
//! (kubernetes `staging/src/k8s.io/apimachinery/pkg/util/managedfields/internal`), for the
//! fields these objects hold: `data`, `binaryData`, `stringData` keys, `metadata.labels` and
//! `metadata.annotations` keys, `type`, `immutable`. Minimal but faithful where reloadlet reads
//! it (the time a manager last wrote data):
//!
//! - one entry per (manager, operation); the manager is `fieldManager`, else the User-Agent up
//!   to its first `/` (apiserver `endpoints/handlers/create.go` `managerOrUserAgent`,
//!   `prefixFromUserAgent`; [`manager_or_user_agent`]);
//! - an **update** (create, PUT, merge/strategic patch) takes the leaves it added or modified
//!   from every other manager and adds them to its own entry, drops everyone's removed leaves
//!   (structured-merge-diff `merge/update.go` `Updater.update` / `Updater.Update`), and sets its
//!   entry's `time` only when it took a field (`managedfieldsupdater.go`
//!   `managedFieldsUpdater.Update`: "if the current operation took any fields … update the
//!   timestamp"): a removal alone moves no time;
//! - an **apply** owns exactly the leaves of its configuration, takes what it changed from the
//!   others (after `check_apply`'s conflicts), and sets its `time` when the object changed
//!   (`managedFieldsUpdater.Apply`: `if object != nil`). It does not prune (neither does the
//!   simulator's apply of the object);
//! - the base is the request's managedFields when it sends some, `[]` resets them, else the
//!   stored ones (`fieldmanager.go` `decodeLiveOrNew`, `isResetManagedFields`);
//! - entries are sorted by operation, time, manager (`managedfields.go`
//!   `sortEncodedManagedFields`); `time` is to the second (`metav1.Time`).
//!
//! Not kept: the `.` (map itself) markers, subresources (these objects have none), the
//! 10-update-manager cap (`capmanagers.go`).

use super::model::now_ts;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// `validation.FieldManagerMaxLength`.
const FIELD_MANAGER_MAX_LENGTH: usize = 128;

/// A field: `["data", "app.conf"]`, `["metadata", "labels", "team"]`, `["type"]`.
type Path = Vec<String>;

/// What a write is.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Operation<'a> {
    Update,
    /// Server-side apply of this configuration.
    Apply(&'a Value),
}

/// Who writes and how.
#[derive(Clone, Debug)]
pub(crate) struct Writer<'a> {
    pub manager: String,
    pub operation: Operation<'a>,
}

impl Writer<'_> {
    pub fn update(manager: &str) -> Self {
        Self {
            manager: manager.to_owned(),
            operation: Operation::Update,
        }
    }
}

/// The manager of a request: its `fieldManager`, else the User-Agent's prefix (apiserver
/// `endpoints/handlers/create.go` `managerOrUserAgent` / `prefixFromUserAgent`: the
/// characters before the first `/`, unprintable ones dropped, cut at 128 bytes).
pub(crate) fn manager_or_user_agent(field_manager: Option<&str>, user_agent: &str) -> String {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        return m.to_owned();
    }
    let mut out = String::new();
    for c in user_agent.split('/').next().unwrap_or_default().chars() {
        // Go's unicode.IsPrint: graphic characters and the ASCII space.
        if c != ' ' && (c.is_control() || c.is_whitespace()) {
            continue;
        }
        if out.len() + c.len_utf8() > FIELD_MANAGER_MAX_LENGTH {
            break;
        }
        out.push(c);
    }
    out
}

/// The tracked leaves of a ConfigMap/Secret (as JSON) and their values.
fn leaves(obj: &Value) -> BTreeMap<Path, Value> {
    let mut out = BTreeMap::new();
    let mut keys = |prefix: &[&str], map: Option<&Value>| {
        for (k, v) in map.and_then(Value::as_object).into_iter().flatten() {
            if v.is_null() {
                continue;
            }
            let mut path: Path = prefix.iter().map(|s| s.to_string()).collect();
            path.push(k.clone());
            out.insert(path, v.clone());
        }
    };
    for top in ["data", "binaryData", "stringData"] {
        keys(&[top], obj.get(top));
    }
    for m in ["labels", "annotations"] {
        keys(&["metadata", m], obj.get("metadata").and_then(|x| x.get(m)));
    }
    for scalar in ["type", "immutable"] {
        if let Some(v) = obj.get(scalar).filter(|v| !v.is_null()) {
            out.insert(vec![scalar.to_owned()], v.clone());
        }
    }
    out
}

/// `fieldsV1` of a set of leaves: `{"f:data": {"f:app.conf": {}}}`.
fn encode(set: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for part in path {
            node = node
                .entry(format!("f:{part}"))
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("built as objects");
        }
    }
    Value::Object(root)
}

/// The leaves a `fieldsV1` names (`.` markers and list keys skipped).
fn decode(v: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    let Some(m) = v.as_object() else {
        return;
    };
    let children: Vec<(&str, &Value)> = m
        .iter()
        .filter_map(|(k, v)| k.strip_prefix("f:").map(|k| (k, v)))
        .collect();
    if children.is_empty() {
        if !prefix.is_empty() && !m.contains_key(".") {
            out.insert(prefix.clone());
        }
        return;
    }
    for (k, v) in children {
        prefix.push(k.to_owned());
        decode(v, prefix, out);
        prefix.pop();
    }
}

/// One entry being worked on.
struct Entry {
    meta: ManagedFieldsEntry,
    set: BTreeSet<Path>,
}

fn operation_name(op: Operation<'_>) -> &'static str {
    match op {
        Operation::Update => "Update",
        Operation::Apply(_) => "Apply",
    }
}

/// The managedFields of `new` after `writer` wrote it over `old` (`None`: a create). `new`'s
/// own managedFields are what the request sent.
pub(crate) fn track(
    old: Option<&Value>,
    new: &Value,
    writer: &Writer<'_>,
) -> Vec<ManagedFieldsEntry> {
    let sent = new
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .and_then(|v| serde_json::from_value::<Vec<ManagedFieldsEntry>>(v.clone()).ok());
    let stored = || {
        old.and_then(|o| o.get("metadata"))
            .and_then(|m| m.get("managedFields"))
            .and_then(|v| serde_json::from_value::<Vec<ManagedFieldsEntry>>(v.clone()).ok())
            .unwrap_or_default()
    };
    let base = match (writer.operation, sent) {
        (Operation::Update, Some(sent)) if !sent.is_empty() => {
            // `[{}]` resets as `[]` does.
            if sent.len() == 1 && sent[0] == ManagedFieldsEntry::default() {
                Vec::new()
            } else {
                sent
            }
        }
        (Operation::Update, Some(_)) => Vec::new(),
        _ => stored(),
    };
    let mut entries: Vec<Entry> = base
        .into_iter()
        .map(|meta| {
            let mut set = BTreeSet::new();
            if let Some(f) = &meta.fields_v1 {
                decode(&f.0, &mut Vec::new(), &mut set);
            }
            Entry { meta, set }
        })
        .collect();
    let before = old.map(leaves).unwrap_or_default();
    let after = leaves(new);
    let changed: BTreeSet<Path> = after
        .iter()
        .filter(|(p, v)| before.get(*p) != Some(*v))
        .map(|(p, _)| p.clone())
        .collect();
    let removed: BTreeSet<Path> = before
        .keys()
        .filter(|p| !after.contains_key(*p))
        .cloned()
        .collect();
    let op = operation_name(writer.operation);
    let mine = |e: &Entry| {
        e.meta.manager.as_deref() == Some(writer.manager.as_str())
            && e.meta.operation.as_deref() == Some(op)
            && e.meta.subresource.as_deref().unwrap_or_default().is_empty()
    };
    for e in entries.iter_mut().filter(|e| !mine(e)) {
        e.set
            .retain(|p| !changed.contains(p) && !removed.contains(p));
    }
    let now = Time(Timestamp::from_second(now_ts().as_second()).unwrap_or(now_ts()));
    let index = match entries.iter().position(mine) {
        Some(i) => i,
        None => {
            entries.push(Entry {
                meta: ManagedFieldsEntry {
                    manager: Some(writer.manager.clone()),
                    operation: Some(op.to_owned()),
                    api_version: Some("v1".into()),
                    fields_type: Some("FieldsV1".into()),
                    ..ManagedFieldsEntry::default()
                },
                set: BTreeSet::new(),
            });
            entries.len() - 1
        }
    };
    let own = &mut entries[index];
    match writer.operation {
        Operation::Update => {
            own.set.retain(|p| !removed.contains(p));
            own.set.extend(changed.iter().cloned());
            if !changed.is_empty() {
                own.meta.time = Some(now);
            }
        }
        Operation::Apply(config) => {
            own.set = leaves(config).into_keys().collect();
            if !changed.is_empty() || !removed.is_empty() || own.meta.time.is_none() {
                own.meta.time = Some(now);
            }
        }
    }
    let mut out: Vec<ManagedFieldsEntry> = entries
        .into_iter()
        .filter(|e| !e.set.is_empty())
        .map(|mut e| {
            e.meta.fields_type = Some("FieldsV1".into());
            e.meta.fields_v1 = Some(FieldsV1(encode(&e.set)));
            e.meta
        })
        .collect();
    out.sort_by(|p, q| {
        let secs = |e: &ManagedFieldsEntry| e.time.as_ref().map_or(0, |t| t.0.as_second());
        (p.operation.as_deref(), secs(p), p.manager.as_deref()).cmp(&(
            q.operation.as_deref(),
            secs(q),
            q.manager.as_deref(),
        ))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn owners(fields: &[ManagedFieldsEntry]) -> Vec<(String, String, Value)> {
        fields
            .iter()
            .map(|e| {
                (
                    e.manager.clone().unwrap_or_default(),
                    e.operation.clone().unwrap_or_default(),
                    e.fields_v1.clone().map(|f| f.0).unwrap_or(Value::Null),
                )
            })
            .collect()
    }

    fn with(obj: Value, fields: &[ManagedFieldsEntry]) -> Value {
        let mut obj = obj;
        obj["metadata"]["managedFields"] = serde_json::to_value(fields).unwrap();
        obj
    }

    #[test]
    fn managers_take_what_they_add_or_change_and_only_that_moves_their_time() {
        let v1 = json!({"metadata": {"name": "app", "labels": {"team": "a"}}, "data": {"a": "1", "b": "2"}});
        let created = track(None, &v1, &Writer::update("kubectl-create"));
        assert_eq!(
            owners(&created),
            [(
                "kubectl-create".into(),
                "Update".into(),
                json!({"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:team": {}}}})
            )]
        );
        let t0 = created[0].time.clone().expect("a create sets the time");
        assert_eq!(t0.0.subsec_nanosecond(), 0, "to the second");

        // Another manager changes one key: it takes it.
        let old = with(v1.clone(), &created);
        let mut v2 = old.clone();
        v2["data"]["b"] = json!("3");
        let edited = track(Some(&old), &v2, &Writer::update("kubectl-edit"));
        assert_eq!(
            owners(&edited),
            [
                (
                    "kubectl-create".into(),
                    "Update".into(),
                    json!({"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:team": {}}}})
                ),
                (
                    "kubectl-edit".into(),
                    "Update".into(),
                    json!({"f:data": {"f:b": {}}})
                ),
            ]
        );
        assert_eq!(edited[0].time, Some(t0.clone()), "the creator's time stays");

        // A removal alone takes no field: nobody's time moves, the key leaves every entry.
        let old = with(v2.clone(), &edited);
        let mut v3 = old.clone();
        v3["data"].as_object_mut().unwrap().remove("b");
        let removed = track(Some(&old), &v3, &Writer::update("remover"));
        assert_eq!(
            owners(&removed)[0].2,
            json!({"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:team": {}}}})
        );
        assert_eq!(
            removed.len(),
            1,
            "kubectl-edit owned only b; remover took nothing"
        );

        // An unchanged write changes nothing.
        let old = with(v3.clone(), &removed);
        assert_eq!(track(Some(&old), &old, &Writer::update("noop")), removed);

        // An apply owns its configuration's leaves, under its own entry.
        let config = json!({"metadata": {"name": "app"}, "data": {"c": "4"}});
        let mut v4 = old.clone();
        v4["data"]["c"] = json!("4");
        let applied = track(
            Some(&old),
            &v4,
            &Writer {
                manager: "helm".into(),
                operation: Operation::Apply(&config),
            },
        );
        assert_eq!(
            owners(&applied)[0],
            (
                "helm".into(),
                "Apply".into(),
                json!({"f:data": {"f:c": {}}})
            )
        );

        // The request's managedFields: `[]` resets them.
        let mut reset = v4.clone();
        reset["metadata"]["managedFields"] = json!([]);
        reset["data"]["a"] = json!("9");
        let after = track(
            Some(&with(v4.clone(), &applied)),
            &reset,
            &Writer::update("x"),
        );
        assert_eq!(
            owners(&after),
            [("x".into(), "Update".into(), json!({"f:data": {"f:a": {}}}))]
        );
    }

    #[test]
    fn the_manager_is_the_field_manager_else_the_user_agent_prefix() {
        assert_eq!(manager_or_user_agent(Some("helm"), "kubectl/v1.35"), "helm");
        assert_eq!(
            manager_or_user_agent(None, "kubectl/v1.35.0 (linux/amd64) kubernetes/abc"),
            "kubectl"
        );
        assert_eq!(manager_or_user_agent(Some(""), "kube-rs\t/1"), "kube-rs");
        assert_eq!(manager_or_user_agent(None, &"x".repeat(200)).len(), 128);
    }
}
