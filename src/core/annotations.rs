//! Parsing of the `reloadlet.io/*` pod annotations into a [`PodPolicy`] (pure, fuzzed).
//!
//! Annotations are user input: every error is a sentence that can go into a Warning Event.

use crate::core::model::{ReloadSignal, SignalCheck};
use crate::core::rollout::{self, BlockedError, BLOCKED_TIMEOUT, ON_BLOCKED};
use std::collections::BTreeMap;

pub const PREFIX: &str = "reloadlet.io/";
pub const ACTION: &str = "reloadlet.io/action";
pub const SIGNAL: &str = "reloadlet.io/signal";
pub const CONTAINERS: &str = "reloadlet.io/containers";
pub const CONFIGMAPS: &str = "reloadlet.io/configmaps";
pub const SECRETS: &str = "reloadlet.io/secrets";
/// Narrowing to CSI volumes of the Secrets Store driver by SecretProviderClass
/// (`csi.volumeAttributes.secretProviderClass`), docs/csi.md.
pub const SECRET_PROVIDER_CLASSES: &str = "reloadlet.io/secretproviderclasses";
/// Narrowing to CSI volumes by pod volume name (any driver reloadlet watches), docs/csi.md.
pub const CSI_VOLUMES: &str = "reloadlet.io/csi-volumes";
/// Opt-in to the rotations of projected `podCertificate` sources (KEP-4317), by signer name:
/// `example.com/mtls[,…]`. Without it a rotation never acts (docs/signals.md).
pub const POD_CERTIFICATES: &str = "reloadlet.io/pod-certificates";
pub const EVICT_UNOWNED: &str = "reloadlet.io/evict-unowned";
/// `"off"`: signal without first checking that the process handles the signal.
pub const SIGNAL_CHECK: &str = "reloadlet.io/signal-check";

/// `reloadlet.io/action: http`: the port (a number or a named container port), path,
/// method, body and scheme of the reload request.
pub const HTTP_PORT: &str = "reloadlet.io/http-port";
pub const HTTP_PATH: &str = "reloadlet.io/http-path";
pub const HTTP_METHOD: &str = "reloadlet.io/http-method";
pub const HTTP_BODY: &str = "reloadlet.io/http-body";
pub const HTTP_SCHEME: &str = "reloadlet.io/http-scheme";

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
/// Written by `reloadlet controller` only: the digest of what an `action: rollout` pod reads of
/// each ConfigMap/Secret (volumes and env), like [`ENV_BASELINE`] (docs/rollout.md).
pub const ROLLOUT_BASELINE: &str = "reloadlet.io/rollout-baseline";
/// Written by whoever acts on the pod: what it applied (`reloadlet status`, docs/status.md;
/// the record's format is `core::status::applied`'s).
pub const APPLIED: &str = "reloadlet.io/applied";

const KNOWN: [&str; 25] = [
    POD_CERTIFICATES,
    ROLLOUT_BASELINE,
    APPLIED,
    // Written by `reloadlet controller` only: what it holds for an env consumer.
    crate::core::pacing::ENV_PACING,
    // Copied from the pod template onto every pod a rollout creates.
    crate::core::rollout::RESTARTED_FOR,
    ENV_ACTION,
    ENV_BASELINE,
    ACTION,
    HTTP_PORT,
    HTTP_PATH,
    HTTP_METHOD,
    HTTP_BODY,
    HTTP_SCHEME,
    SIGNAL,
    CONTAINERS,
    CONFIGMAPS,
    SECRETS,
    SECRET_PROVIDER_CLASSES,
    CSI_VOLUMES,
    EVICT_UNOWNED,
    SIGNAL_CHECK,
    FAST_PROJECTION,
    PROJECTION_NUDGE,
    ON_BLOCKED,
    BLOCKED_TIMEOUT,
];
/// Kubernetes object names are at most 253 characters; a list longer than this is not a typo.
const MAX_LIST_ITEMS: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Signal {
        signal: ReloadSignal,
        /// `reloadlet.io/signal-check`.
        check: SignalCheck,
    },
    Evict {
        allow_unowned: bool,
    },
    Http(HttpSpec),
    /// `reloadlet.io/action: rollout`: `reloadlet controller` rolls the owning workload
    /// (docs/rollout.md); the node agent never acts on the pod.
    Rollout,
    /// `reloadlet.io/action: restart`: the containers' main processes are stopped and the
    /// kubelet starts them again in the same pod (docs/restart.md, `core::restart`).
    Restart(super::restart::RestartSpec),
}

