//! Pure parsers for cgroup membership: `/proc/<pid>/cgroup` lines and the container
//! cgroup paths the kubelet and the container runtimes create (node-facts.md §4).
//!
//! No I/O here. Every function accepts arbitrary text and never panics; the parsers are
//! fuzzed (`fuzz/`) and property-tested (`tests/fuzz_parsers.rs`).
//!
//! Paths are matched on their **tail**: the container leaf and the pod cgroup right above
//! it. The head is never looked at, so paths relative to a cgroup namespace
//! (`/../../kubepods.slice/…`), kubepods nested under another slice (kind's
//! `/kubelet.slice/kubelet-kubepods.slice/…`) and a custom cgroup root all match.

use crate::core::model::ContainerId;
use std::borrow::Cow;

/// One line of `/proc/<pid>/cgroup`: `hierarchy-ID:controller-list:cgroup-path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupLine {
    /// The hierarchy ID; always 0 for the cgroup v2 unified hierarchy.
    pub hierarchy: u32,
    /// Controllers bound to the hierarchy (`["cpu", "cpuacct"]`, `["name=systemd"]`);
    /// empty for cgroup v2.
    pub controllers: Vec<String>,
    /// The cgroup path, relative to the reader's cgroup namespace root; starts with `/`.
    pub path: String,
}

impl CgroupLine {
    /// This line is the cgroup v2 unified hierarchy (`0::/path`).
    pub fn is_v2(&self) -> bool {
        self.hierarchy == 0 && self.controllers.is_empty()
    }
}

/// Parses the text of `/proc/<pid>/cgroup`. Lines that are not `N:ctrls:/path` are
/// skipped; paths may themselves contain `:` (systemd `slice:prefix:name` leaves).
pub fn parse_proc_cgroup(text: &str) -> Vec<CgroupLine> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<CgroupLine> {
    let mut parts = line.splitn(3, ':');
    let hierarchy = parts.next()?;
    let controllers = parts.next()?;
    let path = parts.next()?;
    if hierarchy.is_empty() || !hierarchy.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let hierarchy: u32 = hierarchy.parse().ok()?;
    if !path.starts_with('/') {
        return None;
    }
    let controllers = if controllers.is_empty() {
        Vec::new()
    } else {
        controllers.split(',').map(str::to_owned).collect()
    };
    Some(CgroupLine {
        hierarchy,
        controllers,
        path: path.to_owned(),
    })
}

/// The pod and container a container cgroup path names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerCgroup {
    /// The pod UID, normalised to lower case with `-` (the systemd driver writes `_`).
    pub pod_uid: String,
    /// The container (or sandbox) ID: 64 lower-case hex characters.
    pub container_id: String,
    /// A CRI-O `crio-conmon-<id>` cgroup: the monitor process, never the container.
    pub conmon: bool,
}

/// Reads the pod and container out of a cgroup path, or `None` when the path is not a
/// container cgroup of a pod.
///
/// Recognised (on the tail, any head): a pod segment — `pod<uid>` (cgroupfs driver) or
/// `…kubepods[-burstable|-besteffort]-pod<uid_>.slice` (systemd driver) — directly
/// followed by a container segment:
///
/// | runtime | systemd | cgroupfs |
/// |---|---|---|
/// | containerd | `cri-containerd-<id>.scope` | `<id>` |
/// | CRI-O | `crio-<id>.scope`, `crio-conmon-<id>.scope` | `crio-<id>`, `crio-conmon-<id>` |
/// | cri-dockerd | `docker-<id>.scope` | `<id>` |
///
/// and the single-segment form a runtime writes when systemd did not create the scope,
/// `kubepods-…-pod<uid_>.slice:cri-containerd:<id>` (also `:crio:`, `:docker:`). Sub-cgroups
/// a container creates below its own cgroup belong to it. A `.mount` leaf (a systemd
/// mount unit inside a container running systemd) is not a container process: `None`.
/// IDs must be exactly 64 lower-case hex characters, so QoS segments (`burstable`,
/// `kubepods`) can never be read as one.
///
/// Not recognised: a path that does not show the pod segment, as a sibling container
/// of the reader's own pod looks from inside a private cgroup namespace (`/../<id>`).
pub fn container_of(path: &str) -> Option<ContainerCgroup> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let leaf = segments.last()?;
    if leaf.ends_with(".mount") {
        return None;
    }
    // The deepest match wins: a container may create sub-cgroups below its own one.
    for i in (0..segments.len()).rev() {
        if let Some(found) = combined_segment(segments[i]) {
            return Some(found);
        }
        if i == 0 {
            break;
        }
        if let Some((container_id, conmon)) = container_segment(segments[i]) {
            if let Some(pod_uid) = pod_segment(segments[i - 1]) {
                return Some(ContainerCgroup {
                    pod_uid,
                    container_id,
                    conmon,
                });
            }
        }
    }
    None
}

