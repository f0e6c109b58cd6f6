//! A node that refuses pidfds — a kernel before 5.3 (`ENOSYS`) or a container runtime whose
//! seccomp profile predates them (`EPERM`) — must still get its signals: reloadlet falls back
//! to `kill(2)` after the same start-time and cgroup re-check, and says so once in its log.
//!
//! The fault is real: the agent runs under a seccomp filter that makes `pidfd_open` and
//! `pidfd_send_signal` fail with the given errno, as such a profile does.

mod common;

use common::fixtures::{configmap, pod};
use common::*;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

const NS: &str = "shop";
const WAIT: Duration = Duration::from_secs(15);

/// Installs, in the calling process, a seccomp filter that fails `pidfd_open` and
/// `pidfd_send_signal` with `errno` and allows everything else.
fn refuse_pidfds(errno: u32) -> std::io::Result<()> {
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k: u32, jt: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf: 0,
        k,
    };
    let filter = [
        // seccomp_data.nr (offset 0)
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        jeq(libc::SYS_pidfd_open as u32, 2),
        jeq(libc::SYS_pidfd_send_signal as u32, 1),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | (errno & libc::SECCOMP_RET_DATA),
        ),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: plain prctl calls; `prog` points to `filter`, alive for the call (the kernel
    // copies it).
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const libc::sock_fprog,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

async fn signals_arrive_without_pidfds(errno: i32) {
    let mut node = Node::start(NodeOptions::default()).await;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_reloadlet"));
    // SAFETY: the closure only makes two prctl calls (async-signal-safe) before exec.
    unsafe {
        cmd.pre_exec(move || refuse_pidfds(errno as u32));
    }
    node.spawn_agent_with(cmd, &[]);
    node.wait_ready().await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "1")]));
    let out = node.path("app.sig");
    node.api.create_pod(
        pod(NS, "web")
            .signal()
            .configmap_volume("conf", "c")
            .recorder("app", &out, &[("conf", "/c")])
            .build(),
    );
    let handles = node.wait_running(NS, "web").await;
    eventually("recorder ready", WAIT, || {
        recorder_ready(&out).then_some(())
    })
    .await;
    node.wait_tracked(2).await;

    for (round, value) in ["2", "3"].into_iter().enumerate() {
        node.api
            .apply_configmap(configmap(NS, "c", &[("k", value)]));
        eventually(&format!("signal {}", round + 1), WAIT, || {
            (signals_in(&out).len() == round + 1).then_some(())
        })
        .await;
    }
    assert_eq!(signals_in(&out), ["SIGHUP", "SIGHUP"]);
    let ev = node.wait_event(NS, "web", "Signaled").await;
    let pid = handles.container("app").unwrap().main_pid;
    assert_eq!(
        ev.note,
        format!("sent SIGHUP to container app (pid {pid}): configmap c changed")
    );
    assert!(node.events(NS, "web", "SignalFailed").is_empty());
    let log = node.agent_log();
    assert_eq!(
        log.matches("pidfds are not available on this node").count(),
        1,
        "one warning, not one per signal:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_pidfd_syscalls_enosys_signals_fall_back_to_kill() {
    signals_arrive_without_pidfds(libc::ENOSYS).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_pidfds_refused_by_seccomp_eperm_signals_fall_back_to_kill() {
    signals_arrive_without_pidfds(libc::EPERM).await;
}
