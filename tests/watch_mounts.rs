//! Secret and projected volumes get a tmpfs mounted on their directory after it exists
//! (node-facts §1). Needs root (mount); skipped otherwise.

#[path = "support/watch.rs"]
mod watch_support;

use std::fs;
use std::time::Duration;

use inotify::{EventMask, Inotify, WatchMask};
use reloadlet::core::model::VolumePlugin::{Projected, Secret};
use reloadlet::host::inotify::{LookCause, VolumeWatcher, WatchEvent, WatcherOptions};
use watch_support::*;

#[test]
fn a_watch_on_the_covered_dir_alone_misses_writes_into_the_tmpfs() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("vol");
    fs::create_dir(&vol).unwrap();
    let mut inotify = Inotify::init().unwrap();
    let vol_wd = inotify
        .watches()
        .add(&vol, WatchMask::MOVED_TO | WatchMask::CREATE)
        .unwrap();
    let parent_wd = inotify
        .watches()
        .add(dir.path(), WatchMask::CREATE)
        .unwrap();
    let _mount = TmpfsMount::mount(&vol);

    atomic_write(&vol, &[("password", "s3cret")]);
    assert!(
        vol.join("..data/password").exists(),
        "the write landed in the tmpfs"
    );
    // Sentinel in the parent: inotify queues events in order, so everything the volume
    // watch would report is read before it.
    fs::write(dir.path().join("sentinel"), "").unwrap();

    let mut buffer = [0u8; 4096];
    let mut from_vol = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    'read: loop {
        assert!(
            std::time::Instant::now() < deadline,
            "sentinel never arrived"
        );
        let events = match inotify.read_events(&mut buffer) {
            Ok(events) => events,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(e) => panic!("read: {e}"),
        };
        for event in events {
            if event.wd == vol_wd {
                from_vol.push(format!("{:?} {:?}", event.mask, event.name));
            }
            if event.wd == parent_wd && event.name.is_some_and(|n| n == "sentinel") {
                break 'read;
            }
        }
    }
    assert!(
        from_vol.is_empty(),
        "the covered dir's watch saw {from_vol:?}"
    );
}

#[tokio::test]
async fn a_tmpfs_mounted_after_start_is_followed_and_its_writes_seen() {
    if !root_or_skip() {
        return;
    }
    let k = Kubelet::new();
    let s = key("tmpfs-1", Secret, "creds");
    let dir = k.mkdir_volume(&s);
    let mut w = VolumeWatcher::new(k.root(), WatcherOptions::default()).unwrap();
    collect_through(&mut w, &look(&s, LookCause::Discovered)).await;
    let baseline = w.stats().watches;

    let mut mount = TmpfsMount::mount(&dir);
    let events = collect_through(&mut w, &look(&s, LookCause::Remounted)).await;
    assert_eq!(events, vec![look(&s, LookCause::Remounted)]);
    assert_eq!(
        w.stats().watches,
        baseline,
        "the covered dir's watch was released"
    );

    atomic_write(&dir, &[("password", "v1")]);
    collect_through(&mut w, &look(&s, LookCause::Swap)).await;
    atomic_write(&dir, &[("password", "v2")]);
    let events = collect_through(&mut w, &look(&s, LookCause::Swap)).await;
    assert_eq!(events, vec![look(&s, LookCause::Swap)]);

    // Unmounted: the watch goes back to the (covered) directory.
    mount.unmount();
    collect_through(&mut w, &look(&s, LookCause::Remounted)).await;
    atomic_write(&dir, &[("password", "v3")]);
    let events = collect_through(&mut w, &look(&s, LookCause::Swap)).await;
    assert!(
        events
            .iter()
            .all(|e| matches!(e, WatchEvent::Look { key, .. } if *key == s)),
        "{events:?}"
    );
    assert_eq!(w.stats().watches, baseline);
}

#[tokio::test]
async fn a_write_right_after_the_mount_is_not_lost() {
    if !root_or_skip() {
        return;
    }
    let k = Kubelet::new();
    let p = key("tmpfs-2", Projected, "kube-api-access-q");
    let dir = k.mkdir_volume(&p);
    let mut w = VolumeWatcher::new(k.root(), WatcherOptions::default()).unwrap();
    collect_through(&mut w, &look(&p, LookCause::Discovered)).await;
    // The kubelet mounts and writes at once, before the watcher runs again: the write
    // happens while only the covered dir is watched; the re-arm must still make the agent
    // look.
    let _mount = TmpfsMount::mount(&dir);
    atomic_write(&dir, &[("token", "t1")]);
    collect_through(&mut w, &look(&p, LookCause::Remounted)).await;
    atomic_write(&dir, &[("token", "t2")]);
    collect_through(&mut w, &look(&p, LookCause::Swap)).await;
}

#[tokio::test]
async fn kubelet_teardown_of_a_mounted_volume_releases_every_watch() {
    if !root_or_skip() {
        return;
    }
    let k = Kubelet::new();
    let keep = key("tmpfs-keep", Secret, "k");
    k.add_volume(&keep, &[("f", "1")]);
    let mut w = VolumeWatcher::new(k.root(), WatcherOptions::default()).unwrap();
    collect_through(&mut w, &look(&keep, LookCause::Discovered)).await;
    let baseline = w.stats();

    let s = key("tmpfs-3", Secret, "creds");
    let dir = k.mkdir_volume(&s);
    let mut mount = TmpfsMount::mount(&dir);
    atomic_write(&dir, &[("password", "v1")]);
    collect_through(&mut w, &look(&s, LookCause::Discovered)).await;
    // The watch is on the tmpfs: a swap inside it is reported.
    atomic_write(&dir, &[("password", "v2")]);
    collect_through(&mut w, &look(&s, LookCause::Swap)).await;

    // Teardown as the kubelet does it: unmount, then remove the pod directory.
    mount.unmount();
    fs::remove_dir_all(k.pod_dir("tmpfs-3")).unwrap();
    collect_through(
        &mut w,
        &WatchEvent::PodGone {
            pod_uid: "tmpfs-3".into(),
        },
    )
    .await;
    assert_eq!(w.stats(), baseline);
}

#[test]
fn inotify_reports_unmount_on_the_tmpfs_root() {
    if !root_or_skip() {
        return;
    }
    // The watcher relies on IN_UNMOUNT (besides the mount table) to notice unmounts.
    let dir = tempfile::tempdir().unwrap();
    let mut mount = TmpfsMount::mount(dir.path());
    let mut inotify = Inotify::init().unwrap();
    let wd = inotify
        .watches()
        .add(dir.path(), WatchMask::MOVED_TO)
        .unwrap();
    mount.unmount();
    let mut buffer = [0u8; 1024];
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        assert!(std::time::Instant::now() < deadline, "no IN_UNMOUNT");
        match inotify.read_events(&mut buffer) {
            Ok(events) => {
                if events
                    .into_iter()
                    .any(|e| e.wd == wd && e.mask.contains(EventMask::UNMOUNT))
                {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => panic!("read: {e}"),
        }
    }
}
