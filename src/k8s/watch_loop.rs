//! The one relist-watch loop every API watch uses: kube's `watcher` stream with its backoff,
//! each (re)list gathered into one complete list (objects converted as they arrive, so a
//! large list is never held whole), the progress signal that resets a non-resetting backoff,
//! and failures handed on to be counted and logged by the watch that knows what they mean.
//!
//! A (re)list is either paged (LIST with `limit`, then WATCH from its resourceVersion) or,
//! with [`Listing::Streaming`], a streaming list: one WATCH with `sendInitialEvents=true`,
//! `resourceVersionMatch=NotOlderThan`, `allowWatchBookmarks=true` (kube's
//! `watcher::Config::streaming_lists()`, kube-runtime 5 `watcher.rs` `InitialListStrategy::
//! StreamingList`), whose initial ADDED events end with a BOOKMARK annotated
//! `k8s.io/initial-events-end: "true"` (apiserver `storage/cacher/cache_watcher.go`
//! `convertToWatchEvent` → `storage.AnnotateInitialEventsEndBookmark`). Nobody can tell from
//! discovery whether a server offers it (the `WatchList` feature gate, on by default from
//! 1.32; aggregated API servers have their own gates): a server without it refuses the watch
//! with 422 Invalid (apimachinery `meta/internalversion/validation` `validateWatchOptions`:
//! "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled";
//! before 1.27 "resourceVersionMatch is forbidden for watch"). kube's watcher would retry that
//! forever, so here — as client-go's reflector does ("falling back to the standard LIST/WATCH
//! semantics because making progress is better than deadlocking", `tools/cache/reflector.go`
//! `ListAndWatch`) — a 400/422 refusal of the streaming watch switches this watch to paged
//! lists for the rest of the process.

use super::api_backoff::{Progress, WatchBackoff};
use futures::{Stream, StreamExt};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// What a watch says, once its relists are gathered.
#[derive(Debug)]
pub enum Change<T, K> {
    /// The complete list after a (re)list: what is not in it is gone.
    Listed(Vec<T>),
    Applied(T),
    /// The object as last seen.
    Deleted(K),
    /// The watch failed; it retries with backoff (410: it relists).
    Failed(watcher::Error),
}

/// How the watch backs off after a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pacing {
    /// kube's `default_backoff()`.
    Default,
    /// [`WatchBackoff`]: not reset by a relist, only once the watch delivered data (see
    /// `api_backoff`).
    UntilData,
}

/// How a watch (re)lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    /// LIST in pages of `config`'s page size, then WATCH.
    Paged,
    /// A streaming list where the server offers one, else paged (see the module's docs).
    Streaming,
}

/// Whether a failure of a streaming watch says the server does not offer streaming lists:
/// the watch refused at its start as invalid (422) or bad (400).
fn refuses_streaming(e: &watcher::Error) -> bool {
    matches!(
        e,
        watcher::Error::WatchStartFailed(kube::Error::Api(s)) if matches!(s.code, 400 | 422)
    )
}

/// The changes of `api`'s objects (`config`: selectors, page size); `convert` keeps what is
/// needed of each listed or applied object (`None`: skip it).
pub fn changes<K, T>(
    api: Api<K>,
    config: watcher::Config,
    pacing: Pacing,
    convert: impl FnMut(&K) -> Option<T> + Send + 'static,
) -> impl Stream<Item = Change<T, K>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    T: Send + 'static,
{
    paced(watcher::watcher(api, config).boxed(), pacing, convert)
}

/// [`changes`], (re)listing as `listing` says.
pub fn changes_listed<K, T>(
    api: Api<K>,
    config: watcher::Config,
    listing: Listing,
    pacing: Pacing,
    convert: impl FnMut(&K) -> Option<T> + Send + 'static,
) -> impl Stream<Item = Change<T, K>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
    T: Send + 'static,
{
    let events = match listing {
        Listing::Paged => watcher::watcher(api, config).boxed(),
        Listing::Streaming => streaming_or_paged(api, config),
    };
    paced(events, pacing, convert)
}

/// `events` with the watch backoff `pacing` says, gathered into [`Change`]s.
fn paced<K, T>(
    events: futures::stream::BoxStream<'static, Result<Event<K>, watcher::Error>>,
    pacing: Pacing,
    convert: impl FnMut(&K) -> Option<T> + Send + 'static,
) -> impl Stream<Item = Change<T, K>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    T: Send + 'static,
{
    let progress = Progress::default();
    let events = match pacing {
        Pacing::Default => events.default_backoff().boxed(),
        Pacing::UntilData => events.backoff(WatchBackoff::new(progress.clone())).boxed(),
    };
    gather(events, progress, convert)
}

