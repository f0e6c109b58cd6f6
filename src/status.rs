//! `reloadlet status`: the report of every consumer of one object (pure; the pods and the
//! object's metadata are read by `crate::wiring::status`). The rows come from
//! [`crate::core::status`]; this file only gathers them and renders the table, the wide table
//! and the JSON.

use crate::core::invalid::Invalid;
use crate::core::model::{PodInfo, SourceKind, SourceRef};
use crate::core::status::applied::Applied;
use crate::core::status::consumers::{consumer, Consumer};
use crate::core::status::data_version::{Published, ANNOTATION};
use crate::core::status::state::{derive, env_held, short_time, summary, Facts, State};
use jiff::Timestamp;
use serde_json::json;
use std::collections::BTreeMap;

/// One pod as read from the API.
pub struct PodFacts {
    pub info: PodInfo,
    pub node: Option<String>,
    /// When its longest-running container started, if all run.
    pub started: Option<Timestamp>,
}

/// The object's metadata in one namespace: its published data version, or why there is none.
pub enum ObjectMeta {
    /// The object does not exist.
    Missing,
    /// It exists; its [`ANNOTATION`], parsed (`Err`: absent or malformed, with the reason).
    Found(Result<Published, Invalid>),
}

/// One consumer.
pub struct Row {
    pub namespace: String,
    pub pod: String,
    pub node: Option<String>,
    pub how: String,
    pub action: String,
    pub state: State,
    /// The version the pod's record says was applied (wide, json).
    pub applied: Option<String>,
    /// The object's current version for what this pod reads (wide, json).
    pub current: Option<String>,
}

pub struct Report {
    pub object: SourceRef,
    pub rows: Vec<Row>,
    /// Namespace notes: a missing object, an unreadable data version, an ignored record.
    pub notes: Vec<String>,
}

impl Report {
    pub fn all_current(&self) -> bool {
        self.rows.iter().all(|r| r.state.is_current())
    }

    pub fn summary(&self) -> String {
        summary(self.rows.iter().map(|r| &r.state))
    }
}

/// The rows of every pod of `pods` that consumes `object`, with `objects[namespace]` the
/// object's metadata there. Pods that have finished (Succeeded, Failed) run nothing.
pub fn report(
    object: &SourceRef,
    pods: &[PodFacts],
    objects: &BTreeMap<String, ObjectMeta>,
) -> Report {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for (ns, meta) in objects {
        match meta {
            ObjectMeta::Missing => notes.push(format!("{ns}: {object} does not exist")),
            ObjectMeta::Found(Err(why)) => notes.push(format!("{ns}: {object}: {why}")),
            ObjectMeta::Found(Ok(_)) => {}
        }
    }
    for p in pods {
        let info = &p.info;
        if matches!(info.phase.as_str(), "Succeeded" | "Failed") {
            continue;
        }
        let Some(c) = consumer(info, object) else {
            continue;
        };
        let published = match objects.get(&info.namespace) {
            Some(ObjectMeta::Found(Ok(p))) => Some(p),
            _ => None,
        };
        let record = match Applied::of_pod(&info.annotations) {
            Ok(r) => r,
            Err(why) => {
                notes.push(format!("{}: {why}; ignored", info.full_name()));
                None
            }
        };
        let entry = record.as_ref().and_then(|r| r.get(object));
        let state = state_of(
            info,
            object,
            &c,
            Facts {
                published,
                record: entry,
                started: p.started,
                phase: &info.phase,
                env_held: None,
            },
        );
        rows.push(Row {
            namespace: info.namespace.clone(),
            pod: info.name.clone(),
            node: p.node.clone(),
            how: c.how(),
            action: c.action.to_string(),
            applied: entry.and_then(|e| e.version.clone()),
            current: published
                .and_then(|p| p.version_for(&c.keys()))
                .map(|v| v.to_string()),
            state,
        });
    }
    rows.sort_by(|a, b| (&a.namespace, &a.pod).cmp(&(&b.namespace, &b.pod)));
    Report {
        object: object.clone(),
        rows,
        notes,
    }
}