/// `path` is a cgroup of the container `container` of the pod `pod_uid` (either UID
/// spelling), and not its CRI-O conmon. The runtime named in `container` is not checked:
/// the 64-hex ID alone names the container, and the cgroupfs leaf does not tell runtimes
/// apart.
pub fn matches(path: &str, pod_uid: &str, container: &ContainerId) -> bool {
    // Cheap rejection first: this runs for every cgroup line of every process in a scan.
    if container.id.is_empty() || !path.contains(container.id.as_str()) {
        return false;
    }
    let Some(found) = container_of(path) else {
        return false;
    };
    let Some(pod_uid) = normalize_pod_uid(pod_uid) else {
        return false;
    };
    !found.conmon && found.pod_uid == *pod_uid && found.container_id == container.id
}

/// Normalises a pod UID to lower case with `-`; `None` when it is not a UID: a UUID
/// (`8-4-4-4-12` hex, with `-` or `_`) or 32 hex digits (static pods: a config hash). A UID
/// in that form already (as the API server writes it) is borrowed, not copied: this runs
/// before every signal.
pub fn normalize_pod_uid(uid: &str) -> Option<Cow<'_, str>> {
    let bytes = uid.as_bytes();
    let ok = match bytes.len() {
        32 => bytes.iter().all(u8::is_ascii_hexdigit),
        36 => {
            let sep = bytes[8];
            (sep == b'-' || sep == b'_')
                && bytes.iter().enumerate().all(|(i, b)| match i {
                    8 | 13 | 18 | 23 => *b == sep,
                    _ => b.is_ascii_hexdigit(),
                })
        }
        _ => false,
    };
    if !ok {
        return None;
    }
    let normal = |b: &u8| *b != b'_' && !b.is_ascii_uppercase();
    Some(if bytes.iter().all(normal) {
        Cow::Borrowed(uid)
    } else {
        Cow::Owned(uid.to_ascii_lowercase().replace('_', "-"))
    })
}

/// A pod cgroup segment: `pod<uid>` or `<…kubepods[-qos]>-pod<uid_>.slice`.
fn pod_segment(segment: &str) -> Option<String> {
    if let Some(uid) = segment.strip_prefix("pod") {
        return normalize_pod_uid(uid).map(Cow::into_owned);
    }
    let stem = segment.strip_suffix(".slice")?;
    let (prefix, uid) = stem.rsplit_once("-pod")?;
    // `kubepods…`, or under a prefix such as kind's `kubelet-kubepods…`.
    let qos_ok = ["kubepods", "kubepods-burstable", "kubepods-besteffort"]
        .iter()
        .any(|q| {
            prefix
                .strip_suffix(q)
                .is_some_and(|rest| rest.is_empty() || rest.ends_with('-'))
        });
    if !qos_ok {
        return None;
    }
    normalize_pod_uid(uid).map(Cow::into_owned)
}

/// A container leaf: returns the ID and whether it is a CRI-O conmon cgroup.
fn container_segment(segment: &str) -> Option<(String, bool)> {
    let (stem, scope) = match segment.strip_suffix(".scope") {
        Some(stem) => (stem, true),
        None => (segment, false),
    };
    let (id, conmon) = if let Some(id) = stem.strip_prefix("crio-conmon-") {
        (id, true)
    } else if let Some(id) = stem.strip_prefix("crio-") {
        (id, false)
    } else if let Some(id) = stem.strip_prefix("cri-containerd-") {
        // containerd with the cgroupfs driver names the leaf by the bare ID.
        if !scope {
            return None;
        }
        (id, false)
    } else if let Some(id) = stem.strip_prefix("docker-") {
        if !scope {
            return None;
        }
        (id, false)
    } else {
        // Bare `<id>`: containerd and cri-dockerd with the cgroupfs driver.
        if scope {
            return None;
        }
        (stem, false)
    };
    is_container_id(id).then(|| (id.to_owned(), conmon))
}