/// A streaming-list watcher until the server refuses one (before any list completed), then
/// a paged one for good.
fn streaming_or_paged<K>(
    api: Api<K>,
    config: watcher::Config,
) -> futures::stream::BoxStream<'static, Result<Event<K>, watcher::Error>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
{
    let resource = K::plural(&Default::default()).into_owned();
    let refused = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = refused.clone();
    let streamed = resource.clone();
    let streaming = watcher::watcher(api.clone(), config.clone().streaming_lists())
        .take_while(move |e| {
            if matches!(e, Ok(Event::InitDone)) {
                tracing::debug!(resource = %streamed, "listed by a streaming list");
            }
            // Only the watch that starts a (re)list carries sendInitialEvents: a refusal of
            // it is the server saying no to streaming lists (a server downgraded since the
            // last list included), not a passing failure.
            let refusal = e.as_ref().err().is_some_and(refuses_streaming);
            if let (true, Err(e)) = (refusal, e) {
                tracing::info!(
                    resource = %resource,
                    error = %e,
                    "the API server does not offer streaming lists (sendInitialEvents); listing in pages"
                );
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            futures::future::ready(!refusal)
        });
    let paged =
        futures::stream::once(async move { refused.load(std::sync::atomic::Ordering::Relaxed) })
            .flat_map(move |refused| {
                if refused {
                    watcher::watcher(api.clone(), config.clone()).boxed()
                } else {
                    futures::stream::empty().boxed()
                }
            });
    streaming.chain(paged).boxed()
}

/// The watcher's events as [`Change`]s: each relist gathered, progress signalled on data.
fn gather<K, T>(
    events: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send,
    progress: Progress,
    mut convert: impl FnMut(&K) -> Option<T> + Send + 'static,
) -> impl Stream<Item = Change<T, K>> + Send
where
    K: Send,
    T: Send + 'static,
{
    events
        .scan(Vec::new(), move |listed: &mut Vec<T>, event| {
            if matches!(
                event,
                Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_))
            ) {
                progress.made();
            }
            let change = match event {
                Ok(Event::Init) => {
                    listed.clear();
                    None
                }
                Ok(Event::InitApply(o)) => {
                    listed.extend(convert(&o));
                    None
                }
                Ok(Event::InitDone) => Some(Change::Listed(std::mem::take(listed))),
                Ok(Event::Apply(o)) => convert(&o).map(Change::Applied),
                Ok(Event::Delete(o)) => Some(Change::Deleted(o)),
                Err(e) => Some(Change::Failed(e)),
            };
            futures::future::ready(Some(change))
        })
        .filter_map(futures::future::ready)
}

/// A refusal that cannot heal by itself (bad request, unauthorized, forbidden, not found).
pub fn hopeless(code: Option<u16>) -> bool {
    matches!(code, Some(400 | 401 | 403 | 404))
}

/// Whether the `count`-th consecutive failure is worth an `error!`: the first when it cannot
/// heal by itself, else once a transient error has repeated three times.
pub fn worth_an_error(count: u32, code: Option<u16>) -> bool {
    let hopeless = hopeless(code);
    (count == 1 && hopeless) || (count == 3 && !hopeless)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_relist_is_one_complete_list_and_skipped_objects_stay_out() {
        let gone = || watcher::Error::NoResourceVersion;
        let events = futures::stream::iter(vec![
            Ok(Event::Init),
            Ok(Event::InitApply(1)),
            Ok(Event::InitApply(-1)),
            Ok(Event::InitApply(2)),
            Ok(Event::InitDone),
            Ok(Event::Apply(3)),
            Ok(Event::Apply(-3)),
            Ok(Event::Delete(1)),
            Err(gone()),
            // A relist started over after an error: only what this one lists.
            Ok(Event::Init),
            Ok(Event::InitApply(9)),
            Ok(Event::Init),
            Ok(Event::InitApply(4)),
            Ok(Event::InitDone),
        ]);
        let positive = |n: &i32| (*n > 0).then_some(*n);
        let changes: Vec<String> = gather(events, Progress::default(), positive)
            .map(|c| match c {
                Change::Failed(_) => "failed".to_string(),
                other => format!("{other:?}"),
            })
            .collect()
            .await;
        assert_eq!(
            changes,
            [
                "Listed([1, 2])",
                "Applied(3)",
                "Deleted(1)",
                "failed",
                "Listed([4])"
            ]
        );
    }

    #[test]
    fn an_error_is_logged_at_once_when_hopeless_else_on_the_third_failure() {
        let logged = |code| {
            (1..=5)
                .filter(|n| worth_an_error(*n, code))
                .collect::<Vec<_>>()
        };
        assert_eq!(logged(Some(403)), [1]);
        assert_eq!(logged(Some(500)), [3]);
        assert_eq!(logged(None), [3]);
    }
}