/// The state of `consumer` (of `info`) for `object`'s current data: a pod being deleted will
/// be replaced, any other is [`derive`]d from `facts` and the controller's hold of its env
/// eviction, if any ([`env_held`]). One derivation for the CLI's rows and the controller's
/// `reloadlet_consumers` gauge.
pub fn state_of(
    info: &PodInfo,
    object: &SourceRef,
    consumer: &Consumer,
    facts: Facts<'_>,
) -> State {
    if info.terminating {
        return State::Pending(crate::core::status::state::Pending::Rollout);
    }
    let facts = Facts {
        env_held: env_held(&info.annotations, object),
        ..facts
    };
    derive(consumer, &facts)
}

/// The table (`wide`: with the node and the data versions), the notes and the summary line.
pub fn table(report: &Report, wide: bool, all_namespaces: bool) -> String {
    let mut lines: Vec<Vec<String>> = Vec::new();
    let mut header: Vec<&str> = Vec::new();
    if all_namespaces {
        header.push("NAMESPACE");
    }
    header.extend(["POD", "HOW", "ACTION", "STATE", "DETAIL"]);
    if wide {
        header.extend(["NODE", "APPLIED", "CURRENT"]);
    }
    lines.push(header.iter().map(|s| s.to_string()).collect());
    for r in &report.rows {
        let mut line = Vec::new();
        if all_namespaces {
            line.push(r.namespace.clone());
        }
        line.extend([
            r.pod.clone(),
            r.how.clone(),
            r.action.clone(),
            r.state.name().to_owned(),
            r.state.detail(),
        ]);
        if wide {
            let dash = || "-".to_owned();
            line.extend([
                r.node.clone().unwrap_or_else(dash),
                r.applied.clone().unwrap_or_else(dash),
                r.current.clone().unwrap_or_else(dash),
            ]);
        }
        lines.push(line);
    }
    let mut out = String::new();
    if !report.rows.is_empty() {
        let columns = lines[0].len();
        let widths: Vec<usize> = (0..columns)
            .map(|i| {
                lines
                    .iter()
                    .map(|l| l[i].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for l in &lines {
            let cells: Vec<String> = l
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if i + 1 == columns {
                        c.clone()
                    } else {
                        format!("{c:<w$}", w = widths[i])
                    }
                })
                .collect();
            out.push_str(cells.join("   ").trim_end());
            out.push('\n');
        }
    }
    for n in &report.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out.push_str(&format!("{}: {}\n", report.object, report.summary()));
    out
}

/// The same facts as JSON.
pub fn json(report: &Report) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = report
        .rows
        .iter()
        .map(|r| {
            let since = match &r.state {
                State::Current { since, .. } => since.map(|t| t.to_string()),
                _ => None,
            };
            json!({
                "namespace": r.namespace,
                "pod": r.pod,
                "node": r.node,
                "how": r.how,
                "action": r.action,
                "state": r.state.name(),
                "detail": r.state.detail(),
                "since": since,
                "appliedVersion": r.applied,
                "currentVersion": r.current,
            })
        })
        .collect();
    json!({
        "object": format!("{}/{}", report.object.kind.as_str(), report.object.name),
        "consumers": rows,
        "notes": report.notes,
        "summary": report.summary(),
        "allCurrent": report.all_current(),
    })
}

/// A workload kind `status` takes: the objects its pods consume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Deployment,
    StatefulSet,
    DaemonSet,
    ReplicaSet,
}

impl Workload {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deployment => "deployment",
            Self::StatefulSet => "statefulset",
            Self::DaemonSet => "daemonset",
            Self::ReplicaSet => "replicaset",
        }
    }
}