/// The request of `reloadlet.io/action: http` (sent to the pod's IP).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpSpec {
    pub port: HttpPort,
    /// Path and optional query, starting with `/` (default `/-/reload`).
    pub path: String,
    pub method: HttpMethod,
    /// Sent as is (default empty).
    pub body: String,
    pub scheme: HttpScheme,
}

/// `reloadlet.io/http-port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpPort {
    Number(u16),
    /// A container port's `name` (an IANA service name, like Kubernetes' named ports).
    Named(String),
}

impl std::fmt::Display for HttpPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::Named(name) => write!(f, "{name:?}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HttpMethod {
    Post,
    Put,
    Get,
}

impl HttpMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Post => "POST",
            Self::Put => "PUT",
            Self::Get => "GET",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HttpScheme {
    Http,
    Https,
}

impl HttpScheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
        }
    }
}

/// `reloadlet.io/http-path` when absent: Prometheus' and Alertmanager's reload endpoint.
pub const DEFAULT_HTTP_PATH: &str = "/-/reload";
/// Longest `reloadlet.io/http-path` accepted (a path, not a document).
const MAX_HTTP_PATH: usize = 2048;

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
    /// `reloadlet.io/secretproviderclasses` / `reloadlet.io/csi-volumes`: narrowing lists too
    /// (any one set, and only the listed sources count).
    pub secret_provider_classes: Option<Vec<String>>,
    pub csi_volumes: Option<Vec<String>>,
    /// `reloadlet.io/pod-certificates`: the signers whose `podCertificate` rotations count.
    /// An opt-in, not a narrowing list: it never leaves a ConfigMap or Secret out.
    pub pod_certificates: Option<Vec<String>>,
}

