//! Errors of the volume watcher.

use std::io;
use std::path::PathBuf;

/// Why the volume watcher cannot start or continue.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// `<kubelet-root>/pods` is missing, not a directory, or unreadable.
    #[error("kubelet pods directory {path} is missing or unreadable: {source} (set --kubelet-root and mount it into the agent; k0s uses /var/lib/k0s/kubelet, microk8s /var/snap/microk8s/common/var/lib/kubelet)")]
    PodsDir { path: PathBuf, source: io::Error },
    /// `inotify_init1` failed; with `EMFILE` the message names the sysctl and the command that
    /// raises it.
    #[error("{}", init_message(.0))]
    Init(#[source] io::Error),
    /// The inotify or mount table fd could not be registered with the Tokio reactor.
    #[error("cannot register the inotify fd with the Tokio reactor: {0}")]
    Register(#[source] io::Error),
    /// The pods directory itself could not be watched.
    #[error("cannot watch the kubelet pods directory {path} (check fs.inotify.max_user_watches): {source}")]
    WatchRoot { path: PathBuf, source: io::Error },
    /// `new` was called outside a Tokio runtime.
    #[error("the volume watcher must be created inside a Tokio runtime")]
    NoRuntime,
    /// `WatcherOptions::rescan_interval` was zero.
    #[error("the rescan interval must be greater than zero")]
    ZeroRescanInterval,
    /// Reading events from the inotify fd failed.
    #[error("reading inotify events failed: {0}")]
    Read(#[source] io::Error),
    /// The pods directory disappeared while being watched.
    #[error("kubelet pods directory {path} disappeared")]
    RootGone { path: PathBuf },
}

/// The one-line explanation of a failed `inotify_init1`.
///
/// The kernel answers `EMFILE` when this user's inotify instances reach
/// `fs.inotify.max_user_instances` (linux fs/notify/inotify/inotify_user.c, `inotify_new_group`:
/// `inc_inotify_instances` fails with -EMFILE) and also when the process has no free file
/// descriptor (`get_unused_fd_flags`, RLIMIT_NOFILE); the message says which applies.
pub fn init_message(e: &io::Error) -> String {
    if e.raw_os_error() != Some(libc::EMFILE) {
        return format!("cannot create an inotify instance: {e}");
    }
    let current = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    if fds_exhausted() {
        return format!(
            "cannot create an inotify instance: this process has no free file descriptor ({e}); raise its open-file limit (ulimit -n / the container runtime's LimitNOFILE)"
        );
    }
    let suggested = current.map_or(512, |c| (c * 2).max(512));
    format!(
        "cannot create an inotify instance: every inotify instance this user may have is in use (fs.inotify.max_user_instances = {}); raise it on the node with `sysctl -w fs.inotify.max_user_instances={suggested}` (persist it in /etc/sysctl.d/)",
        current.map_or("?".to_string(), |c| c.to_string())
    )
}

/// Whether this process's open files have reached RLIMIT_NOFILE.
fn fds_exhausted() -> bool {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return false;
    }
    let open = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count()) as u64;
    open + 1 >= lim.rlim_cur
}
