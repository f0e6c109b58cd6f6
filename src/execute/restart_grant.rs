//! The agent's side of the restart grant (issue #45 §2, docs/restart.md, "The grant"): a
//! `restart` decision is not carried out at once; the agent writes
//! `reloadlet.io/restart-request: <id>` on the pod, keeps the restart (containers, stop plans,
//! cause) here, and performs it when its pod watch shows `reloadlet.io/restart-grant` equal
//! to that id. Once every stopped container runs again (a new container ID: the kubelet
//! started it), it writes `reloadlet.io/restarted: <id>`; the controller then waits for the
//! pod's Ready condition before it grants a sibling.
//!
//! [`Requests`] is the synchronous state (unit-tested below); [`super::Inner`] carries out
//! the steps it returns.
//!
//! **Trust.** A pod author can write any of the three annotations. The agent performs only
//! (a) a restart it holds here, for a change it saw, whose id equals the grant; or (b) after
//! its own restart (this memory lost), a request on the pod that is granted, not restarted,
//! and carries the agent's own MAC for this pod UID ([`crate::core::restart_request::is_own_request`]);
//! of its containers, only those that run as they did at the request are stopped (the tags of
//! [`crate::core::restart_request`]: none twice).
//! A forged grant can therefore only let a restart the agent already wanted go ahead early,
//! on a pod its author may write (and could delete); a request copied into a pod template,
//! or onto another pod, verifies nowhere.

use super::restart::RestartJob;
use crate::core::model::PodInfo;
use crate::core::restart_grant::{id_of, GRANT, RESTARTED};
use std::collections::{BTreeMap, HashMap, HashSet};

/// A restart waiting for its grant.
#[derive(Clone, Debug)]
pub struct Request {
    pub id: String,
    /// The latest job of each container.
    pub jobs: BTreeMap<String, RestartJob>,
}

/// A granted restart being carried out.
#[derive(Clone, Debug)]
struct Restarting {
    id: String,
    /// The container ID each stopped container had (`None`: none known): it runs again once
    /// its ID differs.
    before: BTreeMap<String, Option<String>>,
    /// The stops are over (`stopped`: how many reached their container).
    done: Option<usize>,
}

#[derive(Debug, Default)]
struct PodRequests {
    waiting: Option<Request>,
    restarting: Option<Restarting>,
}

/// Who made a request id the agent can verify.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Maker {
    /// The agent itself ([`crate::core::restart_request::is_own_request`]).
    Agent,
    /// The controller, for an env restart
    /// ([`crate::core::restart_request::is_controller_request`]).
    Controller,
}

/// What the executor does next for a pod.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// The grant came for this request: stop these containers (their jobs).
    Perform { id: String, jobs: Vec<RestartJob> },
    /// After an agent restart: the pod holds a granted, unrestarted request the agent wrote;
    /// the caller picks the containers (`core::policy::recovered_restart`) and calls
    /// [`Requests::begin`].
    Recover { id: String },
    /// The pod holds a granted, unrestarted request the controller made (an env restart):
    /// the caller adds the containers its tags name
    /// ([`crate::core::restart_request::controller_targets`]) to `jobs` (the agent's own
    /// waiting restart, if any: a request the controller's replaced joins it, not lost) and
    /// calls [`Requests::begin`].
    Controller { id: String, jobs: Vec<RestartJob> },
    /// Every stopped container runs again (or none was stopped): write `restarted: id`.
    Record { id: String },
}

/// The agent's restart requests, by pod UID.
#[derive(Debug, Default)]
pub struct Requests {
    pods: HashMap<String, PodRequests>,
    /// `(pod uid, id)` recovered by this process: never twice.
    recovered: HashSet<(String, String)>,
}

impl Requests {
    /// A `restart` decision for the pod: its jobs join (replace, per container) the waiting
    /// request, which takes the new id. Returns the id to write as the request.
    pub fn request(&mut self, uid: &str, id: String, jobs: Vec<RestartJob>) -> String {
        let pod = self.pods.entry(uid.to_owned()).or_default();
        let waiting = pod.waiting.get_or_insert_with(|| Request {
            id: id.clone(),
            jobs: BTreeMap::new(),
        });
        waiting.id = id.clone();
        for job in jobs {
            waiting.jobs.insert(job.container.clone(), job);
        }
        id
    }

