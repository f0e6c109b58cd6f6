//! Plain data shared by every layer: what reloadlet knows about a pod, a volume and a
//! container. No Kubernetes, inotify or /proc types here — the edges convert into these.

use crate::core::shared_map::SharedMap;
use std::fmt;
use std::sync::Arc;

/// A kubelet volume plugin whose volumes reloadlet watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VolumePlugin {
    ConfigMap,
    Secret,
    Projected,
    /// An inline CSI volume (`spec.volumes[].csi`) of a driver reloadlet is told to watch
    /// (`--csi-drivers`); its files live in `<volume>/mount` (docs/csi.md).
    Csi,
}

impl VolumePlugin {
    pub const ALL: [VolumePlugin; 4] = [Self::ConfigMap, Self::Secret, Self::Projected, Self::Csi];

    /// The directory name under `pods/<uid>/volumes/` (`kubernetes.io/configmap` escaped).
    pub fn dir_name(self) -> &'static str {
        match self {
            Self::ConfigMap => "kubernetes.io~configmap",
            Self::Secret => "kubernetes.io~secret",
            Self::Projected => "kubernetes.io~projected",
            // kubernetes `pkg/volume/csi/csi_mounter.go`, `getTargetPath`: the escaped
            // `kubernetes.io/csi` plugin name.
            Self::Csi => "kubernetes.io~csi",
        }
    }

    pub fn from_dir_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.dir_name() == name)
    }

    /// Short label for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConfigMap => "configmap",
            Self::Secret => "secret",
            Self::Projected => "projected",
            Self::Csi => "csi",
        }
    }
}

/// One projected volume on disk: `<root>/pods/<pod_uid>/volumes/<plugin>/<volume>`.
///
/// The names are shared (`Arc<str>`): a key is cloned into every record of a swap (the change
/// detector's, the debouncer's, the signal's) on the hot thread before the signal, and all
/// volumes of a pod share their pod's UID. A clone counts a reference; it allocates nothing.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeKey {
    pub pod_uid: Arc<str>,
    pub plugin: VolumePlugin,
    pub volume: Arc<str>,
}

impl fmt::Display for VolumeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.pod_uid,
            self.plugin.as_str(),
            self.volume
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceKind {
    ConfigMap,
    Secret,
    /// A Secrets Store CSI volume: `name` reads `<class> (volume <volume>)`
    /// ([`SourceRef::csi`]).
    SecretProviderClass,
    /// A CSI volume of another known driver: `name` reads `<volume> (<driver>)`.
    CsiVolume,
    /// A projected `podCertificate` source (KEP-4317): `name` is its `signerName`. The
    /// kubelet writes a fresh key and chain at every rotation; it counts only for a pod that
    /// names the signer in `reloadlet.io/pod-certificates`.
    PodCertificate,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConfigMap => "configmap",
            Self::Secret => "secret",
            Self::SecretProviderClass => "secretproviderclass",
            Self::CsiVolume => "csi volume",
            Self::PodCertificate => "pod certificate",
        }
    }

    /// A source the kubelet projects from an API object (a ConfigMap or a Secret), as opposed
    /// to the files a CSI driver writes.
    pub fn is_api_object(self) -> bool {
        matches!(self, Self::ConfigMap | Self::Secret)
    }
}

/// A ConfigMap or Secret that feeds a volume, or the CSI volume a driver writes (for CSI
/// kinds `name` is the text events and logs show, see [`SourceRef::csi`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceRef {
    pub kind: SourceKind,
    pub name: String,
}

impl fmt::Display for SourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind.as_str(), self.name)
    }
}

impl SourceRef {
    /// The source a CSI volume stands for in causes: "secretproviderclass vault-db (volume
    /// secrets)" for the Secrets Store driver with a class, "csi volume certs
    /// (csi.cert-manager.io)" otherwise. Never a file name, content or hash.
    pub fn csi(volume: &str, csi: &CsiVolumeSpec) -> Self {
        match &csi.class {
            Some(class) => Self {
                kind: SourceKind::SecretProviderClass,
                name: format!("{class} (volume {volume})"),
            },
            None => Self {
                kind: SourceKind::CsiVolume,
                name: format!("{volume} ({})", csi.driver),
            },
        }
    }
}

/// The Secrets Store CSI driver's name (kubernetes-sigs/secrets-store-csi-driver).
pub const SECRETS_STORE_DRIVER: &str = "secrets-store.csi.k8s.io";
/// Its volume attribute naming the SecretProviderClass (`csi.volumeAttributes`).
pub const SECRET_PROVIDER_CLASS_ATTRIBUTE: &str = "secretProviderClass";

