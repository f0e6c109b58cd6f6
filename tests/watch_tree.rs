//! The volume watcher on a plain directory tree (no mounts, no sysctls).

#[path = "support/watch.rs"]
mod watch_support;

use std::collections::BTreeSet;
use std::fs;
use std::time::{Duration, Instant};

use reloadlet::core::model::VolumePlugin::{ConfigMap, Projected, Secret};
use reloadlet::host::inotify::{LookCause, VolumeWatcher, WatchError, WatchEvent, WatcherOptions};
use watch_support::*;

const SOON: Duration = Duration::from_secs(10);

fn watcher(k: &Kubelet) -> VolumeWatcher {
    VolumeWatcher::new(k.root(), WatcherOptions::default()).expect("watcher")
}

#[tokio::test]
async fn existing_volumes_are_discovered_at_start_and_other_plugins_ignored() {
    let k = Kubelet::new();
    let keys = [
        key("p1", ConfigMap, "cfg"),
        key("p1", Secret, "creds"),
        key("p2", Projected, "kube-api-access-x"),
    ];
    for key in &keys {
        k.add_volume(key, &[("a.conf", "1")]);
    }
    fs::create_dir_all(
        k.pod_dir("p1")
            .join("volumes/kubernetes.io~empty-dir/scratch"),
    )
    .unwrap();
    fs::create_dir_all(
        k.pod_dir("p2")
            .join("volumes/kubernetes.io~downward-api/info"),
    )
    .unwrap();
    fs::create_dir_all(k.pod_dir("p3").join("containers/app")).unwrap();

    let mut w = watcher(&k);
    let first = collect_until(&mut w, SOON, |all| all.len() >= 3).await;
    let got: BTreeSet<_> = first.iter().cloned().collect();
    let want: BTreeSet<_> = keys
        .iter()
        .map(|k| look(k, LookCause::Discovered))
        .collect();
    assert_eq!(got, want);
    assert_eq!(first.len(), 3, "one Discovered per volume: {first:?}");
    let mut sorted = keys.to_vec();
    sorted.sort();
    assert_eq!(w.volumes(), sorted);
    let stats = w.stats();
    assert_eq!(
        (stats.pods, stats.volumes, stats.unwatched_volumes),
        (3, 3, 0)
    );
    // pods + 3 pod dirs + 2 volumes dirs + 3 plugin dirs + 3 volume dirs.
    assert_eq!(stats.watches, 12);
    assert_eq!(w.volume_dir(&keys[0]), k.volume_dir(&keys[0]));
}

#[tokio::test]
async fn a_swap_yields_exactly_one_swap_look_for_that_volume() {
    let k = Kubelet::new();
    let a = key("swap-a", ConfigMap, "cfg");
    let b = key("swap-b", ConfigMap, "cfg");
    let dir_a = k.add_volume(&a, &[("app.conf", "v1"), ("conf.d/x.conf", "x")]);
    let dir_b = k.add_volume(&b, &[("app.conf", "v1")]);
    let mut w = watcher(&k);
    collect_until(&mut w, SOON, |all| all.len() >= 2).await;

    atomic_write(&dir_a, &[("app.conf", "v2"), ("conf.d/x.conf", "x")]);
    // Sentinel: b's swap is queued after every event of a's swap.
    atomic_write(&dir_b, &[("app.conf", "v2")]);
    let events = collect_through(&mut w, &look(&b, LookCause::Swap)).await;
    assert_eq!(count(&events, &look(&a, LookCause::Swap)), 1, "{events:?}");
    assert_eq!(events.len(), 2, "nothing but the two swaps: {events:?}");
}

#[tokio::test]
async fn the_first_write_into_an_empty_volume_is_a_swap() {
    let k = Kubelet::new();
    let a = key("first-write", Secret, "tls");
    let dir = k.mkdir_volume(&a);
    let mut w = watcher(&k);
    collect_through(&mut w, &look(&a, LookCause::Discovered)).await;
    atomic_write(&dir, &[("tls.crt", "c")]);
    let events = collect_through(&mut w, &look(&a, LookCause::Swap)).await;
    assert_eq!(events, vec![look(&a, LookCause::Swap)]);
}

