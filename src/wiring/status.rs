//! `reloadlet status TARGET`: the pods of the namespace (or of all) and the object's metadata
//! read from the API — read only, and for the object only `PartialObjectMetadata`, so a
//! Secret's data is never asked for — then the report of [`crate::status`]; with `--wait`,
//! again until every consumer is current or the timeout passes.

use crate::config::status::{Output, StatusArgs};
use crate::core::model::{SourceKind, SourceRef};
use crate::k8s::pod_convert;
use crate::k8s::pod_view::PodView;
use crate::status::{self, ObjectMeta, PodFacts, Report};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::ListParams;
use kube::{Api, Client};
use std::collections::{BTreeMap, BTreeSet};
use tokio::time::Instant;

/// What `status` prints, and whether every consumer is current (exit 0).
pub struct Answer {
    pub text: String,
    pub all_current: bool,
}

/// Runs the command (`Err`: why it could not; exit 2).
pub async fn run(args: StatusArgs) -> Result<Answer, String> {
    let config = config(&args).await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config).map_err(|e| format!("Kubernetes client: {e}"))?;
    let object = SourceRef {
        kind: args.target.kind,
        name: args.target.name.clone(),
    };
    let scope = (!args.all_namespaces).then_some(namespace.as_str());
    let deadline = Instant::now() + args.timeout;
    let mut last_summary = String::new();
    loop {
        let report = read(&client, &object, scope).await?;
        let done = report.all_current() || !args.wait || Instant::now() >= deadline;
        if done {
            let text = match args.output {
                Some(Output::Json) => {
                    let mut v = status::json(&report);
                    if args.wait && !report.all_current() {
                        v["timedOut"] = true.into();
                    }
                    format!("{:#}\n", v)
                }
                wide => {
                    let mut t =
                        status::table(&report, wide == Some(Output::Wide), args.all_namespaces);
                    if args.wait && !report.all_current() {
                        t.push_str(&format!(
                            "timed out after {}\n",
                            humantime::format_duration(args.timeout)
                        ));
                    }
                    t
                }
            };
            return Ok(Answer {
                text,
                all_current: report.all_current(),
            });
        }
        let summary = report.summary();
        if summary != last_summary {
            eprintln!(
                "{} {}: {summary}",
                status::hms(jiff::Timestamp::now()),
                object
            );
            last_summary = summary;
        }
        tokio::time::sleep(args.interval).await;
    }
}

/// The kubeconfig the flags name, like kubectl's: `--kubeconfig`, `--context`, else kube's
/// inference (KUBECONFIG, ~/.kube/config, in-cluster).
async fn config(args: &StatusArgs) -> Result<kube::Config, String> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let result = match (&args.kubeconfig, &args.context) {
        (Some(path), _) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| format!("cannot read kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| e.to_string())
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| e.to_string()),
        (None, None) => kube::Config::infer().await.map_err(|e| e.to_string()),
    };
    result.map_err(|e| format!("no Kubernetes configuration: {e}"))
}

/// One look: the pods, then the object's metadata in each namespace with a consumer (and in
/// the namespace asked for).
async fn read(client: &Client, object: &SourceRef, scope: Option<&str>) -> Result<Report, String> {
    let pods: Api<PodView> = match scope {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let list = pods
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("cannot list pods: {e}"))?;
    let facts: Vec<PodFacts> = list
        .items
        .iter()
        .filter_map(|p| {
            let info = pod_convert::pod_info(p)?;
            Some(PodFacts {
                node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
                started: started(p),
                info,
            })
        })
        .collect();
    let mut namespaces: BTreeSet<String> = facts
        .iter()
        .filter(|p| crate::core::status::consumers::consumer(&p.info, object).is_some())
        .map(|p| p.info.namespace.clone())
        .collect();
    if let Some(ns) = scope {
        namespaces.insert(ns.to_owned());
    }
    let mut objects = BTreeMap::new();
    for ns in namespaces {
        objects.insert(ns.clone(), metadata(client, &ns, object).await?);
    }
    Ok(status::report(object, &facts, &objects))
}

/// The object's metadata only (`Accept: …;as=PartialObjectMetadata`): its data-version
/// annotation, never its data.
async fn metadata(client: &Client, ns: &str, object: &SourceRef) -> Result<ObjectMeta, String> {
    let meta = match object.kind {
        SourceKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get_metadata_opt(&object.name)
            .await
            .map(|o| o.map(|o| o.metadata)),
        SourceKind::Secret => Api::<Secret>::namespaced(client.clone(), ns)
            .get_metadata_opt(&object.name)
            .await
            .map(|o| o.map(|o| o.metadata)),
        SourceKind::SecretProviderClass | SourceKind::CsiVolume => return Ok(ObjectMeta::Missing),
    }
    .map_err(|e| format!("cannot read {object} in {ns}: {e}"))?;
    Ok(match meta {
        None => ObjectMeta::Missing,
        Some(m) => ObjectMeta::Found(status::unpublished(
            m.annotations
                .as_ref()
                .and_then(|a| a.get(crate::core::status::data_version::ANNOTATION)),
        )),
    })
}

/// When the pod's longest-running container started, when all of its containers run (a pod
/// whose every container started after the data changed runs the new data).
fn started(pod: &PodView) -> Option<jiff::Timestamp> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let mut earliest: Option<jiff::Timestamp> = None;
    for s in statuses {
        let t = s.state.as_ref()?.running.as_ref()?.started_at.as_ref()?.0;
        earliest = Some(earliest.map_or(t, |e| e.min(t)));
    }
    earliest
}
