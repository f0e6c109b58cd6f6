//! Kubernetes clients by kube's standard inference (in-cluster, else KUBECONFIG).

use kube::{Client, Config};

pub struct Clients {
    /// Watches and events: kube's default retry of 429/503/504 is welcome there.
    pub main: Client,
    /// Evictions: the retry layer is off, so a PDB refusal (429) reaches reloadlet at once and
    /// reloadlet paces, counts and reports it itself.
    pub eviction: Client,
}

impl Clients {
    pub async fn infer() -> Result<Self, kube::Error> {
        let config = Config::infer().await.map_err(kube::Error::InferConfig)?;
        let mut no_retry = config.clone();
        no_retry.default_retry = false;
        Ok(Self {
            main: Client::try_from(config)?,
            eviction: Client::try_from(no_retry)?,
        })
    }
}
