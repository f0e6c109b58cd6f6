//! Reloader's annotations, understood (pure; `--reloader-compat`, off by default so that
//! reloadlet beside a running Reloader never doubles its rollouts).
//!
//! The semantics follow Reloader's own matcher (stakater/Reloader
//! `internal/pkg/reload/matcher.go`, `Matcher.ShouldReload`, and `service.go`,
//! `processResource`), in its order:
//!
//! 1. `reloader.stakater.com/ignore: "true"` on the ConfigMap or Secret: never.
//! 2. The workload's own annotations are read when they hold any relevant key, else its pod
//!    template's (`selectAnnotations`).
//! 3. `configmap.reloader.stakater.com/reload` / `secret.reloader.stakater.com/reload`: a
//!    comma-separated list of names, each an anchored regular expression (`^name$`; one that
//!    does not compile is compared literally). An explicit match rolls even when the
//!    workload does not reference the object.
//! 4. `reloader.stakater.com/search: "true"` on the workload with
//!    `reloader.stakater.com/match: "true"` on the object.
//! 5. `reloader.stakater.com/auto: "true"`, or the typed `configmap.reloader.stakater.com/
//!    auto` / `secret.reloader.stakater.com/auto`.
//!
//! 4 and 5 ("auto" reloads) apply only to objects the workload references (volumes, env,
//! envFrom). A pod template's own `reloadlet.io/action` wins over all of this; that check is
//! the caller's.

use crate::core::model::SourceKind;
use regex::RegexBuilder;
use std::collections::BTreeMap;

/// The label a Deployment's ReplicaSet and pods carry (`DefaultDeploymentUniqueLabelKey`).
pub const DEPLOYMENT_HASH: &str = "pod-template-hash";
/// Argo Rollouts' (`DefaultRolloutUniqueLabelKey`).
pub const ROLLOUT_HASH: &str = "rollouts-pod-template-hash";
pub const AUTO: &str = "reloader.stakater.com/auto";
pub const CONFIGMAP_AUTO: &str = "configmap.reloader.stakater.com/auto";
pub const SECRET_AUTO: &str = "secret.reloader.stakater.com/auto";
pub const CONFIGMAP_RELOAD: &str = "configmap.reloader.stakater.com/reload";
pub const SECRET_RELOAD: &str = "secret.reloader.stakater.com/reload";
pub const SEARCH: &str = "reloader.stakater.com/search";
pub const MATCH: &str = "reloader.stakater.com/match";
pub const IGNORE: &str = "reloader.stakater.com/ignore";

/// The annotations a workload (or its pod template) carries to roll (Reloader's
/// `hasRelevantAnnotations`); `match` and `ignore` are the ConfigMap's or Secret's own.
pub const WORKLOAD_KEYS: [&str; 6] = [
    AUTO,
    CONFIGMAP_AUTO,
    SECRET_AUTO,
    CONFIGMAP_RELOAD,
    SECRET_RELOAD,
    SEARCH,
];

/// The object that changed.
pub struct Changed<'a> {
    pub kind: SourceKind,
    pub name: &'a str,
    pub annotations: &'a BTreeMap<String, String>,
    /// Whether the workload's pod template references it.
    pub referenced: bool,
}

/// A workload's annotations and its pod template's.
pub struct Workload<'a> {
    pub annotations: &'a BTreeMap<String, String>,
    pub template: &'a BTreeMap<String, String>,
}

/// Which Reloader annotation makes the workload roll for `changed` (`None`: none does);
/// `…/reload` lists compiled for this call only (see [`ReloadLists`] for the cached form).
pub fn matching(workload: &Workload<'_>, changed: &Changed<'_>) -> Option<&'static str> {
    matching_with(workload, changed, &ReloadLists::default())
}

