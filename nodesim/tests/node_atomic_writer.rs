//! The AtomicWriter seen through a real inotify watch (mask: all events) on the volume dir:
//! the event sequences of node-facts.md §2.

use inotify::{EventMask, Inotify, WatchMask};
use nodesim::atomic_writer::{write, FileProjection, WriteOutcome};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Ev {
    mask: EventMask,
    name: String,
    cookie: u32,
}

/// Everything queued on the watch (the writer's syscalls are done when `write` returns).
fn drain(inotify: &mut Inotify) -> Vec<Ev> {
    let mut buf = [0u8; 65536];
    let mut out = Vec::new();
    loop {
        match inotify.read_events(&mut buf) {
            Ok(events) => {
                let before = out.len();
                out.extend(events.map(|e| {
                    Ev {
                        mask: e.mask,
                        name: e
                            .name
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                        cookie: e.cookie,
                    }
                }));
                if out.len() == before {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("inotify read: {e}"),
        }
    }
    out
}

/// Events that change something (the writer also reads the old dir: OPEN/ACCESS/CLOSE_NOWRITE).
fn changes(events: &[Ev]) -> Vec<(EventMask, String)> {
    let read_only = EventMask::OPEN | EventMask::ACCESS | EventMask::CLOSE_NOWRITE;
    events
        .iter()
        .filter(|e| !read_only.contains(e.mask - EventMask::ISDIR))
        .map(|e| (e.mask, e.name.clone()))
        .collect()
}

fn payload(entries: &[(&str, &str)]) -> BTreeMap<String, FileProjection> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), FileProjection::new(v.as_bytes())))
        .collect()
}

fn watch(dir: &Path) -> Inotify {
    let inotify = Inotify::init().unwrap();
    inotify.watches().add(dir, WatchMask::ALL_EVENTS).unwrap();
    inotify
}

fn swap_cookie_matches(events: &[Ev]) {
    let from = events
        .iter()
        .find(|e| e.mask.contains(EventMask::MOVED_FROM))
        .unwrap();
    let to = events
        .iter()
        .find(|e| e.mask.contains(EventMask::MOVED_TO))
        .unwrap();
    assert_eq!(
        from.cookie, to.cookie,
        "MOVED_FROM/MOVED_TO of one rename share a cookie"
    );
    assert_ne!(from.cookie, 0);
}

#[test]
fn first_write_then_update_then_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let v = tmp.path();
    let mut inotify = watch(v);
    use EventMask as M;

    // first write
    let first = payload(&[
        ("app.conf", "v1"),
        ("conf.d/default.conf", "d1"),
        ("removed.txt", "bye"),
    ]);
    let WriteOutcome::Written { data_dir: ts1, .. } = write(v, &first).unwrap() else {
        panic!("nothing written")
    };
    let events = drain(&mut inotify);
    assert_eq!(
        changes(&events),
        vec![
            (M::CREATE | M::ISDIR, ts1.clone()),
            (M::ATTRIB | M::ISDIR, ts1.clone()),
            (M::CREATE, "..data_tmp".into()),
            (M::MOVED_FROM, "..data_tmp".into()),
            (M::MOVED_TO, "..data".into()),
            (M::CREATE, "app.conf".into()),
            (M::CREATE, "conf.d".into()),
            (M::CREATE, "removed.txt".into()),
        ],
        "first write, all events: {events:#?}"
    );
    swap_cookie_matches(&events);

    // update: a changed key, a new key, a dropped key
    let second = payload(&[
        ("app.conf", "v2"),
        ("conf.d/default.conf", "d1"),
        ("new.txt", "hi"),
    ]);
    let WriteOutcome::Written {
        data_dir: ts2,
        previous,
    } = write(v, &second).unwrap()
    else {
        panic!("nothing written")
    };
    assert_eq!(previous.as_deref(), Some(ts1.as_str()));
    let events = drain(&mut inotify);
    assert_eq!(
        changes(&events),
        vec![
            (M::CREATE | M::ISDIR, ts2.clone()),
            (M::ATTRIB | M::ISDIR, ts2.clone()),
            (M::CREATE, "..data_tmp".into()),
            (M::MOVED_FROM, "..data_tmp".into()),
            (M::MOVED_TO, "..data".into()),
            (M::CREATE, "new.txt".into()),
            (M::DELETE, "removed.txt".into()),
            (M::DELETE | M::ISDIR, ts1.clone()),
        ],
        "update, all events: {events:#?}"
    );
    swap_cookie_matches(&events);
    assert!(
        !events
            .iter()
            .any(|e| e.mask.contains(M::DELETE) && e.name == "..data"),
        "the replaced ..data gets no DELETE"
    );
    assert_eq!(std::fs::read_to_string(v.join("app.conf")).unwrap(), "v2");

    // content-only change: the swap and the old dir's removal, no key symlink touched
    let third = payload(&[
        ("app.conf", "v3"),
        ("conf.d/default.conf", "d1"),
        ("new.txt", "hi"),
    ]);
    let WriteOutcome::Written { data_dir: ts3, .. } = write(v, &third).unwrap() else {
        panic!("nothing written")
    };
    let events = drain(&mut inotify);
    assert_eq!(
        changes(&events),
        vec![
            (M::CREATE | M::ISDIR, ts3.clone()),
            (M::ATTRIB | M::ISDIR, ts3.clone()),
            (M::CREATE, "..data_tmp".into()),
            (M::MOVED_FROM, "..data_tmp".into()),
            (M::MOVED_TO, "..data".into()),
            (M::DELETE | M::ISDIR, ts2.clone()),
        ],
        "content-only update: {events:#?}"
    );

    // unchanged: nothing is created, renamed, deleted or modified; the only events are
    // the reads of the current data dir (OPEN/ACCESS/CLOSE_NOWRITE on `..<ts>`), which a
    // watch asking only for the events it needs does not receive
    assert_eq!(write(v, &third).unwrap(), WriteOutcome::Unchanged);
    let events = drain(&mut inotify);
    assert_eq!(changes(&events), vec![], "unchanged: {events:#?}");
    let read_only = M::OPEN | M::ACCESS | M::CLOSE_NOWRITE | M::ISDIR;
    for e in &events {
        assert!(
            read_only.contains(e.mask) && e.name == ts3,
            "unexpected event on unchanged write: {e:?}"
        );
    }
}

#[test]
fn a_watch_with_a_narrow_mask_sees_nothing_on_unchanged_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let v = tmp.path();
    let p = payload(&[("k", "v")]);
    write(v, &p).unwrap();
    let mut inotify = Inotify::init().unwrap();
    let mask = WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MOVED_TO
        | WatchMask::MOVED_FROM
        | WatchMask::MODIFY
        | WatchMask::ATTRIB;
    inotify.watches().add(v, mask).unwrap();
    assert_eq!(write(v, &p).unwrap(), WriteOutcome::Unchanged);
    assert_eq!(drain(&mut inotify), vec![]);
    write(v, &payload(&[("k", "v2")])).unwrap();
    let events = drain(&mut inotify);
    assert!(
        events
            .iter()
            .any(|e| e.mask.contains(EventMask::MOVED_TO) && e.name == "..data"),
        "{events:?}"
    );
}