impl PodPolicy {
    pub fn narrowed(&self) -> bool {
        self.configmaps.is_some()
            || self.secrets.is_some()
            || self.secret_provider_classes.is_some()
            || self.csi_volumes.is_some()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationError {
    #[error(
        "{ACTION}: {0:?} is not an action; use \"signal\", \"evict\", \"http\", \"rollout\" or \"restart\""
    )]
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
    #[error("{ENV_ACTION}: {0:?} is not valid; use \"evict\" or \"restart\" (or remove it)")]
    InvalidEnvAction(String),
    #[error("{HTTP_PORT} is required with {ACTION}: http (a port number or the name of a container port)")]
    MissingHttpPort,
    #[error("{HTTP_PORT}: {0:?} is neither a port number (1-65535) nor a port name (1-15 lowercase letters, digits and '-', with at least one letter)")]
    InvalidHttpPort(String),
    #[error("{HTTP_PATH}: {0:?} is not an absolute URL path; use a path starting with \"/\" (e.g. /-/reload), without spaces")]
    InvalidHttpPath(String),
    #[error("{HTTP_METHOD}: {0:?} is not allowed; use POST (the default), PUT or GET")]
    InvalidHttpMethod(String),
    #[error("{HTTP_SCHEME}: {0:?} is not valid; use \"http\" (the default) or \"https\"")]
    InvalidHttpScheme(String),
    #[error("unknown annotation {0:?}; known: reloadlet.io/action, signal, containers, configmaps, secrets, secretproviderclasses, csi-volumes, evict-unowned, signal-check, http-port, http-path, http-method, http-body, http-scheme, fast-projection, projection-nudge, env-action, env-baseline, on-blocked, blocked-timeout, rollout-baseline, restarted-for, restart-containers, restart-grace, restart-timeout, drain, debounce, min-interval, flap-threshold, window, window-duration, window-timezone, window-actions")]
    UnknownKey(String),
    /// `reloadlet.io/on-blocked` / `reloadlet.io/blocked-timeout` (core::rollout).
    #[error(transparent)]
    Blocked(#[from] BlockedError),
    /// `reloadlet.io/restart-*` (core::restart).
    #[error(transparent)]
    Restart(#[from] super::restart::RestartError),
}

/// Parses the pod's annotations. `Ok(None)`: the pod did not opt in (no `reloadlet.io/action`).
pub fn parse(annotations: &BTreeMap<String, String>) -> Result<Option<PodPolicy>, AnnotationError> {
    let Some(action) = annotations.get(ACTION) else {
        return Ok(None);
    };
    if let Some(unknown) = annotations.keys().find(|k| {
        k.starts_with(PREFIX)
            && !KNOWN.contains(&k.as_str())
            && !super::pacing::spec::ANNOTATIONS.contains(&k.as_str())
            && !super::restart::ANNOTATIONS.contains(&k.as_str())
            && !super::restart_grant::ANNOTATIONS.contains(&k.as_str())
    }) {
        return Err(AnnotationError::UnknownKey(unknown.clone()));
    }
    let action = match action.trim().to_ascii_lowercase().as_str() {
        "signal" => {
            let signal = match annotations.get(SIGNAL) {
                None => ReloadSignal::Hup,
                Some(s) => ReloadSignal::parse(s)
                    .ok_or_else(|| AnnotationError::UnknownSignal(s.clone()))?,
            };
            Action::Signal {
                signal,
                check: signal_check(annotations)?,
            }
        }
        "evict" => Action::Evict {
            allow_unowned: parse_bool(annotations.get(EVICT_UNOWNED))?,
        },
        "http" => Action::Http(http_spec(annotations)?),
        "rollout" => Action::Rollout,
        "restart" => Action::Restart(super::restart::parse(annotations)?),
        _ => return Err(AnnotationError::UnknownAction(action.clone())),
    };
    if !matches!(action, Action::Signal { .. }) {
        signal_check(annotations)?;
    }
    fast_projection(annotations)?;
    env_evicts(annotations)?;
    rollout::on_blocked(annotations)?;
    Ok(Some(PodPolicy {
        action,
        containers: parse_list(annotations, CONTAINERS, "container", is_dns_label)?,
        configmaps: parse_list(annotations, CONFIGMAPS, "ConfigMap", is_dns_subdomain)?,
        secrets: parse_list(annotations, SECRETS, "Secret", is_dns_subdomain)?,
        secret_provider_classes: parse_list(
            annotations,
            SECRET_PROVIDER_CLASSES,
            "SecretProviderClass",
            is_dns_subdomain,
        )?,
        csi_volumes: parse_list(annotations, CSI_VOLUMES, "volume", is_dns_label)?,
        pod_certificates: parse_list(annotations, POD_CERTIFICATES, "signer", is_signer_name)?,
    }))
}

/// The `reloadlet.io/http-*` annotations of an `http` pod.
fn http_spec(annotations: &BTreeMap<String, String>) -> Result<HttpSpec, AnnotationError> {
    let port = annotations
        .get(HTTP_PORT)
        .ok_or(AnnotationError::MissingHttpPort)?;
    let port = http_port(port).ok_or_else(|| AnnotationError::InvalidHttpPort(port.clone()))?;
    let path = match annotations.get(HTTP_PATH) {
        None => DEFAULT_HTTP_PATH.to_owned(),
        Some(p) if is_http_path(p.trim()) => p.trim().to_owned(),
        Some(p) => return Err(AnnotationError::InvalidHttpPath(p.clone())),
    };
    let method = match annotations.get(HTTP_METHOD) {
        None => HttpMethod::Post,
        Some(m) => match m.trim().to_ascii_uppercase().as_str() {
            "POST" => HttpMethod::Post,
            "PUT" => HttpMethod::Put,
            "GET" => HttpMethod::Get,
            _ => return Err(AnnotationError::InvalidHttpMethod(m.clone())),
        },
    };
    let scheme = match annotations.get(HTTP_SCHEME) {
        None => HttpScheme::Http,
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "http" => HttpScheme::Http,
            "https" => HttpScheme::Https,
            _ => return Err(AnnotationError::InvalidHttpScheme(v.clone())),
        },
    };
    Ok(HttpSpec {
        port,
        path,
        method,
        body: annotations.get(HTTP_BODY).cloned().unwrap_or_default(),
        scheme,
    })
}

/// A port number (1-65535) or a Kubernetes port name: an IANA service name, 1-15
/// characters of `a-z0-9-`, at least one letter, no leading, trailing or double `-`
/// (kubernetes `staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go`,
/// `IsValidPortName`).
fn http_port(s: &str) -> Option<HttpPort> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return match s.parse::<u16>() {
            Ok(n) if n > 0 => Some(HttpPort::Number(n)),
            _ => None,
        };
    }
    let valid = (1..=15).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.bytes().any(|b| b.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--");
    valid.then(|| HttpPort::Named(s.to_owned()))
}