    /// The id waiting for a grant on the pod, if any.
    pub fn waiting(&self, uid: &str) -> Option<&str> {
        self.pods.get(uid)?.waiting.as_ref().map(|w| w.id.as_str())
    }

    /// The pod as its watch shows it now: what to do. `whose`: who made an id for this pod,
    /// when the agent can verify it (`None`: no one it trusts).
    pub fn on_pod(&mut self, pod: &PodInfo, whose: impl Fn(&str) -> Option<Maker>) -> Option<Step> {
        let grant = id_of(&pod.annotations, GRANT);
        let restarted = id_of(&pod.annotations, RESTARTED);
        if let Some(state) = self.pods.get_mut(&pod.uid) {
            if let Some(r) = &state.restarting {
                if let Some(stopped) = r.done {
                    if stopped == 0 || runs_again(pod, &r.before) {
                        let id = r.id.clone();
                        state.restarting = None;
                        if state.waiting.is_none() {
                            self.pods.remove(&pod.uid);
                        }
                        return Some(Step::Record { id });
                    }
                }
                // One restart at a time per pod: a newer request waits for this one.
                return None;
            }
            let granted = state
                .waiting
                .as_ref()
                .is_some_and(|w| Some(w.id.as_str()) == grant && restarted != grant);
            if granted {
                let waiting = state.waiting.take().expect("checked above");
                let jobs: Vec<RestartJob> = waiting.jobs.into_values().collect();
                state.restarting = Some(Restarting {
                    id: waiting.id.clone(),
                    before: before(pod, &jobs),
                    done: None,
                });
                return Some(Step::Perform {
                    id: waiting.id,
                    jobs,
                });
            }
            // The controller's request replaced the agent's on the pod (both written at
            // once) and was granted: one restart serves both.
            let controller = |id: &str| whose(id) == Some(Maker::Controller);
            let id =
                crate::core::restart_grant::granted_not_restarted(&pod.annotations, controller)?;
            if !self.recovered.insert((pod.uid.clone(), id.to_owned())) {
                return None;
            }
            let jobs = state
                .waiting
                .take()
                .map(|w| w.jobs.into_values().collect())
                .unwrap_or_default();
            return Some(Step::Controller {
                id: id.to_owned(),
                jobs,
            });
        }
        let id = crate::core::restart_grant::granted_not_restarted(&pod.annotations, |id| {
            whose(id).is_some()
        })?;
        let step = match whose(id) {
            Some(Maker::Controller) => Step::Controller {
                id: id.to_owned(),
                jobs: Vec::new(),
            },
            _ => Step::Recover { id: id.to_owned() },
        };
        self.recovered
            .insert((pod.uid.clone(), id.to_owned()))
            .then_some(step)
    }

    /// A recovered request's jobs: it is being carried out now.
    pub fn begin(&mut self, pod: &PodInfo, id: &str, jobs: &[RestartJob]) {
        let state = self.pods.entry(pod.uid.clone()).or_default();
        state.restarting = Some(Restarting {
            id: id.to_owned(),
            before: before(pod, jobs),
            done: None,
        });
    }

    /// The stops of the pod's restart `id` are over; `stopped` of them reached their container.
    pub fn stopped(&mut self, uid: &str, id: &str, stopped: usize) {
        if let Some(r) = self
            .pods
            .get_mut(uid)
            .and_then(|p| p.restarting.as_mut())
            .filter(|r| r.id == id)
        {
            r.done = Some(stopped);
        }
    }

    /// The pod is gone.
    pub fn forget(&mut self, uid: &str) {
        self.pods.remove(uid);
        self.recovered.retain(|(u, _)| u != uid);
    }
}

fn before(pod: &PodInfo, jobs: &[RestartJob]) -> BTreeMap<String, Option<String>> {
    jobs.iter()
        .map(|j| (j.container.clone(), container_id(pod, &j.container)))
        .collect()
}

