//! Errors that cannot heal stop at startup with one line (exit 2), in the log format asked
//! for: a malformed --pod-selector, a byte size that is not a quantity, no inotify instance
//! left (`fs.inotify.max_user_instances`).

use test_support::wait;

use std::path::Path;
use std::process::{Command, Output};

const IN_USERNS: &str = "RELOADLET_STARTUP_TEST_IN_USERNS";

fn reloadlet(dir: &Path, args: &[&str]) -> Command {
    std::fs::create_dir_all(dir.join("kubelet/pods")).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_reloadlet"));
    cmd.args(["--node-name", "n1", "--kubelet-root"])
        .arg(dir.join("kubelet"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("RELOADLET_LOG_FORMAT")
        // No API server: a startup error must come before any API call.
        .env("KUBECONFIG", dir.join("no-kubeconfig"));
    cmd
}

/// Exit status 2 and exactly one line on stderr, returned.
fn one_line_exit_2(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    stderr.trim_end().to_string()
}

#[test]
fn a_malformed_pod_selector_stops_reloadlet_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = reloadlet(dir.path(), &["--pod-selector", "app in ("])
        .output()
        .unwrap();
    let line = one_line_exit_2(&out);
    assert!(
        line.contains("--pod-selector \"app in (\" is not a valid label selector")
            && line.contains("missing ')'"),
        "{line}"
    );
}

#[test]
fn with_json_logs_a_fatal_error_is_one_json_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = reloadlet(dir.path(), &["--pod-selector", "app in ("])
        .env("RELOADLET_LOG_FORMAT", "json")
        .output()
        .unwrap();
    let line = one_line_exit_2(&out);
    let v: serde_json::Value = serde_json::from_str(&line).expect(&line);
    assert_eq!(v["level"], "ERROR", "{line}");
    assert!(
        v["message"].as_str().unwrap().contains("--pod-selector"),
        "{line}"
    );
    // A value clap refuses, with the flag instead of the environment variable.
    let out = reloadlet(
        dir.path(),
        &["--log-format", "json", "--max-volume-bytes", "24mi"],
    )
    .output()
    .unwrap();
    let line = one_line_exit_2(&out);
    let v: serde_json::Value = serde_json::from_str(&line).expect(&line);
    let msg = v["message"].as_str().unwrap();
    assert!(msg.contains("did you mean Mi?"), "{line}");
}

#[test]
fn max_volume_bytes_takes_kubernetes_quantities() {
    let dir = tempfile::tempdir().unwrap();
    let out = reloadlet(dir.path(), &["--max-volume-bytes", "24mi"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unknown suffix \"mi\" (did you mean Mi?)"),
        "{stderr}"
    );
    // 64Mi is accepted: reloadlet gets past flag parsing to the missing kubeconfig.
    let out = reloadlet(dir.path(), &["--max-volume-bytes", "64Mi"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no Kubernetes configuration"), "{stderr}");
}

/// Without an inotify instance left, reloadlet exits at once naming the sysctl and the
/// command that raises it. Runs itself again in a fresh user namespace whose own instance
/// limit (`/proc/sys/user/max_inotify_instances`) is 0, so the machine's limit is untouched;
/// the kernel answers EMFILE exactly as for `fs.inotify.max_user_instances`.
#[test]
fn no_inotify_instance_left_exits_naming_the_sysctl() {
    if std::env::var_os(IN_USERNS).is_none() {
        if !wait::root_or_skip() {
            return;
        }
        let out = Command::new("unshare")
            .args(["--user", "--map-root-user"])
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "no_inotify_instance_left_exits_naming_the_sysctl",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(IN_USERNS, "1")
            .output()
            .expect("run unshare");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "in the user namespace:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    std::fs::write("/proc/sys/user/max_inotify_instances", "0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = reloadlet(dir.path(), &[]).output().unwrap();
    let line = one_line_exit_2(&out);
    assert!(
        line.contains("fs.inotify.max_user_instances")
            && line.contains("sysctl -w fs.inotify.max_user_instances="),
        "{line}"
    );
}
