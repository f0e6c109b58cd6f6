//! A signal must land where something handles it: reloadlet reads the main process's
//! `SigCgt`/`SigBlk`/`SigIgn`/`NSpid`/`comm` before signalling (issue: "a signal nobody
//! handles"). Real processes on the simulated node: a plain `sleep` as PID 1, a process that
//! ignores the signal, a `sleep` that is not PID 1 (shared PID namespace: it would die),
//! processes that handle it every way, and real signal-forwarding inits.

mod common;

use common::fixtures::{configmap, pod, recorder_container, sandboxed};
use common::*;
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const NS: &str = "shop";
const WAIT: Duration = Duration::from_secs(15);

/// A container running `argv`, mounting volume `conf` (under the test's directory `base`).
fn plain(base: &Path, name: &str, argv: &[&str]) -> serde_json::Value {
    json!({"name": name, "image": "debian", "command": argv,
           "volumeMounts": [{"name": "conf", "mountPath": sandboxed(base, &format!("/{name}"))}]})
}

/// A container running `init` (with `init_args`) in front of a `sigrecorder` writing to `out`.
fn behind_init(name: &str, out: &Path, init: &[&str]) -> serde_json::Value {
    let mut c = recorder_container(name, out, &[("conf", "/c")], false);
    let recorder: Vec<serde_json::Value> = c["command"].as_array().unwrap().clone();
    let mut argv: Vec<serde_json::Value> = init.iter().map(|a| json!(a)).collect();
    argv.extend(recorder);
    c["command"] = json!(argv);
    c
}

