//! The in-process handle's logs of what was asked: Events, evictions, the budget
//! invariant, every request (read settled), open watches (see [`super::records`]).

use super::render;
use super::store::State;
use super::{ApiServer, EvictionRecord, InvariantRecord, RecordedEvent, RequestRecord};

/// How long a read of the request log waits for the requests being answered
/// ([`ApiServer::settled`]): a held or delayed handler is not waited for past it.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl ApiServer {
    /// Every Event of both APIs.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.state().recorded_events()
    }
    /// Every eviction request with its answer.
    pub fn evictions(&self) -> Vec<EvictionRecord> {
        self.state().records.evictions.clone()
    }
    /// Every eviction that deleted a PDB-covered pod.
    pub fn invariant_log(&self) -> Vec<InvariantRecord> {
        self.state().records.invariants.clone()
    }
    /// Evictions that brought a PDB's Ready, non-terminating pods below desiredHealthy.
    pub fn invariant_violations(&self) -> Vec<String> {
        self.state()
            .records
            .invariants
            .iter()
            .filter(|r| r.is_violation())
            .map(|r| {
                format!(
                    "evicting {} left {} healthy pods under {} (was {}, desiredHealthy {})",
                    r.pod, r.healthy_after, r.pdb, r.healthy_before, r.desired_healthy
                )
            })
            .collect()
    }
    /// Every HTTP request answered (method, path, query, `Accept`, `Content-Type` and
    /// the body of writes), e.g. to assert "no per-object GETs" or count patches. A request
    /// is logged once answered, after its handler changed the store; the log is read once
    /// every request that arrived before this call is answered ([`Self::settled`]), so a
    /// change read from the store (`get_pod`, …) before this call has its request here.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.settled().records.requests.clone()
    }
    /// The requests answered after the first `n` (cheap to poll on a long log).
    pub fn requests_since(&self, n: usize) -> Vec<RequestRecord> {
        self.settled()
            .records
            .requests
            .get(n..)
            .unwrap_or_default()
            .to_vec()
    }
    /// How many requests were answered so far.
    pub fn request_count(&self) -> usize {
        self.settled().records.requests.len()
    }
    /// The state once every request that had arrived when this was called is answered and
    /// logged (a handler's store change and its log line are two steps): at most
    /// [`SETTLE_WAIT`], then as it is. Waits on a blocking-capable thread only: from a
    /// current-thread runtime (where waiting would stop the server answering) it does not
    /// wait.
    fn settled(&self) -> std::sync::MutexGuard<'_, State> {
        let upto = self.state().records.next_request;
        let deadline = std::time::Instant::now() + SETTLE_WAIT;
        let wait = || loop {
            let state = self.state();
            let done = state.records.answering.range(..upto).next().is_none();
            if done || std::time::Instant::now() >= deadline {
                return;
            }
            drop(state);
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(wait),
            Ok(_) => {}
            Err(_) => wait(),
        }
        self.state()
    }
    /// Watch streams open right now per kind (`Pod`, `ConfigMap`, `Secret`, `Lease`), e.g. to
    /// assert "one watch per kind" (kinds with none open are left out).
    pub fn open_watches(&self) -> std::collections::BTreeMap<&'static str, usize> {
        self.inner
            .shared
            .open_watches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(r, n)| (render::kind_of(*r).0, *n))
            .collect()
    }
}
