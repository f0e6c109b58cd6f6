//! Kernel limits: queue overflow and the watch limit. These change inotify sysctls, so
//! they live in their own test binary and hold `SYSCTL_LOCK`. Need root; skipped otherwise.
//!
//! - `fs.inotify.max_queued_events` is global and read when an inotify instance is created:
//!   it is lowered only around `VolumeWatcher::new` and restored by a guard at once.
//! - The watch limit is checked at every `inotify_add_watch`, so lowering the global
//!   `fs.inotify.max_user_watches` would starve every other root process on the machine for
//!   the whole test. Instead the test re-runs itself in a fresh user namespace and lowers
//!   that namespace's own limit, `/proc/sys/user/max_inotify_watches`; the kernel answers
//!   `ENOSPC` exactly as for the global sysctl.

#[path = "support/watch.rs"]
mod watch_support;

use std::collections::BTreeSet;
use std::fs;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use reloadlet::core::model::VolumeKey;
use reloadlet::core::model::VolumePlugin::{ConfigMap, Secret};
use reloadlet::host::inotify::{LookCause, VolumeWatcher, WatchEvent, WatcherOptions};
use watch_support::*;

/// Serialises the tests of this binary that change global sysctls.
static SYSCTL_LOCK: Mutex<()> = Mutex::new(());

const SOON: Duration = Duration::from_secs(10);
const IN_USERNS: &str = "RELOADLET_WATCH_TEST_IN_USERNS";

#[tokio::test]
async fn an_overflow_rescans_the_whole_tree() {
    if !root_or_skip() {
        return;
    }
    let k = Kubelet::new();
    let keys: Vec<VolumeKey> = (0..4)
        .map(|i| key(&format!("ovf-{i}"), ConfigMap, "cfg"))
        .collect();
    for key in &keys {
        k.add_volume(key, &[("f", "0")]);
    }
    let mut w = {
        let _serial = SYSCTL_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let _small_queue = SysctlGuard::set("/proc/sys/fs/inotify/max_queued_events", "16");
        VolumeWatcher::new(k.root(), WatcherOptions::default()).unwrap()
    };
    collect_until(&mut w, SOON, |all| all.len() >= 4).await;

    // 40 swaps while the watcher is not reading overflow its 16-event queue; then a pod
    // appears and another disappears, both lost with the overflow.
    for round in 0..10 {
        for key in &keys {
            atomic_write(&k.volume_dir(key), &[("f", &round.to_string())]);
        }
    }
    let newcomer = key("ovf-new", Secret, "s");
    k.add_volume(&newcomer, &[("f", "1")]);
    fs::remove_dir_all(k.pod_dir("ovf-0")).unwrap();

    let events = collect_until(&mut w, SOON, |all| {
        all.contains(&WatchEvent::Overflow)
            && all.contains(&WatchEvent::PodGone {
                pod_uid: "ovf-0".into(),
            })
    })
    .await;
    let overflow_at = events
        .iter()
        .position(|e| *e == WatchEvent::Overflow)
        .unwrap();
    assert_eq!(count(&events, &WatchEvent::Overflow), 1, "{events:?}");
    let after = &events[overflow_at + 1..];
    let rescanned: BTreeSet<VolumeKey> = after
        .iter()
        .filter_map(|e| match e {
            WatchEvent::Look {
                key,
                cause: LookCause::Rescan,
            } => Some(key.clone()),
            _ => None,
        })
        .collect();
    let present: BTreeSet<VolumeKey> = keys[1..]
        .iter()
        .cloned()
        .chain([newcomer.clone()])
        .collect();
    assert_eq!(rescanned, present, "{events:?}");
    assert_eq!(
        after
            .iter()
            .filter(|e| matches!(e, WatchEvent::Look { .. }))
            .count(),
        present.len()
    );
    assert!(after.contains(&WatchEvent::VolumeGone(keys[0].clone())));
    let stats = w.stats();
    assert_eq!((stats.overflows, stats.volumes, stats.pods), (1, 4, 4));
    assert_eq!(
        stats.watches,
        1 + 4 * 4,
        "stale watches dropped, missing ones armed"
    );

    // The newcomer found by the rescan is really watched.
    atomic_write(&k.volume_dir(&newcomer), &[("f", "2")]);
    collect_through(&mut w, &look(&newcomer, LookCause::Swap)).await;
}

