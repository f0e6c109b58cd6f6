//! Running reloadlet's OCI image (hack/build-image.sh) under podman with the posture of the
//! rendered Helm chart, against a simulated node whose API server speaks TLS and wants a
//! bearer token, as in a cluster: the token of the workload's service account, authorized
//! by the RBAC objects of the same render ([`ImageNode::authorize_as`]).
//!
//! Everything here is private to one test and removed on drop, even after a failed assertion:
//! podman's store, run and temp directories (a temp dir; vfs driver, cgroupfs manager, no
//! events log), its containers (and their conmon), their cgroups (under a parent cgroup of
//! the test's own), and the shared bind mount of the kubelet root. No daemon is involved:
//! podman and conmon are started per container and stop with it.
#![allow(dead_code)] // each test binary uses a different part

use nodesim::apiserver::{rbac, ApiServerOptions};
use nodesim::node::SimNode;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const NODE: &str = "node-a";
/// Where a pod finds its service account's credentials (`rest.InClusterConfig`; kube's
/// `incluster_config::token_file`/`cert_file`).
pub const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Why this machine cannot run the image tests, in one line; `None` when it can.
/// `RELOADLET_REQUIRE_IMAGE=1` (hack/test.sh) turns a missing piece into a failure.
pub fn missing() -> Option<String> {
    let mut why = Vec::new();
    for tool in ["podman", "runc", "conmon"] {
        if which(tool).is_none() {
            why.push(format!(
                "{tool} is not installed (hack/install-test-deps.sh)"
            ));
        }
    }
    if !archive().exists() {
        why.push(format!(
            "no image at {} (hack/build-image.sh)",
            archive().display()
        ));
    }
    if why.is_empty() {
        return None;
    }
    let line = why.join("; ");
    if std::env::var("RELOADLET_REQUIRE_IMAGE").as_deref() == Ok("1") {
        panic!("RELOADLET_REQUIRE_IMAGE=1 but {line}");
    }
    Some(line)
}

pub fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(tool))
            .find(|p| p.is_file())
    })
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The OCI archive hack/build-image.sh saves.
pub fn archive() -> PathBuf {
    let out = Command::new(repo().join("hack/build-image.sh"))
        .arg("--print-archive")
        .output()
        .expect("hack/build-image.sh --print-archive");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The name hack/build-image.sh gives the image index: the chart's `image.repository` and
/// appVersion.
pub fn image_ref() -> String {
    let out = Command::new(repo().join("hack/build-image.sh"))
        .arg("--print-image")
        .output()
        .expect("hack/build-image.sh --print-image");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The chart rendered with these extra `helm template` arguments, one JSON value per document.
pub fn render_chart(args: &[String]) -> Vec<Value> {
    let out = Command::new(repo().join("hack/render-chart-json.sh"))
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .expect("hack/render-chart-json.sh");
    assert!(out.status.success(), "rendering the chart failed");
    serde_json::from_slice(&out.stdout).expect("rendered chart as JSON")
}

/// The rendered object of this kind.
pub fn find_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in the rendered chart"))
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    out
}

/// A ConfigMap with these keys.
pub fn configmap(
    namespace: &str,
    name: &str,
    data: &[(&str, &str)],
) -> k8s_openapi::api::core::v1::ConfigMap {
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": namespace},
        "data": data
    }))
    .unwrap()
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The simulated node with a TLS + bearer-token API server, its kubelet root made a shared
/// mount (so that the tmpfs volumes the kubelet mounts later reach a container that mounted
/// the pods directory with HostToContainer / `rslave` propagation), and a private podman.
pub struct ImageNode {
    pub sim: Option<SimNode>,
    pub podman: Podman,
    shared_root: Option<PathBuf>,
    /// The token file's directory, mounted as the service account volume.
    pub sa_dir: PathBuf,
}

impl std::ops::Deref for ImageNode {
    type Target = SimNode;
    fn deref(&self) -> &SimNode {
        self.sim.as_ref().expect("node running")
    }
}