/// An inline CSI volume as the pod spec declares it (`spec.volumes[].csi`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CsiVolumeSpec {
    /// `csi.driver`.
    pub driver: String,
    /// `csi.volumeAttributes.secretProviderClass` of a Secrets Store volume.
    pub class: Option<String>,
}

/// The ConfigMap the root-CA publisher keeps in every namespace, projected into every pod by
/// the injected `kube-api-access-*` volume. A cluster CA rotation changes it in every pod at
/// once, so it never triggers unless the pod names it in `reloadlet.io/configmaps`.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";
/// The only key the root-CA publisher writes into [`ROOT_CA_CONFIGMAP`]
/// (kubernetes `pkg/controller/certificates/rootcacertpublisher/publisher.go`, `syncNamespace`).
pub const ROOT_CA_KEY: &str = "ca.crt";

/// A pod volume as declared in the pod spec (only what reloadlet needs).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct VolumeSpec {
    pub name: String,
    /// ConfigMap/Secret sources; empty for other volume types.
    pub sources: Vec<SourceRef>,
    /// A projected volume with a `serviceAccountToken` source (e.g. `kube-api-access-*`).
    pub service_account_token: bool,
    /// The files a ConfigMap/Secret source writes when the spec says so (`items[].path`);
    /// a source missing here writes every key of its object (names unknown from the spec).
    pub source_paths: Vec<(SourceRef, Vec<String>)>,
    /// The keys a ConfigMap/Secret source projects when it lists `items` (`items[].key`);
    /// a source missing here projects every key of its object (`data` and `binaryData`).
    pub source_keys: Vec<(SourceRef, Vec<String>)>,
    /// `(items[].key, items[].path)` of each ConfigMap/Secret source that lists `items`, in
    /// every volume kind (`source_paths` has the paths of projected volumes only, where they
    /// decide which part of the digest a file is): the agent reads a source's pairs back from
    /// the files with them (`core::status::data_version::pairs_of_files`).
    pub source_items: Vec<(SourceRef, Vec<(String, String)>)>,
    /// Files of a projected volume that no ConfigMap/Secret writes: downwardAPI `items[].path`,
    /// serviceAccountToken `path`, clusterTrustBundle `path`. They change on a pod label edit or
    /// a token refresh and are left out of the content hash.
    pub other_paths: Vec<String>,
    /// An inline CSI volume: its driver and class (`None` for every other volume type).
    pub csi: Option<CsiVolumeSpec>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeMount {
    pub volume: String,
    /// Mounted through `subPath`/`subPathExpr`: the kubelet never updates it.
    pub sub_path: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ContainerRuntime {
    Containerd,
    CriO,
    Docker,
}

/// `status.containerStatuses[].containerID`, e.g. `containerd://<64 hex>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContainerId {
    pub runtime: ContainerRuntime,
    pub id: String,
}

impl ContainerId {
    /// Parses `<runtime>://<id>`. The id must be 1..=128 chars of `[0-9a-zA-Z]`.
    pub fn parse(s: &str) -> Option<Self> {
        let (scheme, id) = s.split_once("://")?;
        let runtime = match scheme {
            "containerd" => ContainerRuntime::Containerd,
            "cri-o" => ContainerRuntime::CriO,
            "docker" => ContainerRuntime::Docker,
            _ => return None,
        };
        let valid =
            !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric());
        valid.then(|| Self {
            runtime,
            id: id.to_owned(),
        })
    }
}

impl fmt::Display for ContainerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.runtime {
            ContainerRuntime::Containerd => "containerd",
            ContainerRuntime::CriO => "cri-o",
            ContainerRuntime::Docker => "docker",
        };
        write!(f, "{scheme}://{}", self.id)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerKind {
    Regular,
    /// An init container with `restartPolicy: Always` (a native sidecar): it keeps running.
    SidecarInit,
    /// A classic init container: it has exited before the pod runs; never a target.
    Init,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerInfo {
    pub name: String,
    pub kind: ContainerKind,
    pub mounts: Vec<VolumeMount>,
    /// From the pod status; `None` until the runtime has created the container.
    pub container_id: Option<ContainerId>,
    /// `state.running` is set in the status.
    pub running: bool,
    /// The container's declared TCP ports (`ports[]`): `reloadlet.io/http-port` must name
    /// one of them, by number or by name.
    pub ports: Vec<ContainerPort>,
}

/// One `ports[]` entry of a container (TCP only: an HTTP request never reaches a port
/// declared for UDP or SCTP).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerPort {
    /// `containerPort`.
    pub number: u16,
    /// `name`, if the entry has one.
    pub name: Option<String>,
}

impl ContainerPort {
    pub fn named(name: &str, number: u16) -> Self {
        Self {
            number,
            name: Some(name.to_owned()),
        }
    }

    pub fn unnamed(number: u16) -> Self {
        Self { number, name: None }
    }
}