fn container_id(pod: &PodInfo, container: &str) -> Option<String> {
    pod.containers
        .iter()
        .find(|c| c.name == container)
        .and_then(|c| c.container_id.as_ref())
        .map(|id| id.id.clone())
}

/// Every container stopped runs again: running, under a container ID other than the one it
/// had (the kubelet made a new container: `startContainer`, pkg/kubelet/kuberuntime/
/// kuberuntime_container.go; the pod status the kubelet writes with it carries the Ready
/// condition of the new container, `generateAPIPodStatus` in pkg/kubelet/kubelet_pods.go).
fn runs_again(pod: &PodInfo, before: &BTreeMap<String, Option<String>>) -> bool {
    before.iter().all(|(name, old)| {
        pod.containers
            .iter()
            .find(|c| &c.name == name)
            .is_none_or(|c| c.running && c.container_id.as_ref().map(|i| &i.id) != old.as_ref())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{ContainerId, ContainerInfo, ContainerKind, ContainerRuntime};
    use crate::core::restart::StopPlan;
    use crate::core::restart_grant::REQUEST;

    fn job(container: &str) -> RestartJob {
        RestartJob {
            pod_uid: "u1".into(),
            container: container.into(),
            stop: StopPlan {
                signal: crate::core::model::ReloadSignal::Term,
                grace: std::time::Duration::from_secs(1),
                drain: None,
                timeout: std::time::Duration::from_secs(300),
            },
            first_seen: std::time::Instant::now(),
            sources: vec![],
            seen: crate::execute::applied::Seen::none(),
        }
    }

    fn pod(annotations: &[(&str, &str)], container_id: &str, running: bool) -> PodInfo {
        PodInfo {
            uid: "u1".into(),
            annotations: annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            containers: vec![ContainerInfo {
                name: "app".into(),
                kind: ContainerKind::Regular,
                mounts: vec![],
                container_id: Some(ContainerId {
                    runtime: ContainerRuntime::Containerd,
                    id: container_id.into(),
                }),
                running,
                ports: vec![],
            }],
            ..PodInfo::default()
        }
    }

    #[test]
    fn a_request_is_performed_once_on_its_grant_and_recorded_when_the_container_runs_again() {
        let mut r = Requests::default();
        let never = |_: &str| None;
        r.request("u1", "a1".into(), vec![job("app")]);
        // no grant, a forged grant of another id: nothing
        assert_eq!(r.on_pod(&pod(&[(REQUEST, "a1")], "c1", true), never), None);
        assert_eq!(
            r.on_pod(&pod(&[(REQUEST, "a1"), (GRANT, "zz")], "c1", true), never),
            None
        );
        // a newer change replaces the id: the grant of the old one does nothing
        r.request("u1", "a2".into(), vec![job("app")]);
        assert_eq!(r.waiting("u1"), Some("a2"));
        assert_eq!(r.on_pod(&pod(&[(GRANT, "a1")], "c1", true), never), None);
        let granted = pod(&[(REQUEST, "a2"), (GRANT, "a2")], "c1", true);
        assert_eq!(
            r.on_pod(&granted, never),
            Some(Step::Perform {
                id: "a2".into(),
                jobs: vec![job("app")]
            })
        );
        // while it runs, the same grant performs nothing again
        assert_eq!(r.on_pod(&granted, never), None);
        r.stopped("u1", "a2", 1);
        // the old container still shows (or is not running yet): not yet
        assert_eq!(r.on_pod(&granted, never), None);
        assert_eq!(r.on_pod(&pod(&[(GRANT, "a2")], "c2", false), never), None);
        assert_eq!(
            r.on_pod(&pod(&[(GRANT, "a2")], "c2", true), never),
            Some(Step::Record { id: "a2".into() })
        );
        assert_eq!(r.on_pod(&pod(&[(GRANT, "a2")], "c2", true), never), None);
    }

    #[test]
    fn a_change_during_a_restart_waits_and_is_granted_after_it() {
        let mut r = Requests::default();
        let never = |_: &str| None;
        r.request("u1", "a1".into(), vec![job("app")]);
        let granted = pod(&[(GRANT, "a1")], "c1", true);
        assert!(matches!(
            r.on_pod(&granted, never),
            Some(Step::Perform { .. })
        ));
        r.request("u1", "a2".into(), vec![job("app")]);
        r.stopped("u1", "a1", 1);
        assert_eq!(
            r.on_pod(&pod(&[(GRANT, "a1")], "c2", true), never),
            Some(Step::Record { id: "a1".into() })
        );
        assert_eq!(r.waiting("u1"), Some("a2"));
        assert!(matches!(
            r.on_pod(&pod(&[(GRANT, "a2"), (RESTARTED, "a1")], "c2", true), never),
            Some(Step::Perform { id, .. }) if id == "a2"
        ));
    }

    #[test]
    fn after_an_agent_restart_only_its_own_granted_request_is_recovered_and_once() {
        let mut r = Requests::default();
        let own = |id: &str| (id == "mine").then_some(Maker::Agent);
        let forged = pod(&[(REQUEST, "theirs"), (GRANT, "theirs")], "c1", true);
        assert_eq!(r.on_pod(&forged, own), None);
        let done = pod(
            &[(REQUEST, "mine"), (GRANT, "mine"), (RESTARTED, "mine")],
            "c1",
            true,
        );
        assert_eq!(r.on_pod(&done, own), None);
        let granted = pod(&[(REQUEST, "mine"), (GRANT, "mine")], "c1", true);
        assert_eq!(
            r.on_pod(&granted, own),
            Some(Step::Recover { id: "mine".into() })
        );
        assert_eq!(r.on_pod(&granted, own), None, "never twice");
        r.begin(&granted, "mine", &[job("app")]);
        r.stopped("u1", "mine", 0);
        assert_eq!(
            r.on_pod(&granted, own),
            Some(Step::Record { id: "mine".into() }),
            "nothing stopped: recorded at once"
        );
    }

    #[test]
    fn a_granted_controller_request_is_performed_once_with_a_waiting_restart_joined() {
        let whose = |id: &str| match id {
            "mine" => Some(Maker::Agent),
            "ctl" => Some(Maker::Controller),
            _ => None,
        };
        // no request of the agent's: the controller's, once
        let mut r = Requests::default();
        let granted = pod(&[(REQUEST, "ctl"), (GRANT, "ctl")], "c1", true);
        assert_eq!(r.on_pod(&pod(&[(REQUEST, "ctl")], "c1", true), whose), None);
        assert_eq!(
            r.on_pod(&granted, whose),
            Some(Step::Controller {
                id: "ctl".into(),
                jobs: vec![]
            })
        );
        assert_eq!(r.on_pod(&granted, whose), None, "never twice");
        r.begin(&granted, "ctl", &[job("app")]);
        r.stopped("u1", "ctl", 1);
        assert_eq!(
            r.on_pod(&pod(&[(REQUEST, "ctl"), (GRANT, "ctl")], "c2", true), whose),
            Some(Step::Record { id: "ctl".into() })
        );
        let done = pod(
            &[(REQUEST, "ctl"), (GRANT, "ctl"), (RESTARTED, "ctl")],
            "c2",
            true,
        );
        assert_eq!(Requests::default().on_pod(&done, whose), None);
        // the agent's request waits, the controller's replaced it and is granted: joined
        let mut r = Requests::default();
        r.request("u1", "mine".into(), vec![job("app")]);
        assert_eq!(
            r.on_pod(&granted, whose),
            Some(Step::Controller {
                id: "ctl".into(),
                jobs: vec![job("app")]
            })
        );
        assert_eq!(r.waiting("u1"), None);
        // a grant no one verifies: nothing, waiting or not
        let forged = pod(&[(REQUEST, "zz"), (GRANT, "zz")], "c1", true);
        assert_eq!(Requests::default().on_pod(&forged, whose), None);
        let mut r = Requests::default();
        r.request("u1", "mine".into(), vec![job("app")]);
        assert_eq!(r.on_pod(&forged, whose), None);
        assert_eq!(r.waiting("u1"), Some("mine"));
    }
}
