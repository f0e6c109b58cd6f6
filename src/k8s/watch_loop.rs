//! The one relist-watch loop every API watch uses: kube's `watcher` stream with its backoff,
//! each (re)list gathered into one complete list (objects converted as they arrive, so a
//! large list is never held whole), the progress signal that resets a non-resetting backoff,
//! and failures handed on to be counted and logged by the watch that knows what they mean.

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
    let progress = Progress::default();
    let events = watcher::watcher(api, config);
    let events = match pacing {
        Pacing::Default => events.default_backoff().boxed(),
        Pacing::UntilData => events.backoff(WatchBackoff::new(progress.clone())).boxed(),
    };
    gather(events, progress, convert)
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
