//! How a simulated container is started and stopped: the shim's argv (`unshare` or
//! `nsenter`), the init script that joins the container cgroup and bind-mounts the volumes,
//! waiting for the exec, and the cleanup of process group, cgroups and mount targets.

use crate::runtime::cgroups::Cgroup;
use crate::runtime::container::{ContainerSpec, Running, UserNamespace};
use crate::runtime::mount_targets;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long a container may take to reach its command.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a shim may take to exit once its container is gone.
const SHIM_EXIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Which PID namespace a container's processes live in.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PidNs {
    /// A new one, the container init is PID 1.
    Own,
    /// The PID namespace of this (pause) process.
    Join(i32),
    /// The host's.
    Host,
}

/// The shim's command line.
pub(crate) fn shim_argv(
    ns: PidNs,
    script: &str,
    command: &[String],
    conmon: Option<&Cgroup>,
) -> Vec<String> {
    let mut argv: Vec<String> = Vec::new();
    if let Some(conmon) = conmon {
        let moves: Vec<String> = conmon
            .procs_files()
            .iter()
            .map(|f| format!("echo 0 > {}", sh_quote(&f.to_string_lossy())))
            .collect();
        argv.extend([
            "/bin/sh".into(),
            "-c".into(),
            format!("set -e; {}; exec \"$@\"", moves.join("; ")),
            "conmon".into(),
        ]);
    }
    let unshare_mount = ["unshare", "--mount", "--propagation", "private"].map(String::from);
    match ns {
        PidNs::Own => argv.extend(
            [
                "unshare",
                "--fork",
                "--kill-child",
                "--pid",
                "--mount-proc",
                "--propagation",
                "private",
            ]
            .map(String::from),
        ),
        PidNs::Host => argv.extend(
            [
                "unshare",
                "--fork",
                "--kill-child",
                "--mount",
                "--propagation",
                "private",
            ]
            .map(String::from),
        ),
        PidNs::Join(pid) => {
            argv.extend([
                "nsenter".into(),
                "--target".into(),
                pid.to_string(),
                "--pid".into(),
                "--".into(),
            ]);
            argv.extend(unshare_mount);
        }
    }
    argv.extend([
        "--".into(),
        "/bin/sh".into(),
        "-c".into(),
        script.to_owned(),
        "sh".into(),
    ]);
    argv.extend(command.iter().cloned());
    argv
}

/// What the container init runs before exec: bind mounts, join the cgroup, chdir.
pub(crate) fn init_script(spec: &ContainerSpec, procs_files: &[PathBuf]) -> String {
    let mut lines = vec!["set -e".to_owned()];
    for m in &spec.mounts {
        let (src, dst) = (
            sh_quote(&m.source.to_string_lossy()),
            sh_quote(&m.target.to_string_lossy()),
        );
        lines.push(format!("mount --bind {src} {dst}"));
        if m.read_only {
            lines.push(format!("mount -o remount,bind,ro {dst}"));
        }
    }
    for f in procs_files {
        lines.push(format!("echo 0 > {}", sh_quote(&f.to_string_lossy())));
    }
    if let Some(dir) = &spec.working_dir {
        lines.push(format!("cd {}", sh_quote(&dir.to_string_lossy())));
    }
    // Into the user namespace last, as host root: the bind mounts and the cgroup move
    // above need the host's credentials. A new namespace starts without a mapping; the
    // command waits until the runtime writes it from outside ([`write_id_maps`]).
    match spec.user_namespace {
        None => lines.push("exec \"$@\"".into()),
        // The pause process is no PID of this namespace: its user namespace comes in as fd 9
        // ([`join_user_ns_argv`]), closed again before the command.
        Some(UserNamespace::Join(_)) => lines.push(
            "exec nsenter --user=/proc/self/fd/9 -- /bin/sh -c 'exec 9<&-; exec \"$@\"' sh \"$@\""
                .into(),
        ),
        Some(UserNamespace::New { .. }) => lines.push(
            "exec unshare --user -- /bin/sh -c \
             'until read -r m < /proc/self/uid_map && [ -n \"$m\" ]; do sleep 0.005; done; \
             exec \"$@\"' sh \"$@\""
                .into(),
        ),
    }
    lines.join("\n")
}

