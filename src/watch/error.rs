//! Errors of the volume watcher.

use std::io;
use std::path::PathBuf;

/// Why the volume watcher cannot start or continue.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// `<kubelet-root>/pods` is missing, not a directory, or unreadable.
    #[error("kubelet pods directory {path} is missing or unreadable (is the kubelet root right, and is it mounted into the agent?): {source}")]
    PodsDir { path: PathBuf, source: io::Error },
    /// `inotify_init1` failed (often `fs.inotify.max_user_instances`).
    #[error("cannot create an inotify instance (check fs.inotify.max_user_instances): {0}")]
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
