//! One fake per edge, recording what was asked of it.

use super::*;
use crate::core::disposition::{decide, SignalCheck, SignalStatus};
use crate::core::model::{ContainerId, ReloadSignal};
use futures::future::BoxFuture;
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

/// Records every drain-gate write (pod name, `status`, when); `fail`: the next writes answer
/// these errors.
#[derive(Default)]
pub struct Gate {
    pub writes: Mutex<Vec<(String, bool, std::time::Instant)>>,
    pub fail: Mutex<VecDeque<PatchError>>,
}

impl Gate {
    /// The `status` values written for `pod`, in order.
    pub fn statuses(&self, pod: &str) -> Vec<bool> {
        self.writes
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _, _)| p == pod)
            .map(|(_, s, _)| *s)
            .collect()
    }
}

impl GateWriter for Gate {
    fn set<'a>(
        &'a self,
        pod: &'a PodRef,
        condition: &'a crate::core::drain_gate::GateCondition,
    ) -> BoxFuture<'a, Result<(), PatchError>> {
        Box::pin(async move {
            if let Some(e) = self.fail.lock().unwrap().pop_front() {
                return Err(e);
            }
            self.writes.lock().unwrap().push((
                pod.name.clone(),
                condition.serving,
                std::time::Instant::now(),
            ));
            Ok(())
        })
    }
}

/// The controller's Lease as the agent reads it: the record it answers (`None`: no Lease)
/// or an error, and how often it was read.
pub struct Lease {
    pub answer: Mutex<Result<Option<LeaseRecord>, LeaseError>>,
    reads: std::sync::atomic::AtomicUsize,
}

impl Lease {
    pub fn answering(answer: Result<Option<LeaseRecord>, LeaseError>) -> Self {
        Self {
            answer: Mutex::new(answer),
            reads: Default::default(),
        }
    }

    pub fn set(&self, answer: Result<Option<LeaseRecord>, LeaseError>) {
        *self.answer.lock().unwrap() = answer;
    }

    pub fn reads(&self) -> usize {
        self.reads.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A record held by `holder`, renewed at `renewed` for `seconds`.
    pub fn record(holder: Option<&str>, renewed: jiff::Timestamp, seconds: i32) -> LeaseRecord {
        LeaseRecord {
            holder: holder.map(str::to_owned),
            lease_duration_seconds: seconds,
            renew_time: Some(renewed.to_string()),
            acquire_time: None,
            transitions: 0,
        }
    }
}

impl LeaseReader for Lease {
    fn lease(&self) -> String {
        "reloadlet-system/reloadlet-controller".into()
    }

    fn read(&self) -> BoxFuture<'_, Result<Option<LeaseRecord>, LeaseError>> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let answer = self.answer.lock().unwrap().clone();
        Box::pin(async move { answer })
    }
}
