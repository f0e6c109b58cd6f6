//! `reloadlet status TARGET`: the pods of the namespace (or of all) and the object's metadata
//! read from the API — read only, and for the object only `PartialObjectMetadata`, so a
//! Secret's data is never asked for — then the report of [`crate::status`]; with `--wait`,
//! again until every consumer is current or the timeout passes.

use crate::config::status::{Output, StatusArgs, Target};
use crate::core::model::{SourceKind, SourceRef};
use crate::k8s::pod_convert;
use crate::k8s::pod_view::PodView;
use crate::status::{self, ObjectMeta, PodFacts, Report};
use crate::wiring::Failed;
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
pub async fn run(args: StatusArgs) -> Result<Answer, Failed> {
    let config = config(&args).await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config).map_err(|e| Failed::because("Kubernetes client", e))?;
    let scope = (!args.all_namespaces).then_some(namespace.as_str());
    let deadline = Instant::now() + args.timeout;
    let mut last_summary = String::new();
    loop {
        let look = read(&client, &args.target, scope).await?;
        let all_current = look.all_current();
        let done = all_current || !args.wait || Instant::now() >= deadline;
        if done {
            let timed_out = args.wait && !all_current;
            let text = match args.output {
                Some(Output::Json) => {
                    let mut v = look.json();
                    if timed_out {
                        v["timedOut"] = true.into();
                    }
                    format!("{v:#}\n")
                }
                wide => {
                    let mut t = look.table(wide == Some(Output::Wide), args.all_namespaces);
                    if timed_out {
                        t.push_str(&format!(
                            "timed out after {}\n",
                            humantime::format_duration(args.timeout)
                        ));
                    }
                    t
                }
            };
            return Ok(Answer { text, all_current });
        }
        let summary = look.summary();
        if summary != last_summary {
            eprintln!("{} {summary}", status::hms(jiff::Timestamp::now()));
            last_summary = summary;
        }
        tokio::time::sleep(args.interval).await;
    }
}

/// One look: the report of the object, or of each object a workload's pods consume.
struct Look {
    /// `deployment web` for a workload target.
    workload: Option<String>,
    reports: Vec<Report>,
}

impl Look {
    fn all_current(&self) -> bool {
        // A workload none of whose pods was found is not "all current": likely a typo.
        !(self.workload.is_some() && self.reports.is_empty())
            && self.reports.iter().all(Report::all_current)
    }

    fn summary(&self) -> String {
        let lines: Vec<String> = self
            .reports
            .iter()
            .map(|r| format!("{}: {}", r.object, r.summary()))
            .collect();
        match &self.workload {
            Some(w) if lines.is_empty() => format!("{w}: no pod consumes a ConfigMap or Secret"),
            _ => lines.join("; "),
        }
    }

    fn table(&self, wide: bool, all_namespaces: bool) -> String {
        let tables: Vec<String> = self
            .reports
            .iter()
            .map(|r| status::table(r, wide, all_namespaces))
            .collect();
        let mut out = tables.join("\n");
        if let Some(w) = &self.workload {
            if self.reports.is_empty() {
                out.push_str(&format!(
                    "{w}: no pod of it consumes a ConfigMap or Secret\n"
                ));
            } else {
                let current = self.reports.iter().filter(|r| r.all_current()).count();
                let n = self.reports.len();
                let objects = if n == 1 { "object" } else { "objects" };
                out.push_str(&format!(
                    "\n{w}: {n} {objects}, {current} with every consumer current\n"
                ));
            }
        }
        out
    }

    fn json(&self) -> serde_json::Value {
        match &self.workload {
            None => self.reports.first().map(status::json).unwrap_or_default(),
            Some(w) => serde_json::json!({
                "workload": w.replace(' ', "/"),
                "objects": self.reports.iter().map(status::json).collect::<Vec<_>>(),
                "allCurrent": self.all_current(),
            }),
        }
    }
}

/// The kubeconfig the flags name, like kubectl's: `--kubeconfig`, `--context`, else kube's
/// inference (KUBECONFIG, ~/.kube/config, in-cluster).
async fn config(args: &StatusArgs) -> Result<kube::Config, Failed> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let result = match (&args.kubeconfig, &args.context) {
        (Some(path), _) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| {
                Failed::because(format!("cannot read kubeconfig {}", path.display()), e)
            })?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(Box::from)
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(Box::from),
        (None, None) => kube::Config::infer().await.map_err(Box::from),
    };
    result.map_err(|e: Box<dyn std::error::Error + Send + Sync>| {
        Failed::because("no Kubernetes configuration", e)
    })
}

/// The pods (of the namespace, or all), then the object's metadata in each namespace with a
/// consumer (and in the namespace asked for).
async fn read(client: &Client, target: &Target, scope: Option<&str>) -> Result<Look, Failed> {
    let pods: Api<PodView> = match scope {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let list = pods
        .list(&ListParams::default())
        .await
        .map_err(|e| Failed::because("cannot list pods", e))?;
    let mut facts: Vec<PodFacts> = list
        .items
        .iter()
        .filter_map(|p| {
            let info = pod_convert::pod_info(p)?;
            Some(PodFacts {
                node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
                started: info.started,
                info,
            })
        })
        .collect();
    let (workload, objects) = match target {
        Target::Object(object) => (None, vec![object.clone()]),
        Target::Workload(kind, name) => {
            facts.retain(|p| status::belongs_to(&p.info, *kind, name));
            let objects = status::consumed_objects(facts.iter().map(|p| &p.info));
            (Some(format!("{} {name}", kind.as_str())), objects)
        }
    };
    let mut reports = Vec::new();
    for object in objects {
        let mut namespaces: BTreeSet<String> = facts
            .iter()
            .filter(|p| crate::core::status::consumers::consumer(&p.info, &object).is_some())
            .map(|p| p.info.namespace.clone())
            .collect();
        if let (Some(ns), None) = (scope, &workload) {
            namespaces.insert(ns.to_owned());
        }
        let mut metas = BTreeMap::new();
        for ns in namespaces {
            metas.insert(ns.clone(), metadata(client, &ns, &object).await?);
        }
        reports.push(status::report(&object, &facts, &metas));
    }
    Ok(Look { workload, reports })
}

/// The object's metadata only (`Accept: …;as=PartialObjectMetadata`): its data-version
/// annotation, never its data.
async fn metadata(client: &Client, ns: &str, object: &SourceRef) -> Result<ObjectMeta, Failed> {
    let meta = match object.kind {
        SourceKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get_metadata_opt(&object.name)
            .await
            .map(|o| o.map(|o| o.metadata)),
        SourceKind::Secret => Api::<Secret>::namespaced(client.clone(), ns)
            .get_metadata_opt(&object.name)
            .await
            .map(|o| o.map(|o| o.metadata)),
        SourceKind::SecretProviderClass | SourceKind::CsiVolume | SourceKind::PodCertificate => {
            return Ok(ObjectMeta::Missing)
        }
    }
    .map_err(|e| Failed::because(format!("cannot read {object} in {ns}"), e))?;
    Ok(match meta {
        None => ObjectMeta::Missing,
        Some(m) => ObjectMeta::Found(status::unpublished(
            m.annotations
                .as_ref()
                .and_then(|a| a.get(crate::core::status::data_version::ANNOTATION)),
        )),
    })
}
