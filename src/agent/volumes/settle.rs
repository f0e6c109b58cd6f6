//! CSI volumes written in place, waiting for their writes to settle (`--csi-settle`): a
//! driver writing several files one after another is looked at once, after the last one
//! (docs/csi.md). A `..data` swap never waits here.

use super::{Changed, VolumeTracker};
use crate::core::model::VolumeKey;
use crate::host::inotify::LookCause;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

impl VolumeTracker {
    /// `--csi-settle`: how long after its last write in place a CSI volume is looked at.
    pub fn with_csi_settle(mut self, after: Duration) -> Self {
        self.settling = Settling::new(after);
        self
    }

    /// When the next CSI volume written in place is due ([`Self::look_settled`]).
    pub fn next_settled(&self) -> Option<Instant> {
        self.settling.next()
    }

    /// Looks at the CSI volumes whose writes in place settled by `now`: a change is its
    /// keyed hash differing from the last one acted on.
    pub fn look_settled(&mut self, now: Instant, changed: &mut impl FnMut(Changed<'_>)) {
        for (key, dir) in self.settling.take_due(now) {
            self.look_at(&key, dir, LookCause::Written, now, changed);
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Settling {
    after: Duration,
    /// When each volume is due, and its directory. Empty unless a CSI volume is being
    /// written in place: the loop's deadline costs nothing for other volumes.
    due: HashMap<VolumeKey, (Instant, PathBuf)>,
}

impl Settling {
    pub(super) fn new(after: Duration) -> Self {
        Self {
            after,
            due: HashMap::new(),
        }
    }

    /// A file of the volume was written at `now`: its look moves to `now + after`.
    pub(super) fn written(&mut self, key: &VolumeKey, dir: PathBuf, now: Instant) {
        let at = now + self.after;
        match self.due.get_mut(key) {
            Some(due) => *due = (at, dir),
            None => {
                self.due.insert(key.clone(), (at, dir));
            }
        }
    }

    pub(super) fn next(&self) -> Option<Instant> {
        self.due.values().map(|(at, _)| *at).min()
    }

    /// The volumes due by `now`, taken out.
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<(VolumeKey, PathBuf)> {
        if self.due.is_empty() {
            return Vec::new();
        }
        let keys: Vec<VolumeKey> = self
            .due
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| self.due.remove(&k).map(|(_, dir)| (k, dir)))
            .collect()
    }

    pub(super) fn forget(&mut self, gone: impl Fn(&VolumeKey) -> bool) {
        self.due.retain(|k, _| !gone(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::VolumePlugin;

    #[test]
    fn each_write_moves_the_look_after_the_last_one() {
        let key = VolumeKey {
            pod_uid: "u".into(),
            plugin: VolumePlugin::Csi,
            volume: "db".into(),
        };
        let t0 = Instant::now();
        let s = Duration::from_secs(2);
        let mut settling = Settling::new(s);
        assert_eq!(settling.next(), None);
        settling.written(&key, "d".into(), t0);
        settling.written(&key, "d".into(), t0 + Duration::from_millis(500));
        settling.written(&key, "d".into(), t0 + Duration::from_secs(1));
        assert_eq!(settling.next(), Some(t0 + Duration::from_secs(3)));
        assert!(settling
            .take_due(t0 + Duration::from_millis(2999))
            .is_empty());
        assert_eq!(settling.take_due(t0 + s * 2).len(), 1);
        assert_eq!(settling.next(), None);
        settling.written(&key, "d".into(), t0);
        settling.forget(|k| &*k.pod_uid == "u");
        assert!(settling.take_due(t0 + s * 10).is_empty());
    }
}