impl fmt::Display for ContainerPort {
    /// `9090/web`, or `9090` for an unnamed port.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{}/{name}", self.number),
            None => write!(f, "{}", self.number),
        }
    }
}

/// Everything reloadlet keeps about one pod of its node.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PodInfo {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// Shared with every pod that carries the same ones, as the controller keeps them
    /// ([`crate::core::shared_map`]).
    pub annotations: SharedMap,
    /// Shared, as the annotations are.
    pub labels: SharedMap,
    pub volumes: Vec<VolumeSpec>,
    pub containers: Vec<ContainerInfo>,
    /// An `ownerReferences` entry with `controller: true` exists.
    pub has_controller: bool,
    /// That entry (kind and name): the controller's `--reloader-compat` finds the pod's
    /// workload through it (boxed: read rarely, and every pod input carries a `PodInfo`).
    pub controller: Option<Box<crate::core::rollout::OwnerRef>>,
    /// `status.phase` (`Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`).
    pub phase: String,
    /// The `Ready` condition is `True` (the restart grant waits for it again).
    pub ready: bool,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// ConfigMap/Secret keys read through `env[].valueFrom` / `envFrom` (the controller's env
    /// consumers, docs/env-consumers.md).
    pub env: Vec<EnvRef>,
    /// `status.podIP` (set by the kubelet once the sandbox has its network).
    pub pod_ip: Option<std::net::IpAddr>,
    /// `spec.hostNetwork`: the pod shares the node's network, and `pod_ip` is the node's own
    /// address.
    pub host_network: bool,
    /// What `action: restart` reads of the spec (boxed: read rarely, and every pod input
    /// carries a `PodInfo`).
    pub restart: Box<RestartFacts>,
    /// When the longest-running of its containers (`status.containerStatuses`) started, when
    /// all of them run (`reloadlet status`: a pod started after the data changed runs it).
    pub started: Option<jiff::Timestamp>,
}

/// The parts of a pod's spec a restart in place depends on (`core::restart`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RestartFacts {
    /// `spec.restartPolicy` (`None`: `Always`).
    pub restart_policy: Option<String>,
    /// `spec.terminationGracePeriodSeconds`.
    pub termination_grace_seconds: Option<i64>,
    /// `spec.readinessGates` has `reloadlet.io/restart-drain`.
    pub drain_gate: bool,
    /// `status.conditions[reloadlet.io/restart-drain].status == "True"`; `None`: no such
    /// condition (`core::drain_gate`).
    pub drain_condition: Option<bool>,
    /// `status.conditions[ContainersReady].status == "True"`.
    pub containers_ready: bool,
    /// `(container, lifecycle.stopSignal)` of the containers that set one.
    pub stop_signals: Vec<(String, String)>,
    /// Not Ready since then: the `Ready` condition's `lastTransitionTime` while its status is
    /// not `True` (the kubelet keeps it while the status stays, `updateLastTransitionTime` in
    /// pkg/kubelet/status/status_manager.go); `None`: Ready, or not told.
    pub unready_since: Option<jiff::Timestamp>,
}

/// Which keys of a ConfigMap/Secret a container reads into its environment.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EnvKeys {
    /// `env[].valueFrom.configMapKeyRef` / `secretKeyRef`: one key.
    Key(String),
    /// `envFrom[].configMapRef` / `secretRef`: every key, named `<prefix><key>`.
    All { prefix: String },
}

/// One `env`/`envFrom` reference of one container.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EnvRef {
    pub source: SourceRef,
    pub keys: EnvKeys,
    /// `optional: true`: the container starts without it.
    pub optional: bool,
    pub container: String,
}

impl PodInfo {
    /// `namespace/name`, the way operators name a pod.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub fn volume(&self, name: &str) -> Option<&VolumeSpec> {
        self.volumes.iter().find(|v| v.name == name)
    }
}

/// Whether reloadlet reads the target's disposition before signalling
/// (`reloadlet.io/signal-check`, parsed with the rest of the pod's annotations).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SignalCheck {
    #[default]
    On,
    /// Send whatever the process would do with it.
    Off,
}

/// Signals an annotation may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReloadSignal {
    Hup,
    Int,
    Quit,
    Usr1,
    Usr2,
    Term,
    Winch,
    /// Only `action: restart` sends it, after the grace; no annotation can ask for it (it is
    /// not in [`ReloadSignal::ALL`], which [`ReloadSignal::parse`] reads).
    Kill,
}

impl ReloadSignal {
    pub const ALL: [ReloadSignal; 7] = [
        Self::Hup,
        Self::Int,
        Self::Quit,
        Self::Usr1,
        Self::Usr2,
        Self::Term,
        Self::Winch,
    ];