/// The shim's command line for a container joining the pause process `pid`'s user
/// namespace: the shim opens it as fd 9 while `/proc/<pid>` is still its to see, then runs
/// `argv`.
pub(crate) fn join_user_ns_argv(pid: i32, argv: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = vec![
        "/bin/sh".into(),
        "-c".into(),
        format!("exec 9< /proc/{pid}/ns/user && exec \"$@\""),
        "userns".into(),
    ];
    out.extend(argv);
    out
}

/// What runc's parent process does for a child that unshared its user namespace (runc
/// `libcontainer/nsenter/nsexec.c`: the child sends `SYNC_USERMAP_PLS`, the parent writes
/// `/proc/<pid>/{uid,gid}_map` in `update_uidmap`/`update_gidmap`, then acks): only a
/// process privileged in the parent namespace may map a range. Written once, GIDs first,
/// so the child's wait for `uid_map` sees both. True once `pid` is in a mapped namespace of
/// its own; false while it has not unshared yet.
fn write_id_maps(pid: i32, host_id: u32, length: u32) -> bool {
    // Both links read, and different: a link that cannot be read (the process exiting, or in
    // the middle of an `execve`) says nothing, and must not pass for a namespace of its own
    // (the host's `uid_map` is never empty, so it would pass for mapped too).
    let own_ns = match (
        fs::read_link(format!("/proc/{pid}/ns/user")),
        fs::read_link("/proc/self/ns/user"),
    ) {
        (Ok(theirs), Ok(ours)) => theirs != ours,
        _ => false,
    };
    if !own_ns {
        return false;
    }
    let uid_map = format!("/proc/{pid}/uid_map");
    if fs::read_to_string(&uid_map).is_ok_and(|m| !m.trim().is_empty()) {
        return true;
    }
    let line = format!("0 {host_id} {length}\n");
    match fs::write(format!("/proc/{pid}/gid_map"), &line).and_then(|()| fs::write(&uid_map, &line))
    {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(pid, error = %e, "writing the user namespace's ID maps failed");
            false
        }
    }
}

/// Single-quotes `s` for `/bin/sh`.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// 64 random hex chars.
pub fn random_container_id() -> String {
    (0..4)
        .map(|_| format!("{:016x}", rand::random::<u64>()))
        .collect()
}

/// Why a container's process never ran its command.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotStarted {
    #[error("exited at start ({0})")]
    Exited(std::process::ExitStatus),
    #[error("not running its command after {0:?}")]
    NoExec(std::time::Duration),
}

