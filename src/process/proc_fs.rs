//! [`ProcFs`]: [`ContainerProcesses`] over a procfs, with a cache of main processes.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use procfs::ProcError;

use super::disposition::{self, SignalCheck, SignalStatus};
use super::pidfd::{Pidfds, Pinned, Pinner};
use super::{scan, ContainerProcesses, Delivery, MainProcess, ProcessError};
use crate::model::{ContainerId, ReloadSignal};
use crate::process::cgroup::normalize_pod_uid;

/// Beyond this many cached containers the cache starts over (entries of containers that
/// are gone are otherwise only dropped by [`ProcFs::forget_pod`]).
const CACHE_CAPACITY: usize = 4096;

/// [`ContainerProcesses`] over a procfs mount (normally `/proc`; tests use a fake tree).
///
/// Signalling a container whose main process is cached costs a `pidfd_open`, three small
/// reads (`stat`, `cgroup`, `status`) and the signal; a full scan of the proc root happens only on
/// a cache miss, or once when the cached process has gone.
///
/// The proc root must belong to the agent's PID namespace (see the [module docs](super)).
pub struct ProcFs {
    proc_root: PathBuf,
    pinner: Box<dyn Pinner>,
    cache: Mutex<HashMap<(String, String), MainProcess>>,
    scans: AtomicU64,
}

/// The outcome of one try at a cached or freshly found process.
enum Attempt {
    Done(Delivery),
    /// It turned out not to be the main process any more.
    Stale,
}

impl ProcFs {
    /// A `ProcFs` reading `proc_root` (e.g. `/proc`) and signalling through pidfds.
    pub fn new(proc_root: impl Into<PathBuf>) -> Self {
        Self::with_pinner(proc_root, Box::new(Pidfds::default()))
    }

    pub(crate) fn with_pinner(proc_root: impl Into<PathBuf>, pinner: Box<dyn Pinner>) -> Self {
        Self {
            proc_root: proc_root.into(),
            pinner,
            cache: Mutex::new(HashMap::new()),
            scans: AtomicU64::new(0),
        }
    }

    /// The proc root this reads.
    pub fn proc_root(&self) -> &Path {
        &self.proc_root
    }

    /// How many full scans of the proc root were made so far (a cache hit makes none).
    pub fn scan_count(&self) -> u64 {
        self.scans.load(Ordering::Relaxed)
    }

    /// Drops the cached main processes of a pod (call when the pod is gone).
    pub fn forget_pod(&self, pod_uid: &str) {
        let Some(uid) = normalize_pod_uid(pod_uid) else {
            return;
        };
        self.lock_cache()
            .retain(|(cached_uid, _), _| *cached_uid != uid);
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), MainProcess>> {
        // A panic while holding the lock cannot leave the map inconsistent: keep using it.
        self.cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn scan(&self, uid: &str, container: &ContainerId) -> Result<MainProcess, ProcessError> {
        self.scans.fetch_add(1, Ordering::Relaxed);
        let members =
            scan::members(&self.proc_root, uid, container).map_err(|err| ProcessError::Io {
                path: self.proc_root.clone(),
                source: proc_error_to_io(err),
            })?;
        let main = scan::choose_main(&members).ok_or_else(|| ProcessError::NoProcess {
            pod_uid: uid.to_owned(),
            container: container.clone(),
            proc_root: self.proc_root.clone(),
        })?;
        let mut cache = self.lock_cache();
        if cache.len() >= CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert((uid.to_owned(), container.id.clone()), main);
        Ok(main)
    }

    /// `main` still is the container's main process: same start time, alive, in the
    /// container's cgroup. Any read error counts as "no".
    fn still_main(&self, main: MainProcess, uid: &str, container: &ContainerId) -> bool {
        match scan::observe(&self.proc_root, main.pid, uid, container) {
            Ok(seen) => seen.start_time == main.start_time && !seen.dead && seen.in_container,
            Err(ProcError::NotFound(_)) => false,
            Err(err) => {
                tracing::debug!(pid = main.pid, %err, "cannot re-check process");
                false
            }
        }
    }

    /// What `/proc/<pid>/status` says about the process's signals. `Ok(None)`: it is gone.
    fn signal_status(&self, pid: i32) -> Result<Option<SignalStatus>, ProcessError> {
        let path = self.proc_root.join(pid.to_string()).join("status");
        match scan::status_text(&self.proc_root, pid) {
            Ok(text) => SignalStatus::parse(&text)
                .map(Some)
                .ok_or_else(|| ProcessError::Status {
                    pid,
                    path,
                    why: "no SigBlk/SigIgn/SigCgt lines".into(),
                }),
            Err(ProcError::NotFound(_)) => Ok(None),
            Err(err) => Err(ProcessError::Status {
                pid,
                path,
                why: err.to_string(),
            }),
        }
    }

    /// Pins `main`, checks it still is the container's main process, reads its signal
    /// masks, and signals it when the verdict says so.
    fn try_signal(
        &self,
        main: MainProcess,
        uid: &str,
        container: &ContainerId,
        signal: ReloadSignal,
        check: SignalCheck,
    ) -> Result<Attempt, ProcessError> {
        let signal_error = |source| ProcessError::Signal {
            pid: main.pid,
            signal,
            source,
        };
        let mut pinned: Box<dyn Pinned> = match self.pinner.pin(main.pid) {
            Ok(pinned) => pinned,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Attempt::Stale),
            Err(err) => return Err(signal_error(err)),
        };
        // Pinned before these reads: if they still show the same process (same start
        // time), the pidfd refers to it, since a PID is only reused after its process is
        // gone, and a process never comes back.
        if !self.still_main(main, uid, container) {
            return Ok(Attempt::Stale);
        }
        let Some(status) = self.signal_status(main.pid)? else {
            return Ok(Attempt::Stale);
        };
        let verdict = disposition::decide(&status, signal, check);
        let mut delivery = Delivery {
            pid: main.pid,
            status,
            verdict,
            by_kill: !pinned.exact(),
        };
        if !verdict.sends() {
            return Ok(Attempt::Done(delivery));
        }
        // Twice at most: a pidfd refused at send time is followed by one `kill` pin.
        for _ in 0..2 {
            // Not pinned by a pidfd (kill fallback): check again right before the kill.
            if !pinned.exact() && !self.still_main(main, uid, container) {
                return Ok(Attempt::Stale);
            }
            delivery.by_kill = !pinned.exact();
            match pinned.signal(signal) {
                Ok(()) => return Ok(Attempt::Done(delivery)),
                Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Attempt::Stale),
                Err(err) if err.kind() == io::ErrorKind::Unsupported => {
                    pinned = match self.pinner.pin(main.pid) {
                        Ok(p) => p,
                        Err(err) if err.kind() == io::ErrorKind::NotFound => {
                            return Ok(Attempt::Stale)
                        }
                        Err(err) => return Err(signal_error(err)),
                    };
                }
                Err(err) => return Err(signal_error(err)),
            }
        }
        Err(signal_error(io::Error::other(
            "neither a pidfd nor kill(2) could signal it",
        )))
    }
}

