//! `reloadlet explain`: one pod read from the API, its budgets and its containers' main
//! processes looked up on this node, and the report of what reloadlet would do.

use crate::config::ExplainArgs;
use crate::core::invalid::Invalid;
use crate::explain::{self, MainPidError, MainProcessView};
use crate::host::process::ProcFs;
use crate::k8s::client::Clients;
use crate::k8s::pdb_watch;
use crate::k8s::pod_convert;
use crate::k8s::pod_get;
use crate::ports::ContainerProcesses;
use crate::wiring::Failed;

/// The report of `reloadlet explain --pod NS/NAME` (`Err`: why there is none).
pub async fn report(args: ExplainArgs) -> Result<String, Failed> {
    let scope = args.scope.scope()?;
    let (namespace, name) = args.pod;
    let clients = Clients::infer().await.map_err(|e| {
        Failed::because("no Kubernetes configuration (in-cluster or KUBECONFIG)", e)
    })?;
    let pod = pod_get::get_pod(clients.main.clone(), &namespace, &name)
        .await
        .map_err(|e| Failed::because(format!("cannot get pod {namespace}/{name}"), e))?;
    let Some(info) = pod_convert::pod_info(&pod) else {
        return Err(Failed::because(
            format!("pod {namespace}/{name}"),
            Invalid::new("it has no uid or spec"),
        ));
    };
    let pod_node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    let this_node = args.node_name.filter(|n| !n.is_empty());
    let elsewhere = match (&pod_node, &this_node) {
        (Some(p), Some(t)) if p != t => Some(p.clone()),
        _ => None,
    };
    let other_node = match &elsewhere {
        Some(node) => {
            let (agent_ns, agent_labels) = pod_get::own_pod_identity(clients.main.clone()).await;
            Some(explain::OtherNode {
                node: node.clone(),
                command: explain::reach_agent_command(
                    &agent_ns,
                    &agent_labels,
                    node,
                    &info.full_name(),
                ),
            })
        }
        None => None,
    };
    let budgets = pdb_watch::list_namespace(clients.main.clone(), &namespace)
        .await
        .map(|idx| idx.coverage(&namespace, &info.labels));
    let processes = ProcFs::new(args.proc_root);
    let main_pid = |container: &str| -> Result<MainProcessView, MainPidError> {
        let c = info
            .containers
            .iter()
            .find(|c| c.name == container)
            .ok_or(MainPidError::UnknownContainer)?;
        let id = c.container_id.as_ref().ok_or(MainPidError::NoContainerId)?;
        match processes.inspect(&info.uid, id) {
            Ok((main, status)) => Ok(MainProcessView {
                pid: main.pid,
                status: Ok(status),
            }),
            Err(e) => processes
                .find_main_process(&info.uid, id)
                .map(|main| MainProcessView {
                    pid: main.pid,
                    status: Err(e),
                })
                .map_err(MainPidError::from),
        }
    };
    let denials = crate::serve::denials::Denials::detached();
    let lease = if is_restart(&info) {
        Some(
            read_lease(
                &args.controller_lease.controller_lease_namespace,
                &args.controller_lease.controller_lease,
                &clients,
                &denials,
            )
            .await,
        )
    } else {
        None
    };
    let only_pod = if is_restart(&info) {
        Some(
            pod_get::namespace_pods(clients.main.clone(), &namespace)
                .await
                .map(|pods| crate::core::restart_grant::only_pod_of_owner(&info, &pods)),
        )
    } else {
        None
    };
    let ctx = explain::Context {
        scope: &scope,
        pod_node: pod_node.as_deref(),
        other_node,
        budgets: Some(budgets),
        lease,
        only_pod,
    };
    let mut text = explain::report(&info, &ctx, &pod_convert::env_only_sources(&pod), &main_pid);
    text.push_str(&crate::controller::nudge::qualify::explain(&info));
    text.push_str(&crate::controller::env::explain::explain(
        &info,
        jiff::Timestamp::now(),
    ));
    match args.pacing.defaults(std::time::Duration::ZERO) {
        Ok(defaults) => {
            let saved = crate::host::state_file::read_pacers(&args.state_dir)
                .and_then(|mut pacers| pacers.remove(&info.uid));
            text.push_str(&explain::pacing(
                &info,
                &defaults,
                saved.as_ref(),
                jiff::Timestamp::now(),
            ))
        }
        Err(e) => text.push_str(&format!(
            "  pacing: the agent's pacing flags are invalid: {e}\n"
        )),
    }
    // explain says what it may not read itself (docs/explain.md).
    let workloads = crate::k8s::workloads::KubeWorkloads::new(
        clients.main.clone(),
        std::sync::Arc::new(denials.clone()),
    );
    text.push_str(&crate::controller::rollout::explain::explain(&info, &workloads).await);
    text.push_str(&refused_note(
        &denials.standing(),
        &info.namespace,
        &info.name,
    ));
    Ok(text)
}

fn is_restart(pod: &crate::core::model::PodInfo) -> bool {
    pod.annotations
        .get("reloadlet.io/action")
        .is_some_and(|a| a.trim().eq_ignore_ascii_case("restart"))
}

/// Who holds the controller's Lease now (the one the agent reads, docs/restart.md).
async fn read_lease(
    namespace: &Option<String>,
    name: &str,
    clients: &Clients,
    denials: &crate::serve::denials::Denials,
) -> explain::LeaseSeen {
    use crate::ports::LeaseReader;
    let namespace = namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "reloadlet-system".into());
    let reader = crate::k8s::controller::KubeLeaseStore::agent_reader(
        clients.main.clone(),
        &namespace,
        name,
        std::sync::Arc::new(denials.clone()),
    );
    let record = reader.read().await?;
    let fields = record
        .as_ref()
        .map(|r| crate::core::lease_holder::LeaseFields {
            holder: r.holder.as_deref(),
            renew_time: r.renew_time.as_deref(),
            lease_duration_seconds: r.lease_duration_seconds,
        });
    Ok((
        reader.lease(),
        crate::core::lease_holder::coordination(fields, jiff::Timestamp::now()),
    ))
}

/// What the identity explain runs as may not read, named with its rules, and where to run
/// explain for that part; empty when nothing was refused.
fn refused_note(refused: &[crate::core::permission::Denied], ns: &str, name: &str) -> String {
    if refused.is_empty() {
        return String::new();
    }
    let rules: Vec<String> = refused
        .iter()
        .map(|d| format!("{} {}", d.verb, d.resource_name()))
        .collect();
    format!(
        "  NOTE: the identity explain runs as may not {} (the agent's role never needs that); for the workload part run explain with your own kubeconfig: KUBECONFIG=… reloadlet explain --pod {ns}/{name} (docs/explain.md)\n",
        rules.join(", ")
    )
}