/// [`matching`] with the `…/reload` lists compiled once and kept in `lists`.
pub fn matching_with(
    workload: &Workload<'_>,
    changed: &Changed<'_>,
    lists: &ReloadLists,
) -> Option<&'static str> {
    if changed.annotations.get(IGNORE).map(String::as_str) == Some("true") {
        return None;
    }
    let (explicit, typed_auto) = match changed.kind {
        SourceKind::ConfigMap => (CONFIGMAP_RELOAD, CONFIGMAP_AUTO),
        SourceKind::Secret => (SECRET_RELOAD, SECRET_AUTO),
        // Reloader's annotations name ConfigMaps and Secrets only.
        SourceKind::SecretProviderClass | SourceKind::CsiVolume | SourceKind::PodCertificate => {
            return None
        }
    };
    let relevant = |a: &BTreeMap<String, String>| {
        [explicit, SEARCH, AUTO, typed_auto]
            .iter()
            .any(|k| a.contains_key(*k))
    };
    let annotations = if relevant(workload.annotations) {
        workload.annotations
    } else if relevant(workload.template) {
        workload.template
    } else {
        return None;
    };
    let is_true = |k: &str| annotations.get(k).map(String::as_str) == Some("true");
    if annotations
        .get(explicit)
        .is_some_and(|list| lists.get(list).matches(changed.name))
    {
        return Some(explicit);
    }
    if !changed.referenced {
        return None;
    }
    if is_true(SEARCH) && changed.annotations.get(MATCH).map(String::as_str) == Some("true") {
        return Some(SEARCH);
    }
    if is_true(AUTO) {
        return Some(AUTO);
    }
    is_true(typed_auto).then_some(typed_auto)
}

/// Whether a Reloader annotation on the workload names a Secret (they need `--secrets`).
pub fn wants_secrets(workload: &Workload<'_>) -> bool {
    [workload.annotations, workload.template].iter().any(|a| {
        a.contains_key(SECRET_RELOAD)
            || a.get(SECRET_AUTO).map(String::as_str) == Some("true")
            || a.get(AUTO).map(String::as_str) == Some("true")
            || a.get(SEARCH).map(String::as_str) == Some("true")
    })
}

/// The most memory one `…/reload` entry's compiled program may take. A pattern for object
/// names compiles to a few KiB; the regex crate's default (10 MiB) lets one entry such as
/// `a{1000}{1000}` cost tens of milliseconds of compiling, and a 256 KiB annotation holds
/// thousands of entries, each compiled on every change of every ConfigMap or Secret. Over
/// this limit an entry fails to compile early and is compared literally, as any entry that
/// does not compile.
const MAX_PATTERN_SIZE: usize = 64 * 1024;

/// An entry longer than this is compared literally without compiling it: Kubernetes object
/// names are at most 253 characters, and no pattern for them needs to be longer.
const MAX_PATTERN_LEN: usize = 1024;

/// At most this many entries of one `…/reload` list are read (after dropping repeats). A
/// workload names a handful of ConfigMaps; a 256 KiB annotation could hold 40,000 entries.
/// A longer list is refused whole — it matches nothing — and the controller says so.
pub const MAX_LIST_ENTRIES: usize = 256;

/// How many compiled entries [`ReloadLists`] keeps before it starts over (a few KiB each).
const MAX_CACHED_ENTRIES: usize = 4096;

/// One entry of a `…/reload` list.
#[derive(Debug)]
enum Entry {
    Pattern(String, regex::Regex),
    Literal(String),
}

/// A parsed `…/reload` list: each entry an anchored regular expression, literal when it does
/// not compile (as Reloader does) or is over [`MAX_PATTERN_LEN`] / [`MAX_PATTERN_SIZE`] /
/// [`MAX_PATTERN_NEST`]. The expressions are a tenant's: `regex` matches in linear time, and
/// these caps make one entry such as `(a{1000}){1000}` cost bounded CPU and memory to refuse
/// (issue #43 §1).
#[derive(Debug)]
pub struct NameList {
    entries: Vec<Entry>,
    /// Over [`MAX_LIST_ENTRIES`]: matches nothing.
    too_long: bool,
}

impl NameList {
    pub fn parse(list: &str) -> Self {
        let mut seen = std::collections::BTreeSet::new();
        let distinct: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|v| !v.is_empty() && seen.insert(*v))
            .take(MAX_LIST_ENTRIES + 1)
            .collect();
        if distinct.len() > MAX_LIST_ENTRIES {
            return Self {
                entries: Vec::new(),
                too_long: true,
            };
        }
        let entries = distinct
            .into_iter()
            .map(|v| {
                if v.len() > MAX_PATTERN_LEN {
                    return Entry::Literal(v.to_owned());
                }
                match RegexBuilder::new(&format!("^(?:{v})$"))
                    .size_limit(MAX_PATTERN_SIZE)
                    .dfa_size_limit(MAX_PATTERN_SIZE)
                    .nest_limit(MAX_PATTERN_NEST)
                    .build()
                {
                    Ok(re) => Entry::Pattern(v.to_owned(), re),
                    Err(_) => Entry::Literal(v.to_owned()),
                }
            })
            .collect();
        Self {
            entries,
            too_long: false,
        }
    }

    /// Over [`MAX_LIST_ENTRIES`] distinct entries: refused whole.
    pub fn too_long(&self) -> bool {
        self.too_long
    }

    pub fn matches(&self, name: &str) -> bool {
        self.entries.iter().any(|e| match e {
            Entry::Pattern(_, re) => re.is_match(name),
            Entry::Literal(v) => v == name,
        })
    }

    /// The entries as written, repeats dropped.
    pub fn entries(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| match e {
            Entry::Pattern(v, _) | Entry::Literal(v) => v.as_str(),
        })
    }
}