impl ImageNode {
    /// The node, its API server accepting only service account tokens (no static token: a
    /// request without a token from [`ImageNode::authorize_as`] gets 401). The service
    /// account volume holds `ca.crt` and `namespace`; `authorize_as` writes the token.
    pub async fn start() -> ImageNode {
        let sim = SimNode::start_with_api(
            NODE,
            "reloadlet-image-",
            ApiServerOptions {
                tls: true,
                bearer_tokens: Some(Vec::new()),
                ..Default::default()
            },
            |_| {},
        )
        .await
        .expect("simulated node");
        let podman = Podman::new(&sim.path("podman"));
        let mut node = ImageNode {
            sim: Some(sim),
            podman,
            shared_root: None,
            sa_dir: PathBuf::new(),
        };
        // Private by default here (no systemd): bind the kubelet root onto itself and make
        // it shared (mount(8), "Shared subtree operations").
        let root = node.kubelet_root();
        run(Command::new("mount").arg("--rbind").arg(&root).arg(&root));
        node.shared_root = Some(root.clone());
        run(Command::new("mount").arg("--make-rshared").arg(&root));

        // The service account volume: token, ca.crt, namespace (what the kubelet projects).
        node.sa_dir = node.path("serviceaccount");
        std::fs::create_dir_all(&node.sa_dir).unwrap();
        let ca = node.api.ca_pem().expect("TLS").to_string();
        std::fs::write(node.sa_dir.join("ca.crt"), ca).unwrap();
        std::fs::write(node.sa_dir.join("namespace"), "reloadlet-system").unwrap();
        node
    }

    /// Runs the workload (the DaemonSet or the Deployment of `docs`, a chart render) under
    /// the chart's RBAC: the API server enforces the RBAC objects of that same render (so
    /// the chart values that gave the container its flags also gave the rules), and the
    /// service account volume holds a new token of the workload's service account (its pod
    /// template's `serviceAccountName`, in its namespace). Returns the token.
    pub fn authorize_as(&self, docs: &[Value], workload: &Value) -> String {
        let policy = rbac::Policy::from_objects(docs).expect("the render's RBAC objects");
        assert!(
            !policy.cluster_role_bindings.is_empty(),
            "the render has no RBAC"
        );
        self.api.set_rbac(policy);
        let namespace = workload["metadata"]["namespace"]
            .as_str()
            .expect("the workload's namespace");
        let account = workload["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .expect("the pod template's serviceAccountName");
        let token = self
            .api
            .mint_token(rbac::User::service_account(namespace, account));
        self.write_token(&token);
        token
    }

    /// No request was refused (403) by the chart's RBAC, nor otherwise.
    pub fn assert_no_forbidden(&self) {
        let refused: Vec<String> = self
            .api
            .forbidden()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            refused.is_empty(),
            "403s under the chart's RBAC: {refused:#?}"
        );
    }

    /// Replaces the token file atomically (write, then rename), as the kubelet's atomic
    /// writer swaps a projected volume's files.
    pub fn write_token(&self, token: &str) {
        use std::os::unix::fs::PermissionsExt;
        let tmp = self.sa_dir.join(".token.tmp");
        std::fs::write(&tmp, token).unwrap();
        // Readable by a non-root container user too (the controller runs as 65534); the
        // kubelet gives a projected token to the pod's runAsUser.
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::rename(&tmp, self.sa_dir.join("token")).unwrap();
    }

