//! The in-process handle's fault injection and server behaviour: outages, response delay,
//! watch-list support, watch-cache compaction.

use super::ApiServer;
use std::time::Duration;

impl ApiServer {
    /// Turns the `WatchList` feature gate on or off for the watches started from now on.
    pub fn set_watch_list(&self, on: bool) {
        self.inner.shared.set_watch_list(on);
    }
    /// `Some(code)`: every request answers that status and open watches break; `None`
    /// restores service.
    pub fn set_outage(&self, code: Option<u16>) {
        self.inner.shared.outage.send_replace(code);
    }
    /// Delays every response by `delay`.
    pub fn set_response_delay(&self, delay: Option<Duration>) {
        *self
            .inner
            .shared
            .delay
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = delay;
    }
    /// Drops the retained history: watches from an older version get 410, and open
    /// watches end with a 410 ERROR event (their watcher relists).
    pub fn compact(&self) {
        self.state().compact();
    }
}