/// `kubepods-…-pod<uid_>.slice:<runtime prefix>:<id>`.
fn combined_segment(segment: &str) -> Option<ContainerCgroup> {
    let mut parts = segment.split(':');
    let (pod, runtime, id) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !matches!(runtime, "cri-containerd" | "crio" | "docker") {
        return None;
    }
    let pod_uid = pod_segment(pod)?;
    is_container_id(id).then(|| ContainerCgroup {
        pod_uid,
        container_id: id.to_owned(),
        conmon: false,
    })
}

/// Exactly 64 lower-case hex characters.
fn is_container_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::ContainerRuntime;

    const UID: &str = "1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9";
    const UID_: &str = "1f2e3d4c_5b6a_4978_8695_a4b3c2d1e0f9";

    fn id(c: char) -> String {
        c.to_string().repeat(64)
    }

    fn found(container_id: &str, conmon: bool) -> Option<ContainerCgroup> {
        Some(ContainerCgroup {
            pod_uid: UID.to_owned(),
            container_id: container_id.to_owned(),
            conmon,
        })
    }

    #[test]
    fn proc_cgroup_v1_v2_and_garbage() {
        let text = "12:memory:/kubepods/pod1/abc\n\
                    11:cpu,cpuacct:/x\n\
                    1:name=systemd:/system.slice/a.service\n\
                    0::/../../kubepods.slice/y\n\
                    garbage\n\
                    x:cpu:/z\n\
                    3:cpu:relative\n\
                    99999999999:cpu:/overflow\n\
                    4::\n\
                    \n\
                    5:pids:/with:colons:in:path";
        let lines = parse_proc_cgroup(text);
        let got: Vec<(u32, Vec<&str>, &str)> = lines
            .iter()
            .map(|l| {
                let ctrls = l.controllers.iter().map(String::as_str).collect();
                (l.hierarchy, ctrls, l.path.as_str())
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (12, vec!["memory"], "/kubepods/pod1/abc"),
                (11, vec!["cpu", "cpuacct"], "/x"),
                (1, vec!["name=systemd"], "/system.slice/a.service"),
                (0, vec![], "/../../kubepods.slice/y"),
                (5, vec!["pids"], "/with:colons:in:path"),
            ]
        );
        assert!(lines[3].is_v2());
        assert!(!lines[0].is_v2());
    }

    #[test]
    fn every_documented_layout_is_recognised() {
        let a = id('a');
        let cases: Vec<(String, Option<ContainerCgroup>)> = vec![
            // containerd, systemd driver, each QoS class.
            (format!("/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{a}.scope"), found(&a, false)),
            (
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{a}.scope"),
                found(&a, false),
            ),
            (
                format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/cri-containerd-{a}.scope"),
                found(&a, false),
            ),
            // containerd / cri-dockerd, cgroupfs driver.
            (format!("/kubepods/pod{UID}/{a}"), found(&a, false)),
            (format!("/kubepods/burstable/pod{UID}/{a}"), found(&a, false)),
            (format!("/kubepods/besteffort/pod{UID}/{a}"), found(&a, false)),
            // CRI-O, both drivers, with conmon siblings flagged.
            (format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/crio-{a}.scope"), found(&a, false)),
            (
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/crio-conmon-{a}.scope"),
                found(&a, true),
            ),
            (format!("/kubepods/burstable/pod{UID}/crio-{a}"), found(&a, false)),
            (format!("/kubepods/burstable/pod{UID}/crio-conmon-{a}"), found(&a, true)),
            // cri-dockerd, systemd driver.
            (format!("/kubepods.slice/kubepods-pod{UID_}.slice/docker-{a}.scope"), found(&a, false)),
            // Relative to a cgroup namespace, nested under other slices (kind), custom roots.
            (format!("/../../kubepods-besteffort-pod{UID_}.slice/cri-containerd-{a}.scope"), found(&a, false)),
            (format!("/../../pod{UID}/{a}"), found(&a, false)),
            (
                format!("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{a}.scope"),
                found(&a, false),
            ),
            (format!("/docker/{}/kubepods/pod{UID}/{a}", id('e')), found(&a, false)),
            // The runtime's fallback when systemd did not make the scope.
            (
                format!("/system.slice/containerd.service/kubepods-burstable-pod{UID_}.slice:cri-containerd:{a}"),
                found(&a, false),
            ),
            // A sub-cgroup the container created below its own cgroup.
            (format!("/kubepods.slice/kubepods-pod{UID_}.slice/crio-{a}.scope/container"), found(&a, false)),
            // Static pods: the UID is a 32-hex config hash.
            (
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{a}.scope", "c".repeat(32)),
                Some(ContainerCgroup { pod_uid: "c".repeat(32), container_id: a.clone(), conmon: false }),
            ),
        ];
        for (path, want) in cases {
            assert_eq!(container_of(&path), want, "{path}");
        }
    }

    #[test]
    fn lookalikes_are_not_containers() {
        let a = id('a');
        for path in [
            String::new(),
            "/".to_owned(),
            "/kubepods".to_owned(),
            "/kubepods/burstable".to_owned(),
            format!("/kubepods/burstable/pod{UID}"),
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"),
            // QoS segments are never IDs, nor pod segments.
            "/kubepods/burstable/besteffort".to_owned(),
            format!("/kubepods/pod{UID}/burstable"),
            // IDs must be 64 lower-case hex.
            format!("/kubepods/pod{UID}/{}", "a".repeat(63)),
            format!("/kubepods/pod{UID}/{}", "a".repeat(65)),
            format!("/kubepods/pod{UID}/{}", "A".repeat(64)),
            format!("/kubepods/pod{UID}/{}", "g".repeat(64)),
            // Leaf kinds belong to their driver.
            format!("/kubepods/pod{UID}/{a}.scope"),
            format!("/kubepods/pod{UID}/cri-containerd-{a}"),
            // A .mount leaf inside a container is not the container.
            format!("/kubepods.slice/kubepods-pod{UID_}.slice/crio-{a}.scope/dev-hugepages.mount"),
            // No pod segment right above the container.
            format!("/system.slice/cri-containerd-{a}.scope"),
            format!("/kubepods/pod{UID}/x/{a}"),
            format!("/kubepods.slice/other-pod{UID_}.slice/cri-containerd-{a}.scope"),
            format!("/kubepods/pod{}/{a}", &UID[..35]),
            format!("/kubepods/pod{UID}x/{a}"),
            format!("/system.slice/x.service/kubepods-pod{UID_}.slice:runc:{a}"),
        ] {
            assert_eq!(container_of(&path), None, "{path}");
        }
    }

    #[test]
    fn matches_compares_pod_uid_in_either_spelling_and_skips_conmon() {
        let a = id('a');
        let container = ContainerId {
            runtime: ContainerRuntime::CriO,
            id: a.clone(),
        };
        let path = format!("/kubepods.slice/kubepods-pod{UID_}.slice/crio-{a}.scope");
        assert!(matches(&path, UID, &container));
        assert!(matches(&path, UID_, &container));
        assert!(matches(&path, &UID.to_ascii_uppercase(), &container));
        let conmon = format!("/kubepods.slice/kubepods-pod{UID_}.slice/crio-conmon-{a}.scope");
        assert!(!matches(&conmon, UID, &container));
        let other_pod = "1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f8";
        assert!(!matches(&path, other_pod, &container));
        let other = ContainerId {
            runtime: ContainerRuntime::CriO,
            id: id('b'),
        };
        assert!(!matches(&path, UID, &other));
        assert!(!matches(&path, "not-a-uid", &container));
    }

    #[test]
    fn pod_uids_normalise() {
        assert_eq!(normalize_pod_uid(UID_).as_deref(), Some(UID));
        // The API server's form is taken as it is (no copy before a signal).
        assert!(matches!(normalize_pod_uid(UID), Some(Cow::Borrowed(u)) if u == UID));
        let hash = "1f2e3d4c5b6a49788695a4b3c2d1e0f9";
        assert!(matches!(normalize_pod_uid(hash), Some(Cow::Borrowed(_))));
        assert_eq!(
            normalize_pod_uid(&hash.to_ascii_uppercase()).as_deref(),
            Some(hash)
        );
        assert_eq!(
            normalize_pod_uid(&UID.to_ascii_uppercase()).as_deref(),
            Some(UID)
        );
        for bad in [
            "",
            "1f2e3d4c-5b6a_4978-8695-a4b3c2d1e0f9",
            "1f2e3d4c5b6a49788695a4b3c2d1e0f9ab",
            "zzzzzzzz-5b6a-4978-8695-a4b3c2d1e0f9",
        ] {
            assert_eq!(normalize_pod_uid(bad), None, "{bad}");
        }
    }
}