/// Waits until the shim's child has joined the container cgroup and exec'd the command;
/// returns its host PID. Exec'd means: its command line is the command's, or its executable
/// is the command's — a program may rewrite its command line at once (nginx's master sets
/// its title, `ngx_setproctitle`, before this poll may see the exec), while the shell that
/// runs the init script is still `/bin/sh`. Either way its command line must not be empty:
/// `execve(2)` switches `/proc/<pid>/exe` to the new file before it lays out the arguments,
/// and until then the kernel reads the command line as empty (`fs/proc/base.c`,
/// `get_mm_cmdline`: "Check if process spawned far enough to have cmdline", `mm->env_end`
/// still 0; it is set with the arguments in `fs/binfmt_elf.c`, `create_elf_tables`).
pub(crate) fn wait_for_exec(running: &mut Running) -> Result<i32, NotStarted> {
    let deadline = Instant::now() + START_TIMEOUT;
    let want: Vec<u8> = running
        .spec
        .argv
        .iter()
        .flat_map(|a| a.bytes().chain([0]))
        .collect();
    let want_exe = running.spec.argv.first().and_then(|a| executable(a));
    loop {
        if let Ok(Some(status)) = running.shim.try_wait() {
            return Err(NotStarted::Exited(status));
        }
        let in_cgroup = running.cgroup.pids();
        for pid in in_cgroup {
            if parent_of(pid) != Some(running.handle.shim_pid) {
                continue;
            }
            // Not started before its user namespace is mapped (a `/bin/sh` command would
            // pass for exec'd while still the init script).
            if let Some(UserNamespace::New { host_id, length }) = running.spec.user_namespace {
                if !write_id_maps(pid, host_id, length) {
                    continue;
                }
            }
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let exec_d = cmdline == want
                || !cmdline.is_empty()
                    && want_exe.is_some()
                    && fs::read_link(format!("/proc/{pid}/exe")).ok() == want_exe;
            if exec_d {
                return Ok(pid);
            }
        }
        if Instant::now() > deadline {
            return Err(NotStarted::NoExec(START_TIMEOUT));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The file `command` runs (a path, or a name looked up in `PATH`), symlinks resolved as
/// `/proc/<pid>/exe` shows them.
fn executable(command: &str) -> Option<PathBuf> {
    if command.contains('/') {
        return fs::canonicalize(command).ok();
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(command))
        .find(|p| p.is_file())
        .and_then(|p| fs::canonicalize(p).ok())
}

/// The parent PID from `/proc/<pid>/stat`.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    crate::proc_stat::fields_after_comm(&stat)?
        .nth(1)?
        .parse()
        .ok()
}

/// Releases the mount targets a container held, newest first.
pub(crate) fn release_targets(targets: &[PathBuf]) {
    for target in targets.iter().rev() {
        mount_targets::release(target);
    }
}

/// Stops a container: SIGTERM, up to `grace`, then SIGKILL to everything in its cgroup;
/// reaps the shim, removes cgroups and created mount targets. Errors are logged.
pub(crate) fn cleanup(mut running: Running, grace: Duration) {
    let main = running.handle.main_pid;
    if main > 0 && !grace.is_zero() {
        let _ = kill(Pid::from_raw(main), Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while !running.cgroup.pids().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    if let Err(e) = running.cgroup.kill_all() {
        tracing::warn!(container = %running.handle.name, error = %e, "kill failed");
    }
    let deadline = Instant::now() + SHIM_EXIT_TIMEOUT;
    loop {
        match running.shim.try_wait() {
            Ok(Some(_)) | Err(_) => break,
            Ok(None) if Instant::now() > deadline => {
                let _ = running.shim.kill();
                let _ = running.shim.wait();
                break;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    let Running {
        cgroup,
        conmon_cgroup,
        targets,
        handle,
        ..
    } = running;
    for cg in std::iter::once(cgroup).chain(conmon_cgroup) {
        if let Err(e) = cg.remove() {
            tracing::warn!(container = %handle.name, error = %e, "cgroup removal failed");
        }
    }
    release_targets(&targets);
}

/// The pause process, and the stand-in for a container without a command (image
/// entrypoints do not exist here). Like the real pause it exits on SIGTERM/SIGINT; unlike
/// it, it logs every other signal it receives (`received SIGHUP` in its log), so a test can
/// prove nobody signalled it — as PID 1 of its namespace a plain `sleep` would silently
/// ignore them.
pub fn stand_in_argv() -> Vec<String> {
    let script = "trap 'exit 0' TERM INT; \
        for s in HUP QUIT USR1 USR2 WINCH ALRM; do trap \"echo received SIG$s\" $s; done; \
        while :; do sleep 3600 & wait $!; done";
    vec!["/bin/sh".into(), "-c".into(), script.into()]
}

/// In the forked child before exec: every catchable signal, the real-time ones included, back
/// to `SIG_DFL`, an empty mask. Through `rt_sigaction(2)` itself: glibc's `sigaction` refuses
/// the two real-time signals it keeps for itself (32 and 33), which a parent may still have
/// left ignored.
pub(crate) fn reset_signals() -> std::io::Result<()> {
    use nix::libc;
    use nix::sys::signal::{SigSet, SigmaskHow};
    // The kernel's `struct sigaction` all zero: handler SIG_DFL, no flags, no restorer, an
    // empty mask, whatever the architecture's field order.
    let default = [0u64; 4];
    for signo in 1..=64 {
        if signo == libc::SIGKILL || signo == libc::SIGSTOP {
            continue;
        }
        // SAFETY: `default` is readable for the size of the kernel's sigaction; no old action
        // is asked for; the sigset size is the kernel's (8 bytes).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signo,
                default.as_ptr(),
                std::ptr::null_mut::<u64>(),
                8usize,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
        .map_err(std::io::Error::from)
}
