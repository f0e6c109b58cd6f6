//! The DaemonSet controller, after kube-controller-manager's
//! (`pkg/controller/daemon/daemon_controller.go` `podsShouldBeOnNode`,
//! `update.go` `rollingUpdate`): one pod `<name>-<5 random>` on each of the server's nodes
//! (the template's `nodeName` alone when set; node selectors and taints are not
//! emulated), labelled `controller-revision-hash: <hash>` and `pod-template-generation`,
//! controlled by the DaemonSet.
//!
//! - A node without a non-terminating pod gets one at once: a terminating old pod does
//!   not hold its replacement back (`findUpdatedPodsOnNode` skips terminating pods).
//! - RollingUpdate with `maxSurge` 0: old pods that are not available are deleted freely;
//!   available ones are deleted while fewer than `maxUnavailable` nodes lack an available
//!   pod. With `maxSurge` > 0: a new pod starts beside an available old one (up to
//!   `maxSurge` nodes at a time), and the old one is deleted once the new one is Ready.
//! - `OnDelete`: nothing is deleted for a template change.
//! - status: desiredNumberScheduled, currentNumberScheduled, numberReady, numberAvailable,
//!   numberUnavailable, updatedNumberScheduled, observedGeneration.

use super::model::{key_of, random_suffix, Key};
use super::store::State;
use super::workloads::{controller_ref, is_ready, scaled, template_hash, NewPod};
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;

use super::statefulset::REVISION_LABEL;

fn node_of(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

fn at_revision(p: &Pod, hash: &str) -> bool {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(REVISION_LABEL))
        .is_some_and(|h| h == hash)
}

impl State {
    /// One pass over every DaemonSet; true when it created or deleted a pod.
    pub(crate) fn sync_daemonsets(&mut self) -> bool {
        let all: Vec<(Key, DaemonSet)> = self
            .workloads
            .daemonsets
            .iter()
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        let mut changed = false;
        for (key, ds) in all {
            changed |= self.sync_daemonset(&key, ds);
        }
        changed
    }

    fn daemon_nodes(&self, ds: &DaemonSet) -> Vec<String> {
        let pinned = ds
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        match pinned {
            Some(n) => vec![n],
            None if self.workloads.nodes.is_empty() => vec!["node-a".into()],
            None => self.workloads.nodes.clone(),
        }
    }

    fn sync_daemonset(&mut self, key: &Key, mut ds: DaemonSet) -> bool {
        let uid = ds.metadata.uid.clone().unwrap_or_default();
        let spec = ds.spec.clone().unwrap_or_default();
        let hash = template_hash(&spec.template);
        let nodes = self.daemon_nodes(&ds);
        let desired = i32::try_from(nodes.len()).unwrap_or(0);
        let strategy = spec.update_strategy.clone().unwrap_or_default();
        let rolling = strategy.type_.as_deref() != Some("OnDelete");
        let ru = strategy.rolling_update.clone().unwrap_or_default();
        let max_surge = scaled(ru.max_surge.as_ref(), desired, true);
        let max_unavailable = match scaled(ru.max_unavailable.as_ref(), desired, true) {
            0 if max_surge == 0 => 1,
            n => n,
        };
        let live: Vec<Pod> = self
            .pods_controlled_by(&uid)
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let mut by_node: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
        for p in &live {
            by_node.entry(node_of(p)).or_default().push(p);
        }
        let mut create: Vec<String> = Vec::new();
        let mut delete: Vec<Key> = Vec::new();
        // Nodes without an available pod count as unavailable.
        let mut unavailable = nodes
            .iter()
            .filter(|n| {
                !by_node
                    .get(n.as_str())
                    .is_some_and(|ps| ps.iter().any(|p| is_ready(p)))
            })
            .count() as i32;
        let mut surging = 0;
        let generation = ds.metadata.generation.unwrap_or(1).to_string();
        for node in &nodes {
            let pods = by_node.get(node.as_str()).cloned().unwrap_or_default();
            if pods.is_empty() {
                create.push(node.clone());
                continue;
            }
            if !rolling {
                continue;
            }
            let new = pods.iter().find(|p| at_revision(p, &hash));
            let old = pods.iter().find(|p| !at_revision(p, &hash));
            let Some(old) = old else { continue };
            match new {
                Some(new) if is_ready(new) => delete.push(key_of(&old.metadata)),
                Some(_) => surging += 1,
                None if !is_ready(old) => delete.push(key_of(&old.metadata)),
                None if max_surge > 0 => {
                    if surging < max_surge {
                        surging += 1;
                        create.push(node.clone());
                    }
                }
                None => {
                    if unavailable < max_unavailable {
                        unavailable += 1;
                        delete.push(key_of(&old.metadata));
                    }
                }
            }
        }
        let changed = !create.is_empty() || !delete.is_empty();
        for k in delete {
            self.graceful_no_settle(&k, None);
        }
        for node in create {
            self.spawn_pod(NewPod {
                namespace: &key.0,
                name: format!("{}-{}", key.1, random_suffix(5)),
                template: &spec.template,
                extra_labels: BTreeMap::from([
                    (REVISION_LABEL.to_string(), hash.clone()),
                    ("pod-template-generation".to_string(), generation.clone()),
                ]),
                owner: controller_ref("DaemonSet", &ds.metadata),
                node,
            });
        }
        let pods: Vec<Pod> = self
            .pods_controlled_by(&uid)
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let count = |f: &dyn Fn(&Pod) -> bool| {
            i32::try_from(pods.iter().filter(|p| f(p)).count()).unwrap_or(0)
        };
        let ready = count(&|p| is_ready(p));
        let status = DaemonSetStatus {
            observed_generation: ds.metadata.generation,
            desired_number_scheduled: desired,
            current_number_scheduled: count(&|_| true),
            number_ready: ready,
            number_available: Some(ready),
            number_unavailable: Some((desired - ready).max(0)),
            updated_number_scheduled: Some(count(&|p| at_revision(p, &hash))),
            number_misscheduled: 0,
            ..ds.status.clone().unwrap_or_default()
        };
        if ds.status.as_ref() != Some(&status) {
            ds.status = Some(status);
            self.commit_by_controller(key, ds);
        }
        changed
    }
}
