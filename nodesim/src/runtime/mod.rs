//! "Containers" as real processes in real cgroups, named as containerd, CRI-O and
//! cri-dockerd name them.
//!
//! Each container (and the pod sandbox's pause process) is started through a *shim*:
//! `unshare --fork --pid --mount …` (or `nsenter --pid` into the pause process for
//! `shareProcessNamespace`). The shim stays outside the container cgroup — like
//! containerd-shim or conmon — and its child, the container init, bind-mounts the volumes
//! in its private mount namespace, moves itself into the container cgroup (`echo 0 >
//! cgroup.procs`) and execs the container's command. Under CRI-O the shim first moves itself
//! into the `crio-conmon-<id>` sibling cgroup, so it plays conmon.

pub mod cgroups;
mod container;
mod mount_targets;
mod shim;

use crate::flavor::{CgroupDriver, CgroupVersion, QosClass, Runtime};
use crate::runtime::cgroups::{Cgroup, CgroupError, CgroupMounts};
use crate::runtime::container::Running;
pub use crate::runtime::container::{BindMount, ContainerHandle, ContainerSpec, UserNamespace};
use crate::runtime::shim::{
    cleanup, init_script, join_user_ns_argv, release_targets, reset_signals, shim_argv,
    wait_for_exec, PidNs,
};
pub use crate::runtime::shim::{parent_of, random_container_id, stand_in_argv};

/// Starts `cmd` as a service manager starts a process: every catchable signal (real-time ones
/// included) at its default action and none blocked, whatever the caller inherited (`nohup` ignores SIGHUP, `setsid`
/// and shells may leave others ignored or blocked). Used for the containers here and for
/// every process a test starts (the agent, the controller, shells, runtimes), so that a test
/// run under `nohup` or from a shell that blocks signals behaves as one run from a terminal.
pub fn default_signals(cmd: &mut Command) -> &mut Command {
    // SAFETY: sigaction(2) and sigprocmask(2) are async-signal-safe; nothing is allocated.
    unsafe { cmd.pre_exec(reset_signals) }
}
use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CONTAINER_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The runtime's node-wide settings.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    pub runtime: Runtime,
    pub driver: CgroupDriver,
    pub cgroup_version: CgroupVersion,
    /// Container logs go to `<log_dir>/<pod uid>/<container>-<id prefix>.log`.
    pub log_dir: PathBuf,
}

/// The pod-level settings of a sandbox.
#[derive(Clone, Debug)]
pub struct SandboxSpec {
    pub pod_uid: String,
    pub qos: QosClass,
    /// `shareProcessNamespace: true`: containers join the pause process's PID namespace.
    pub share_process_namespace: bool,
    /// `hostPID: true`: no PID namespace at all.
    pub host_pid: bool,
    /// `hostUsers: false`: the pod's user namespace mapping, `(first host ID, length)`
    /// ([`UserNamespace`]).
    pub user_namespace: Option<(u32, u32)>,
}

/// A container that ran to completion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completed {
    pub id: String,
    pub exit_code: i32,
}

/// A container whose main process exited on its own (or was killed from outside).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exited {
    pub name: String,
    pub id: String,
    pub exit_code: i32,
}

/// Errors of the simulated runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("starting {what}: {source}")]
    Spawn {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("container {name:?} did not start: {why}; log {log}:\n{tail}")]
    StartFailed {
        name: String,
        why: String,
        log: PathBuf,
        tail: String,
    },
    #[error("container {0:?} has an empty command")]
    EmptyCommand(String),
    #[error("no sandbox for pod {0}")]
    NoSandbox(String),
    #[error("pod {0} already has a sandbox")]
    SandboxExists(String),
    #[error("no container {id} in pod {pod_uid}")]
    NoContainer { pod_uid: String, id: String },
    #[error("container {name:?} still running after {timeout:?}")]
    Timeout { name: String, timeout: Duration },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> RuntimeError + 'a {
    move |source| RuntimeError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

#[derive(Debug)]
struct PodRuntime {
    spec: SandboxSpec,
    sandbox: Running,
    containers: Vec<Running>,
    /// Dropped last: the containers' and sandbox's cgroups are its children.
    pod_cgroup: Cgroup,
}

/// The simulated container runtime of one node.
#[derive(Debug)]
pub struct SimRuntime {
    cfg: RuntimeConfig,
    mounts: CgroupMounts,
    pods: HashMap<String, PodRuntime>,
}

impl SimRuntime {
    /// Finds the cgroup hierarchies from `/proc/self/mountinfo`.
    pub fn new(cfg: RuntimeConfig) -> Result<Self, RuntimeError> {
        let mounts = CgroupMounts::detect()?;
        mounts.roots(cfg.cgroup_version)?;
        fs::create_dir_all(&cfg.log_dir).map_err(io_err("mkdir", &cfg.log_dir))?;
        Ok(Self {
            cfg,
            mounts,
            pods: HashMap::new(),
        })
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.cfg
    }

