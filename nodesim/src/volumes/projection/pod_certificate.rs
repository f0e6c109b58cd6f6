//! The kubelet's pod certificates (KEP-4317, beta in 1.35). For each projected
//! `podCertificate` source the kubelet's pod certificate manager holds a private key of the
//! source's `keyType` and the chain its signer issued for it (kubernetes
//! `pkg/kubelet/podcertificate/podcertificatemanager.go`: a PodCertificateRequest per source,
//! refreshed from the issued certificate's `beginRefreshAt`, `refreshCredentials`), and the
//! projected plugin writes them with the volume's other files, through the AtomicWriter
//! (`collectData` in `pkg/volume/projected/projected.go`): at `credentialBundlePath` the key's
//! PEM block then the chain's, at `keyPath` the key, at `certificateChainPath` the chain. So a
//! rotation is one `..data` swap of the volume, like a token refresh.
//!
//! The simulation is its own signer: a self-signed certificate for the pod's key (nothing in
//! the simulation verifies it). `ED25519`, `ECDSAP256` and `ECDSAP384` keys are of that type;
//! `RSA3072`, `RSA4096` and `ECDSAP521` are issued as P-256 keys (ring, which rcgen uses here,
//! does not generate them): the files' shape is the same. The mode of the files is the
//! volume's `defaultMode`, as for its other sources.

use super::*;
use k8s_openapi::api::core::v1::PodCertificateProjection;

/// The credentials the kubelet holds for a pod's `podCertificate` sources, until the next
/// rotation. Re-projecting with the same cache gives the same bytes (a resync writes nothing);
/// [`PodCertificates::rotate`] makes the next projection get a new key and chain.
#[derive(Debug, Default, Clone)]
pub struct PodCertificates {
    /// (signer, key type, paths) → (key PEM, chain PEM).
    issued: BTreeMap<(String, String, Vec<String>), (String, String)>,
}

impl PodCertificates {
    /// Forgets every credential: the next projection gets new ones.
    pub fn rotate(&mut self) {
        self.issued.clear();
    }

    /// The files of one source: `(path, bytes)` for each path it names.
    pub(super) fn files(
        &mut self,
        pod: &Pod,
        source: &PodCertificateProjection,
    ) -> Result<Vec<(String, Vec<u8>)>, ProjectionError> {
        let paths: Vec<String> = [
            &source.credential_bundle_path,
            &source.key_path,
            &source.certificate_chain_path,
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
        let entry = (
            source.signer_name.clone(),
            source.key_type.clone(),
            paths.clone(),
        );
        let (key, chain) = match self.issued.get(&entry) {
            Some(issued) => issued.clone(),
            None => {
                let issued = issue(pod, source)?;
                self.issued.insert(entry, issued.clone());
                issued
            }
        };
        let mut files = Vec::new();
        if let Some(p) = &source.credential_bundle_path {
            files.push((p.clone(), format!("{key}{chain}").into_bytes()));
        }
        if let Some(p) = &source.key_path {
            files.push((p.clone(), key.clone().into_bytes()));
        }
        if let Some(p) = &source.certificate_chain_path {
            files.push((p.clone(), chain.clone().into_bytes()));
        }
        Ok(files)
    }
}

/// A new key of the source's type and a certificate for it: (key PEM, chain PEM).
fn issue(
    pod: &Pod,
    source: &PodCertificateProjection,
) -> Result<(String, String), ProjectionError> {
    let failed =
        |e: rcgen::Error| ProjectionError::PodCertificate(format!("{}: {e}", source.signer_name));
    let algorithm = match source.key_type.as_str() {
        "ED25519" => &rcgen::PKCS_ED25519,
        "ECDSAP384" => &rcgen::PKCS_ECDSA_P384_SHA384,
        _ => &rcgen::PKCS_ECDSA_P256_SHA256,
    };
    let key = rcgen::KeyPair::generate_for(algorithm).map_err(failed)?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or_default()
        ),
    );
    let cert = params.self_signed(&key).map_err(failed)?;
    Ok((key.serialize_pem(), cert.pem()))
}
