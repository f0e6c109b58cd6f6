//! What the kube edges tell [`crate::ports::Refusals`] (`crate::serve::denials`): the HTTP
//! status and message of a kube error, and which verb a watcher's failure was refused (a
//! failed initial list is `list`, a failed watch `watch`: `watcher::Error`'s variants in
//! kube-runtime's src/watcher.rs).

use super::watch_loop::Change;
use crate::core::permission::Request;
use crate::ports::{ApiError, RefusalSink};
use kube::runtime::watcher;

/// The status and message of an error the API server answered.
pub fn api_status(e: &kube::Error) -> Option<(u16, &str)> {
    match e {
        kube::Error::Api(s) => Some((s.code, s.message.as_str())),
        _ => None,
    }
}

/// A failed request as the ports carry it: kube's message, with the status when the API
/// server answered.
pub fn api_error(e: &kube::Error) -> ApiError {
    ApiError {
        status: api_status(e).map(|(code, _)| code),
        message: e.to_string(),
    }
}

/// [`message`] of a failed request, with the status when the API server answered.
pub fn refused_error(e: &kube::Error, request: Request, namespace: Option<&str>) -> ApiError {
    ApiError {
        status: api_status(e).map(|(code, _)| code),
        message: message(e, request, namespace),
    }
}

/// The verb, status and message of a refused watcher request.
pub fn watch_status(e: &watcher::Error) -> Option<(&'static str, u16, &str)> {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s)) => {
            Some(("list", s.code, s.message.as_str()))
        }
        watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => {
            Some(("watch", s.code, s.message.as_str()))
        }
        watcher::Error::WatchError(s) => Some(("watch", s.code, s.message.as_str())),
        _ => None,
    }
}

/// The message of a failed request: a refusal named in one line (what this identity may not
/// do), anything else as kube says it.
pub fn message(e: &kube::Error, request: Request, namespace: Option<&str>) -> String {
    match api_status(e) {
        Some((code @ (401 | 403), _)) => {
            let scope = namespace.map_or("cluster-wide".to_string(), |ns| {
                format!("in namespace {ns}")
            });
            format!(
                "forbidden (HTTP {code}): this identity may not {} {} {scope} (the rule {{apiGroups: [\"{}\"], resources: [\"{}\"], verbs: [\"{}\"]}})",
                request.verb,
                crate::core::permission::resource_name(request.group, request.resource),
                request.group,
                request.resource,
                request.verb,
            )
        }
        _ => e.to_string(),
    }
}

/// Reports one request's result (`namespace`: `None` for a cluster-wide one).
pub fn report<T>(
    denials: &RefusalSink,
    request: Request,
    namespace: Option<&str>,
    result: &Result<T, kube::Error>,
) {
    match result {
        Ok(_) => denials.outcome(request, namespace, Ok(())),
        Err(e) => {
            if let Some(status) = api_status(e) {
                denials.outcome(request, namespace, Err(status));
            }
        }
    }
}

/// A cluster-wide watch of `resource` for `feature`: a completed list grants both verbs (a
/// refused watch start does not relist: kube-runtime's `step_trampolined` keeps
/// `State::InitListed` after `WatchStartFailed`, so this cannot flap), an object changed
/// grants the watch, a refused list or watch is reported with its verb.
#[derive(Clone, Copy, Debug)]
pub struct Watched {
    pub feature: crate::core::permission::Feature,
    pub group: &'static str,
    pub resource: &'static str,
}

impl Watched {
    pub fn report<T, K>(&self, denials: &RefusalSink, change: &Change<T, K>) {
        self.report_one(denials, None, None, change)
    }

    /// [`Self::report`] for a watch in `namespace` (`None`: cluster-wide) of the one object
    /// `name` (`None`: of every object), which the shipped rule grants by name.
    pub fn report_one<T, K>(
        &self,
        denials: &RefusalSink,
        namespace: Option<&str>,
        name: Option<&'static str>,
        change: &Change<T, K>,
    ) {
        match change {
            Change::Listed(_) => {
                for verb in ["list", "watch"] {
                    denials.allowed(self.feature, verb, self.group, self.resource);
                }
            }
            Change::Failed(e) => {
                if let Some((verb, code, message)) = watch_status(e) {
                    let request = Request {
                        name,
                        ..Request::new(self.feature, verb, self.group, self.resource)
                    };
                    denials.outcome(request, namespace, Err((code, message)));
                }
            }
            Change::Applied(_) | Change::Deleted(_) => {
                denials.allowed(self.feature, "watch", self.group, self.resource)
            }
        }
    }
}
