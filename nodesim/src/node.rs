//! A whole simulated node in a temp dir: the API server (with a kubeconfig for it), the
//! kubelet root, and the simulated kubelet. Used by the tests, the demo and the benchmark.

use crate::apiserver::{ApiServer, ApiServerOptions};
use crate::kubelet::{KubeletOptions, SimKubelet};
use std::path::PathBuf;

pub struct SimNode {
    // Dropped in this order: the kubelet stops every process and removes mounts and
    // cgroups before the temp dir goes.
    pub kubelet: SimKubelet,
    pub api: ApiServer,
    pub dir: tempfile::TempDir,
}

impl SimNode {
    /// Starts a node named `node_name` in a new temp dir whose name starts with `prefix`;
    /// `configure` may change the kubelet's options (runtime, cgroup driver and version…).
    pub async fn start(
        node_name: &str,
        prefix: &str,
        configure: impl FnOnce(&mut KubeletOptions),
    ) -> anyhow::Result<SimNode> {
        Self::start_with_api(node_name, prefix, ApiServerOptions::default(), configure).await
    }

    /// [`SimNode::start`] with these API server options (e.g. TLS and bearer tokens).
    pub async fn start_with_api(
        node_name: &str,
        prefix: &str,
        api_opts: ApiServerOptions,
        configure: impl FnOnce(&mut KubeletOptions),
    ) -> anyhow::Result<SimNode> {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir()?;
        let api = ApiServer::start_with(api_opts).await?;
        api.write_kubeconfig(&dir.path().join("kubeconfig"))?;
        let root = dir.path().join("kubelet");
        std::fs::create_dir_all(root.join("pods"))?;
        let mut opts = KubeletOptions::new(&root, dir.path().join("work"), node_name);
        configure(&mut opts);
        let kubelet = SimKubelet::start(api.clone(), opts)?;
        Ok(SimNode { kubelet, api, dir })
    }

    /// A path inside the node's temp dir.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The kubelet root (`<dir>/kubelet`), what reloadlet's `--kubelet-root` points at.
    pub fn kubelet_root(&self) -> PathBuf {
        self.path("kubelet")
    }

    /// A kubeconfig for the API server (what `KUBECONFIG` points at), as the admin: allowed
    /// everything.
    pub fn kubeconfig(&self) -> PathBuf {
        self.path("kubeconfig")
    }

    /// A kubeconfig with a new token of the ServiceAccount `namespace/name`, whose requests
    /// the API server authorizes with its RBAC objects ([`ApiServer::set_rbac`]).
    pub fn kubeconfig_for(&self, namespace: &str, name: &str) -> std::io::Result<PathBuf> {
        let token = self
            .api
            .mint_token(crate::apiserver::rbac::User::service_account(
                namespace, name,
            ));
        let path = self.path(&format!("kubeconfig-{namespace}-{name}"));
        self.api.write_kubeconfig_with_token(&path, Some(&token))?;
        Ok(path)
    }
}