#[tokio::test]
async fn pods_created_after_start_are_followed_without_races() {
    let k = Kubelet::new();
    let mut w = watcher(&k);
    let keys: Vec<_> = (0..60)
        .map(|i| {
            key(
                &format!("late-{i}"),
                [ConfigMap, Secret, Projected][i % 3],
                "vol",
            )
        })
        .collect();
    // mkdir -p and write at once while the watcher is processing: every interleaving of
    // mkdir, watch, write and scan must end with the volume seen and watched.
    let root = k.root().to_path_buf();
    let to_write = keys.clone();
    let writer = tokio::task::spawn_blocking(move || {
        for key in &to_write {
            let dir = root
                .join("pods")
                .join(&*key.pod_uid)
                .join("volumes")
                .join(key.plugin.dir_name())
                .join(&*key.volume);
            fs::create_dir_all(&dir).unwrap();
            atomic_write(&dir, &[("f", "1")]);
        }
    });
    let events = collect_until(&mut w, SOON, |all| {
        keys.iter()
            .all(|key| all.contains(&look(key, LookCause::Discovered)))
    })
    .await;
    writer.await.unwrap();
    // Flush the events of the first writes (they are queued before the sentinel's).
    let sentinel = key("late-sentinel", ConfigMap, "s");
    k.add_volume(&sentinel, &[("f", "1")]);
    let more = collect_through(&mut w, &look(&sentinel, LookCause::Discovered)).await;
    let events: Vec<_> = events.into_iter().chain(more).collect();
    for key in &keys {
        assert_eq!(
            count(&events, &look(key, LookCause::Discovered)),
            1,
            "{key}: {events:?}"
        );
    }
    assert_eq!(w.stats().volumes, 61);
    assert_eq!(w.stats().unwatched_volumes, 0);
    // Every one of them is really watched: a later swap is seen for each.
    for key in &keys {
        atomic_write(&k.volume_dir(key), &[("f", "2")]);
    }
    collect_until(&mut w, SOON, |all| {
        keys.iter()
            .all(|key| all.contains(&look(key, LookCause::Swap)))
    })
    .await;
}

#[tokio::test]
async fn a_volume_dir_made_in_steps_is_followed_at_every_level() {
    let k = Kubelet::new();
    let a = key("steps", Projected, "p");
    let mut w = watcher(&k);
    let pod = k.pod_dir("steps");
    fs::create_dir(&pod).unwrap();
    fs::create_dir(pod.join("volumes")).unwrap();
    fs::create_dir(pod.join("volumes/kubernetes.io~projected")).unwrap();
    fs::create_dir(k.volume_dir(&a)).unwrap();
    atomic_write(&k.volume_dir(&a), &[("token", "t")]);
    let events = collect_until(&mut w, SOON, |all| {
        all.contains(&look(&a, LookCause::Discovered))
    })
    .await;
    assert!(
        events
            .iter()
            .all(|e| matches!(e, WatchEvent::Look { key, .. } if *key == a)),
        "{events:?}"
    );
    atomic_write(&k.volume_dir(&a), &[("token", "t2")]);
    collect_through(&mut w, &look(&a, LookCause::Swap)).await;
}

#[tokio::test]
async fn removed_volumes_and_pods_are_reported_gone_once() {
    let k = Kubelet::new();
    let a = key("gone-1", ConfigMap, "a");
    let b = key("gone-1", Secret, "b");
    k.add_volume(&a, &[("f", "1")]);
    k.add_volume(&b, &[("f", "1")]);
    let mut w = watcher(&k);
    collect_until(&mut w, SOON, |all| all.len() >= 2).await;

    fs::remove_dir_all(k.volume_dir(&a)).unwrap();
    let events = collect_through(&mut w, &WatchEvent::VolumeGone(a.clone())).await;
    assert_eq!(events, vec![WatchEvent::VolumeGone(a.clone())]);

    fs::remove_dir_all(k.pod_dir("gone-1")).unwrap();
    let gone = WatchEvent::PodGone {
        pod_uid: "gone-1".into(),
    };
    let events = collect_through(&mut w, &gone).await;
    assert_eq!(events, vec![WatchEvent::VolumeGone(b.clone()), gone]);
    assert_eq!(w.stats().watches, 1, "only the pods dir is still watched");
    assert!(w.volumes().is_empty());
}

#[tokio::test]
async fn a_pod_dir_moved_away_is_gone_and_its_watches_released() {
    let k = Kubelet::new();
    let a = key("moved", ConfigMap, "a");
    k.add_volume(&a, &[("f", "1")]);
    let mut w = watcher(&k);
    collect_through(&mut w, &look(&a, LookCause::Discovered)).await;
    let elsewhere = k.root().join("moved-away");
    fs::rename(k.pod_dir("moved"), &elsewhere).unwrap();
    collect_through(
        &mut w,
        &WatchEvent::PodGone {
            pod_uid: "moved".into(),
        },
    )
    .await;
    assert_eq!(w.stats().watches, 1);
    // Writes in the moved tree are no longer reported.
    let moved_vol = elsewhere.join("volumes/kubernetes.io~configmap/a");
    atomic_write(&moved_vol, &[("f", "2")]);
    let b = key("sentinel", ConfigMap, "b");
    k.add_volume(&b, &[("f", "1")]);
    let events = collect_through(&mut w, &look(&b, LookCause::Discovered)).await;
    assert_eq!(events, vec![look(&b, LookCause::Discovered)]);
}

