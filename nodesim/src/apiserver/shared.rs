//! What the HTTP handlers, watch tasks and the in-process handle share.

use super::access::Access;
use super::model::Resource;
use super::store::{State, WatchSignal};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{broadcast, watch};

/// Shared server internals.
pub(crate) struct Shared {
    state: Mutex<State>,
    pub watch_tx: broadcast::Sender<WatchSignal>,
    /// `Some(code)`: every request answers that status, open watches end.
    pub outage: watch::Sender<Option<u16>>,
    /// Delay before each response.
    pub delay: Mutex<Option<Duration>>,
    /// Becomes `true` when the server shuts down.
    pub shutdown: watch::Receiver<bool>,
    /// How often watches with `allowWatchBookmarks` get a BOOKMARK.
    pub bookmark_interval: Duration,
    /// A watch's lifetime when the client gives no `timeoutSeconds`.
    pub default_watch_timeout: Duration,
    /// Eviction requests being served right now.
    pub in_flight: std::sync::atomic::AtomicUsize,
    /// Watch streams open right now, per resource.
    pub open_watches: Mutex<BTreeMap<Resource, usize>>,
    /// The bearer tokens accepted; `None`: no authentication.
    tokens: Mutex<Option<Vec<String>>>,
    /// The `WatchList` feature gate: streaming lists are served.
    watch_list: std::sync::atomic::AtomicBool,
    /// Service accounts' tokens, RBAC, and what was allowed and denied.
    access: Mutex<Access>,
}

impl Shared {
    pub fn new(
        state: State,
        watch_tx: broadcast::Sender<WatchSignal>,
        shutdown: watch::Receiver<bool>,
        bookmark_interval: Duration,
        default_watch_timeout: Duration,
        delay: Option<Duration>,
    ) -> Self {
        Self {
            state: Mutex::new(state),
            watch_tx,
            outage: watch::Sender::new(None),
            delay: Mutex::new(delay),
            shutdown,
            bookmark_interval,
            default_watch_timeout,
            in_flight: Default::default(),
            open_watches: Default::default(),
            tokens: Mutex::new(None),
            watch_list: std::sync::atomic::AtomicBool::new(true),
            access: Mutex::new(Access::default()),
        }
    }

    pub fn set_watch_list(&self, on: bool) {
        self.watch_list
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn watch_list(&self) -> bool {
        self.watch_list.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Replaces the accepted bearer tokens (`None`: no authentication).
    pub fn set_tokens(&self, tokens: Option<Vec<String>>) {
        *self.tokens.lock().unwrap_or_else(|e| e.into_inner()) = tokens;
    }

    /// Whether a request bearing `token` ("" for none) is authenticated: a service
    /// account's minted token always is, until revoked; a revoked one never is.
    pub fn authenticates(&self, token: &str) -> bool {
        {
            let access = self.access();
            if access.is_revoked(token) {
                return false;
            }
            if access.is_minted(token) {
                return true;
            }
        }
        match &*self.tokens.lock().unwrap_or_else(|e| e.into_inner()) {
            None => true,
            Some(known) => !token.is_empty() && known.iter().any(|t| t == token),
        }
    }

    /// Tokens, RBAC and their records.
    pub fn access(&self) -> MutexGuard<'_, Access> {
        self.access.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Locks the state (a panic in another holder does not poison it for tests).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The configured response delay.
    pub fn delay(&self) -> Option<Duration> {
        *self.delay.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Counts one open watch stream of a resource in [`Shared::open_watches`] while it lives.
pub(crate) struct OpenWatch {
    shared: std::sync::Arc<Shared>,
    resource: Resource,
}

impl OpenWatch {
    pub fn new(shared: std::sync::Arc<Shared>, resource: Resource) -> Self {
        *shared
            .open_watches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(resource)
            .or_default() += 1;
        Self { shared, resource }
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        let mut open = self
            .shared
            .open_watches
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.resource) {
            *n = n.saturating_sub(1);
        }
    }
}