impl ContainerProcesses for ProcFs {
    fn warm(&self, targets: &[(String, ContainerId)]) -> usize {
        let wanted: std::collections::HashSet<(String, String)> = targets
            .iter()
            .filter_map(|(uid, c)| Some((normalize_pod_uid(uid)?, c.id.clone())))
            .collect();
        if wanted.is_empty() {
            return 0;
        }
        self.scans.fetch_add(1, Ordering::Relaxed);
        let Ok(found) = scan::members_of_many(&self.proc_root, &wanted) else {
            return 0;
        };
        let mut cache = self.lock_cache();
        if cache.len() + found.len() >= CACHE_CAPACITY {
            cache.clear();
        }
        let mut n = 0;
        for (key, members) in found {
            if let Some(main) = scan::choose_main(&members) {
                cache.insert(key, main);
                n += 1;
            }
        }
        n
    }

    fn forget_pod(&self, pod_uid: &str) {
        ProcFs::forget_pod(self, pod_uid)
    }

    fn find_main_process(
        &self,
        pod_uid: &str,
        container: &ContainerId,
    ) -> Result<MainProcess, ProcessError> {
        let uid = checked_uid(pod_uid)?;
        self.scan(&uid, container)
    }

    fn inspect(
        &self,
        pod_uid: &str,
        container: &ContainerId,
    ) -> Result<(MainProcess, SignalStatus), ProcessError> {
        let uid = checked_uid(pod_uid)?;
        let main = self.scan(&uid, container)?;
        match self.signal_status(main.pid)? {
            Some(status) => Ok((main, status)),
            None => Err(ProcessError::Vanished {
                pod_uid: uid,
                container: container.clone(),
                pid: main.pid,
            }),
        }
    }

    fn deliver(
        &self,
        pod_uid: &str,
        container: &ContainerId,
        signal: ReloadSignal,
        check: SignalCheck,
    ) -> Result<Delivery, ProcessError> {
        let uid = checked_uid(pod_uid)?;
        let key = (uid.clone(), container.id.clone());
        let cached = self.lock_cache().get(&key).copied();
        if let Some(main) = cached {
            if let Attempt::Done(d) = self.try_signal(main, &uid, container, signal, check)? {
                return Ok(d);
            }
            self.lock_cache().remove(&key);
        }
        let main = self.scan(&uid, container)?;
        match self.try_signal(main, &uid, container, signal, check)? {
            Attempt::Done(d) => Ok(d),
            Attempt::Stale => {
                self.lock_cache().remove(&key);
                Err(ProcessError::Vanished {
                    pod_uid: uid,
                    container: container.clone(),
                    pid: main.pid,
                })
            }
        }
    }
}

fn checked_uid(pod_uid: &str) -> Result<String, ProcessError> {
    normalize_pod_uid(pod_uid).ok_or_else(|| ProcessError::InvalidPodUid {
        pod_uid: pod_uid.to_owned(),
    })
}

fn proc_error_to_io(err: ProcError) -> io::Error {
    match err {
        ProcError::Io(err, _) => err,
        ProcError::NotFound(_) => io::Error::from(io::ErrorKind::NotFound),
        ProcError::PermissionDenied(_) => io::Error::from(io::ErrorKind::PermissionDenied),
        other => io::Error::other(other.to_string()),
    }
}
