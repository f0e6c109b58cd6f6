//! The node agent (`reloadlet`, the default command): settings, edges and the loop on its
//! hot thread, put together.

use crate::agent::hot_thread::HotThread;
use crate::agent::{Agent, Deps};
use crate::config::Settings;
use crate::execute::applied::RecordDeps;
use crate::execute::evict::EvictionSettings;
use crate::host::inotify::WatcherOptions;
use crate::host::process::ProcFs;
use crate::host::state_file::StateStore;
use crate::k8s::api_backoff::ApiMetrics;
use crate::k8s::client::Clients;
use crate::k8s::controller::KubePatcher;
use crate::k8s::events::QueuedRecorder;
use crate::k8s::eviction::KubeEvictor;
use crate::k8s::pdb_watch::{self, SharedBudgets};
use crate::k8s::pod_watch::{self, PodWatchConfig, PodWatchReport};
use crate::serve::denials::{own_pod_ref, Denials};
use crate::serve::health::{self, Health};
use crate::serve::metrics::Metrics;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Why the agent stopped.
#[derive(Debug)]
pub enum RunError {
    /// It could not start (exit status 2, one line).
    Startup(String),
    /// It ran and failed (exit status 1).
    Stopped(anyhow::Error),
}

/// The edges of the pods' `reloadlet.io/applied` record: the pod patch (a dry run under
/// `--dry-run`) and the controller's key, followed from its Secret in the agent's own
/// namespace (`POD_NAMESPACE`; without it no key is looked for and entries carry no version).
fn status_record(
    settings: &Settings,
    client: &kube::Client,
    refusals: &crate::ports::RefusalSink,
) -> RecordDeps {
    let (key, rx) = tokio::sync::watch::channel(None);
    match settings.own_pod.as_ref() {
        Some((namespace, _)) => {
            tokio::spawn(crate::k8s::controller_key::follow(
                client.clone(),
                namespace.clone(),
                refusals.clone(),
                key,
            ));
        }
        None => {
            tracing::info!("POD_NAMESPACE is not set: the controller's key is not looked for; status records carry no data version");
        }
    }
    let patcher =
        KubePatcher::status_record(client.clone(), refusals.clone(), settings.scope.dry_run);
    RecordDeps {
        patcher: Arc::new(patcher),
        key: rx,
    }
}

