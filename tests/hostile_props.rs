//! Properties over what a tenant writes (issue #43 §5): arbitrary annotation maps, volume
//! trees and pod objects, built from hostile fragments (huge numbers, control and bidi
//! characters, 64 KiB values, `..`, regex metacharacters, cron patterns that never match),
//! fed to the parsers and deciders a pod author reaches. Each property must never panic and
//! must refuse what is over a documented bound (docs/security.md).
//!
//! `tests/fuzz_parsers.rs` searches the byte-level parsers (cgroup paths, container IDs,
//! `/proc` status) that cargo-fuzz also runs; this file holds the structured inputs (maps,
//! trees on disk, pod JSON) that libFuzzer's byte strings do not describe well. Both use the
//! same seeded generator: `RELOADLET_FUZZ_SEED` replays a run, `RELOADLET_PROPS_SCALE`
//! multiplies every iteration count (default 1; CI keeps the whole file well under 30 s).

#[path = "support/rng.rs"]
mod rng;

use reloadlet::core::annotations::{self, Action, HttpPort};
use reloadlet::core::model::{
    ContainerInfo, ContainerKind, PodInfo, SourceKind, SourceRef, VolumeMount, VolumeSpec,
};
use reloadlet::core::owner_chain::{self, Link, WorkloadFacts};
use reloadlet::core::pacing::spec::{
    DEBOUNCE, FLAP_THRESHOLD, MAX_DEBOUNCE, MIN_INTERVAL, WINDOW, WINDOW_ACTIONS, WINDOW_DURATION,
    WINDOW_TIMEZONE,
};
use reloadlet::core::pacing::{PacingDefaults, PacingSpec};
use reloadlet::core::policy::{self, Decision};
use reloadlet::core::reloader_compat::{self as rc, Changed, Workload};
use reloadlet::core::rollout::{self, OwnerRef, Strategy, WorkloadKind, WorkloadRef};
use reloadlet::core::volume_digest::HashKey;
use reloadlet::host::volume_read::{self, HashError, Layout, MAX_DEPTH, MAX_ENTRIES};
use rng::Rng;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::Duration;

/// The longest duration any annotation may ask for (docs/security.md: 7 days).
const WEEK: u128 = 7 * 86_400;
/// `reloadlet.io/containers`, `configmaps`, … take at most this many items.
const MAX_LIST_ITEMS: usize = 64;
/// `reloadlet.io/http-path` is at most this long.
const MAX_HTTP_PATH: usize = 2048;

