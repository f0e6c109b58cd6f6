//! Parsing of the `reloadlet.io/*` pod annotations into a [`PodPolicy`] (pure, fuzzed).
//!
//! Annotations are user input: every error is a sentence that can go into a Warning Event.

use crate::model::ReloadSignal;
use std::collections::BTreeMap;

pub const PREFIX: &str = "reloadlet.io/";
pub const ACTION: &str = "reloadlet.io/action";
pub const SIGNAL: &str = "reloadlet.io/signal";
pub const CONTAINERS: &str = "reloadlet.io/containers";
pub const CONFIGMAPS: &str = "reloadlet.io/configmaps";
pub const SECRETS: &str = "reloadlet.io/secrets";
pub const EVICT_UNOWNED: &str = "reloadlet.io/evict-unowned";
/// `"off"`: signal without first checking that the process handles the signal.
pub const SIGNAL_CHECK: &str = "reloadlet.io/signal-check";

/// `"false"` opts a pod out of the controller's projection nudges (fast projection).
pub const FAST_PROJECTION: &str = "reloadlet.io/fast-projection";
/// Written by `reloadlet controller` only (never by users): `configmap/<name>@<rv>[#n]`.
pub const PROJECTION_NUDGE: &str = "reloadlet.io/projection-nudge";
/// `evict`: the controller evicts the pod when a ConfigMap/Secret it reads through env
/// changes, whatever `reloadlet.io/action` says (docs/env-consumers.md).
pub const ENV_ACTION: &str = "reloadlet.io/env-action";
/// Written by `reloadlet controller` only: the digest of each env reference when it first saw
/// the pod (`configmap/<name>=<16 hex>,…`).
pub const ENV_BASELINE: &str = "reloadlet.io/env-baseline";

const KNOWN: [&str; 11] = [
    ENV_ACTION,
    ENV_BASELINE,
    ACTION,
    SIGNAL,
    CONTAINERS,
    CONFIGMAPS,
    SECRETS,
    EVICT_UNOWNED,
    SIGNAL_CHECK,
    FAST_PROJECTION,
    PROJECTION_NUDGE,
];
/// Kubernetes object names are at most 253 characters; a list longer than this is not a typo.
const MAX_LIST_ITEMS: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Signal(ReloadSignal),
    Evict { allow_unowned: bool },
}

/// What a pod asked for through its annotations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodPolicy {
    pub action: Action,
    /// `reloadlet.io/containers`; `None` means every container that mounts a changed volume.
    pub containers: Option<Vec<String>>,
    /// `reloadlet.io/configmaps` / `reloadlet.io/secrets`. When both are `None` every
    /// ConfigMap/Secret source counts; when either is set, only the listed sources count.
    pub configmaps: Option<Vec<String>>,
    pub secrets: Option<Vec<String>>,
}