/// `…/reload` lists compiled once per distinct text, not once per change and pod: at most
/// [`MAX_CACHED_ENTRIES`] compiled entries are kept; past that the cache starts over.
#[derive(Debug, Default)]
pub struct ReloadLists {
    lists: std::cell::RefCell<(
        std::collections::HashMap<String, std::sync::Arc<NameList>>,
        usize,
    )>,
}

impl ReloadLists {
    pub fn get(&self, list: &str) -> std::sync::Arc<NameList> {
        let mut cache = self.lists.borrow_mut();
        if let Some(found) = cache.0.get(list) {
            return found.clone();
        }
        let parsed = std::sync::Arc::new(NameList::parse(list));
        let size = parsed.entries.len().max(1);
        if cache.1 + size > MAX_CACHED_ENTRIES {
            *cache = Default::default();
        }
        cache.1 += size;
        cache.0.insert(list.to_owned(), parsed.clone());
        parsed
    }
}

#[cfg(test)]
fn names_match(list: &str, name: &str) -> bool {
    NameList::parse(list).matches(name)
}

/// How deeply one entry may nest groups and repetitions (the crate's default is 250).
const MAX_PATTERN_NEST: u32 = 32;

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn check(
        workload: &[(&str, &str)],
        template: &[(&str, &str)],
        kind: SourceKind,
        name: &str,
        object: &[(&str, &str)],
        referenced: bool,
    ) -> Option<&'static str> {
        let (w, t, o) = (ann(workload), ann(template), ann(object));
        matching(
            &Workload {
                annotations: &w,
                template: &t,
            },
            &Changed {
                kind,
                name,
                annotations: &o,
                referenced,
            },
        )
    }

    use SourceKind::{ConfigMap as Cm, Secret as Sec};

    /// A tenant's pathological entry is refused at bounded cost and compared literally; an
    /// ordinary one still matches.
    #[test]
    fn a_pathological_reload_entry_costs_bounded_and_matches_nothing() {
        assert!(!names_match(
            "(a{1000}){1000},((((((((((((((((((((((((((((((((((a))))))))))))))))))))))))))))))))))",
            "a"
        ));
        assert!(names_match("app-.*,other", "app-config"));
        assert!(
            names_match("(a{1000}){1000}", "(a{1000}){1000}"),
            "compared literally"
        );
        // Refused by the size limit, not compiled: the default limit would take it.
        assert!(RegexBuilder::new("^(?:(a{100}){100})$")
            .size_limit(MAX_PATTERN_SIZE)
            .build()
            .is_err());
        assert!(regex::Regex::new("^(?:(a{100}){100})$").is_ok());
    }

    /// A list of more distinct entries than any workload names is refused whole; repeats do
    /// not count; a list is compiled once however often it is asked about.
    #[test]
    fn a_huge_reload_list_is_refused_and_lists_are_compiled_once() {
        let many: Vec<String> = (0..=MAX_LIST_ENTRIES).map(|i| format!("cm-{i}")).collect();
        let long = NameList::parse(&many.join(","));
        assert!(long.too_long());
        assert!(!long.matches("cm-0"));
        let repeated = vec!["cm-0"; 10 * MAX_LIST_ENTRIES].join(",");
        let short = NameList::parse(&repeated);
        assert!(!short.too_long());
        assert!(short.matches("cm-0"));
        assert_eq!(short.entries().collect::<Vec<_>>(), ["cm-0"]);

        let lists = ReloadLists::default();
        let a = lists.get("app-.*, other");
        let b = lists.get("app-.*, other");
        assert!(std::sync::Arc::ptr_eq(&a, &b), "compiled once");
        assert!(a.matches("app-x") && a.matches("other") && !a.matches("x"));
        // The cache is bounded: many distinct lists never keep more than the cap.
        for i in 0..2 * MAX_CACHED_ENTRIES {
            lists.get(&format!("cm-{i}"));
        }
        let (kept, entries) = &*lists.lists.borrow();
        assert!(*entries <= MAX_CACHED_ENTRIES && kept.len() <= MAX_CACHED_ENTRIES);
    }

    #[test]
    fn every_annotation() {
        // (workload annotations, kind, name, object annotations, referenced, wanted)
        type Case<'a> = (
            &'a [(&'a str, &'a str)],
            SourceKind,
            &'a str,
            &'a [(&'a str, &'a str)],
            bool,
            Option<&'a str>,
        );
        let cases: &[Case] = &[
            (&[(AUTO, "true")], Cm, "app", &[], true, Some(AUTO)),
            (&[(AUTO, "true")], Sec, "tls", &[], true, Some(AUTO)),
            (&[(AUTO, "true")], Cm, "app", &[], false, None),
            (&[(AUTO, "false")], Cm, "app", &[], true, None),
            (
                &[(CONFIGMAP_AUTO, "true")],
                Cm,
                "app",
                &[],
                true,
                Some(CONFIGMAP_AUTO),
            ),
            (&[(CONFIGMAP_AUTO, "true")], Sec, "tls", &[], true, None),
            (
                &[(SECRET_AUTO, "true")],
                Sec,
                "tls",
                &[],
                true,
                Some(SECRET_AUTO),
            ),
            (
                &[(CONFIGMAP_RELOAD, "app,other")],
                Cm,
                "app",
                &[],
                false,
                Some(CONFIGMAP_RELOAD),
            ),
            (
                &[(CONFIGMAP_RELOAD, "app-.*")],
                Cm,
                "app-v2",
                &[],
                true,
                Some(CONFIGMAP_RELOAD),
            ),
            (&[(CONFIGMAP_RELOAD, "app")], Cm, "app-v2", &[], true, None),
            (&[(CONFIGMAP_RELOAD, "app")], Sec, "app", &[], true, None),
            (
                &[(SECRET_RELOAD, "tls")],
                Sec,
                "tls",
                &[],
                false,
                Some(SECRET_RELOAD),
            ),
            // An entry that is no regular expression is compared literally.
            (
                &[(CONFIGMAP_RELOAD, "a(b")],
                Cm,
                "a(b",
                &[],
                true,
                Some(CONFIGMAP_RELOAD),
            ),
            (
                &[(SEARCH, "true")],
                Cm,
                "app",
                &[(MATCH, "true")],
                true,
                Some(SEARCH),
            ),
            (&[(SEARCH, "true")], Cm, "app", &[], true, None),
            (
                &[(SEARCH, "true")],
                Cm,
                "app",
                &[(MATCH, "true")],
                false,
                None,
            ),
            (
                &[(AUTO, "true")],
                Cm,
                "app",
                &[(IGNORE, "true")],
                true,
                None,
            ),
            (
                &[(CONFIGMAP_RELOAD, "app")],
                Cm,
                "app",
                &[(IGNORE, "true")],
                true,
                None,
            ),
            (&[], Cm, "app", &[], true, None),
        ];
        for (i, (workload, kind, name, object, referenced, want)) in cases.iter().enumerate() {
            assert_eq!(
                check(workload, &[], *kind, name, object, *referenced),
                *want,
                "case {i}"
            );
        }
    }

    #[test]
    fn the_template_is_read_when_the_workload_has_nothing_relevant() {
        assert_eq!(
            check(&[("team", "web")], &[(AUTO, "true")], Cm, "app", &[], true),
            Some(AUTO)
        );
        // The workload's own relevant annotation wins over the template's.
        assert_eq!(
            check(
                &[(CONFIGMAP_RELOAD, "other")],
                &[(AUTO, "true")],
                Cm,
                "app",
                &[],
                true
            ),
            None
        );
    }

    #[test]
    fn secrets_wanted() {
        let (w, t) = (ann(&[(SECRET_RELOAD, "tls")]), ann(&[]));
        assert!(wants_secrets(&Workload {
            annotations: &w,
            template: &t
        }));
        let w = ann(&[(CONFIGMAP_AUTO, "true")]);
        assert!(!wants_secrets(&Workload {
            annotations: &w,
            template: &t
        }));
    }
}