/// Whether `pod` belongs to the workload: its controller is the StatefulSet, DaemonSet or
/// ReplicaSet of that name; for a Deployment, a ReplicaSet `<name>-<pod-template-hash>` (the
/// name the Deployment controller gives its ReplicaSets, with the pod's own label).
pub fn belongs_to(pod: &PodInfo, workload: Workload, name: &str) -> bool {
    let Some(owner) = pod.controller.as_deref() else {
        return false;
    };
    match workload {
        Workload::StatefulSet => owner.kind == "StatefulSet" && owner.name == name,
        Workload::DaemonSet => owner.kind == "DaemonSet" && owner.name == name,
        Workload::ReplicaSet => owner.kind == "ReplicaSet" && owner.name == name,
        Workload::Deployment => {
            owner.kind == "ReplicaSet"
                && pod
                    .labels
                    .get("pod-template-hash")
                    .is_some_and(|hash| owner.name == format!("{name}-{hash}"))
        }
    }
}

/// The ConfigMaps and Secrets `pods` consume (volumes, projected sources, env), sorted; the
/// root CA every pod gets injected (`kube-root-ca.crt`) only when a pod names it in
/// `reloadlet.io/configmaps`.
pub fn consumed_objects<'a>(pods: impl IntoIterator<Item = &'a PodInfo>) -> Vec<SourceRef> {
    use crate::core::model::ROOT_CA_CONFIGMAP;
    let mut out = std::collections::BTreeSet::new();
    for p in pods {
        for v in &p.volumes {
            let wanted = |s: &&SourceRef| {
                s.kind.is_api_object()
                    && !(s.kind == SourceKind::ConfigMap
                        && s.name == ROOT_CA_CONFIGMAP
                        && !crate::core::policy::source_counts(p, s))
            };
            for s in v.sources.iter().filter(wanted) {
                if consumer(p, s).is_some() {
                    out.insert(s.clone());
                }
            }
        }
        for e in &p.env {
            out.insert(e.source.clone());
        }
    }
    out.into_iter().collect()
}

/// The note for an object without a published data version.
pub fn unpublished(value: Option<&String>) -> Result<Published, Invalid> {
    match value {
        None => Err(crate::invalid!(
            "no {ANNOTATION} yet: the data version is published on the object by reloadlet controller (docs/status.md)"
        )),
        Some(v) => Published::parse(v).map_err(|e| e.context(format!("{ANNOTATION} ignored"))),
    }
}