/// Re-runs one test of this binary inside a new user namespace (as its root) and checks
/// it really ran and passed there.
fn run_in_user_namespace(test: &str) {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("unshare")
        .args(["--user", "--map-root-user"])
        .arg(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(IN_USERNS, "1")
        .output()
        .expect("run unshare");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "in the user namespace:\n{stdout}\n{stderr}"
    );
}

#[test]
fn at_the_watch_limit_no_volume_goes_unlooked() {
    if std::env::var_os(IN_USERNS).is_none() {
        if !root_or_skip() {
            return;
        }
        run_in_user_namespace("at_the_watch_limit_no_volume_goes_unlooked");
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(watch_limit_scenario());
}

async fn watch_limit_scenario() {
    const LIMIT: &str = "/proc/sys/user/max_inotify_watches";
    let k = Kubelet::new();
    let keys: Vec<VolumeKey> = ["a", "b", "c", "d"]
        .iter()
        .map(|v| key("lim", ConfigMap, v))
        .collect();
    for key in &keys {
        k.add_volume(key, &[("f", "0")]);
    }
    // pods, pods/lim, volumes, kubernetes.io~configmap and two of the four volumes.
    fs::write(LIMIT, "6").unwrap();
    let opts = WatcherOptions {
        rescan_interval: Duration::from_millis(100),
        ..Default::default()
    };
    let mut w = VolumeWatcher::new(k.root(), opts).unwrap();
    let found = collect_until(&mut w, SOON, |all| all.len() >= 4).await;
    let discovered: BTreeSet<_> = found.into_iter().collect();
    assert_eq!(
        discovered,
        keys.iter()
            .map(|k| look(k, LookCause::Discovered))
            .collect(),
        "every volume is discovered"
    );
    let stats = w.stats();
    assert_eq!(
        (
            stats.watches,
            stats.unwatched_volumes,
            stats.watch_limit_errors
        ),
        (6, 2, 2)
    );
    let unwatched: Vec<VolumeKey> = keys.iter().filter(|k| !w.is_watched(k)).cloned().collect();
    assert_eq!(unwatched.len(), 2);

    // A pod created at the limit: nothing of it can be watched, yet it is found and looked at.
    let late = key("lim-late", Secret, "s");
    k.add_volume(&late, &[("f", "0")]);
    for key in &unwatched {
        atomic_write(&k.volume_dir(key), &[("f", "1")]);
    }
    // Periodic looks, at least twice each, for every unwatched volume; never a swap for them.
    let polled: Vec<VolumeKey> = unwatched.iter().cloned().chain([late.clone()]).collect();
    let events = collect_until(&mut w, SOON, |all| {
        polled
            .iter()
            .all(|key| count(all, &look(key, LookCause::Rescan)) >= 2)
    })
    .await;
    assert_eq!(
        count(&events, &look(&late, LookCause::Discovered)),
        1,
        "{events:?}"
    );
    for key in &keys {
        if !unwatched.contains(key) {
            assert_eq!(
                count(&events, &look(key, LookCause::Rescan)),
                0,
                "watched {key} is not polled"
            );
        }
    }
    assert!(
        !events.iter().any(|e| matches!(
            e,
            WatchEvent::Look {
                cause: LookCause::Swap,
                ..
            }
        )),
        "{events:?}"
    );
    assert!(w.stats().watch_limit_errors > 2, "retries count too");

    // Limit raised: the next retry arms them; swaps are then reported as such.
    fs::write(LIMIT, "1000").unwrap();
    let mut tries = 0;
    while w.stats().unwatched_volumes > 0 {
        tries += 1;
        assert!(
            tries < 100,
            "unwatched volumes never armed: {:?}",
            w.stats()
        );
        tokio::time::timeout(SOON, w.next_batch())
            .await
            .unwrap()
            .unwrap();
    }
    for key in polled {
        atomic_write(&k.volume_dir(&key), &[("f", "2")]);
        collect_through(&mut w, &look(&key, LookCause::Swap)).await;
    }
}
