//! The agent's edges as small traits, with no `kube` import: what the executor needs from
//! the Kubernetes API (Events, the Eviction API) and from the OS (finding and signalling a
//! container's main process). The real implementations live in `k8s/` and `process/`;
//! [`fake`] holds one fake of each for unit tests.

use crate::core::model::PodInfo;
use futures::future::BoxFuture;
use std::time::Duration;

pub use crate::host::process::ContainerProcesses;

/// The pod an event or an eviction is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

impl PodRef {
    /// `namespace/name`.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

impl From<&PodInfo> for PodRef {
    fn from(p: &PodInfo) -> Self {
        Self {
            uid: p.uid.clone(),
            namespace: p.namespace.clone(),
            name: p.name.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEvent {
    pub warning: bool,
    /// `Signaled`, `SignalNotHandled`, `InvalidAnnotation`, `SubPathNotUpdated`, `SignalFailed`,
    /// `EvictionRequested`, … (from [`crate::core::outcome::Outcome::event`]).
    pub reason: &'static str,
    /// Short PascalCase verb: `Signal`, `Evict`, `Validate`; for a refused API request the
    /// request (`ListDeployments`), so that kube's recorder folds only repeats of one refusal.
    pub action: std::borrow::Cow<'static, str>,
    pub note: String,
}

/// An object an Event is about other than a pod (a rolled workload): its `regarding`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

impl From<&PodRef> for ObjectRef {
    fn from(p: &PodRef) -> Self {
        Self {
            api_version: "v1".into(),
            kind: "Pod".into(),
            uid: p.uid.clone(),
            namespace: p.namespace.clone(),
            name: p.name.clone(),
        }
    }
}

/// Where the agent sends Kubernetes Events (`k8s::events::QueuedRecorder`).
pub trait EventSink: Send + Sync {
    fn publish(&self, pod: &PodRef, event: PodEvent) {
        self.publish_about(&ObjectRef::from(pod), event);
    }
    /// An Event regarding `object`.
    fn publish_about(&self, object: &ObjectRef, event: PodEvent);
    /// Events dropped so far because the queue was full.
    fn dropped(&self) -> u64 {
        0
    }
}

/// What the Eviction API answered (`k8s::eviction::classify`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvictOutcome {
    /// 201/200: the pod is being deleted (or would be, on dry-run).
    Evicted,
    /// 429: a PodDisruptionBudget does not allow it now. `cause` is the server's explanation.
    Blocked {
        cause: String,
        retry_after: Option<Duration>,
    },
    /// 404 or 409 (UID precondition failed): the pod is gone or was replaced.
    Gone,
    /// Anything else (500 for several PDBs, 403, network errors, no answer in time): keep
    /// retrying, report it.
    Failed { code: Option<u16>, message: String },
}

#[derive(Clone, Debug)]
pub struct EvictRequest {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub dry_run: bool,
}

/// The Eviction API (`k8s::eviction::KubeEvictor`).
pub trait Evictor: Send + Sync {
    fn evict(&self, req: &EvictRequest) -> BoxFuture<'_, EvictOutcome>;
}

/// One reload request to a pod (`reloadlet.io/action: http`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpCall {
    pub method: crate::core::annotations::HttpMethod,
    /// `<scheme>://<pod IP>:<port><path>`.
    pub url: String,
    pub body: String,
}

/// What the pod answered: the status and the first bytes of the body (the first
/// [`HTTP_BODY_READ`] bytes at most, lossy UTF-8, trimmed). Tenant text: quoted only through
/// `execute::http::quoted_body`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpAnswer {
    pub status: u16,
    pub body_prefix: String,
}

/// The most bytes of a reload endpoint's answer body that are read; the client then hangs
/// up. (Of those, at most `execute::http::QUOTED_BODY_BYTES` are quoted.)
pub const HTTP_BODY_READ: usize = 4096;

/// Why a reload request got no HTTP answer. Each holds the client's error and its causes
/// as one line (`a: b: c`), the text logged and quoted in `ReloadFailed`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HttpCallError {
    /// The request could not be built from the call (the client refuses the URL).
    #[error("{0}")]
    Request(String),
    /// Connection refused or reset, TLS failure, the connection closed before an answer.
    #[error("{0}")]
    Transport(String),
}

/// Sends reload requests (`reload_client::ReloadClient`). Implementations need no timeout:
/// the executor bounds each call.
pub trait HttpCaller: Send + Sync {
    fn call(&self, call: &HttpCall) -> BoxFuture<'_, Result<HttpAnswer, HttpCallError>>;
}