/// `HH:MM:SS` (re-exported for the wiring's progress lines).
pub fn hms(t: Timestamp) -> String {
    short_time(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::outcome::ActionKind;
    use crate::core::status::applied::{Entry, Recorded};
    use crate::core::status::data_version::version_of_files;
    use crate::core::volume_digest::HashKey;

    fn app() -> SourceRef {
        SourceRef {
            kind: SourceKind::ConfigMap,
            name: "app".into(),
        }
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_764_406_800 + s).unwrap()
    }

    fn pod(
        name: &str,
        action: Option<&str>,
        annotations: &[(&str, String)],
        phase: &str,
    ) -> PodFacts {
        let mut a: BTreeMap<String, String> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        if let Some(action) = action {
            a.insert("reloadlet.io/action".into(), action.into());
        }
        PodFacts {
            info: PodInfo {
                uid: name.into(),
                annotations: a.into(),
                phase: phase.into(),
                ..crate::core::model::test_pods::mounting("web", name, app())
            },
            node: Some("node-a".into()),
            started: Some(t(0)),
        }
    }

    #[test]
    fn the_report_lists_consumers_their_states_and_a_summary() {
        let key = HashKey::from_bytes([1; 32]);
        let data: [(&str, &[u8]); 1] = [("k", b"new")];
        let published = Published::of(&key, "web", &app(), data, t(100));
        let version = version_of_files(&key, "web", &app(), data);
        let record = |result| {
            let mut a = Applied::default();
            a.record(Entry::new(
                &app(),
                Some(&version),
                t(120),
                "agent",
                ActionKind::Signal,
                result,
            ));
            a.render()
        };
        let pods = vec![
            pod(
                "signalled",
                Some("signal"),
                &[("reloadlet.io/applied", record(Recorded::Applied))],
                "Running",
            ),
            pod("waiting", Some("signal"), &[], "Running"),
            pod("plain", None, &[], "Running"),
            pod(
                "hostile",
                Some("signal"),
                &[("reloadlet.io/applied", "{not json".into())],
                "Running",
            ),
            pod("done", Some("signal"), &[], "Succeeded"),
        ];
        let objects = [("web".to_string(), ObjectMeta::Found(Ok(published)))].into();
        let r = report(&app(), &pods, &objects);
        let states: Vec<(&str, &str)> = r
            .rows
            .iter()
            .map(|r| (r.pod.as_str(), r.state.name()))
            .collect();
        assert_eq!(
            states,
            [
                ("hostile", "pending"),
                ("plain", "not reloaded"),
                ("signalled", "current"),
                ("waiting", "pending")
            ]
        );
        assert!(!r.all_current());
        let text = table(&r, false, false);
        assert!(
            text.contains("POD         HOW        ACTION   STATE"),
            "{text}"
        );
        assert!(
            text.contains("signalled   volume v   signal   current        since 09:02:00 (signal)"),
            "{text}"
        );
        assert!(
            text.contains("note: web/hostile: reloadlet.io/applied is not a valid record"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "configmap app: 4 consumers: 1 current, 2 pending (kubelet), 1 not reloaded\n"
            ),
            "{text}"
        );
        let wide = table(&r, true, true);
        assert!(
            wide.contains("NAMESPACE")
                && wide.contains("node-a")
                && wide.contains(&version.to_string()),
            "{wide}"
        );
        let j = json(&r);
        assert_eq!(j["consumers"][2]["state"], "current");
        assert_eq!(j["allCurrent"], false);
    }

    #[test]
    fn a_workloads_pods_and_the_objects_they_consume() {
        use crate::core::rollout::OwnerRef;
        let mut p = pod("web-7d9f-abcde", Some("signal"), &[], "Running").info;
        let owner = |kind: &str, name: &str| {
            Some(Box::new(OwnerRef {
                api_version: "apps/v1".into(),
                kind: kind.into(),
                name: name.into(),
                uid: "u".into(),
            }))
        };
        p.controller = owner("ReplicaSet", "web-7d9f");
        p.labels.insert("pod-template-hash".into(), "7d9f".into());
        assert!(belongs_to(&p, Workload::Deployment, "web"));
        assert!(belongs_to(&p, Workload::ReplicaSet, "web-7d9f"));
        assert!(!belongs_to(&p, Workload::Deployment, "web-7d9f"));
        assert!(
            !belongs_to(&p, Workload::Deployment, "we"),
            "a name prefix is not the owner"
        );
        p.labels.insert("pod-template-hash".into(), "other".into());
        assert!(!belongs_to(&p, Workload::Deployment, "web"));
        p.controller = owner("StatefulSet", "db");
        assert!(belongs_to(&p, Workload::StatefulSet, "db"));
        assert!(!belongs_to(&p, Workload::DaemonSet, "db"));
        p.env.push(crate::core::model::EnvRef {
            source: SourceRef {
                kind: SourceKind::Secret,
                name: "creds".into(),
            },
            keys: crate::core::model::EnvKeys::Key("PW".into()),
            optional: false,
            container: "app".into(),
        });
        let names: Vec<String> = consumed_objects([&p])
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(names, ["configmap app", "secret creds"]);
    }

    #[test]
    fn a_missing_object_or_version_is_said_once() {
        let pods = vec![pod("p", Some("signal"), &[], "Running")];
        let objects = [("web".to_string(), ObjectMeta::Found(unpublished(None)))].into();
        let r = report(&app(), &pods, &objects);
        assert_eq!(r.rows[0].state.name(), "pending");
        let text = table(&r, false, false);
        assert!(
            text.contains("note: web: configmap app: no reloadlet.io/data-version yet"),
            "{text}"
        );
        let missing = report(
            &app(),
            &pods,
            &[("web".to_string(), ObjectMeta::Missing)].into(),
        );
        assert_eq!(missing.notes, ["web: configmap app does not exist"]);
        assert_eq!(
            table(&report(&app(), &[], &BTreeMap::new()), false, false),
            "configmap app: 0 consumers\n"
        );
    }
}