fn scaled(n: usize) -> usize {
    let scale: usize = std::env::var("RELOADLET_PROPS_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    n * scale.max(1)
}

/// Runs `check` on `iters` inputs made by `make`; a panic in either names the seed and the
/// input (Debug), so the case replays.
fn search<T: std::fmt::Debug>(
    name: &str,
    seed: u64,
    iters: usize,
    mut make: impl FnMut(&mut Rng) -> T,
    mut check: impl FnMut(&T),
) {
    let seed = rng::seed(seed);
    let mut rng = Rng(seed);
    for i in 0..iters {
        let input = make(&mut rng);
        if catch_unwind(AssertUnwindSafe(|| check(&input))).is_err() {
            let shown = format!("{input:?}");
            let shown: String = shown.chars().take(4_000).collect();
            panic!("{name}: property failed on input #{i} (seed {seed}): {shown}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Hostile fragments
// ---------------------------------------------------------------------------------------

const FRAGMENTS: &[&str] = &[
    "",
    " ",
    "  \t",
    "300000000000y",
    "99999999999999999999",
    "99999999999999999999s",
    "18446744073709551615",
    "-1",
    "-1s",
    "0",
    "0s",
    "1ns",
    "7d",
    "8d",
    "1h",
    "61m",
    "1h0m1s",
    "1.5h",
    "10/10m",
    "0/1m",
    "3/0s",
    "1/300000000000y",
    "4294967296/1m",
    "off",
    "signal",
    "evict",
    "http",
    "rollout",
    "SIGNAL",
    "SIGHUP",
    "HUP",
    "usr1",
    "KILL",
    "SIGKILL",
    "9",
    "true",
    "false",
    "TRUE",
    "on",
    "wait",
    "é",
    "\u{0}",
    "\u{1b}[31m",
    "\u{202e}",
    "\u{2028}",
    "\n",
    "\r\n",
    "a,b,,c",
    ",,,",
    ", ,",
    "..",
    "/",
    "../../etc/passwd",
    "//x",
    "/-/reload",
    "/a b",
    "/#frag",
    "/?q=1",
    ".*",
    "(a+)+$",
    "a{1000}{1000}",
    "[",
    "\\",
    "^app$",
    "app|other",
    "(?i)APP",
    "\\p{Greek}+",
    "* * * * *",
    "0 0 31 2 *",
    "0 0 30 2 *",
    "0 0 29 2 *",
    "0 0 29 2 1",
    "*/0 * * * *",
    "0 */0 * * *",
    "0 2 * * *",
    "0 0 * * * *",
    "60 * * * *",
    "0 0 L 2 *",
    "0 0 ? * 8",
    "0 0 1 1 * 2099",
    "@yearly",
    "59 23 31 12 *",
    "Europe/Berlin",
    "UTC",
    "Moon/Base",
    "../../../etc/localtime",
    "all",
    "disruptive",
    "0",
    "65535",
    "65536",
    "https",
    "ftp",
    "POST",
    "DELETE",
    "web",
    "a--b",
    "nginx",
    "nginx-conf",
    "app",
    "app-conf",
    "kube-root-ca.crt",
];

/// A value: one fragment, a few joined, a valid list, or a 64 KiB repetition.
fn value(rng: &mut Rng) -> String {
    match rng.below(10) {
        0..=3 => rng.pick(FRAGMENTS).to_string(),
        4..=6 => {
            let sep = *rng.pick(&[",", " ", "", "/", ", ", "|"]);
            (0..1 + rng.below(5))
                .map(|_| *rng.pick(FRAGMENTS))
                .collect::<Vec<_>>()
                .join(sep)
        }
        7 => duration(rng).0,
        8 => {
            // A list of valid names, sometimes over the item limit.
            let n = *rng.pick(&[1, 2, 3, 10, MAX_LIST_ITEMS, MAX_LIST_ITEMS + 1]);
            (0..n)
                .map(|i| format!("n{i}"))
                .collect::<Vec<_>>()
                .join(",")
        }
        _ => {
            let piece = rng.pick(FRAGMENTS);
            let piece = if piece.is_empty() { "x" } else { piece };
            piece.repeat(65_536 / piece.len() + 1)
        }
    }
}

/// A duration annotation value with its length in whole seconds (`None`: not a plain sum of
/// whole-second parts, e.g. a fraction or junk).
fn duration(rng: &mut Rng) -> (String, Option<u128>) {
    const NUMBERS: &[u128] = &[
        0,
        1,
        7,
        8,
        59,
        60,
        61,
        3_599,
        3_600,
        3_601,
        86_400,
        604_800,
        604_801,
        300_000_000_000,
        99_999_999_999_999_999_999,
    ];
    const UNITS: &[(&str, u128)] = &[
        ("s", 1),
        ("m", 60),
        ("h", 3_600),
        ("d", 86_400),
        ("w", 604_800),
        ("y", 31_557_600),
    ];
    let mut text = String::new();
    let mut total: u128 = 0;
    for _ in 0..1 + rng.below(3) {
        let n = *rng.pick(NUMBERS);
        let (unit, secs) = *rng.pick(UNITS);
        text.push_str(&format!("{n}{unit}"));
        total = total.saturating_add(n.saturating_mul(secs));
    }
    if rng.one_in(8) {
        return (format!("{text}{}", rng.pick(FRAGMENTS)), None);
    }
    (text, Some(total))
}

const RELOADLET_KEYS: &[&str] = &[
    annotations::ACTION,
    annotations::SIGNAL,
    annotations::CONTAINERS,
    annotations::CONFIGMAPS,
    annotations::SECRETS,
    annotations::SECRET_PROVIDER_CLASSES,
    annotations::CSI_VOLUMES,
    annotations::EVICT_UNOWNED,
    annotations::SIGNAL_CHECK,
    annotations::HTTP_PORT,
    annotations::HTTP_PATH,
    annotations::HTTP_METHOD,
    annotations::HTTP_BODY,
    annotations::HTTP_SCHEME,
    annotations::FAST_PROJECTION,
    annotations::PROJECTION_NUDGE,
    annotations::ENV_ACTION,
    annotations::ENV_BASELINE,
    annotations::ROLLOUT_BASELINE,
    rollout::ON_BLOCKED,
    rollout::BLOCKED_TIMEOUT,
    rollout::RESTARTED_FOR,
    DEBOUNCE,
    MIN_INTERVAL,
    FLAP_THRESHOLD,
    WINDOW,
    WINDOW_DURATION,
    WINDOW_TIMEZONE,
    WINDOW_ACTIONS,
];

const DURATION_KEYS: &[&str] = &[
    rollout::BLOCKED_TIMEOUT,
    DEBOUNCE,
    MIN_INTERVAL,
    WINDOW_DURATION,
];

/// The values a key is most often given, so the search gets past the first check.
fn typical(key: &str, rng: &mut Rng) -> String {
    let pick = |rng: &mut Rng, items: &[&str]| rng.pick(items).to_string();
    match key {
        annotations::ACTION => pick(rng, &["signal", "evict", "http", "rollout", " Signal "]),
        annotations::SIGNAL => pick(rng, &["SIGHUP", "USR2", "sigterm", "WINCH"]),
        annotations::CONTAINERS => pick(rng, &["app", "app,sidecar", "nginx"]),
        annotations::CONFIGMAPS => pick(rng, &["app-conf", "a.b,c"]),
        annotations::HTTP_PORT => pick(rng, &["8080", "web", "metrics"]),
        annotations::HTTP_PATH => pick(rng, &["/-/reload", "/reload?x=1"]),
        rollout::ON_BLOCKED => pick(rng, &["wait", "rollout"]),
        FLAP_THRESHOLD => pick(rng, &["3/1m", "off", "10/10m"]),
        WINDOW => pick(
            rng,
            // Patterns that never match are in FRAGMENTS and in their own test: each costs
            // croner's whole search (to year 5000 and back to year 1).
            &["0 2 * * *", "* * * * *", "0 0 29 2 1", "*/15 * * * 1-5"],
        ),
        WINDOW_TIMEZONE => pick(rng, &["UTC", "Europe/Berlin", "America/New_York"]),
        WINDOW_ACTIONS => pick(rng, &["all", "disruptive"]),
        k if DURATION_KEYS.contains(&k) => duration(rng).0,
        _ => value(rng),
    }
}

/// An annotation map a pod author could write.
fn annotation_map(rng: &mut Rng) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    if !rng.one_in(5) {
        map.insert(
            annotations::ACTION.to_owned(),
            typical(annotations::ACTION, rng),
        );
    }
    for _ in 0..rng.below(7) {
        let key = match rng.below(12) {
            0 => format!("reloadlet.io/{}", rng.pick(FRAGMENTS)),
            1 => rng.pick(FRAGMENTS).to_string(),
            2 => rng.pick(&rc::WORKLOAD_KEYS).to_string(),
            _ => rng.pick(RELOADLET_KEYS).to_string(),
        };
        let v = if rng.one_in(3) {
            value(rng)
        } else {
            typical(&key, rng)
        };
        map.insert(key, v);
    }
    map
}

/// A pod with two containers mounting two ConfigMap volumes and one Secret volume.
fn pod_with(annotations: BTreeMap<String, String>) -> PodInfo {
    let volume = |name: &str, kind, source: &str| VolumeSpec {
        name: name.into(),
        sources: vec![SourceRef {
            kind,
            name: source.into(),
        }],
        ..Default::default()
    };
    let container = |name: &str, kind, volumes: &[&str]| ContainerInfo {
        name: name.into(),
        kind,
        mounts: volumes
            .iter()
            .map(|v| VolumeMount {
                volume: (*v).into(),
                sub_path: false,
            })
            .collect(),
        container_id: None,
        running: true,
        ports: vec![reloadlet::core::model::ContainerPort {
            number: 8080,
            name: Some("web".into()),
        }],
    };
    PodInfo {
        uid: "u".into(),
        namespace: "tenant".into(),
        name: "p".into(),
        annotations: annotations.into(),
        volumes: vec![
            volume("conf", SourceKind::ConfigMap, "app-conf"),
            volume("nginx", SourceKind::ConfigMap, "nginx-conf"),
            volume("tls", SourceKind::Secret, "tls"),
        ],
        containers: vec![
            container("init", ContainerKind::Init, &["conf"]),
            container("app", ContainerKind::Regular, &["conf", "tls"]),
            container("nginx", ContainerKind::Regular, &["nginx"]),
        ],
        has_controller: true,
        pod_ip: Some("10.0.0.7".parse().unwrap()),
        phase: "Running".into(),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------
// Annotations, pacing, on-blocked, the decision
// ---------------------------------------------------------------------------------------

/// The parsers of a pod's annotations on arbitrary maps: never panic; what they accept is
/// within every documented bound; a duration over its bound is refused; a maintenance
/// window's next opening is always computed (a pattern that names no date is refused), and the decision built on an accepted policy targets only containers the
/// pod has (never an init container).
#[test]
fn annotation_maps_parse_within_bounds_or_are_refused() {
    let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
    let (mut accepted, mut windows, mut refused_over) = (0, 0, 0);
    search(
        "annotations",
        0x0a11_0a7e,
        scaled(12_000),
        |rng| {
            let mut map = annotation_map(rng);
            // Now and then a duration with a known length, to check the bound.
            let mut over = None;
            if rng.one_in(3) {
                let key = *rng.pick(DURATION_KEYS);
                let (text, secs) = duration(rng);
                let bound = if key == DEBOUNCE {
                    MAX_DEBOUNCE.as_secs() as u128
                } else {
                    WEEK
                };
                if secs.is_some_and(|s| s > bound) {
                    over = Some(key);
                }
                map.insert(key.to_owned(), text);
            }
            (map, over)
        },
        |(map, over)| {
            let parsed = annotations::parse(map);
            let pacing = PacingSpec::parse(map, &PacingDefaults::default());
            let blocked = rollout::on_blocked(map);
            if let Some(key) = over {
                if *key == rollout::BLOCKED_TIMEOUT {
                    assert!(blocked.is_err(), "{key} over its bound accepted");
                    if map.contains_key(annotations::ACTION) {
                        assert!(parsed.is_err(), "{key} over its bound accepted");
                    }
                } else {
                    assert!(pacing.is_err(), "{key} over its bound accepted");
                }
                refused_over += 1;
            }
            if let Ok((_, timeout)) = blocked {
                assert!(!timeout.is_zero() && timeout.as_secs() as u128 <= WEEK);
            }
            if let Ok(Some(p)) = &parsed {
                accepted += 1;
                for list in [
                    &p.containers,
                    &p.configmaps,
                    &p.secrets,
                    &p.secret_provider_classes,
                    &p.csi_volumes,
                ]
                .into_iter()
                .flatten()
                {
                    assert!(!list.is_empty() && list.len() <= MAX_LIST_ITEMS);
                    assert!(list
                        .iter()
                        .all(|i| !i.is_empty() && i.len() <= 253 && !i.contains([',', ' '])));
                }
                if let Action::Http(h) = &p.action {
                    assert!(h.path.starts_with('/') && h.path.len() <= MAX_HTTP_PATH);
                    assert!(!h.path.contains(char::is_control));
                    match &h.port {
                        HttpPort::Number(n) => assert!(*n > 0),
                        HttpPort::Named(n) => assert!((1..=15).contains(&n.len())),
                    }
                }
            }
            if let Ok(spec) = &pacing {
                assert!(spec.debounce <= MAX_DEBOUNCE);
                assert!(spec.min_interval.as_secs() as u128 <= WEEK);
                if let Some(flap) = spec.flap {
                    assert!(flap.count > 0 && !flap.window.is_zero());
                    assert!(flap.window.as_secs() as u128 <= WEEK);
                }
                if let Some((w, _)) = &spec.window {
                    windows += 1;
                    // Returns (bounded by croner's search limits), and is never in the past.
                    if let Some(next) = w.next_open(now) {
                        assert!(next >= now);
                    }
                    let _ = w.describe_next(now);
                    if let Some(closes) = w.closes(now) {
                        assert!(closes > now && closes <= now + Duration::from_secs(7 * 86_400));
                    }
                }
            }
            let pod = pod_with(map.clone());
            let changed: BTreeSet<String> = ["conf", "nginx", "tls"].map(String::from).into();
            match policy::decide(&pod, &changed) {
                Decision::Signal { targets, .. } => {
                    assert!(!targets.is_empty());
                    assert!(targets
                        .iter()
                        .all(|t| ["app", "nginx"].contains(&t.container.as_str())));
                }
                Decision::Http { target, .. } => assert_eq!(target.port, 8080),
                Decision::NotOptedIn => assert!(!map.contains_key(annotations::ACTION)),
                _ => {}
            }
        },
    );
    // The search reaches the interesting branches.
    assert!(accepted > 200, "accepted {accepted}");
    assert!(windows > 50, "windows {windows}");
    assert!(refused_over > 500, "over-bound durations {refused_over}");
}

/// A maintenance window whose pattern never matches (30 February) is refused when it is
/// parsed, naming why (no search to croner's year limit per pending change); one that
/// matches rarely (29 February) is kept and its next opening computed.
#[test]
fn a_window_that_never_opens_is_refused_and_a_rare_one_is_kept() {
    let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
    for pattern in ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4 *", "0 0 31 6,9,11 *"] {
        let map: BTreeMap<String, String> = [(WINDOW.to_owned(), pattern.to_owned())].into();
        let err = PacingSpec::parse(&map, &PacingDefaults::default())
            .expect_err(pattern)
            .to_string();
        assert!(err.contains("never matches a date"), "{pattern}: {err}");
    }
    for pattern in ["0 0 29 2 *", "0 0 L 2 *"] {
        let map: BTreeMap<String, String> = [(WINDOW.to_owned(), pattern.to_owned())].into();
        let spec = PacingSpec::parse(&map, &PacingDefaults::default()).expect(pattern);
        let (w, _) = spec.window.expect("a window");
        assert!(w.next_open(now).is_some(), "{pattern}");
    }
    for pattern in ["*/0 * * * *", "0 */0 * * *", "0 0 0 * *", "0 0 * 13 *"] {
        let map: BTreeMap<String, String> = [(WINDOW.to_owned(), pattern.to_owned())].into();
        assert!(
            PacingSpec::parse(&map, &PacingDefaults::default()).is_err(),
            "{pattern} accepted"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Reloader compat, the owner chain
// ---------------------------------------------------------------------------------------

fn reloader_map(rng: &mut Rng) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for _ in 0..rng.below(4) {
        let key = rng.pick(&rc::WORKLOAD_KEYS).to_string();
        let v = match rng.below(4) {
            0 => "true".to_owned(),
            1 => value(rng),
            _ => (0..1 + rng.below(4))
                .map(|_| *rng.pick(FRAGMENTS))
                .collect::<Vec<_>>()
                .join(","),
        };
        map.insert(key, v);
    }
    map
}

/// Reloader's matcher on arbitrary workload, template and object annotations (regular
/// expressions that do not compile, that would backtrack, that are too big): never panics;
/// `ignore: "true"` on the object always wins; an object the workload does not reference
/// rolls only through an explicit `…/reload` list; and a list that names the object
/// (escaped) always matches it.
#[test]
fn reloader_matching_never_panics_and_keeps_its_order() {
    let mut explicit_hits = 0;
    search(
        "reloader_compat",
        0x002e_10ad,
        scaled(4_000),
        |rng| {
            let workload = reloader_map(rng);
            let template = reloader_map(rng);
            let mut object = BTreeMap::new();
            if rng.one_in(3) {
                object.insert(
                    rc::IGNORE.to_owned(),
                    rng.pick(&["true", "false", "yes"]).to_string(),
                );
            }
            if rng.one_in(3) {
                object.insert(
                    rc::MATCH.to_owned(),
                    rng.pick(&["true", "false"]).to_string(),
                );
            }
            let name = match rng.below(4) {
                0 => rng.pick(FRAGMENTS).to_string(),
                1 => "a.b".repeat(84),
                _ => rng
                    .pick(&["app", "app-conf", "tls", "web.config"])
                    .to_string(),
            };
            let kind = *rng.pick(&[
                SourceKind::ConfigMap,
                SourceKind::Secret,
                SourceKind::CsiVolume,
            ]);
            (workload, template, object, name, kind, rng.one_in(2))
        },
        |(workload, template, object, name, kind, referenced)| {
            let changed = Changed {
                kind: *kind,
                name,
                annotations: object,
                referenced: *referenced,
            };
            let w = Workload {
                annotations: workload,
                template,
            };
            let got = rc::matching(&w, &changed);
            let _ = rc::wants_secrets(&w);
            if object.get(rc::IGNORE).map(String::as_str) == Some("true") {
                assert_eq!(got, None);
            }
            if !referenced {
                assert!(matches!(
                    got,
                    None | Some(rc::CONFIGMAP_RELOAD | rc::SECRET_RELOAD)
                ));
            }
            if let Some(key) = got {
                assert!(workload.contains_key(key) || template.contains_key(key));
            }
            // Positive control: the object's own name, escaped, in the workload's list.
            let explicit = match kind {
                SourceKind::ConfigMap => rc::CONFIGMAP_RELOAD,
                SourceKind::Secret => rc::SECRET_RELOAD,
                _ => return,
            };
            if name.is_empty() || name.trim() != name || name.contains(',') || name.len() > 253 {
                return;
            }
            let mut named = workload.clone();
            let others = named.remove(explicit).unwrap_or_default();
            named.insert(
                explicit.to_owned(),
                format!("{others},{}", regex::escape(name)),
            );
            let mut object = object.clone();
            object.remove(rc::IGNORE);
            let changed = Changed {
                annotations: &object,
                ..changed
            };
            let w = Workload {
                annotations: &named,
                template,
            };
            assert_eq!(rc::matching(&w, &changed), Some(explicit));
            explicit_hits += 1;
        },
    );
    assert!(explicit_hits > 1_000, "explicit {explicit_hits}");
}

fn owner(rng: &mut Rng, kind: &str, name: &str) -> OwnerRef {
    OwnerRef {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: rng
            .pick(&["", "rs-uid", "d-uid", "forged", "rs-uid "])
            .to_string(),
    }
}

fn selector(rng: &mut Rng) -> Option<reloadlet::core::label_selector::LabelSelector> {
    let text = match rng.below(4) {
        0 => rng.pick(FRAGMENTS).to_string(),
        1 => "app=web".to_owned(),
        2 => "app in (web,api),tier!=db".to_owned(),
        _ => format!("app={}", rng.pick(FRAGMENTS)),
    };
    reloadlet::core::label_selector::LabelSelector::parse(&text).ok()
}

/// The owner chain and the grant on arbitrary owner references, selectors and annotations:
/// never panic; a verified chain has matching, non-empty UIDs all the way and selectors that
/// select the pod; a grant holds only when the pod's deciding keys equal the template's.
#[test]
fn the_owner_chain_holds_only_when_it_is_true() {
    let mut verified = 0;
    search(
        "owner_chain",
        0x000c_4a1e,
        scaled(8_000),
        |rng| {
            let labels: BTreeMap<String, String> = match rng.below(3) {
                0 => BTreeMap::new(),
                1 => [("app".to_owned(), "web".to_owned())].into(),
                _ => [("app".to_owned(), rng.pick(FRAGMENTS).to_string())].into(),
            };
            let pod_owner = owner(rng, "ReplicaSet", "web-1");
            let rs = rng.one_in(4).then(|| Link {
                uid: rng.pick(&["", "rs-uid", "forged"]).to_string(),
                owner: rng.one_in(5).then(|| owner(rng, "Deployment", "web")),
                selector: selector(rng),
            });
            let facts = WorkloadFacts {
                strategy: Strategy::deployment_default(3),
                link: Link {
                    uid: rng.pick(&["", "d-uid", "forged"]).to_string(),
                    owner: None,
                    selector: selector(rng),
                },
                annotations: reloader_map(rng),
                template_annotations: annotation_map(rng),
            };
            let pod_annotations = if rng.one_in(2) {
                facts.template_annotations.clone()
            } else {
                annotation_map(rng)
            };
            (labels, pod_owner, rs, facts, pod_annotations)
        },
        |(labels, pod_owner, rs, facts, pod_annotations)| {
            let workload = WorkloadRef {
                kind: WorkloadKind::Deployment,
                namespace: "tenant".into(),
                name: "web".into(),
            };
            if owner_chain::verify(labels, pod_owner, rs.as_ref(), &workload, facts).is_ok() {
                verified += 1;
                let top = match rs {
                    Some(rs) => {
                        assert!(!rs.uid.is_empty() && rs.uid == pod_owner.uid);
                        assert!(rs.selector.as_ref().is_some_and(|s| s.matches(labels)));
                        rs.owner.as_ref().expect("an owner").uid.clone()
                    }
                    None => pod_owner.uid.clone(),
                };
                assert!(!facts.link.uid.is_empty() && top == facts.link.uid);
                assert!(facts
                    .link
                    .selector
                    .as_ref()
                    .is_some_and(|s| s.matches(labels)));
            }
            let granted = owner_chain::granted(
                pod_annotations,
                WorkloadKind::Deployment,
                "web",
                facts,
                |w, t| {
                    let (w, t) = (w.clone(), t.clone());
                    let object = BTreeMap::new();
                    let changed = Changed {
                        kind: SourceKind::ConfigMap,
                        name: "app-conf",
                        annotations: &object,
                        referenced: true,
                    };
                    rc::matching(
                        &Workload {
                            annotations: &w,
                            template: &t,
                        },
                        &changed,
                    )
                    .is_some()
                },
            );
            let deciding = |m: &BTreeMap<String, String>| -> BTreeMap<String, String> {
                m.iter()
                    .filter(|(k, _)| k.starts_with("reloadlet.io/"))
                    .filter(|(k, _)| {
                        ![
                            annotations::ROLLOUT_BASELINE,
                            annotations::ENV_BASELINE,
                            annotations::PROJECTION_NUDGE,
                            rollout::RESTARTED_FOR,
                            reloadlet::core::pacing::ENV_PACING,
                            reloadlet::core::pacing::ROLLOUT_PACING,
                        ]
                        .contains(&k.as_str())
                    })
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            };
            let of_pod = deciding(pod_annotations);
            if !of_pod.is_empty() {
                assert_eq!(
                    granted.is_ok(),
                    of_pod == deciding(&facts.template_annotations),
                    "{granted:?}"
                );
            }
            if let Err(message) = granted {
                assert!(!message.is_empty());
            }
        },
    );
    assert!(verified > 20, "verified {verified}");
}

// ---------------------------------------------------------------------------------------
// Volume trees
// ---------------------------------------------------------------------------------------

/// What the generator wrote, to tell which answers are possible.
#[derive(Debug, Default)]
struct Written {
    /// Bytes the walk pays for: every entry's relative path, link targets, file contents.
    bytes: u128,
    entries: usize,
    /// The deepest directory, in levels below `..data`'s target (its children are level 1).
    deepest_dir: usize,
    fifo: bool,
    /// `..data` is not a symlink to a `..<name>` directory inside the volume.
    bad_data: bool,
    budget: u64,
    /// The generator's log, shown on a failure.
    log: Vec<String>,
}

const NAME_PIECES: &[&[u8]] = &[
    b"a",
    b"key",
    b"..x",
    b"...",
    b"..data",
    b"-",
    b" ",
    b"\n",
    b"\xff\xfe",
    "é".as_bytes(),
    b"\x1b[31m",
    b"$(id)",
    b"*",
    b"0",
];

fn file_name(rng: &mut Rng, taken: &BTreeSet<Vec<u8>>) -> Vec<u8> {
    loop {
        let mut name: Vec<u8> = (0..1 + rng.below(3))
            .flat_map(|_| rng.pick(NAME_PIECES).iter().copied())
            .collect();
        if rng.one_in(40) {
            name = vec![b'n'; 200 + rng.below(56)];
        }
        name.truncate(255);
        if name != b"." && name != b".." && !taken.contains(&name) {
            return name;
        }
        name.push(b'0' + rng.below(10) as u8);
        if name.len() <= 255 && !taken.contains(&name) && name != b".." {
            return name;
        }
    }
}

/// Writes a random tree at `dir` (a `..<timestamp>` directory) and records it.
fn write_tree(rng: &mut Rng, dir: &Path, rel_len: usize, level: usize, w: &mut Written) {
    use std::os::unix::ffi::OsStrExt;
    let mut taken = BTreeSet::new();
    let children = if level == 0 {
        1 + rng.below(6)
    } else {
        rng.below(4)
    };
    for _ in 0..children {
        let name = file_name(rng, &taken);
        taken.insert(name.clone());
        let path = dir.join(std::ffi::OsStr::from_bytes(&name));
        let rel = if rel_len == 0 {
            name.len()
        } else {
            rel_len + 1 + name.len()
        };
        w.entries += 1;
        w.bytes += rel as u128;
        match rng.below(10) {
            0..=3 => {
                let size = match rng.below(20) {
                    0 => 200 << 20, // sparse, over every budget used here
                    1 => 70_000,
                    _ => rng.below(64),
                };
                let f = std::fs::File::create(&path).unwrap();
                f.set_len(size as u64).unwrap();
                w.bytes += size as u128;
                w.log
                    .push(format!("file {} ({size} bytes)", path.display()));
            }
            4..=5 => {
                let target = rng
                    .pick(&[
                        "/",
                        "/etc/shadow",
                        "..",
                        "../..",
                        "/dev/zero",
                        "fifo",
                        "..data",
                        "",
                    ])
                    .to_string();
                let target = if target.is_empty() {
                    "x".repeat(3_000)
                } else {
                    target
                };
                std::os::unix::fs::symlink(&target, &path).unwrap();
                w.bytes += target.len() as u128;
                w.log
                    .push(format!("symlink {} -> {target:.40}", path.display()));
            }
            6 if rng.one_in(6) => {
                let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
                // SAFETY: a valid NUL-terminated path.
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
                w.fifo = true;
                w.log.push(format!("fifo {}", path.display()));
            }
            _ => {
                std::fs::create_dir(&path).unwrap();
                let level = level + 1;
                w.deepest_dir = w.deepest_dir.max(level);
                w.log
                    .push(format!("dir {} (level {level})", path.display()));
                if level < 100 {
                    write_tree(rng, &path, rel, level, w);
                }
            }
        }
    }
}

/// A chain of `depth` directories (each with a small file) below `dir`.
fn write_chain(rng: &mut Rng, dir: &Path, depth: usize, w: &mut Written) {
    let mut path = dir.to_path_buf();
    let mut rel = 0usize;
    for level in 1..=depth {
        let name = if rng.one_in(2) { "..x" } else { "d" };
        path.push(name);
        std::fs::create_dir(&path).unwrap();
        rel = if rel == 0 {
            name.len()
        } else {
            rel + 1 + name.len()
        };
        w.entries += 1;
        w.bytes += rel as u128;
        w.deepest_dir = w.deepest_dir.max(level);
    }
    std::fs::write(path.join("k"), b"v").unwrap();
    w.entries += 1;
    w.bytes += (rel + 2) as u128 + 1;
    w.log.push(format!("chain of {depth}"));
}

/// A random volume at `vol`; `wide`: one directory of more entries than the limit.
fn write_volume(rng: &mut Rng, vol: &Path, wide: bool) -> Written {
    let mut w = Written {
        budget: *rng.pick(&[0, 100, 4_096, 1 << 20, 64 << 20]),
        ..Default::default()
    };
    let data = vol.join("..2026_01_01_00_00_00.1");
    std::fs::create_dir(&data).unwrap();
    match rng.below(12) {
        0 => {
            let target = rng.pick(&["..", "../..", "/etc", "..data", "file", "..2026/..", "x"]);
            if *target == "file" {
                std::fs::write(vol.join("file"), b"x").unwrap();
            }
            std::os::unix::fs::symlink(target, vol.join("..data")).unwrap();
            w.bad_data = true;
        }
        1 => {
            std::fs::create_dir(vol.join("..data")).unwrap();
            w.bad_data = true;
        }
        _ => std::os::unix::fs::symlink("..2026_01_01_00_00_00.1", vol.join("..data")).unwrap(),
    }
    match (wide, rng.below(5)) {
        (true, _) => {
            // Wide: over the entry limit.
            for i in 0..MAX_ENTRIES + 1 {
                std::fs::File::create(data.join(format!("{i}"))).unwrap();
                w.entries += 1;
                w.bytes += format!("{i}").len() as u128;
            }
        }
        (_, 0) => {
            let depth = 1 + rng.below(80);
            write_chain(rng, &data, depth, &mut w)
        }
        _ => write_tree(rng, &data, 0, 0, &mut w),
    }
    w
}

/// `hash_volume` on random trees written to a temp dir (depth up to 80, names with `..`,
/// control bytes and invalid UTF-8, symlinks pointing anywhere, FIFOs, sparse 200 MiB
/// files, a `..data` that is no proper link): never panics, and answers consistently with
/// what was written — `Ok` exactly when no limit is crossed and nothing unsupported is in
/// the tree, and each error only when what it names is true. Symlinks are never followed
/// (one to a FIFO or `/dev/zero` is hashed as its target string), and hashing twice gives
/// the same digest.
#[test]
fn volume_trees_hash_or_are_refused_for_what_they_are() {
    let key = HashKey::from_bytes([7; 32]);
    let scratch = tempfile::tempdir().unwrap();
    let mut counts = BTreeMap::<&str, usize>::new();
    let seed = rng::seed(0x7ee5);
    let mut rng = Rng(seed);
    for i in 0..scaled(400) {
        let vol = scratch.path().join(format!("v{i}"));
        std::fs::create_dir(&vol).unwrap();
        // One volume over the entry limit (20,001 files take a while to write).
        let w = write_volume(&mut rng, &vol, i == 7);
        let got = catch_unwind(AssertUnwindSafe(|| {
            volume_read::hash_volume(&vol, w.budget, &key, &Layout::whole())
        }))
        .unwrap_or_else(|_| panic!("hash_volume panicked on volume #{i} (seed {seed}): {w:?}"));
        let too_large = w.bytes > w.budget as u128;
        let too_many = w.entries > MAX_ENTRIES;
        let too_deep = w.deepest_dir >= MAX_DEPTH;
        let context = || format!("volume #{i} (seed {seed}): {got:?}; written {w:?}");
        let label = match &got {
            Ok(Some(digest)) => {
                assert!(
                    !(w.bad_data || too_large || too_many || too_deep || w.fifo),
                    "{}",
                    context()
                );
                let again = volume_read::hash_volume(&vol, w.budget, &key, &Layout::whole());
                assert_eq!(again.ok().flatten().as_ref(), Some(digest), "{}", context());
                "ok"
            }
            Ok(None) => panic!("no volume read: {}", context()),
            Err(HashError::DataNotSymlink { .. } | HashError::DataTarget { .. }) => {
                assert!(w.bad_data, "{}", context());
                "bad ..data"
            }
            Err(HashError::TooLarge { limit }) => {
                assert!(too_large && *limit == w.budget, "{}", context());
                "too large"
            }
            Err(HashError::TooDeep { limit }) => {
                assert!(too_deep && *limit == MAX_DEPTH, "{}", context());
                "too deep"
            }
            Err(HashError::TooManyEntries { limit }) => {
                assert!(too_many && *limit == MAX_ENTRIES, "{}", context());
                "too many"
            }
            Err(HashError::Unsupported { path }) => {
                assert!(w.fifo, "{}", context());
                let kind = std::fs::symlink_metadata(path).unwrap().file_type();
                assert!(
                    std::os::unix::fs::FileTypeExt::is_fifo(&kind),
                    "{}",
                    context()
                );
                "unsupported"
            }
            Err(HashError::Io { .. }) => {
                // `..data` pointing to `..`-relative junk that does not exist.
                assert!(w.bad_data, "{}", context());
                "bad ..data"
            }
        };
        if !w.bad_data && !too_large && !too_many && !too_deep && !w.fifo {
            assert_eq!(label, "ok", "{}", context());
        }
        *counts.entry(label).or_default() += 1;
        std::fs::remove_dir_all(&vol).unwrap();
    }
    for label in ["ok", "bad ..data", "too large", "too deep", "unsupported"] {
        assert!(counts.get(label).is_some_and(|n| *n > 3), "{counts:?}");
    }
    assert!(counts.contains_key("too many"), "{counts:?}");
}

// ---------------------------------------------------------------------------------------
// Pod objects
// ---------------------------------------------------------------------------------------

fn name(rng: &mut Rng) -> Value {
    match rng.below(6) {
        0 => json!(rng.pick(FRAGMENTS)),
        1 => json!(value(rng)),
        _ => json!(rng.pick(&["app", "conf", "tls", "web", "sidecar", "init"])),
    }
}

fn items(rng: &mut Rng) -> Value {
    Value::Array(
        (0..rng.below(4))
            .map(|_| {
                let path = match rng.below(4) {
                    0 => vec!["d"; 1 + rng.below(2_000)].join("/") + "/k",
                    1 => rng.pick(FRAGMENTS).to_string(),
                    _ => "k".to_owned(),
                };
                json!({"key": name(rng), "path": path})
            })
            .collect(),
    )
}

fn volume(rng: &mut Rng) -> Value {
    let n = name(rng);
    match rng.below(7) {
        0 => json!({"name": n, "configMap": {"name": name(rng), "items": items(rng)}}),
        1 => json!({"name": n, "secret": {"secretName": name(rng), "items": items(rng)}}),
        2 => json!({"name": n, "secret": {}}),
        3 => json!({"name": n, "csi": {"driver": rng.pick(&["secrets-store.csi.k8s.io", "x", ""]),
            "volumeAttributes": {"secretProviderClass": name(rng)}}}),
        4 => json!({"name": n, "emptyDir": {}}),
        _ => {
            let sources: Vec<Value> = (0..rng.below(5))
                .map(|_| match rng.below(5) {
                    0 => json!({"configMap": {"name": name(rng), "items": items(rng)}}),
                    1 => json!({"secret": {"name": name(rng), "items": items(rng)}}),
                    2 => json!({"downwardAPI": {"items": [{"path": name(rng), "fieldRef": {"fieldPath": "metadata.labels"}}]}}),
                    3 => json!({"serviceAccountToken": {"path": name(rng)}}),
                    _ => json!({"clusterTrustBundle": {"path": name(rng)}}),
                })
                .collect();
            json!({"name": n, "projected": {"sources": sources}})
        }
    }
}

fn container(rng: &mut Rng, volumes: &[Value]) -> Value {
    let mounts: Vec<Value> = (0..rng.below(4))
        .map(|_| {
            let v = if volumes.is_empty() || rng.one_in(4) {
                name(rng)
            } else {
                rng.pick(volumes)["name"].clone()
            };
            let mut m = json!({"name": v, "mountPath": "/etc/app"});
            if rng.one_in(4) {
                m["subPath"] = json!(rng.pick(&["", "a", "../.."]));
            }
            m
        })
        .collect();
    let ports: Vec<Value> = (0..rng.below(3))
        .map(|_| {
            let number = *rng.pick(&[0i64, 1, 8080, 65535, 65536, -1, i32::MAX as i64]);
            json!({"containerPort": number, "name": name(rng),
                "protocol": rng.pick(&["TCP", "UDP", "SCTP", "tcp"])})
        })
        .collect();
    let env: Vec<Value> = (0..rng.below(3))
        .map(|_| match rng.below(3) {
            0 => json!({"name": "A", "valueFrom": {"configMapKeyRef": {"name": name(rng), "key": name(rng)}}}),
            1 => json!({"name": "B", "valueFrom": {"secretKeyRef": {"name": name(rng), "key": name(rng), "optional": true}}}),
            _ => json!({"name": "C", "value": value(rng)}),
        })
        .collect();
    let env_from: Vec<Value> = (0..rng.below(2))
        .map(|_| json!({"prefix": name(rng), "configMapRef": {"name": name(rng)}, "secretRef": {"name": name(rng)}}))
        .collect();
    let mut c = json!({"name": name(rng), "image": "x", "volumeMounts": mounts, "ports": ports,
        "env": env, "envFrom": env_from});
    if rng.one_in(3) {
        c["restartPolicy"] = json!(rng.pick(&["Always", "Never", ""]));
    }
    c
}

fn pod_json(rng: &mut Rng) -> Value {
    let volumes: Vec<Value> = (0..rng.below(6)).map(|_| volume(rng)).collect();
    let containers: Vec<Value> = (0..rng.below(4))
        .map(|_| container(rng, &volumes))
        .collect();
    let init: Vec<Value> = (0..rng.below(3))
        .map(|_| container(rng, &volumes))
        .collect();
    let statuses: Vec<Value> = (0..rng.below(3))
        .map(|_| {
            json!({"name": name(rng), "containerID": rng.pick(&["containerd://abc", "docker://", "", "cri-o://\u{0}", "x"]),
                "state": {"running": {}}})
        })
        .collect();
    let owners: Vec<Value> = (0..rng.below(3))
        .map(|_| {
            json!({"apiVersion": "apps/v1", "kind": rng.pick(&["ReplicaSet", "Deployment", "StatefulSet", "Node", ""]),
                "name": name(rng), "uid": rng.pick(&["", "forged", "rs-uid"]), "controller": rng.one_in(2)})
        })
        .collect();
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name(rng), "namespace": "tenant", "uid": rng.pick(&["u", "", "\u{202e}"]),
            "annotations": annotation_map(rng), "labels": {"app": name(rng)}, "ownerReferences": owners},
        "spec": {"nodeName": "node-a", "volumes": volumes, "containers": containers,
            "initContainers": init, "hostNetwork": rng.one_in(5)},
        "status": {"phase": rng.pick(&["Running", "Pending", ""]), "podIP": rng.pick(&["10.0.0.7", "::1", "999.1.1.1", "", "fe80::1%eth0"]),
            "containerStatuses": statuses}
    });
    // Now and then a field of the wrong type, or missing.
    match rng.below(12) {
        0 => pod["spec"]["volumes"] = json!("not a list"),
        1 => pod["metadata"]["annotations"] = json!({"reloadlet.io/action": 1}),
        2 => pod["spec"] = Value::Null,
        3 => pod["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("uid")
            .map(drop)
            .unwrap_or(()),
        _ => {}
    }
    pod
}

/// The pod conversion on random pod JSON (volumes with 2,000-level item paths, projected
/// sources of every kind, ports out of range, env references, forged owner references,
/// fields of the wrong type): decoding may refuse it, but what decodes converts without a
/// panic, every volume's layout is built, and the decision targets only the pod's own
/// non-init containers.
#[test]
fn pod_objects_convert_and_decide_without_panicking() {
    let mut converted = 0;
    search("pod_convert", 0x90d5, scaled(4_000), pod_json, |json| {
        let Ok(view) = serde_json::from_value::<reloadlet::k8s::pod_view::PodView>(json.clone())
        else {
            return;
        };
        let _ = reloadlet::k8s::pod_convert::env_only_sources(&view);
        let _ = reloadlet::k8s::pod_convert::controller_of(&view.metadata);
        let Some(info) = reloadlet::k8s::pod_convert::pod_info(&view) else {
            return;
        };
        converted += 1;
        for v in &info.volumes {
            let _ = Layout::of(v);
            let _ = Layout::sources_of(v, "rest");
        }
        let changed: BTreeSet<String> = info.volumes.iter().map(|v| v.name.clone()).collect();
        let _ = policy::validated_policy(&info);
        if let Decision::Signal { targets, .. } = policy::decide(&info, &changed) {
            for t in targets {
                assert!(info
                    .containers
                    .iter()
                    .any(|c| c.name == t.container && c.kind != ContainerKind::Init));
            }
        }
        for c in &info.containers {
            assert!(c.ports.iter().all(|p| p.number != 0));
        }
    });
    assert!(converted > 500, "converted {converted}");
}

/// A `…/reload` list of regular expressions each too big to compile (`a{1000}{1000}` is
/// millions of states): matching it must not cost the controller a compile to the regex
/// crate's 10 MiB default per entry and per change. Before the size cap, 200 such entries
/// took seconds of CPU for one ConfigMap change (minutes for a 256 KiB annotation).
#[test]
fn a_reload_list_of_huge_regexes_is_matched_cheaply() {
    let list = vec!["a{1000}{1000}"; 200].join(",") + ",app";
    let workload: BTreeMap<String, String> = [(rc::CONFIGMAP_RELOAD.to_owned(), list)].into();
    let (template, object) = (BTreeMap::new(), BTreeMap::new());
    let w = Workload {
        annotations: &workload,
        template: &template,
    };
    for name in ["app", "other"] {
        let changed = Changed {
            kind: SourceKind::ConfigMap,
            name,
            annotations: &object,
            referenced: true,
        };
        let want = (name == "app").then_some(rc::CONFIGMAP_RELOAD);
        assert_eq!(rc::matching(&w, &changed), want, "{name}");
    }
}