/// An origin-form request target: `/`, then what `http` accepts as a path and query (no
/// spaces, no fragment, no control characters).
fn is_http_path(p: &str) -> bool {
    p.starts_with('/')
        && !p.starts_with("//")
        && p.len() <= MAX_HTTP_PATH
        && !p.contains('#')
        && p.parse::<http::uri::PathAndQuery>().is_ok()
}

/// `reloadlet.io/signal-check`: `On` (the default, `"on"`) when reloadlet reads the
/// target's signal masks before signalling; `Off` (`"off"`) to signal regardless.
pub fn signal_check(
    annotations: &BTreeMap<String, String>,
) -> Result<SignalCheck, AnnotationError> {
    match annotations.get(SIGNAL_CHECK) {
        None => Ok(SignalCheck::On),
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "on" => Ok(SignalCheck::On),
            "off" => Ok(SignalCheck::Off),
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

/// What `reloadlet.io/env-action` asks of a change of a ConfigMap/Secret the pod reads
/// through env (the controller's env consumers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvAction {
    /// `evict`: the pod is evicted (and recreated by its controller).
    Evict,
    /// `restart`: the containers that read it are restarted in place, through the restart
    /// grant (docs/restart.md, "Env consumers").
    Restart,
}

/// `reloadlet.io/env-action`, whatever the pod's `reloadlet.io/action` (`signal` too).
/// Absent: `None`.
pub fn env_action(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<EnvAction>, AnnotationError> {
    match annotations.get(ENV_ACTION).map(|v| v.trim()) {
        None => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("evict") => Ok(Some(EnvAction::Evict)),
        Some(v) if v.eq_ignore_ascii_case("restart") => Ok(Some(EnvAction::Restart)),
        Some(_) => Err(AnnotationError::InvalidEnvAction(
            annotations[ENV_ACTION].clone(),
        )),
    }
}

/// `reloadlet.io/env-action: evict`: evict the pod when a ConfigMap/Secret it reads through env
/// changes, even when its `reloadlet.io/action` is `signal`. Absent: `false`.
pub fn env_evicts(annotations: &BTreeMap<String, String>) -> Result<bool, AnnotationError> {
    Ok(env_action(annotations)? == Some(EnvAction::Evict))
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

/// A certificate signer name as the API server requires it (kubernetes
/// `pkg/apis/certificates/validation/validation.go`, `ValidateSignerName`): `<domain>/<path>`,
/// the domain an RFC 1123 subdomain, at most 571 characters in all. The path is held here to
/// URL path characters without `%` (nothing else names a signer), so the name can go into an
/// Event or a log line as it is.
fn is_signer_name(s: &str) -> bool {
    let Some((domain, path)) = s.split_once('/') else {
        return false;
    };
    s.len() <= 571
        && is_dns_subdomain(domain)
        && !path.is_empty()
        && !path.ends_with('/')
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~/".contains(&b))
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
            action: Action::Signal {
                signal: sig,
                check: SignalCheck::On,
            },
            containers: None,
            configmaps: None,
            secrets: None,
            secret_provider_classes: None,
            csi_volumes: None,
            pod_certificates: None,
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
                vec![(ACTION, "reboot")],
                Err(AnnotationError::UnknownAction("reboot".into())),
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
                    secret_provider_classes: None,
                    csi_volumes: None,
                    pod_certificates: None,
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
                    secret_provider_classes: None,
                    csi_volumes: None,
                    pod_certificates: None,
                })),
            ),
            (
                vec![(ACTION, "evict"), (EVICT_UNOWNED, "yes")],
                Err(AnnotationError::InvalidBool("yes".into())),
            ),
            (
                vec![(ACTION, "signal"), (SIGNAL_CHECK, " OFF ")],
                Ok(Some(PodPolicy {
                    action: Action::Signal {
                        signal: ReloadSignal::Hup,
                        check: SignalCheck::Off,
                    },
                    ..signal(ReloadSignal::Hup)
                })),
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
                // The pacing keys are known here; their values are checked by core/pacing.
                vec![
                    (ACTION, "signal"),
                    ("reloadlet.io/debounce", "2s"),
                    ("reloadlet.io/min-interval", "1m"),
                    ("reloadlet.io/flap-threshold", "off"),
                    ("reloadlet.io/window", "0 2 * * *"),
                    ("reloadlet.io/window-duration", "1h"),
                    ("reloadlet.io/window-timezone", "UTC"),
                    ("reloadlet.io/window-actions", "all"),
                ],
                Ok(Some(signal(ReloadSignal::Hup))),
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

    fn http(port: HttpPort) -> PodPolicy {
        PodPolicy {
            action: Action::Http(HttpSpec {
                port,
                path: DEFAULT_HTTP_PATH.into(),
                method: HttpMethod::Post,
                body: String::new(),
                scheme: HttpScheme::Http,
            }),
            containers: None,
            configmaps: None,
            secrets: None,
            secret_provider_classes: None,
            csi_volumes: None,
            pod_certificates: None,
        }
    }

    #[test]
    fn http_table() {
        let with = |f: fn(&mut HttpSpec)| {
            let mut p = http(HttpPort::Number(9090));
            let Action::Http(spec) = &mut p.action else {
                unreachable!()
            };
            f(spec);
            Ok(Some(p))
        };
        type Case<'a> = (
            Vec<(&'a str, &'a str)>,
            Result<Option<PodPolicy>, AnnotationError>,
        );
        let cases: Vec<Case> = vec![
            (
                vec![(ACTION, "http"), (HTTP_PORT, "9090")],
                Ok(Some(http(HttpPort::Number(9090)))),
            ),
            (
                vec![(ACTION, "HTTP"), (HTTP_PORT, " web ")],
                Ok(Some(http(HttpPort::Named("web".into())))),
            ),
            (
                vec![(ACTION, "http"), (HTTP_PORT, "http-metrics")],
                Ok(Some(http(HttpPort::Named("http-metrics".into())))),
            ),
            (
                vec![
                    (ACTION, "http"),
                    (HTTP_PORT, "9090"),
                    (HTTP_PATH, "/api/v2/reload?force=1"),
                    (HTTP_METHOD, "put"),
                    (HTTP_BODY, "{}"),
                    (HTTP_SCHEME, "HTTPS"),
                ],
                with(|s| {
                    s.path = "/api/v2/reload?force=1".into();
                    s.method = HttpMethod::Put;
                    s.body = "{}".into();
                    s.scheme = HttpScheme::Https;
                }),
            ),
            (
                vec![(ACTION, "http"), (HTTP_PORT, "9090"), (HTTP_METHOD, "GET")],
                with(|s| s.method = HttpMethod::Get),
            ),
            (
                vec![(ACTION, "http")],
                Err(AnnotationError::MissingHttpPort),
            ),
            (
                vec![(ACTION, "http"), (HTTP_PATH, "/-/reload")],
                Err(AnnotationError::MissingHttpPort),
            ),
            (
                vec![(ACTION, "http"), (HTTP_PORT, "0")],
                Err(AnnotationError::InvalidHttpPort("0".into())),
            ),
            (
                vec![(ACTION, "http"), (HTTP_PORT, "65536")],
                Err(AnnotationError::InvalidHttpPort("65536".into())),
            ),
            (
                vec![(ACTION, "http"), (HTTP_PORT, "")],
                Err(AnnotationError::InvalidHttpPort("".into())),
            ),
            (
                vec![(ACTION, "http"), (HTTP_PORT, "-9090")],
                Err(AnnotationError::InvalidHttpPort("-9090".into())),
            ),
            (
                vec![(ACTION, "http"), (HTTP_PORT, "Web")],
                Err(AnnotationError::InvalidHttpPort("Web".into())),
            ),
            (
                vec![(ACTION, "http"), (HTTP_PORT, "a-very-long-port-name")],
                Err(AnnotationError::InvalidHttpPort(
                    "a-very-long-port-name".into(),
                )),
            ),
            (
                vec![(ACTION, "http"), (HTTP_PORT, "web--ui")],
                Err(AnnotationError::InvalidHttpPort("web--ui".into())),
            ),
            (
                vec![
                    (ACTION, "http"),
                    (HTTP_PORT, "9090"),
                    (HTTP_PATH, "-/reload"),
                ],
                Err(AnnotationError::InvalidHttpPath("-/reload".into())),
            ),
            (
                vec![(ACTION, "http"), (HTTP_PORT, "9090"), (HTTP_PATH, "/a b")],
                Err(AnnotationError::InvalidHttpPath("/a b".into())),
            ),
            (
                vec![
                    (ACTION, "http"),
                    (HTTP_PORT, "9090"),
                    (HTTP_PATH, "//evil.example/x"),
                ],
                Err(AnnotationError::InvalidHttpPath("//evil.example/x".into())),
            ),
            (
                vec![
                    (ACTION, "http"),
                    (HTTP_PORT, "9090"),
                    (HTTP_PATH, "/x#frag"),
                ],
                Err(AnnotationError::InvalidHttpPath("/x#frag".into())),
            ),
            (
                vec![
                    (ACTION, "http"),
                    (HTTP_PORT, "9090"),
                    (HTTP_PATH, "http://h/x"),
                ],
                Err(AnnotationError::InvalidHttpPath("http://h/x".into())),
            ),
            (
                vec![
                    (ACTION, "http"),
                    (HTTP_PORT, "9090"),
                    (HTTP_METHOD, "DELETE"),
                ],
                Err(AnnotationError::InvalidHttpMethod("DELETE".into())),
            ),
            (
                vec![(ACTION, "http"), (HTTP_PORT, "9090"), (HTTP_SCHEME, "ftp")],
                Err(AnnotationError::InvalidHttpScheme("ftp".into())),
            ),
            (
                vec![
                    (ACTION, "http"),
                    (HTTP_PORT, "9090"),
                    ("reloadlet.io/http-verb", "PUT"),
                ],
                Err(AnnotationError::UnknownKey("reloadlet.io/http-verb".into())),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse(&ann(&input)), want, "{input:?}");
        }
        assert_eq!(
            AnnotationError::InvalidHttpMethod("DELETE".into()).to_string(),
            "reloadlet.io/http-method: \"DELETE\" is not allowed; use POST (the default), PUT or GET"
        );
    }

    #[test]
    fn signal_check_is_on_unless_turned_off() {
        assert_eq!(signal_check(&ann(&[])), Ok(SignalCheck::On));
        assert_eq!(
            signal_check(&ann(&[(SIGNAL_CHECK, "on")])),
            Ok(SignalCheck::On)
        );
        assert_eq!(
            signal_check(&ann(&[(SIGNAL_CHECK, "Off")])),
            Ok(SignalCheck::Off)
        );
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
    fn on_blocked_and_blocked_timeout_are_known_and_checked() {
        let evict = |extra: &[(&str, &str)]| {
            let mut pairs = vec![(ACTION, "evict")];
            pairs.extend_from_slice(extra);
            parse(&ann(&pairs)).map(|p| p.is_some())
        };
        assert_eq!(
            evict(&[(ON_BLOCKED, "rollout"), (BLOCKED_TIMEOUT, "15m")]),
            Ok(true)
        );
        assert_eq!(evict(&[(ON_BLOCKED, "wait")]), Ok(true));
        assert_eq!(
            evict(&[(ON_BLOCKED, "force")]).unwrap_err().to_string(),
            "reloadlet.io/on-blocked: \"force\" is not valid; use \"wait\" (the default) or \"rollout\""
        );
        assert_eq!(
            evict(&[(BLOCKED_TIMEOUT, "soon")]).unwrap_err().to_string(),
            "reloadlet.io/blocked-timeout: \"soon\" is not a duration above 0s and at most 7 days (e.g. 10m, 1h)"
        );
        // A tenant's overflow (issue #43): refused, never added to an instant.
        assert!(evict(&[(ON_BLOCKED, "rollout"), (BLOCKED_TIMEOUT, "300000000000y")]).is_err());
        assert_eq!(evict(&[(BLOCKED_TIMEOUT, "7d")]), Ok(true));
        assert!(evict(&[(BLOCKED_TIMEOUT, "8d")]).is_err());
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
