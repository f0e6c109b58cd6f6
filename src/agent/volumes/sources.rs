//! Which sources of a changed volume changed: the parts of its digest that differ from the
//! last one acted on, mapped back to the ConfigMaps/Secrets (or CSI sources) that project
//! them through the pod spec's layout.

use super::VolumeTracker;
use crate::core::model::PodInfo;
use crate::core::policy::ChangedVolumes;
use crate::host::volume_read::Layout;
use std::collections::BTreeSet;

impl VolumeTracker {
    /// Which sources of each of the pod's changed `volumes` changed since the last action.
    pub fn changed_sources(&self, pod: &PodInfo, volumes: &BTreeSet<String>) -> ChangedVolumes {
        volumes
            .iter()
            .map(|volume| {
                let sources = self
                    .detector
                    .pending_change(&pod.uid, volume)
                    .zip(pod.volume(volume))
                    .map(|((before, now), spec)| {
                        now.changed_parts(before)
                            .iter()
                            .flat_map(|part| Layout::sources_of(spec, part))
                            .collect::<BTreeSet<_>>()
                    });
                (volume.clone(), sources)
            })
            .collect()
    }
}