impl PodPolicy {
    pub fn narrowed(&self) -> bool {
        self.configmaps.is_some() || self.secrets.is_some()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationError {
    #[error("{ACTION}: {0:?} is not an action; use \"signal\" or \"evict\"")]
    UnknownAction(String),
    #[error("{SIGNAL}: {0:?} is not an allowed signal; use one of HUP, INT, QUIT, USR1, USR2, TERM, WINCH (with or without SIG)")]
    UnknownSignal(String),
    #[error("{0}: the list is empty; remove the annotation or name at least one item")]
    EmptyList(&'static str),
    #[error("{key}: {item:?} is not a valid {what} name")]
    InvalidName {
        key: &'static str,
        item: String,
        what: &'static str,
    },
    #[error("{0}: more than {MAX_LIST_ITEMS} items")]
    TooManyItems(&'static str),
    #[error("{EVICT_UNOWNED}: {0:?} is not a boolean; use \"true\" or \"false\"")]
    InvalidBool(String),
    #[error("{SIGNAL_CHECK}: {0:?} is not valid; use \"on\" (the default) or \"off\"")]
    InvalidSignalCheck(String),
    #[error("{FAST_PROJECTION}: {0:?} is not a boolean; use \"true\" or \"false\"")]
    InvalidFastProjection(String),
    #[error("{ENV_ACTION}: {0:?} is not valid; use \"evict\" (or remove it)")]
    InvalidEnvAction(String),
    #[error("unknown annotation {0:?}; known: reloadlet.io/action, signal, containers, configmaps, secrets, evict-unowned, signal-check, fast-projection, projection-nudge, env-action, env-baseline")]
    UnknownKey(String),
}

/// Parses the pod's annotations. `Ok(None)`: the pod did not opt in (no `reloadlet.io/action`).
pub fn parse(annotations: &BTreeMap<String, String>) -> Result<Option<PodPolicy>, AnnotationError> {
    let Some(action) = annotations.get(ACTION) else {
        return Ok(None);
    };
    if let Some(unknown) = annotations
        .keys()
        .find(|k| k.starts_with(PREFIX) && !KNOWN.contains(&k.as_str()))
    {
        return Err(AnnotationError::UnknownKey(unknown.clone()));
    }
    let action = match action.trim().to_ascii_lowercase().as_str() {
        "signal" => {
            let signal = match annotations.get(SIGNAL) {
                None => ReloadSignal::Hup,
                Some(s) => ReloadSignal::parse(s)
                    .ok_or_else(|| AnnotationError::UnknownSignal(s.clone()))?,
            };
            Action::Signal(signal)
        }
        "evict" => Action::Evict {
            allow_unowned: parse_bool(annotations.get(EVICT_UNOWNED))?,
        },
        _ => return Err(AnnotationError::UnknownAction(action.clone())),
    };
    signal_check(annotations)?;
    fast_projection(annotations)?;
    env_evicts(annotations)?;
    Ok(Some(PodPolicy {
        action,
        containers: parse_list(annotations, CONTAINERS, "container", is_dns_label)?,
        configmaps: parse_list(annotations, CONFIGMAPS, "ConfigMap", is_dns_subdomain)?,
        secrets: parse_list(annotations, SECRETS, "Secret", is_dns_subdomain)?,
    }))
}

/// `reloadlet.io/signal-check`: `true` (the default, `"on"`) when reloadlet reads the
/// target's signal masks before signalling; `false` (`"off"`) to signal regardless.
pub fn signal_check(annotations: &BTreeMap<String, String>) -> Result<bool, AnnotationError> {
    match annotations.get(SIGNAL_CHECK) {
        None => Ok(true),
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "on" => Ok(true),
            "off" => Ok(false),
            _ => Err(AnnotationError::InvalidSignalCheck(v.clone())),
        },
    }
}

/// `reloadlet.io/fast-projection`: may the controller nudge the kubelet for this pod?
/// Absent means yes.
pub fn fast_projection(annotations: &BTreeMap<String, String>) -> Result<bool, AnnotationError> {
    match annotations.get(FAST_PROJECTION) {
        None => Ok(true),
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(AnnotationError::InvalidFastProjection(v.clone())),
        },
    }
}

/// `reloadlet.io/env-action: evict`: evict the pod when a ConfigMap/Secret it reads through env
/// changes, even when its `reloadlet.io/action` is `signal`. Absent: `false`.
pub fn env_evicts(annotations: &BTreeMap<String, String>) -> Result<bool, AnnotationError> {
    match annotations.get(ENV_ACTION) {
        None => Ok(false),
        Some(v) if v.trim().eq_ignore_ascii_case("evict") => Ok(true),
        Some(v) => Err(AnnotationError::InvalidEnvAction(v.clone())),
    }
}

fn parse_bool(value: Option<&String>) -> Result<bool, AnnotationError> {
    match value.map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(false),
        Some(v) if v == "true" => Ok(true),
        Some(v) if v == "false" => Ok(false),
        Some(_) => Err(AnnotationError::InvalidBool(
            value.cloned().unwrap_or_default(),
        )),
    }
}

fn parse_list(
    annotations: &BTreeMap<String, String>,
    key: &'static str,
    what: &'static str,
    valid: fn(&str) -> bool,
) -> Result<Option<Vec<String>>, AnnotationError> {
    let Some(raw) = annotations.get(key) else {
        return Ok(None);
    };
    let mut items: Vec<String> = Vec::new();
    for item in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if !valid(item) {
            return Err(AnnotationError::InvalidName {
                key,
                item: item.to_owned(),
                what,
            });
        }
        if !items.iter().any(|i| i == item) {
            items.push(item.to_owned());
        }
        if items.len() > MAX_LIST_ITEMS {
            return Err(AnnotationError::TooManyItems(key));
        }
    }
    if items.is_empty() {
        return Err(AnnotationError::EmptyList(key));
    }
    Ok(Some(items))
}