    /// Creates the pod cgroup and starts the pause process in the sandbox leaf.
    pub fn start_sandbox(&mut self, spec: &SandboxSpec) -> Result<ContainerHandle, RuntimeError> {
        if self.pods.contains_key(&spec.pod_uid) {
            return Err(RuntimeError::SandboxExists(spec.pod_uid.clone()));
        }
        let pod_rel = cgroups::pod_cgroup(self.cfg.driver, spec.qos, &spec.pod_uid);
        let pod_cgroup = Cgroup::create(&self.mounts, self.cfg.cgroup_version, &pod_rel)?;
        let pause = ContainerSpec {
            name: "POD".into(),
            argv: stand_in_argv(),
            user_namespace: spec
                .user_namespace
                .map(|(host_id, length)| UserNamespace::New { host_id, length }),
            ..Default::default()
        };
        let ns = if spec.host_pid {
            PidNs::Host
        } else {
            PidNs::Own
        };
        let sandbox = self.spawn(&spec.pod_uid, &pod_rel, &pause, ns, true)?;
        let handle = sandbox.handle.clone();
        self.pods.insert(
            spec.pod_uid.clone(),
            PodRuntime {
                spec: spec.clone(),
                sandbox,
                containers: Vec::new(),
                pod_cgroup,
            },
        );
        Ok(handle)
    }

    /// Starts a container of the pod whose sandbox runs.
    pub fn start_container(
        &mut self,
        pod_uid: &str,
        spec: &ContainerSpec,
    ) -> Result<ContainerHandle, RuntimeError> {
        let pod = self
            .pods
            .get(pod_uid)
            .ok_or_else(|| RuntimeError::NoSandbox(pod_uid.into()))?;
        let ns = self.pid_ns_of(pod);
        let pod_rel = pod.pod_cgroup.rel_path().to_owned();
        let joined;
        let spec = match pod.spec.user_namespace {
            Some(_) => {
                joined = ContainerSpec {
                    user_namespace: Some(UserNamespace::Join(pod.sandbox.handle.main_pid)),
                    ..spec.clone()
                };
                &joined
            }
            None => spec,
        };
        let running = self.spawn(pod_uid, &pod_rel, spec, ns, true)?;
        let handle = running.handle.clone();
        if let Some(pod) = self.pods.get_mut(pod_uid) {
            pod.containers.push(running);
        }
        Ok(handle)
    }

