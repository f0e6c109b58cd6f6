//! PodDisruptionBudgets in the store, and the disruption controller pass over them.

use super::disruption::{compute_status, pod_is_ready, pod_is_terminating};
use super::replicaset::controller_uid;
use super::selectors::{label_selector_is_empty, label_selector_matches};
use super::store::now_ts;
use super::store::{key_of, Key, PdbEntry, State};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

/// Whether the PDB's selector selects the pod, as the disruption controller sees it
/// (policy/v1: an empty selector selects every pod of the namespace; none selects none).
fn controller_selects(pdb: &PodDisruptionBudget, pod: &Pod) -> bool {
    if pdb.metadata.namespace != pod.metadata.namespace {
        return false;
    }
    let Some(sel) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    let empty = BTreeMap::new();
    label_selector_matches(sel, pod.metadata.labels.as_ref().unwrap_or(&empty))
}

/// Whether the eviction subresource counts the PDB for the pod (an empty selector
/// matches nothing there, as in `getPodDisruptionBudgets`).
fn eviction_selects(pdb: &PodDisruptionBudget, pod: &Pod) -> bool {
    pdb.spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .is_some_and(|s| !label_selector_is_empty(s))
        && controller_selects(pdb, pod)
}

impl State {
    /// Stores a new PDB (generation 1); replaces one of the same name.
    pub fn create_pdb(&mut self, mut pdb: PodDisruptionBudget) -> PodDisruptionBudget {
        let key = key_of(&pdb.metadata);
        if self.pdbs.contains_key(&key) {
            return self.update_pdb(pdb);
        }
        pdb.metadata.generation = None;
        self.stamp_new(&mut pdb.metadata);
        if pdb.status.is_none() {
            pdb.status = Some(PodDisruptionBudgetStatus::default());
        }
        self.pdbs.insert(
            key.clone(),
            PdbEntry {
                pdb,
                observe_after: self.lag_deadline(),
                frozen: false,
            },
        );
        self.recompute_pdbs();
        self.pdbs[&key].pdb.clone()
    }

    /// Replaces a PDB's spec/labels, bumping `metadata.generation`; keeps its status.
    pub fn update_pdb(&mut self, mut pdb: PodDisruptionBudget) -> PodDisruptionBudget {
        let key = key_of(&pdb.metadata);
        let Some(old) = self.pdbs.get(&key).map(|e| e.pdb.clone()) else {
            return self.create_pdb(pdb);
        };
        pdb.metadata.uid = old.metadata.uid.clone();
        pdb.metadata.creation_timestamp = old.metadata.creation_timestamp.clone();
        pdb.metadata.generation = Some(old.metadata.generation.unwrap_or(1) + 1);
        pdb.metadata.namespace = Some(key.0.clone());
        pdb.status = old.status.clone();
        let rv = self.next_rv();
        pdb.metadata.resource_version = Some(rv.to_string());
        let observe_after = self.lag_deadline();
        let frozen = self.pdbs.get(&key).is_some_and(|e| e.frozen);
        let entry = PdbEntry {
            pdb,
            observe_after,
            frozen,
        };
        self.pdbs.insert(key.clone(), entry);
        self.recompute_pdbs();
        self.pdbs[&key].pdb.clone()
    }

    /// Removes a PDB.
    pub fn delete_pdb(&mut self, key: &Key) -> Option<PodDisruptionBudget> {
        let e = self.pdbs.remove(key)?;
        self.next_rv();
        Some(e.pdb)
    }

    /// Pins a PDB's status (`Some`) so the controller no longer touches it, or hands it
    /// back to the controller (`None`). Returns false when there is no such PDB.
    pub fn pin_pdb_status(&mut self, key: &Key, status: Option<PodDisruptionBudgetStatus>) -> bool {
        let rv = self.next_rv();
        let Some(e) = self.pdbs.get_mut(key) else {
            return false;
        };
        e.frozen = status.is_some();
        if let Some(st) = status {
            e.pdb.status = Some(st);
            e.pdb.metadata.resource_version = Some(rv.to_string());
        }
        self.recompute_pdbs();
        true
    }

    fn lag_deadline(&self) -> Option<Instant> {
        (!self.behaviour.controller_lag.is_zero())
            .then(|| Instant::now() + self.behaviour.controller_lag)
    }

    /// The pods the disruption controller counts for a PDB.
    pub fn pods_of_pdb(&self, pdb: &PodDisruptionBudget) -> Vec<&Pod> {
        self.pods
            .values()
            .filter(|p| controller_selects(pdb, p))
            .collect()
    }

    /// The PDBs the eviction subresource considers for a pod.
    pub fn pdbs_for_eviction(&self, pod: &Pod) -> Vec<Key> {
        self.pdbs
            .iter()
            .filter(|(_, e)| eviction_selects(&e.pdb, pod))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Ready, non-terminating pods a PDB selects.
    pub fn healthy_count(&self, pdb: &PodDisruptionBudget) -> i32 {
        let n = self
            .pods_of_pdb(pdb)
            .into_iter()
            .filter(|p| !pod_is_terminating(p) && pod_is_ready(p))
            .count();
        i32::try_from(n).unwrap_or(i32::MAX)
    }

    /// Expected scale: summed replicas of the pods' ReplicaSets; a pod without a known
    /// controller counts one.
    fn expected_scale(&self, pods: &[&Pod]) -> i32 {
        let mut seen = BTreeSet::new();
        let mut scale = 0i32;
        for pod in pods {
            match controller_uid(pod).and_then(|u| self.replicas_of(u).map(|r| (u, r))) {
                Some((uid, replicas)) => {
                    if seen.insert(uid.to_string()) {
                        scale = scale.saturating_add(replicas);
                    }
                }
                None => scale = scale.saturating_add(1),
            }
        }
        scale
    }

    /// One disruption-controller pass over every PDB whose latest generation the
    /// controller may already see (see the configurable lag).
    pub fn recompute_pdbs(&mut self) {
        let now = now_ts();
        let instant_now = Instant::now();
        let keys: Vec<Key> = self.pdbs.keys().cloned().collect();
        for key in keys {
            let entry = &self.pdbs[&key];
            if entry.frozen || entry.observe_after.is_some_and(|t| instant_now < t) {
                continue;
            }
            let pods = self.pods_of_pdb(&entry.pdb);
            let scale = self.expected_scale(&pods);
            let Ok(status) = compute_status(&entry.pdb, &pods, scale, now) else {
                continue;
            };
            let changed = entry.pdb.status.as_ref() != Some(&status);
            let rv = if changed { Some(self.next_rv()) } else { None };
            if let Some(e) = self.pdbs.get_mut(&key) {
                e.observe_after = None;
                if let Some(rv) = rv {
                    e.pdb.status = Some(status);
                    e.pdb.metadata.resource_version = Some(rv.to_string());
                }
            }
        }
    }
}