/// RFC 1123 label: container names.
fn is_dns_label(s: &str) -> bool {
    s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: ConfigMap and Secret names.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.')
            .all(|part| !part.is_empty() && is_dns_label(part))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn signal(sig: ReloadSignal) -> PodPolicy {
        PodPolicy {
            action: Action::Signal(sig),
            containers: None,
            configmaps: None,
            secrets: None,
        }
    }

    #[test]
    fn table() {
        let list = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        type Case<'a> = (
            Vec<(&'a str, &'a str)>,
            Result<Option<PodPolicy>, AnnotationError>,
        );
        let cases: Vec<Case> = vec![
            (vec![], Ok(None)),
            (vec![("other.io/action", "signal")], Ok(None)),
            (vec![("reloadlet.io/signal", "HUP")], Ok(None)),
            (
                vec![(ACTION, "signal")],
                Ok(Some(signal(ReloadSignal::Hup))),
            ),
            (
                vec![(ACTION, " Signal ")],
                Ok(Some(signal(ReloadSignal::Hup))),
            ),
            (
                vec![(ACTION, "signal"), (SIGNAL, "usr1")],
                Ok(Some(signal(ReloadSignal::Usr1))),
            ),
            (
                vec![(ACTION, "signal"), (SIGNAL, "SIGWINCH")],
                Ok(Some(signal(ReloadSignal::Winch))),
            ),
            (
                vec![(ACTION, "signal"), (SIGNAL, "SIGKILL")],
                Err(AnnotationError::UnknownSignal("SIGKILL".into())),
            ),
            (
                vec![(ACTION, "restart")],
                Err(AnnotationError::UnknownAction("restart".into())),
            ),
            (
                vec![(ACTION, "")],
                Err(AnnotationError::UnknownAction("".into())),
            ),
            (
                vec![(ACTION, "signal"), (CONTAINERS, "nginx, sidecar,nginx")],
                Ok(Some(PodPolicy {
                    containers: list(&["nginx", "sidecar"]),
                    ..signal(ReloadSignal::Hup)
                })),
            ),
            (
                vec![(ACTION, "signal"), (CONTAINERS, " , ")],
                Err(AnnotationError::EmptyList(CONTAINERS)),
            ),
            (
                vec![(ACTION, "signal"), (CONTAINERS, "")],
                Err(AnnotationError::EmptyList(CONTAINERS)),
            ),
            (
                vec![(ACTION, "signal"), (CONTAINERS, "Nginx")],
                Err(AnnotationError::InvalidName {
                    key: CONTAINERS,
                    item: "Nginx".into(),
                    what: "container",
                }),
            ),
            (
                vec![(ACTION, "signal"), (CONFIGMAPS, "nginx-conf,app.v2")],
                Ok(Some(PodPolicy {
                    configmaps: list(&["nginx-conf", "app.v2"]),
                    ..signal(ReloadSignal::Hup)
                })),
            ),
            (
                vec![(ACTION, "signal"), (SECRETS, "a..b")],
                Err(AnnotationError::InvalidName {
                    key: SECRETS,
                    item: "a..b".into(),
                    what: "Secret",
                }),
            ),
            (
                vec![(ACTION, "evict")],
                Ok(Some(PodPolicy {
                    action: Action::Evict {
                        allow_unowned: false,
                    },
                    containers: None,
                    configmaps: None,
                    secrets: None,
                })),
            ),
            (
                vec![(ACTION, "evict"), (EVICT_UNOWNED, "TRUE")],
                Ok(Some(PodPolicy {
                    action: Action::Evict {
                        allow_unowned: true,
                    },
                    containers: None,
                    configmaps: None,
                    secrets: None,
                })),
            ),
            (
                vec![(ACTION, "evict"), (EVICT_UNOWNED, "yes")],
                Err(AnnotationError::InvalidBool("yes".into())),
            ),
            (
                vec![(ACTION, "signal"), (SIGNAL_CHECK, " OFF ")],
                Ok(Some(signal(ReloadSignal::Hup))),
            ),
            (
                vec![(ACTION, "signal"), (SIGNAL_CHECK, "no")],
                Err(AnnotationError::InvalidSignalCheck("no".into())),
            ),
            (
                vec![
                    (ACTION, "signal"),
                    (FAST_PROJECTION, "False"),
                    (PROJECTION_NUDGE, "configmap/a@1#2"),
                ],
                Ok(Some(signal(ReloadSignal::Hup))),
            ),
            (
                vec![(ACTION, "signal"), (FAST_PROJECTION, "no")],
                Err(AnnotationError::InvalidFastProjection("no".into())),
            ),
            (
                vec![(ACTION, "signal"), ("reloadlet.io/singal", "HUP")],
                Err(AnnotationError::UnknownKey("reloadlet.io/singal".into())),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse(&ann(&input)), want, "{input:?}");
        }
    }

    #[test]
    fn signal_check_is_on_unless_turned_off() {
        assert_eq!(signal_check(&ann(&[])), Ok(true));
        assert_eq!(signal_check(&ann(&[(SIGNAL_CHECK, "on")])), Ok(true));
        assert_eq!(signal_check(&ann(&[(SIGNAL_CHECK, "Off")])), Ok(false));
        assert_eq!(
            signal_check(&ann(&[(SIGNAL_CHECK, "false")]))
                .unwrap_err()
                .to_string(),
            "reloadlet.io/signal-check: \"false\" is not valid; use \"on\" (the default) or \"off\""
        );
    }

    #[test]
    fn long_lists_are_refused() {
        let many = (0..100)
            .map(|i| format!("c{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(
            parse(&ann(&[(ACTION, "signal"), (CONTAINERS, &many)])),
            Err(AnnotationError::TooManyItems(CONTAINERS))
        );
    }

    #[test]
    fn errors_read_as_sentences() {
        let err = parse(&ann(&[(ACTION, "signal"), (SIGNAL, "KILL")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "reloadlet.io/signal: \"KILL\" is not an allowed signal; use one of HUP, INT, QUIT, USR1, USR2, TERM, WINCH (with or without SIG)"
        );
    }
}
