//! The hasher thread: volumes too big to hash on the hot thread (above
//! [`super::INLINE_HASH_BYTES`]) are hashed here, one at a time, so a 64 MiB volume never
//! holds up the signal of another pod's change. Started on the first big volume; ends when
//! the agent drops it.

use crate::core::model::VolumeKey;
use crate::core::volume_digest::HashKey;
use crate::host::inotify::LookCause;
use crate::host::volume_read::{hash_volume_counted, CountedResult, Layout};
use std::path::PathBuf;
use tokio::sync::mpsc;

/// One volume to hash.
pub struct HashJob {
    pub key: VolumeKey,
    pub dir: PathBuf,
    pub cause: LookCause,
    pub layout: Layout,
    pub max_bytes: u64,
    /// The hash of a swapped volume taken after the action ([`crate::core::detect::ChangeDetector::record`]),
    /// not a look.
    pub after_action: bool,
}

/// Its hash (and the bytes read), back to the agent's loop.
pub struct Hashed {
    pub key: VolumeKey,
    pub dir: PathBuf,
    pub cause: LookCause,
    pub after_action: bool,
    pub result: CountedResult,
}

/// The thread's name (in `ps -L`).
pub const THREAD_NAME: &str = "reloadlet-hash";

/// Hands jobs to the hasher thread (started on the first one).
pub struct Hasher {
    key: HashKey,
    jobs: Option<std::sync::mpsc::Sender<HashJob>>,
    results: mpsc::UnboundedSender<Hashed>,
}

impl Hasher {
    /// Results arrive on the returned receiver, in the order the jobs were sent.
    pub fn new(key: HashKey) -> (Self, mpsc::UnboundedReceiver<Hashed>) {
        let (results, rx) = mpsc::unbounded_channel();
        (
            Self {
                key,
                jobs: None,
                results,
            },
            rx,
        )
    }

    /// Queues `job`. `Err(job)` when the thread cannot be started (the caller hashes in place).
    pub fn send(&mut self, job: HashJob) -> Result<(), Box<HashJob>> {
        if self.jobs.is_none() {
            let (tx, rx) = std::sync::mpsc::channel::<HashJob>();
            let key = self.key.clone();
            let results = self.results.clone();
            let started = std::thread::Builder::new()
                .name(THREAD_NAME.into())
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        let result =
                            hash_volume_counted(&job.dir, job.max_bytes, &key, &job.layout);
                        let done = Hashed {
                            key: job.key,
                            dir: job.dir,
                            cause: job.cause,
                            after_action: job.after_action,
                            result,
                        };
                        if results.send(done).is_err() {
                            return;
                        }
                    }
                });
            if started.is_err() {
                return Err(Box::new(job));
            }
            self.jobs = Some(tx);
        }
        match &self.jobs {
            Some(tx) => tx.send(job).map_err(|e| Box::new(e.0)),
            None => Err(Box::new(job)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::VolumePlugin;

    #[tokio::test]
    async fn a_volume_is_hashed_on_the_hasher_thread_and_comes_back_with_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let ts = dir.path().join("..2024_01_01_00_00_00.1");
        std::fs::create_dir(&ts).unwrap();
        std::fs::write(ts.join("big"), vec![7u8; 300_000]).unwrap();
        std::os::unix::fs::symlink("..2024_01_01_00_00_00.1", dir.path().join("..data")).unwrap();
        let key = HashKey::from_bytes([1; 32]);
        let (mut hasher, mut rx) = Hasher::new(key.clone());
        let volume = VolumeKey {
            pod_uid: "u".into(),
            plugin: VolumePlugin::ConfigMap,
            volume: "v".into(),
        };
        let job = HashJob {
            key: volume.clone(),
            dir: dir.path().to_owned(),
            cause: LookCause::Swap,
            layout: Layout::whole(),
            max_bytes: 1 << 20,
            after_action: false,
        };
        assert!(hasher.send(job).is_ok());
        let done = rx.recv().await.unwrap();
        assert_eq!(done.key, volume);
        let crate::host::volume_read::CountedHash { digest, read, .. } =
            done.result.unwrap().unwrap();
        assert!(read >= 300_000, "{read}");
        let inline =
            crate::host::volume_read::hash_volume(dir.path(), 1 << 20, &key, &Layout::whole())
                .unwrap()
                .unwrap();
        assert_eq!(digest, inline, "the same digest as a hash in place");
        assert_eq!(crate::host::volume_read::content_bytes(dir.path()), 300_000);
    }
}