    /// Runs a classic init container to completion; returns its ID and exit code.
    pub fn run_to_completion(
        &mut self,
        pod_uid: &str,
        spec: &ContainerSpec,
        timeout: Duration,
    ) -> Result<Completed, RuntimeError> {
        let pod = self
            .pods
            .get(pod_uid)
            .ok_or_else(|| RuntimeError::NoSandbox(pod_uid.into()))?;
        let ns = self.pid_ns_of(pod);
        let pod_rel = pod.pod_cgroup.rel_path().to_owned();
        let mut running = self.spawn(pod_uid, &pod_rel, spec, ns, false)?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = running.shim.try_wait() {
                let id = running.handle.id.clone();
                cleanup(running, Duration::ZERO);
                return Ok(Completed {
                    id,
                    exit_code: status.code().unwrap_or(-1),
                });
            }
            if Instant::now() > deadline {
                cleanup(running, Duration::ZERO);
                return Err(RuntimeError::Timeout {
                    name: spec.name.clone(),
                    timeout,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM to the main process, SIGKILL to everything left after `grace`; removes the
    /// container's cgroups and the mount targets it created.
    pub fn stop_container(
        &mut self,
        pod_uid: &str,
        id: &str,
        grace: Duration,
    ) -> Result<(), RuntimeError> {
        let pod = self
            .pods
            .get_mut(pod_uid)
            .ok_or_else(|| RuntimeError::NoSandbox(pod_uid.into()))?;
        let idx = pod
            .containers
            .iter()
            .position(|c| c.handle.id == id)
            .ok_or_else(|| RuntimeError::NoContainer {
                pod_uid: pod_uid.into(),
                id: id.into(),
            })?;
        let running = pod.containers.remove(idx);
        cleanup(running, grace);
        Ok(())
    }

    /// The containers of the pod whose main process has exited (the shim reaped it): taken
    /// out of the pod, their cgroups and mount targets removed, with the shim's exit code
    /// (the main process's own when it exits; `unshare` re-raises most fatal signals, read
    /// as 128 + signal, but reports a SIGKILL as 1). The kubelet's PLEG sees the same
    /// through the runtime's container list.
    pub fn reap_exited(&mut self, pod_uid: &str) -> Vec<Exited> {
        use std::os::unix::process::ExitStatusExt;
        let Some(pod) = self.pods.get_mut(pod_uid) else {
            return Vec::new();
        };
        let mut exited = Vec::new();
        let mut i = 0;
        while i < pod.containers.len() {
            let status = match pod.containers[i].shim.try_wait() {
                Ok(Some(status)) => status,
                _ => {
                    i += 1;
                    continue;
                }
            };
            let running = pod.containers.remove(i);
            let exit_code = status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(-1);
            exited.push(Exited {
                name: running.handle.name.clone(),
                id: running.handle.id.clone(),
                exit_code,
            });
            cleanup(running, Duration::ZERO);
        }
        exited
    }

    /// Stops every container of the pod, then the sandbox, and removes the pod cgroup.
    pub fn stop_sandbox(&mut self, pod_uid: &str, grace: Duration) -> Result<(), RuntimeError> {
        let Some(mut pod) = self.pods.remove(pod_uid) else {
            return Ok(());
        };
        for c in pod.containers.drain(..) {
            cleanup(c, grace);
        }
        cleanup(pod.sandbox, Duration::ZERO);
        let pod_dirs = pod.pod_cgroup.dirs().to_vec();
        pod.pod_cgroup.remove()?;
        // the QoS parents (`kubepods.slice`, `kubepods/burstable` …) are shared by every
        // pod of every simulated node; the last one out removes them (EBUSY otherwise)
        for dir in pod_dirs {
            for parent in dir.ancestors().skip(1) {
                let name = parent
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let ours = name.starts_with("kubepods")
                    || parent.parent().is_some_and(|p| p.ends_with("kubepods"));
                if !ours || fs::remove_dir(parent).is_err() {
                    break;
                }
            }
        }
        Ok(())
    }

    /// The sandbox and containers of a pod.
    pub fn handles(&self, pod_uid: &str) -> Option<(ContainerHandle, Vec<ContainerHandle>)> {
        let pod = self.pods.get(pod_uid)?;
        Some((
            pod.sandbox.handle.clone(),
            pod.containers.iter().map(|c| c.handle.clone()).collect(),
        ))
    }

    /// UIDs of the pods with a sandbox.
    pub fn pod_uids(&self) -> Vec<String> {
        self.pods.keys().cloned().collect()
    }

    /// Kills every process, removes every cgroup and created mount target.
    pub fn shutdown(&mut self) {
        let uids: Vec<String> = self.pods.keys().cloned().collect();
        for uid in uids {
            if let Err(e) = self.stop_sandbox(&uid, Duration::ZERO) {
                tracing::warn!(pod_uid = %uid, error = %e, "sandbox cleanup failed");
            }
        }
    }

    fn pid_ns_of(&self, pod: &PodRuntime) -> PidNs {
        if pod.spec.host_pid {
            PidNs::Host
        } else if pod.spec.share_process_namespace {
            PidNs::Join(pod.sandbox.handle.main_pid)
        } else {
            PidNs::Own
        }
    }

    /// Starts `spec` through a shim; with `await_exec`, waits until its command runs in the
    /// container cgroup and records its PID.
    fn spawn(
        &self,
        pod_uid: &str,
        pod_rel: &str,
        spec: &ContainerSpec,
        ns: PidNs,
        await_exec: bool,
    ) -> Result<Running, RuntimeError> {
        if spec.argv.is_empty() {
            return Err(RuntimeError::EmptyCommand(spec.name.clone()));
        }
        let cfg = &self.cfg;
        let id = random_container_id();
        let leaf = cgroups::container_leaf(cfg.runtime, cfg.driver, &id);
        let rel = format!("{pod_rel}/{leaf}");
        let cgroup = Cgroup::create(&self.mounts, cfg.cgroup_version, &rel)?;
        let conmon_cgroup = match cfg.runtime {
            Runtime::CriO => Some(Cgroup::create(
                &self.mounts,
                cfg.cgroup_version,
                &format!("{pod_rel}/{}", cgroups::crio_conmon_leaf(cfg.driver, &id)),
            )?),
            _ => None,
        };

        let log_dir = cfg.log_dir.join(pod_uid);
        fs::create_dir_all(&log_dir).map_err(io_err("mkdir", &log_dir))?;
        let log_path = log_dir.join(format!("{}-{}.log", spec.name, &id[..12]));
        let log = fs::File::create(&log_path).map_err(io_err("create", &log_path))?;
        let log2 = log.try_clone().map_err(io_err("dup", &log_path))?;

        let mut targets = Vec::new();
        for m in &spec.mounts {
            if let Err(e) = mount_targets::acquire(&m.source, &m.target) {
                release_targets(&targets);
                return Err(RuntimeError::Io {
                    op: e.op,
                    path: e.path,
                    source: e.source,
                });
            }
            targets.push(m.target.clone());
        }

        let mut argv = shim_argv(
            ns,
            &init_script(spec, &cgroup.procs_files()),
            &spec.argv,
            conmon_cgroup.as_ref(),
        );
        if let Some(UserNamespace::Join(pid)) = spec.user_namespace {
            argv = join_user_ns_argv(pid, argv);
        }
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .env("PATH", CONTAINER_PATH)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0);
        // A real container starts with every signal at its default action and none blocked:
        // containerd runs as a systemd service, and systemd resets both for every service it
        // starts (src/core/exec-invoke.c: reset_all_signal_handlers(), reset_signal_mask()).
        // Without this, a test run under `nohup` (SIGHUP ignored) or from a shell that blocks
        // signals would hand that disposition down to every simulated container.
        default_signals(&mut cmd);
        let shim = match cmd.spawn() {
            Ok(child) => child,
            Err(source) => {
                release_targets(&targets);
                return Err(RuntimeError::Spawn {
                    what: format!("shim {}", argv[0]),
                    source,
                });
            }
        };
        let shim_pid = shim.id() as i32;
        let handle = ContainerHandle {
            name: spec.name.clone(),
            id,
            runtime: cfg.runtime,
            cgroup: rel,
            cgroup_paths: cgroup.dirs().to_vec(),
            main_pid: 0,
            shim_pid,
            conmon_pid: conmon_cgroup.as_ref().map(|_| shim_pid),
            log_path: log_path.clone(),
        };
        let mut running = Running {
            handle,
            spec: spec.clone(),
            shim,
            cgroup,
            conmon_cgroup,
            targets,
        };
        if !await_exec {
            return Ok(running);
        }
        match wait_for_exec(&mut running) {
            Ok(pid) => {
                running.handle.main_pid = pid;
                Ok(running)
            }
            Err(why) => {
                let tail = fs::read_to_string(&log_path).unwrap_or_default();
                cleanup(running, Duration::ZERO);
                Err(RuntimeError::StartFailed {
                    name: spec.name.clone(),
                    why: why.to_string(),
                    log: log_path,
                    tail,
                })
            }
        }
    }
}

impl Drop for SimRuntime {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::shim::sh_quote;

    #[test]
    fn container_ids_are_64_hex() {
        let a = random_container_id();
        assert_eq!(a.len(), 64);
        assert!(a
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(a, random_container_id());
    }

    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(sh_quote("a'b c"), "'a'\\''b c'");
    }

    #[test]
    fn parent_of_self_is_our_parent() {
        assert_eq!(
            parent_of(std::process::id() as i32),
            Some(nix::unistd::getppid().as_raw())
        );
        assert_eq!(parent_of(-1), None);
    }

    /// `SigIgn` and `SigBlk` of a process started with `cmd`'s settings, as
    /// `(ignored, blocked)` bit masks.
    fn dispositions(mut cmd: Command) -> (u64, u64) {
        let out = cmd.output().expect("run grep");
        let text = String::from_utf8_lossy(&out.stdout);
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                .unwrap_or_else(|| panic!("no {name} in {text}"))
        };
        (field("SigIgn:"), field("SigBlk:"))
    }

    /// A process started as a test started under `nohup` from a shell that blocks SIGUSR1:
    /// SIGHUP ignored and SIGUSR1 blocked when it execs (set after the fork, as inherited).
    fn as_if_inherited() -> Command {
        use nix::sys::signal::{signal, sigprocmask, SigHandler, SigSet, SigmaskHow, Signal};
        let mut cmd = Command::new("grep");
        cmd.args(["-E", "^Sig(Ign|Blk):", "/proc/self/status"]);
        // SAFETY: signal(2) and sigprocmask(2) are async-signal-safe; nothing is allocated.
        unsafe {
            cmd.pre_exec(|| {
                signal(Signal::SIGHUP, SigHandler::SigIgn).map_err(io::Error::from)?;
                let mut usr1 = SigSet::empty();
                usr1.add(Signal::SIGUSR1);
                sigprocmask(SigmaskHow::SIG_BLOCK, Some(&usr1), None).map_err(io::Error::from)
            });
        }
        cmd
    }

    #[test]
    fn default_signals_undoes_what_nohup_and_a_blocking_shell_hand_down() {
        const HUP: u64 = 1 << (nix::sys::signal::Signal::SIGHUP as u64 - 1);
        const USR1: u64 = 1 << (nix::sys::signal::Signal::SIGUSR1 as u64 - 1);
        // The positive control: without the reset the child does inherit both.
        let (ignored, blocked) = dispositions(as_if_inherited());
        assert!(
            ignored & HUP != 0 && blocked & USR1 != 0,
            "{ignored:x} {blocked:x}"
        );
        let mut cmd = as_if_inherited();
        default_signals(&mut cmd);
        assert_eq!(dispositions(cmd), (0, 0));
    }
}