    /// `podman run` arguments for the pod template's first container, from its spec: the
    /// posture (host PID, user, capabilities, read-only root, no_new_privs, seccomp), its
    /// env (fieldRefs resolved for this node), its hostPath volumes, and the service
    /// account volume; the container's image and args last.
    pub fn run_args(&self, template: &Value, pod_name: &str, namespace: &str) -> Vec<String> {
        let spec = &template["spec"];
        let c = &spec["containers"][0];
        let pod_sc = &spec["securityContext"];
        let sc = &c["securityContext"];
        let mut a: Vec<String> = Vec::new();
        let mut push = |s: &str| a.push(s.to_string());
        // The one difference from a pod: the host's network, so that the agent reaches the
        // API server on 127.0.0.1 and the test reaches its /metrics (a pod network needs a CNI).
        push("--network=host");
        if spec["hostPID"] == true {
            push("--pid=host");
        }
        // containerd gives a non-privileged container its own cgroup namespace on cgroup v2
        // (node-facts §4); the agent must find processes from one.
        push("--cgroupns=private");
        let field = |name: &str| {
            if !sc[name].is_null() {
                &sc[name]
            } else {
                &pod_sc[name]
            }
        };
        let uid = field("runAsUser").as_i64().expect("runAsUser in the chart");
        let gid = field("runAsGroup").as_i64().unwrap_or(uid);
        push(&format!("--user={uid}:{gid}"));
        assert_ne!(
            sc["privileged"], true,
            "the chart's default is not privileged"
        );
        for cap in sc["capabilities"]["drop"].as_array().into_iter().flatten() {
            push(&format!(
                "--cap-drop={}",
                cap.as_str().unwrap().to_lowercase()
            ));
        }
        for cap in sc["capabilities"]["add"].as_array().into_iter().flatten() {
            push(&format!("--cap-add={}", cap.as_str().unwrap()));
        }
        if sc["readOnlyRootFilesystem"] == true {
            // Kubernetes adds no tmpfs to a read-only root; podman would by default.
            push("--read-only");
            push("--read-only-tmpfs=false");
        }
        if sc["allowPrivilegeEscalation"] == false {
            push("--security-opt=no-new-privileges");
        }
        let seccomp = field("seccompProfile");
        assert_eq!(
            seccomp["type"], "RuntimeDefault",
            "only RuntimeDefault is mapped (podman's default profile)"
        );
        for e in c["env"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().unwrap();
            let value = if let Some(v) = e["value"].as_str() {
                v.to_string()
            } else {
                match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                    Some("spec.nodeName") => NODE.to_string(),
                    Some("metadata.name") => pod_name.to_string(),
                    Some("metadata.namespace") => namespace.to_string(),
                    other => panic!("env {name}: unmapped valueFrom {other:?}"),
                }
            };
            push(&format!("--env={name}={value}"));
        }
        let volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
        for m in c["volumeMounts"].as_array().into_iter().flatten() {
            let name = m["name"].as_str().unwrap();
            let vol = volumes
                .iter()
                .find(|v| v["name"] == name)
                .unwrap_or_else(|| panic!("volume {name}"));
            let host = vol["hostPath"]["path"]
                .as_str()
                .unwrap_or_else(|| panic!("volume {name}: only hostPath volumes are mapped"));
            if vol["hostPath"]["type"] == "DirectoryOrCreate" {
                std::fs::create_dir_all(host).unwrap();
            }
            let mut opts = vec![if m["readOnly"] == true { "ro" } else { "rw" }];
            match m["mountPropagation"].as_str() {
                Some("HostToContainer") => opts.push("rslave"),
                None | Some("None") => opts.push("rprivate"),
                Some(other) => panic!("mountPropagation {other} is not mapped"),
            }
            push(&format!(
                "--volume={host}:{}:{}",
                m["mountPath"].as_str().unwrap(),
                opts.join(",")
            ));
        }
        if spec["automountServiceAccountToken"] != false {
            push(&format!("--volume={}:{SA_DIR}:ro", self.sa_dir.display()));
            let addr = self.api.addr();
            push(&format!("--env=KUBERNETES_SERVICE_HOST={}", addr.ip()));
            push(&format!("--env=KUBERNETES_SERVICE_PORT={}", addr.port()));
        }
        push(c["image"].as_str().expect("image"));
        for arg in c["args"].as_array().into_iter().flatten() {
            push(arg.as_str().unwrap());
        }
        a
    }
}

impl Drop for ImageNode {
    fn drop(&mut self) {
        // Containers first (the agent stops touching the node), then the kubelet (its
        // processes and tmpfs mounts), then the shared bind, then podman's cgroups and store.
        self.podman.remove_containers();
        if let Some(sim) = self.sim.take() {
            let SimNode { kubelet, api, dir } = sim;
            drop(kubelet);
            if let Some(root) = self.shared_root.take() {
                let _ = Command::new("umount").arg("-R").arg(&root).status();
            }
            self.podman.remove_cgroups();
            drop(api);
            drop(dir);
        }
    }
}

