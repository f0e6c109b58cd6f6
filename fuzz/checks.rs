//! Properties of the cgroup parsers, checked on arbitrary input. Shared by the
//! cargo-fuzz targets (nightly, libFuzzer) and `tests/fuzz_parsers.rs` (stable, a
//! bounded random search): each function panics when a property fails.

use reloadlet::core::model::{ContainerId, ContainerRuntime};
use reloadlet::host::process::cgroup::{
    container_of, matches, normalize_pod_uid, parse_proc_cgroup,
};

/// `/proc/<pid>/cgroup` text: never panics, every line kept is well formed, and every
/// path it yields satisfies [`cgroup_path`].
pub fn cgroup_paths(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let lines = parse_proc_cgroup(&text);
    assert!(lines.len() <= text.lines().count());
    for line in &lines {
        assert!(line.path.starts_with('/'), "path {:?}", line.path);
        assert!(!line.path.contains('\n'));
        assert!(line
            .controllers
            .iter()
            .all(|c| !c.contains(',') && !c.contains(':')));
        // A kept line is found verbatim in the input.
        let ctrls = line.controllers.join(",");
        let rebuilt = format!("{}:{ctrls}:{}", line.hierarchy, line.path);
        assert!(
            text.lines().any(|l| l.ends_with(&rebuilt)),
            "line {rebuilt:?} not in input"
        );
        cgroup_path(&line.path);
    }
}

/// A cgroup path: when `container_of` finds a container, its fields are well formed,
/// they appear in the path, and `matches` agrees.
pub fn cgroup_path(path: &str) {
    let Some(found) = container_of(path) else {
        return;
    };
    let id = &found.container_id;
    assert_eq!(id.len(), 64, "{path:?}");
    assert!(id
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    assert!(path.contains(id.as_str()));
    assert_eq!(
        normalize_pod_uid(&found.pod_uid).as_deref(),
        Some(found.pod_uid.as_str())
    );
    let systemd_uid = found.pod_uid.replace('-', "_");
    assert!(
        path.to_ascii_lowercase().contains(&found.pod_uid)
            || path.to_ascii_lowercase().contains(&systemd_uid),
        "{path:?}"
    );
    assert!(!path.ends_with(".mount") && !path.ends_with(".mount/"));
    for runtime in [
        ContainerRuntime::Containerd,
        ContainerRuntime::CriO,
        ContainerRuntime::Docker,
    ] {
        let container = ContainerId {
            runtime,
            id: id.clone(),
        };
        assert_eq!(
            matches(path, &found.pod_uid, &container),
            !found.conmon,
            "{path:?}"
        );
        assert_eq!(
            matches(path, &systemd_uid, &container),
            !found.conmon,
            "{path:?}"
        );
    }
}

/// A `containerStatuses[].containerID` string, and the same bytes as a cgroup path.
pub fn container_id(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Some(parsed) = ContainerId::parse(&text) {
        assert!(!parsed.id.is_empty() && parsed.id.len() <= 128);
        assert!(parsed.id.bytes().all(|b| b.is_ascii_alphanumeric()));
        let shown = parsed.to_string();
        assert_eq!(shown, text, "display round trip");
        assert_eq!(ContainerId::parse(&shown), Some(parsed));
    }
    if let Some(uid) = normalize_pod_uid(&text) {
        assert!(uid.len() == 32 || uid.len() == 36);
        assert_eq!(normalize_pod_uid(&uid).as_deref(), Some(&*uid));
        // A UID already in normal form is taken as it is.
        assert!(matches!(
            normalize_pod_uid(&uid),
            Some(std::borrow::Cow::Borrowed(_))
        ));
    }
    cgroup_path(&text);
}

/// Pod annotations (user input): one `key=value` pair per line. Parsing never panics; an
/// accepted policy is well formed; and the decision built on it never targets a container
/// the pod does not have, never a classic init container, and only allowed signals.
pub fn annotations(data: &[u8]) {
    use reloadlet::core::model::{
        ContainerInfo, ContainerKind, PodInfo, ReloadSignal, SourceKind, SourceRef, VolumeMount,
        VolumeSpec,
    };
    use reloadlet::core::policy::{decide, Decision};
    use std::collections::{BTreeMap, BTreeSet};

    let text = String::from_utf8_lossy(data);
    let annotations: BTreeMap<String, String> = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    if let Ok(Some(policy)) = reloadlet::core::annotations::parse(&annotations) {
        for list in [&policy.containers, &policy.configmaps, &policy.secrets]
            .into_iter()
            .flatten()
        {
            assert!(!list.is_empty());
            assert!(list
                .iter()
                .all(|i| !i.is_empty() && !i.contains(',') && !i.contains(' ')));
        }
    }
    let container = |name: &str, kind, volume: &str, sub_path| ContainerInfo {
        name: name.into(),
        kind,
        mounts: vec![VolumeMount {
            volume: volume.into(),
            sub_path,
        }],
        container_id: None,
        running: true,
        ports: Vec::new(),
    };
    let pod = PodInfo {
        uid: "u".into(),
        namespace: "ns".into(),
        name: "p".into(),
        annotations: annotations.into(),
        volumes: vec![
            VolumeSpec {
                name: "conf".into(),
                sources: vec![SourceRef {
                    kind: SourceKind::ConfigMap,
                    name: "nginx-conf".into(),
                }],
                service_account_token: false,
                ..Default::default()
            },
            VolumeSpec {
                name: "tls".into(),
                sources: vec![SourceRef {
                    kind: SourceKind::Secret,
                    name: "tls".into(),
                }],
                service_account_token: false,
                ..Default::default()
            },
        ],
        containers: vec![
            container("init", ContainerKind::Init, "conf", false),
            container("proxy", ContainerKind::SidecarInit, "tls", false),
            container("nginx", ContainerKind::Regular, "conf", false),
            container("sub", ContainerKind::Regular, "conf", true),
        ],
        has_controller: true,
        ..Default::default()
    };
    let changed: BTreeSet<String> = ["conf".to_string(), "tls".to_string()].into();
    if let Decision::Signal {
        signal, targets, ..
    } = decide(&pod, &changed)
    {
        assert!(ReloadSignal::ALL.contains(&signal));
        assert!(!targets.is_empty());
        for t in targets {
            assert!(
                ["proxy", "nginx"].contains(&t.container.as_str()),
                "target {}",
                t.container
            );
        }
    }
}

/// `/proc/<pid>/status` text: never panics; a parsed status gives every signal a verdict
/// that follows the masks (a handler or a mask always sends, `SIG_IGN` alone never does).
pub fn proc_status(data: &[u8]) {
    use reloadlet::core::disposition::{decide, describe, SignalCheck, SignalStatus, Verdict};
    use reloadlet::core::model::ReloadSignal;
    let text = String::from_utf8_lossy(data);
    let Some(status) = SignalStatus::parse(&text) else {
        return;
    };
    for signal in ReloadSignal::ALL {
        let bit = 1u64 << (signal.number() - 1);
        let verdict = decide(&status, signal, SignalCheck::On);
        if (status.caught | status.blocked) & bit != 0 {
            assert!(matches!(verdict, Verdict::Send(_)), "{status:?} {signal}");
        } else if status.ignored & bit != 0 {
            assert!(!verdict.sends(), "{status:?} {signal}");
        }
        assert!(decide(&status, signal, SignalCheck::Off).sends());
        assert!(!describe(&status, 1, signal, verdict).is_empty());
    }
}