#[tokio::test]
async fn watch_count_returns_to_baseline_after_200_pods_come_and_go() {
    let k = Kubelet::new();
    let keep = key("keeper", ConfigMap, "cfg");
    k.add_volume(&keep, &[("f", "1")]);
    let mut w = watcher(&k);
    collect_through(&mut w, &look(&keep, LookCause::Discovered)).await;
    let baseline = w.stats();

    let uids: Vec<String> = (0..200).map(|i| format!("churn-{i:03}")).collect();
    for uid in &uids {
        k.add_volume(&key(uid, ConfigMap, "cfg"), &[("f", "1")]);
        k.add_volume(&key(uid, Projected, "kube-api-access-z"), &[("token", "t")]);
    }
    collect_until(&mut w, SOON, |all| all.len() >= 400).await;
    assert_eq!(w.stats().volumes, baseline.volumes + 400);
    for uid in &uids {
        fs::remove_dir_all(k.pod_dir(uid)).unwrap();
    }
    let events = collect_until(&mut w, SOON, |all| {
        uids.iter().all(|uid| {
            all.contains(&WatchEvent::PodGone {
                pod_uid: uid.as_str().into(),
            })
        })
    })
    .await;
    for uid in &uids {
        assert_eq!(
            count(
                &events,
                &WatchEvent::PodGone {
                    pod_uid: uid.as_str().into()
                }
            ),
            1
        );
    }
    assert_eq!(w.stats(), baseline);
    // The survivor is still watched.
    atomic_write(&k.volume_dir(&keep), &[("f", "2")]);
    collect_through(&mut w, &look(&keep, LookCause::Swap)).await;
}

#[tokio::test]
async fn next_batch_is_cancel_safe_in_select() {
    let k = Kubelet::new();
    let keys: Vec<_> = (0..20)
        .map(|i| key(&format!("cancel-{i}"), ConfigMap, "cfg"))
        .collect();
    for key in &keys {
        k.add_volume(key, &[("f", "1")]);
    }
    let mut w = watcher(&k);
    collect_until(&mut w, SOON, |all| all.len() >= 20).await;

    let writer_keys = keys.clone();
    let dirs: Vec<_> = keys.iter().map(|key| k.volume_dir(key)).collect();
    let writer = tokio::task::spawn_blocking(move || {
        for _round in 0..5 {
            for dir in &dirs {
                atomic_write(dir, &[("f", "x")]);
            }
        }
        writer_keys
    });
    let mut swaps = 0;
    let deadline = tokio::time::Instant::now() + SOON;
    while swaps < 100 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {swaps} of 100 swaps seen"
        );
        // A timer that often wins the race cancels next_batch mid-wait.
        tokio::select! {
            batch = w.next_batch() => {
                for e in batch.expect("batch") {
                    assert!(matches!(e, WatchEvent::Look { cause: LookCause::Swap, .. }), "{e:?}");
                    swaps += 1;
                }
            }
            _ = tokio::time::sleep(Duration::from_micros(200)) => {}
        }
    }
    writer.await.unwrap();
    assert_eq!(swaps, 100);
}

#[tokio::test]
async fn arming_1000_volumes_across_250_pods_is_fast() {
    let k = Kubelet::new();
    for p in 0..250 {
        let uid = format!("perf-{p:03}");
        for (plugin, name) in [
            (ConfigMap, "a"),
            (ConfigMap, "b"),
            (Secret, "c"),
            (Projected, "kube-api-access-d"),
        ] {
            k.add_volume(&key(&uid, plugin, name), &[("f", "1")]);
        }
    }
    let started = Instant::now();
    let mut w = watcher(&k);
    let took = started.elapsed();
    assert!(took < Duration::from_millis(200), "arming took {took:?}");
    let events = collect_until(&mut w, SOON, |all| all.len() >= 1000).await;
    assert_eq!(events.len(), 1000);
    assert_eq!(w.stats().volumes, 1000);
    // pods + 250 × (pod, volumes, 3 plugin dirs, 4 volumes)
    assert_eq!(w.stats().watches, 1 + 250 * 9);
    eprintln!("armed {} watches in {took:?}", w.stats().watches);
}

#[tokio::test]
async fn a_missing_or_unusable_pods_dir_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = VolumeWatcher::new(dir.path(), WatcherOptions::default()).unwrap_err();
    assert!(matches!(err, WatchError::PodsDir { .. }), "{err:?}");
    assert!(err.to_string().contains("pods"), "{err}");
    fs::write(dir.path().join("pods"), "not a dir").unwrap();
    let err = VolumeWatcher::new(dir.path(), WatcherOptions::default()).unwrap_err();
    assert!(matches!(err, WatchError::PodsDir { .. }), "{err:?}");
    let k = Kubelet::new();
    let err = VolumeWatcher::new(
        k.root(),
        WatcherOptions {
            rescan_interval: Duration::ZERO,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(err, WatchError::ZeroRescanInterval), "{err:?}");
}

#[test]
fn creating_a_watcher_outside_a_runtime_is_an_error_not_a_panic() {
    let k = Kubelet::new();
    let err = VolumeWatcher::new(k.root(), WatcherOptions::default()).unwrap_err();
    assert!(matches!(err, WatchError::NoRuntime), "{err:?}");
}