/// podman with a private store under `dir` and a parent cgroup of its own.
pub struct Podman {
    pub dir: PathBuf,
    pub cgroup_parent: String,
    containers: Vec<String>,
}

impl Podman {
    pub fn new(dir: &Path) -> Podman {
        std::fs::create_dir_all(dir).unwrap();
        Podman {
            dir: dir.to_path_buf(),
            // Unique per test: the temp dir's name.
            cgroup_parent: format!(
                "/reloadlet-image-test-{}",
                dir.parent()
                    .and_then(|p| p.file_name())
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| std::process::id().to_string())
            ),
            containers: Vec::new(),
        }
    }

    pub fn cmd(&self) -> Command {
        let mut cmd = Command::new("podman");
        nodesim::runtime::default_signals(&mut cmd);
        let d = &self.dir;
        cmd.arg(format!("--root={}", d.join("root").display()))
            .arg(format!("--runroot={}", d.join("run").display()))
            .arg(format!("--tmpdir={}", d.join("tmp").display()))
            .args([
                "--storage-driver=vfs",
                "--cgroup-manager=cgroupfs",
                "--runtime=runc",
                "--events-backend=none",
            ]);
        cmd
    }

    /// This machine's platform from the archive's image index, named as the chart names it
    /// (`podman pull oci-archive:ARCHIVE:IMAGE:VERSION`: `podman load` refuses a layout whose
    /// index.json lists more than the image, and it also lists the attached SBOM); returns
    /// the image's id.
    pub fn load(&self, archive: &Path) -> String {
        let out = run(self.cmd().arg("pull").arg("--quiet").arg(format!(
            "oci-archive:{}:{}",
            archive.display(),
            image_ref()
        )));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// `podman run -d` with these arguments (before the image) under the test's cgroup
    /// parent, with limits this machine allows (root here lacks CAP_SYS_RESOURCE: podman
    /// must not raise nofile, nor set nproc to the current limit). Returns the container id.
    pub fn run_detached(&mut self, name: &str, args: &[String]) -> String {
        let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(1024);
        let out = run(self
            .cmd()
            .args(["run", "--detach", "--pull=never"])
            .arg(format!("--name={name}"))
            .arg(format!("--cgroup-parent={}", self.cgroup_parent))
            .arg(format!("--ulimit=nofile={nofile}:{nofile}"))
            .arg("--ulimit=nproc=4096:4096")
            .args(args));
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        self.containers.push(id.clone());
        id
    }

    /// `podman inspect --format FORMAT ID`.
    pub fn inspect(&self, id: &str, format: &str) -> String {
        let out = run(self.cmd().args(["inspect", "--format", format, id]));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The container's log (stdout and stderr).
    pub fn logs(&self, id: &str) -> String {
        let out = self
            .cmd()
            .args(["logs", id])
            .output()
            .map(|o| {
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                )
            })
            .unwrap_or_default();
        out
    }

    /// Stops and removes every container this test started (SIGTERM, then SIGKILL after 10 s).
    pub fn remove_containers(&mut self) {
        for id in std::mem::take(&mut self.containers) {
            let _ = self
                .cmd()
                .args(["rm", "--force", "--time=10", &id])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// Removes the parent cgroup (every hierarchy; podman puts each container in
    /// `libpod-<id>` and conmon in `conmon` under it) once their processes are gone: conmon
    /// exits just after its container, so this polls for up to 10 s.
    pub fn remove_cgroups(&self) {
        let tops: Vec<PathBuf> = std::fs::read_dir("/sys/fs/cgroup")
            .map(|d| {
                d.flatten()
                    .map(|h| h.path().join(self.cgroup_parent.trim_start_matches('/')))
                    .collect()
            })
            .unwrap_or_default();
        test_support::wait::within_blocking(std::time::Duration::from_secs(10), || {
            tops.iter().for_each(|top| remove_cgroup_tree(top));
            tops.iter().all(|t| !t.exists())
        });
    }
}

/// Removes an (empty of processes) cgroup directory tree, children first.
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}