    /// Canonical name, e.g. `SIGHUP`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hup => "SIGHUP",
            Self::Int => "SIGINT",
            Self::Quit => "SIGQUIT",
            Self::Usr1 => "SIGUSR1",
            Self::Usr2 => "SIGUSR2",
            Self::Term => "SIGTERM",
            Self::Winch => "SIGWINCH",
            Self::Kill => "SIGKILL",
        }
    }

    /// Accepts `HUP`, `SIGHUP`, `sighup`, `Hup`… (with or without `SIG`, any case).
    pub fn parse(s: &str) -> Option<Self> {
        let upper = s.trim().to_ascii_uppercase();
        let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
        Self::ALL.into_iter().find(|sig| &sig.name()[3..] == bare)
    }

    /// The Linux signal number.
    pub fn number(self) -> i32 {
        match self {
            Self::Hup => 1,
            Self::Int => 2,
            Self::Quit => 3,
            Self::Usr1 => 10,
            Self::Usr2 => 12,
            Self::Term => 15,
            Self::Winch => 28,
            Self::Kill => 9,
        }
    }
}

impl fmt::Display for ReloadSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Pods for tests.
#[cfg(test)]
pub mod test_pods {
    use super::*;

    /// A running pod `namespace/name` (uid `namespace-name`, owned by a controller) whose
    /// container `app` mounts `source` whole through the volume `v`.
    pub fn mounting(namespace: &str, name: &str, source: SourceRef) -> PodInfo {
        PodInfo {
            uid: format!("{namespace}-{name}"),
            namespace: namespace.into(),
            name: name.into(),
            volumes: vec![VolumeSpec {
                name: "v".into(),
                sources: vec![source],
                ..Default::default()
            }],
            containers: vec![ContainerInfo {
                name: "app".into(),
                kind: ContainerKind::Regular,
                mounts: vec![VolumeMount {
                    volume: "v".into(),
                    sub_path: false,
                }],
                container_id: None,
                running: true,
                ports: Vec::new(),
            }],
            has_controller: true,
            phase: "Running".into(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names_parse_in_any_spelling() {
        for (input, want) in [
            ("SIGHUP", Some(ReloadSignal::Hup)),
            ("hup", Some(ReloadSignal::Hup)),
            ("SigUsr1", Some(ReloadSignal::Usr1)),
            (" usr2 ", Some(ReloadSignal::Usr2)),
            ("WINCH", Some(ReloadSignal::Winch)),
            ("SIGKILL", None),
            ("KILL", None),
            ("9", None),
            ("", None),
            ("SIG", None),
            ("SIGSIGHUP", None),
        ] {
            assert_eq!(ReloadSignal::parse(input), want, "{input:?}");
        }
    }

    #[test]
    fn container_ids_parse_for_each_runtime() {
        let hex = "a".repeat(64);
        assert_eq!(
            ContainerId::parse(&format!("containerd://{hex}")).map(|c| c.runtime),
            Some(ContainerRuntime::Containerd)
        );
        assert_eq!(
            ContainerId::parse("cri-o://abc123").map(|c| c.runtime),
            Some(ContainerRuntime::CriO)
        );
        assert_eq!(
            ContainerId::parse("docker://abc").map(|c| c.runtime),
            Some(ContainerRuntime::Docker)
        );
        for bad in [
            "",
            "containerd://",
            "rkt://abc",
            "containerd://../x",
            "containerd:/abc",
            "abc",
        ] {
            assert_eq!(ContainerId::parse(bad), None, "{bad:?}");
        }
        let id = ContainerId::parse("cri-o://abc").unwrap();
        assert_eq!(id.to_string(), "cri-o://abc");
    }

    #[test]
    fn plugin_dir_names_round_trip() {
        for p in VolumePlugin::ALL {
            assert_eq!(VolumePlugin::from_dir_name(p.dir_name()), Some(p));
        }
        assert_eq!(
            VolumePlugin::from_dir_name("kubernetes.io~downward-api"),
            None
        );
        assert_eq!(
            VolumePlugin::from_dir_name("kubernetes.io~csi"),
            Some(VolumePlugin::Csi)
        );
    }

    #[test]
    fn csi_sources_name_class_or_driver_and_volume() {
        let spc = CsiVolumeSpec {
            driver: SECRETS_STORE_DRIVER.into(),
            class: Some("vault-db".into()),
        };
        assert_eq!(
            SourceRef::csi("secrets", &spc).to_string(),
            "secretproviderclass vault-db (volume secrets)"
        );
        let cm = CsiVolumeSpec {
            driver: "csi.cert-manager.io".into(),
            class: None,
        };
        assert_eq!(
            SourceRef::csi("certs", &cm).to_string(),
            "csi volume certs (csi.cert-manager.io)"
        );
    }
}