/// Runs the node agent until SIGTERM/SIGINT (or a fatal error).
pub async fn run(settings: Settings) -> Result<(), RunError> {
    let fail = |reason: &str| -> Result<(), RunError> { Err(RunError::Startup(reason.to_owned())) };
    let store = match StateStore::open(&settings.paths.state_dir) {
        Ok(s) => Some(s),
        Err(e) => return fail(&format!("{e} (set --state-dir to a writable directory)")),
    };
    let arming = std::time::Instant::now();
    let (hot, stats) = match HotThread::spawn(
        settings.paths.kubelet_root.clone(),
        WatcherOptions {
            rescan_interval: settings.volumes.rescan_interval,
            csi_drivers: settings.volumes.csi_drivers.clone(),
        },
        settings.volumes.hot_thread_slice,
    ) {
        Ok(armed) => armed,
        Err(e @ crate::host::inotify::WatchError::PodsDir { .. }) => return fail(&e.to_string()),
        Err(e) => {
            return fail(&format!(
                "cannot watch {}: {e}",
                settings.paths.kubelet_root.display()
            ))
        }
    };
    tracing::info!(
        pods = stats.pods,
        volumes = stats.volumes,
        watches = stats.watches,
        took_ms = arming.elapsed().as_secs_f64() * 1e3,
        "volume watches armed"
    );
    let clients = match Clients::infer().await {
        Ok(c) => c,
        Err(e) => {
            return fail(&format!(
                "no Kubernetes configuration (in-cluster or KUBECONFIG): {e}"
            ))
        }
    };
    let mut registry = Registry::with_prefix("reloadlet");
    let metrics = Metrics::new(&mut registry);
    let notify_metrics = crate::outbound::notify::NotifyMetrics::new(&mut registry);
    let api_metrics = ApiMetrics::new(&mut registry);
    let health = Arc::new(Health::default());
    health.beat();
    let denials = Denials::new(&mut registry, health.clone());
    let refusals: crate::ports::RefusalSink = Arc::new(denials.clone());
    let listener = match tokio::net::TcpListener::bind(settings.listen).await {
        Ok(l) => l,
        Err(e) => return fail(&format!("cannot listen on {}: {e}", settings.listen)),
    };
    let app = health::router(health.clone(), Arc::new(registry));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    });

    let (pod_tx, pod_rx) = mpsc::channel(1024);
    tokio::spawn(pod_watch::run(
        clients.main.clone(),
        PodWatchConfig {
            node_name: settings.node_name.clone(),
            label_selector: settings.scope.selector.clone(),
        },
        pod_tx,
        PodWatchReport {
            metrics: api_metrics.clone(),
            health: health.clone(),
            denials: refusals.clone(),
        },
    ));
    let budgets = SharedBudgets::default();
    tokio::spawn(pdb_watch::run(
        clients.main.clone(),
        budgets.clone(),
        api_metrics,
        refusals.clone(),
    ));
    // No HTTP client at all while notifications are off.
    let notifier = if !settings.notify.enabled() {
        crate::outbound::notify::Notifier::disabled()
    } else {
        match crate::outbound::notify::HttpPoster::for_settings(&settings.notify) {
            Ok(poster) => {
                tracing::info!(notify = %settings.notify.describe(), "notifications on");
                crate::outbound::notify::Notifier::start(
                    &settings.notify,
                    poster,
                    notify_metrics,
                    CancellationToken::new(),
                )
            }
            Err(e) => return fail(&format!("notifications: {e}")),
        }
    };
    let http =
        match crate::outbound::reload_client::ReloadClient::new(settings.http_ca_file.as_deref()) {
            Ok(c) => c,
            Err(e) => return fail(&e.to_string()),
        };
    let events = Arc::new(QueuedRecorder::spawn(
        clients.main.clone(),
        format!("reloadlet-{}", settings.node_name),
        refusals.clone(),
    ));
    if let Some(own_pod) = own_pod_ref(settings.own_pod.as_ref()) {
        denials.publish_to(events.clone(), own_pod);
    }
    let record = status_record(&settings, &clients.main, &refusals);
    let deps = Deps {
        record: Some(record),
        http: Arc::new(http),
        events,
        processes: Arc::new(ProcFs::new(&settings.paths.proc_root)),
        evictor: Arc::new(KubeEvictor::new(clients.eviction.clone(), refusals.clone())),
        notifier,
        gate: Some(Arc::new(crate::k8s::pod_condition::KubeGate::new(
            clients.main.clone(),
            refusals.clone(),
        ))),
    };
    let eviction = EvictionSettings {
        max_in_flight: settings.eviction.max_in_flight,
        initial_backoff: settings.eviction.backoff,
        max_backoff: settings.eviction.backoff_max,
        ..EvictionSettings::default()
    };
    let lease = settings.controller_lease.clone().map(|(namespace, name)| {
        Arc::new(crate::k8s::controller::KubeLeaseStore::agent_reader(
            clients.main.clone(),
            &namespace,
            &name,
            refusals.clone(),
        )) as Arc<dyn crate::ports::LeaseReader>
    });
    let shutdown = CancellationToken::new();
    tokio::spawn(super::shutdown_on_signal(shutdown.clone()));
    tracing::info!(node = %settings.node_name, kubelet_root = %settings.paths.kubelet_root.display(), debounce = ?settings.volumes.debounce, dry_run = settings.scope.dry_run, listen = %settings.listen, "reloadlet started");
    let agent = Agent::new(
        settings,
        eviction,
        deps,
        metrics,
        health,
        store,
        shutdown.child_token(),
    )
    .with_budgets(budgets);
    let agent = match lease {
        Some(lease) => agent.with_controller_lease(lease),
        None => agent,
    };
    hot.run(agent, pod_rx, shutdown)
        .await
        .map_err(RunError::Stopped)
}