/// One fake per edge, recording what was asked of it.
#[cfg(test)]
pub mod fake {
    use super::*;
    use crate::core::model::{ContainerId, ReloadSignal};
    use crate::host::process::{
        decide, Delivery, MainProcess, ProcessError, SignalCheck, SignalStatus,
    };
    use std::collections::VecDeque;
    use std::sync::Mutex;

    /// Records every Event: on pods, and on other objects (workloads). The third field is
    /// a fault to inject: publishing any Event but `InternalError` on the pod of that name
    /// panics (a bug reached from one pod's input, `crate::contain`).
    #[derive(Default)]
    pub struct Events(
        pub Mutex<Vec<(PodRef, PodEvent)>>,
        pub Mutex<Vec<(ObjectRef, PodEvent)>>,
        pub Mutex<Option<String>>,
    );

    impl Events {
        pub fn reasons(&self) -> Vec<&'static str> {
            let mut reasons: Vec<_> = self
                .0
                .lock()
                .unwrap()
                .iter()
                .map(|(_, e)| e.reason)
                .collect();
            reasons.extend(self.1.lock().unwrap().iter().map(|(_, e)| e.reason));
            reasons
        }
    }

    impl EventSink for Events {
        fn publish(&self, pod: &PodRef, event: PodEvent) {
            let poisoned = self.2.lock().unwrap().as_deref() == Some(pod.name.as_str());
            if poisoned && event.reason != "InternalError" {
                panic!("injected: no {} Event for {}", event.reason, pod.name);
            }
            self.0.lock().unwrap().push((pod.clone(), event));
        }

        fn publish_about(&self, object: &ObjectRef, event: PodEvent) {
            self.1.lock().unwrap().push((object.clone(), event));
        }
    }

    /// Answers from a script (then `Evicted`); `None` in the script: the call never answers.
    #[derive(Default)]
    pub struct Evictor {
        pub script: Mutex<VecDeque<Option<EvictOutcome>>>,
        pub calls: Mutex<Vec<EvictRequest>>,
    }

    impl Evictor {
        pub fn answering(answers: impl IntoIterator<Item = Option<EvictOutcome>>) -> Self {
            Self {
                script: Mutex::new(answers.into_iter().collect()),
                ..Default::default()
            }
        }

        pub fn calls(&self) -> usize {
            self.calls.lock().unwrap().len()
        }
    }

    impl super::Evictor for Evictor {
        fn evict(&self, req: &EvictRequest) -> BoxFuture<'_, EvictOutcome> {
            self.calls.lock().unwrap().push(req.clone());
            let next = self
                .script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(Some(EvictOutcome::Evicted));
            Box::pin(async move {
                match next {
                    Some(outcome) => outcome,
                    None => std::future::pending().await,
                }
            })
        }
    }

    /// What the fake HTTP endpoint does with one request.
    #[derive(Clone, Debug)]
    pub enum Reply {
        Status(u16, &'static str),
        Fail(&'static str),
        /// Never answers (the executor's timeout has to end it).
        Hang,
    }

    /// Records every reload request with the (tokio) time it was made; answers from a
    /// script, then 200.
    #[derive(Default)]
    pub struct Http {
        pub script: Mutex<VecDeque<Reply>>,
        pub calls: Mutex<Vec<(HttpCall, tokio::time::Instant)>>,
    }

    impl Http {
        pub fn answering(replies: impl IntoIterator<Item = Reply>) -> Self {
            Self {
                script: Mutex::new(replies.into_iter().collect()),
                ..Default::default()
            }
        }

        pub fn calls(&self) -> Vec<HttpCall> {
            self.calls
                .lock()
                .unwrap()
                .iter()
                .map(|(c, _)| c.clone())
                .collect()
        }

        /// When each call was made.
        pub fn times(&self) -> Vec<tokio::time::Instant> {
            self.calls.lock().unwrap().iter().map(|(_, t)| *t).collect()
        }
    }

    impl HttpCaller for Http {
        fn call(&self, call: &HttpCall) -> BoxFuture<'_, Result<HttpAnswer, HttpCallError>> {
            self.calls
                .lock()
                .unwrap()
                .push((call.clone(), tokio::time::Instant::now()));
            let next = self
                .script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(Reply::Status(200, "ok"));
            Box::pin(async move {
                match next {
                    Reply::Status(status, body) => Ok(HttpAnswer {
                        status,
                        body_prefix: body.into(),
                    }),
                    Reply::Fail(e) => Err(HttpCallError::Transport(e.into())),
                    Reply::Hang => std::future::pending().await,
                }
            })
        }
    }

    /// Containers' main processes: a process per container ID, which handles every signal;
    /// `fail` makes the next deliveries fail (as while a container restarts).
    #[derive(Default)]
    pub struct Processes {
        /// Container ID → host PID.
        pub pids: Mutex<std::collections::HashMap<String, i32>>,
        pub fail: Mutex<u32>,
        /// Main processes are kept (as `ProcFs::warm` keeps a pidfd): signals take the hot
        /// path, [`ContainerProcesses::deliver_kept`].
        pub kept: std::sync::atomic::AtomicBool,
        /// How many deliveries took the hot path.
        pub hot: std::sync::atomic::AtomicUsize,
        /// (pod UID, container ID, signal) of every signal sent.
        pub sent: Mutex<Vec<(String, String, ReloadSignal)>>,
        /// How many warm passes began.
        pub warms: std::sync::atomic::AtomicUsize,
        /// While set, a warm pass does not end (as a /proc pass over many pods takes time).
        pub hold_warm: std::sync::atomic::AtomicBool,
        /// A fault to inject: a signal to this pod UID on the hot path panics (a bug reached
        /// from one pod's input, `crate::contain`).
        pub panic_for: Mutex<Option<String>>,
    }

    impl Processes {
        pub fn with(container_id: &str, pid: i32) -> Self {
            let p = Self::default();
            p.pids.lock().unwrap().insert(container_id.into(), pid);
            p
        }

        pub fn sent(&self) -> usize {
            self.sent.lock().unwrap().len()
        }

        fn status() -> SignalStatus {
            SignalStatus {
                name: "app".into(),
                caught: u64::MAX,
                ns_pid: Some(1),
                ..Default::default()
            }
        }
    }

    impl ContainerProcesses for Processes {
        fn find_main_process(
            &self,
            pod_uid: &str,
            container: &ContainerId,
        ) -> Result<MainProcess, ProcessError> {
            let pid = self.pids.lock().unwrap().get(&container.id).copied();
            pid.map(|pid| MainProcess { pid, start_time: 1 })
                .ok_or_else(|| ProcessError::NoProcess {
                    pod_uid: pod_uid.into(),
                    container: container.clone(),
                    proc_root: "/proc".into(),
                })
        }

        fn deliver(
            &self,
            pod_uid: &str,
            container: &ContainerId,
            signal: ReloadSignal,
            check: SignalCheck,
        ) -> Result<Delivery, ProcessError> {
            {
                let mut fail = self.fail.lock().unwrap();
                if *fail > 0 {
                    *fail -= 1;
                    return Err(ProcessError::NoProcess {
                        pod_uid: pod_uid.into(),
                        container: container.clone(),
                        proc_root: "/proc".into(),
                    });
                }
            }
            let main = self.find_main_process(pod_uid, container)?;
            let status = Self::status();
            self.sent
                .lock()
                .unwrap()
                .push((pod_uid.into(), container.id.clone(), signal));
            Ok(Delivery {
                pid: main.pid,
                verdict: decide(&status, signal, check),
                status,
                by_kill: false,
            })
        }

        fn inspect(
            &self,
            pod_uid: &str,
            container: &ContainerId,
        ) -> Result<(MainProcess, SignalStatus), ProcessError> {
            Ok((self.find_main_process(pod_uid, container)?, Self::status()))
        }

        fn deliver_kept(
            &self,
            pod_uid: &str,
            container: &ContainerId,
            signal: ReloadSignal,
            check: SignalCheck,
        ) -> Option<Result<Delivery, ProcessError>> {
            use std::sync::atomic::Ordering;
            if !self.kept.load(Ordering::Relaxed) {
                return None;
            }
            if self.panic_for.lock().unwrap().as_deref() == Some(pod_uid) {
                panic!("injected: cannot signal pod {pod_uid}");
            }
            self.hot.fetch_add(1, Ordering::Relaxed);
            Some(self.deliver(pod_uid, container, signal, check))
        }

        fn warm(&self, targets: &[(String, ContainerId)]) -> usize {
            use std::sync::atomic::Ordering;
            self.warms.fetch_add(1, Ordering::Relaxed);
            while self.hold_warm.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            targets.len()
        }
    }
}