fn has_init(name: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

async fn wait_ready(files: &[&Path]) {
    eventually("recorders ready", WAIT, || {
        files.iter().all(|f| recorder_ready(f)).then_some(())
    })
    .await;
}

fn explain(node: &Node, name: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_reloadlet"))
        .args(["explain", "--pod", &format!("{NS}/{name}")])
        .env("KUBECONFIG", node.agent_kubeconfig())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_that_does_not_handle_the_signal_is_warned_about_and_never_killed() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "1")]));
    let ignores = node.path("ignores.sig");
    let base = ignores.parent().unwrap().to_path_buf();
    node.api.create_pod(
        pod(NS, "sleep-pid1")
            .signal()
            .configmap_volume("conf", "c")
            .container(plain(&base, "app", &["sleep", "3600"]))
            .build(),
    );
    node.api.create_pod(
        pod(NS, "ignores")
            .signal()
            .configmap_volume("conf", "c")
            .recorder_mode("app", &ignores, &[("conf", "/c")], "ignore")
            .build(),
    );
    node.api.create_pod(
        pod(NS, "shared")
            .signal()
            .share_process_namespace()
            .configmap_volume("conf", "c")
            .container(plain(&base, "app", &["sleep", "3600"]))
            .build(),
    );
    let sleep1 = node.wait_running(NS, "sleep-pid1").await;
    let ign = node.wait_running(NS, "ignores").await;
    let shared = node.wait_running(NS, "shared").await;
    wait_ready(&[&ignores]).await;
    // conf + kube-api-access in each pod
    node.wait_tracked(6).await;
    let pid = |h: &nodesim::kubelet::PodHandles| h.container("app").unwrap().main_pid;
    let (sleep1_pid, ign_pid, shared_pid) = (pid(&sleep1), pid(&ign), pid(&shared));

    // explain says it ahead of time.
    let text = explain(&node, "sleep-pid1");
    assert!(text.contains(&format!("main pid {sleep1_pid}\n      on a change: SIGHUP sent, Warning SignalNotHandled: pid 1 (sleep) has no handler for SIGHUP: the kernel drops it unless the process waits for it")), "{text}");
    let text = explain(&node, "ignores");
    assert!(
        text.contains("SIGHUP NOT sent, Warning SignalNotHandled: pid 1 (sigrecorder)")
            && text.contains("ignores SIGHUP: the kernel would drop it"),
        "{text}"
    );
    let text = explain(&node, "shared");
    assert!(text.contains(&format!("SIGHUP NOT sent, Warning SignalNotHandled: process sleep (pid {shared_pid}) has no handler for SIGHUP and is not PID 1 of its PID namespace: SIGHUP would terminate the process")), "{text}");

    node.api.apply_configmap(configmap(NS, "c", &[("k", "2")]));

    let ev = node.wait_event(NS, "sleep-pid1", "SignalNotHandled").await;
    assert_eq!(ev.type_, "Warning");
    assert_eq!(
        ev.note,
        format!("sent SIGHUP to container app, but pid 1 (sleep) has no handler for SIGHUP: the kernel drops it unless the process waits for it (host pid {sleep1_pid}): configmap c changed")
    );
    let ev = node.wait_event(NS, "ignores", "SignalNotHandled").await;
    assert_eq!(ev.type_, "Warning");
    assert_eq!(
        ev.note,
        format!("did not send SIGHUP to container app: pid 1 (sigrecorder) (host pid {ign_pid}) ignores SIGHUP: the kernel would drop it: configmap c changed")
    );
    let ev = node.wait_event(NS, "shared", "SignalNotHandled").await;
    assert_eq!(ev.type_, "Warning");
    assert_eq!(
        ev.note,
        format!("did not send SIGHUP to container app: process sleep (pid {shared_pid}) has no handler for SIGHUP and is not PID 1 of its PID namespace: SIGHUP would terminate the process: configmap c changed")
    );
    never(
        "a process that does not handle SIGHUP died",
        AGENT_QUIET,
        || !alive(sleep1_pid) || !alive(ign_pid) || !alive(shared_pid),
    )
    .await;
    for name in ["sleep-pid1", "ignores", "shared"] {
        assert!(
            node.events(NS, name, "Signaled").is_empty(),
            "{name}: a Signaled event for a signal nobody handles"
        );
    }
    assert_eq!(
        node.metric("reloadlet_actions_total{action=\"signal\",outcome=\"signal_not_handled\"}"),
        1.0
    );
    assert_eq!(
        node.metric("reloadlet_actions_total{action=\"signal\",outcome=\"signal_withheld\"}"),
        2.0
    );
    assert_eq!(
        node.metric("reloadlet_actions_total{action=\"signal\",outcome=\"signaled\"}"),
        0.0
    );
    let log = node.agent_log();
    assert!(
        log.contains("outcome=\"signal_withheld\"") || log.contains("outcome=signal_withheld"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_that_handles_the_signal_gets_it_whichever_way_it_takes_it() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "1")]));
    let out = |m: &str| node.path(&format!("{m}.sig"));
    let (handler, signalfd, sigwait, shared_off, shared_on) = (
        out("handler"),
        out("signalfd"),
        out("sigwait"),
        out("shared-off"),
        out("shared-on"),
    );
    for (name, file, mode) in [
        ("handler", &handler, "handler"),
        ("signalfd", &signalfd, "signalfd"),
        ("sigwait", &sigwait, "sigwait"),
    ] {
        node.api.create_pod(
            pod(NS, name)
                .signal()
                .configmap_volume("conf", "c")
                .recorder_mode("app", file, &[("conf", "/c")], mode)
                .build(),
        );
    }
    // Not PID 1, waiting in sigwait: /proc shows neither a handler nor a mask, so the check
    // withholds the signal (it cannot tell this from a process SIGHUP would kill) ...
    node.api.create_pod(
        pod(NS, "shared-on")
            .signal()
            .share_process_namespace()
            .configmap_volume("conf", "c")
            .recorder_mode("app", &shared_on, &[("conf", "/c")], "sigwait")
            .build(),
    );
    // ... unless the pod turns the check off.
    node.api.create_pod(
        pod(NS, "shared-off")
            .signal()
            .annotate("reloadlet.io/signal-check", "off")
            .share_process_namespace()
            .configmap_volume("conf", "c")
            .recorder_mode("app", &shared_off, &[("conf", "/c")], "sigwait")
            .build(),
    );
    for name in ["handler", "signalfd", "sigwait", "shared-on", "shared-off"] {
        node.wait_running(NS, name).await;
    }
    wait_ready(&[&handler, &signalfd, &sigwait, &shared_on, &shared_off]).await;
    node.wait_tracked(10).await;

    node.api.apply_configmap(configmap(NS, "c", &[("k", "2")]));

    for (name, file) in [
        ("handler", &handler),
        ("signalfd", &signalfd),
        ("sigwait", &sigwait),
        ("shared-off", &shared_off),
    ] {
        eventually(&format!("{name} got SIGHUP"), WAIT, || {
            (signals_in(file) == ["SIGHUP"]).then_some(())
        })
        .await;
    }
    for name in ["handler", "signalfd", "shared-off"] {
        let ev = node.wait_event(NS, name, "Signaled").await;
        assert_eq!(ev.type_, "Normal", "{name}");
    }
    // PID 1 in sigwait: sent; /proc cannot show the wait, so it is Signaled only when caught
    // between two waits, else a Warning that says the signal was sent.
    let ev = eventually("an event for sigwait", WAIT, || {
        node.events(NS, "sigwait", "Signaled")
            .into_iter()
            .chain(node.events(NS, "sigwait", "SignalNotHandled"))
            .next()
    })
    .await;
    assert!(
        ev.reason == "Signaled"
            || ev
                .note
                .starts_with("sent SIGHUP to container app, but pid 1 (sigrecorder)"),
        "{ev:?}"
    );
    let ev = node.wait_event(NS, "shared-on", "SignalNotHandled").await;
    assert!(ev.note.starts_with("did not send SIGHUP"), "{}", ev.note);
    never("shared-on got a signal", AGENT_QUIET, || {
        !signals_in(&shared_on).is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn signal_forwarding_inits_pass_the_signal_to_their_child() {
    let inits: Vec<(&str, Vec<&str>, bool)> = vec![
        ("tini", vec!["tini", "--"], false),
        ("tini-shared", vec!["tini", "--"], true),
        ("dumb-init", vec!["dumb-init"], false),
        ("catatonit", vec!["catatonit", "--"], false),
    ];
    let missing: Vec<&str> = ["tini", "dumb-init", "catatonit"]
        .into_iter()
        .filter(|i| !has_init(i))
        .collect();
    assert!(
        missing.is_empty(),
        "{missing:?} not installed: run hack/install-test-deps.sh"
    );
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&[]).await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "1")]));
    let mut files = Vec::new();
    for (name, init, shared) in &inits {
        let file = node.path(&format!("{name}.sig"));
        let mut p = pod(NS, name)
            .signal()
            .configmap_volume("conf", "c")
            .container(behind_init("app", &file, init));
        if *shared {
            p = p.share_process_namespace();
        }
        node.api.create_pod(p.build());
        files.push(file);
    }
    for (name, _, _) in &inits {
        node.wait_running(NS, name).await;
    }
    let refs: Vec<&Path> = files.iter().map(|f| f.as_path()).collect();
    wait_ready(&refs).await;
    node.wait_tracked(2 * inits.len()).await;
    let text = explain(&node, "tini");
    assert!(text.contains("SIGHUP sent, Event Signaled"), "{text}");

    node.api.apply_configmap(configmap(NS, "c", &[("k", "2")]));

    for ((name, _, _), file) in inits.iter().zip(&files) {
        eventually(&format!("the child of {name} got SIGHUP"), WAIT, || {
            (signals_in(file) == ["SIGHUP"]).then_some(())
        })
        .await;
        let ev = node.wait_event(NS, name, "Signaled").await;
        assert_eq!(ev.type_, "Normal");
        assert!(
            node.events(NS, name, "SignalNotHandled").is_empty(),
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn dry_run_logs_what_the_check_would_decide_and_sends_nothing() {
    let mut node = Node::start(NodeOptions::default()).await;
    node.start_agent(&["--dry-run"]).await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "1")]));
    let base = node.path("x").parent().unwrap().to_path_buf();
    node.api.create_pod(
        pod(NS, "shared")
            .signal()
            .share_process_namespace()
            .configmap_volume("conf", "c")
            .container(plain(&base, "app", &["sleep", "3600"]))
            .build(),
    );
    let handles = node.wait_running(NS, "shared").await;
    let pid = handles.container("app").unwrap().main_pid;
    node.wait_tracked(2).await;
    node.api.apply_configmap(configmap(NS, "c", &[("k", "2")]));
    let line = eventually("the dry-run line", WAIT, || {
        node.agent_log()
            .lines()
            .find(|l| l.contains("dry-run: would NOT send signal"))
            .map(str::to_owned)
    })
    .await;
    assert!(
        line.contains(&format!(
            "process sleep (pid {pid}) has no handler for SIGHUP"
        )),
        "{line}"
    );
    assert!(alive(pid));
    assert!(node.all_events().is_empty(), "{:?}", node.all_events());
}
