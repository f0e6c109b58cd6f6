//! What the controller hands its `reloadlet.io/applied` writer with an outcome (issue #46 §2,
//! `crate::execute::applied`): the pod as it knows it and how to tell, per source acted for,
//! the data version the pod reads of it as published when the record is written
//! (`Published::version_for` of the keys the pod reads, the CLI's own derivation), so
//! `reloadlet status` compares it with the object's.

use super::consumer_states::versions::PublishedVersions;
use crate::core::model::{PodInfo, SourceRef};
use crate::core::status::consumers::consumer;
use crate::core::status::data_version::DataVersion;
use crate::execute::applied::{Known, Seen};
use crate::ports::ObjectKey;
use jiff::Timestamp;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The [`Seen`] of an action of the controller on `pod` (`until`: a hold's end). A source not
/// published yet when the record is written has no version (the record then says so).
pub fn seen(pod: Arc<PodInfo>, published: &PublishedVersions, until: Option<Timestamp>) -> Seen {
    let published = published.clone();
    Seen::known(Known {
        pod,
        versions: Arc::new(move |pod: &PodInfo, sources: &[SourceRef]| {
            versions(pod, sources, &published)
        }),
        until,
    })
}

fn versions(
    pod: &PodInfo,
    sources: &[SourceRef],
    published: &PublishedVersions,
) -> BTreeMap<SourceRef, DataVersion> {
    let mut out = BTreeMap::new();
    for source in sources {
        let key = ObjectKey {
            kind: source.kind,
            namespace: pod.namespace.clone(),
            name: source.name.clone(),
        };
        let version = published.get(&key).and_then(|p| {
            let c = consumer(pod, source)?;
            p.version_for(&c.keys())
        });
        if let Some(version) = version {
            out.insert(source.clone(), version);
        }
    }
    out
}
