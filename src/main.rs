//! `reloadlet`: thin wiring of settings, edges and the agent loop.

use clap::Parser;
use prometheus_client::registry::Registry;
use reloadlet::agent::hot_thread::HotThread;
use reloadlet::agent::{Agent, Deps};
use reloadlet::config::{Cli, Command, ExplainArgs, LogFormat, Settings};
use reloadlet::execute::evict::EvictionSettings;
use reloadlet::explain;
use reloadlet::host::inotify::WatcherOptions;
use reloadlet::host::process::{ContainerProcesses, ProcFs};
use reloadlet::host::state_file::StateStore;
use reloadlet::k8s::api_backoff::ApiMetrics;
use reloadlet::k8s::client::Clients;
use reloadlet::k8s::events::QueuedRecorder;
use reloadlet::k8s::eviction::KubeEvictor;
use reloadlet::k8s::pdb_watch::{self, SharedBudgets};
use reloadlet::k8s::pod_convert;
use reloadlet::k8s::pod_view::PodView;
use reloadlet::k8s::pod_watch::{self, PodWatchConfig, PodWatchReport};
use reloadlet::serve::health::{self, Health};
use reloadlet::serve::metrics::Metrics;
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let format = cli.log_format;
    init_tracing(format);
    reloadlet::host::memory::limit_malloc_arenas();
    // The agent's volume → signal path runs on its own thread (`agent::hot_thread`); this
    // runtime carries the API watches, Events, evictions, retries and the HTTP server: one
    // worker is plenty, and each worker is another stack and malloc arena in the RSS.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        // /proc scans, big-volume-free blocking work; a node agent never needs many at once.
        .max_blocking_threads(4)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(format, &format!("cannot start the async runtime: {e}")),
    };
    match cli.command {
        Some(Command::Explain(args)) => runtime.block_on(explain(args, format)),
        Some(Command::Controller(args)) => {
            // The UTS namespace's hostname, as gethostname(2) returns it.
            let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim_end().to_owned());
            let settings = match args.settings(hostname) {
                Ok(s) => s,
                Err(e) => return fail(format, &e),
            };
            let settings_format = settings.log_format;
            init_tracing(settings_format);
            runtime.block_on(async {
                let shutdown = CancellationToken::new();
                tokio::spawn(shutdown_on_signal(shutdown.clone()));
                match reloadlet::wiring::controller::serve(settings, shutdown).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => fail(settings_format, &e),
                }
            })
        }
        None => {
            let settings = match cli.run.settings(format) {
                Ok(s) => s,
                Err(e) => return fail(format, &e),
            };
            runtime.block_on(run(settings))
        }
    }
}

/// A fatal startup error: one line on stderr (a JSON object with `--log-format json`),
/// exit status 2.
fn fail(format: LogFormat, reason: &str) -> ExitCode {
    match format {
        LogFormat::Json => tracing::error!(exit_code = 2, "{reason}"),
        LogFormat::Text => eprintln!("reloadlet: {reason}"),
    }
    ExitCode::from(2)
}

/// A command line clap refused: its own text, or one JSON line when JSON logs were asked for
/// (the flag or RELOADLET_LOG_FORMAT), so log pipelines see it.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let args: Vec<String> = std::env::args().collect();
    let json = std::env::var("RELOADLET_LOG_FORMAT").is_ok_and(|v| v == "json")
        || args
            .windows(2)
            .any(|w| w[0] == "--log-format" && w[1] == "json")
        || args.iter().any(|a| a == "--log-format=json");
    if !json {
        e.exit();
    }
    init_tracing(LogFormat::Json);
    let text = e.kind().to_string();
    let detail = e
        .to_string()
        .lines()
        .find(|l| l.starts_with("error:"))
        .map(|l| l.trim_start_matches("error:").trim().to_string())
        .unwrap_or(text);
    fail(LogFormat::Json, &detail)
}

fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

async fn run(settings: Settings) -> ExitCode {
    let format = settings.log_format;
    let fail = |reason: &str| fail(format, reason);
    let store = match StateStore::open(&settings.paths.state_dir) {
        Ok(s) => Some(s),
        Err(e) => return fail(&format!("{e} (set --state-dir to a writable directory)")),
    };
    let arming = std::time::Instant::now();
    let (hot, stats) = match HotThread::spawn(
        settings.paths.kubelet_root.clone(),
        WatcherOptions {
            rescan_interval: settings.volumes.rescan_interval,
        },
        settings.volumes.hot_thread_slice,
    ) {
        Ok(armed) => armed,
        Err(e @ reloadlet::host::inotify::WatchError::PodsDir { .. }) => {
            return fail(&e.to_string())
        }
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
    let notify_metrics = reloadlet::outbound::notify::NotifyMetrics::new(&mut registry);
    let api_metrics = ApiMetrics::new(&mut registry);
    let health = Arc::new(Health::default());
    health.beat();
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
        },
    ));
    let budgets = SharedBudgets::default();
    tokio::spawn(pdb_watch::run(
        clients.main.clone(),
        budgets.clone(),
        api_metrics,
    ));
    // No HTTP client at all while notifications are off.
    let notifier = if !settings.notify.enabled() {
        reloadlet::outbound::notify::Notifier::disabled()
    } else {
        match reloadlet::outbound::notify::HttpPoster::for_settings(&settings.notify) {
            Ok(poster) => {
                tracing::info!(notify = %settings.notify.describe(), "notifications on");
                reloadlet::outbound::notify::Notifier::start(
                    &settings.notify,
                    poster,
                    notify_metrics,
                    CancellationToken::new(),
                )
            }
            Err(e) => return fail(&format!("notifications: {e}")),
        }
    };
    let http = match reloadlet::outbound::reload_client::ReloadClient::new(
        settings.http_ca_file.as_deref(),
    ) {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    let deps = Deps {
        http: Arc::new(http),
        events: Arc::new(QueuedRecorder::spawn(
            clients.main.clone(),
            format!("reloadlet-{}", settings.node_name),
        )),
        processes: Arc::new(ProcFs::new(&settings.paths.proc_root)),
        evictor: Arc::new(KubeEvictor::new(clients.eviction.clone())),
        notifier,
    };
    let eviction = EvictionSettings {
        max_in_flight: settings.eviction.max_in_flight,
        initial_backoff: settings.eviction.backoff,
        max_backoff: settings.eviction.backoff_max,
        ..EvictionSettings::default()
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_on_signal(shutdown.clone()));
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
    match hot.run(agent, pod_rx, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "reloadlet stopped");
            ExitCode::FAILURE
        }
    }
}

async fn shutdown_on_signal(token: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
    token.cancel();
}

async fn explain(args: ExplainArgs, format: LogFormat) -> ExitCode {
    let fail = |reason: &str| fail(format, reason);
    let scope = match args.scope.scope() {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    let (namespace, name) = args.pod;
    let clients = match Clients::infer().await {
        Ok(c) => c,
        Err(e) => {
            return fail(&format!(
                "no Kubernetes configuration (in-cluster or KUBECONFIG): {e}"
            ))
        }
    };
    let api: kube::Api<PodView> = kube::Api::namespaced(clients.main.clone(), &namespace);
    let pod = match api.get(&name).await {
        Ok(p) => p,
        Err(e) => return fail(&format!("cannot get pod {namespace}/{name}: {e}")),
    };
    let Some(info) = pod_convert::pod_info(&pod) else {
        return fail(&format!("pod {namespace}/{name} has no uid or spec"));
    };
    let pod_node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    let this_node = args.node_name.filter(|n| !n.is_empty());
    let elsewhere = match (&pod_node, &this_node) {
        (Some(p), Some(t)) if p != t => Some(p.clone()),
        _ => None,
    };
    let other_node = match &elsewhere {
        Some(node) => {
            let (agent_ns, agent_labels) = own_pod_identity(clients.main.clone()).await;
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
        .map(|idx| idx.selecting(&namespace, &info.labels))
        .map_err(|e| e.to_string());
    let processes = ProcFs::new(args.proc_root);
    let main_pid = |container: &str| -> Result<reloadlet::explain::MainProcessView, String> {
        let c = info
            .containers
            .iter()
            .find(|c| c.name == container)
            .ok_or("unknown container")?;
        let id = c.container_id.as_ref().ok_or("no container id yet")?;
        match processes.inspect(&info.uid, id) {
            Ok((main, status)) => Ok(reloadlet::explain::MainProcessView {
                pid: main.pid,
                status: Ok(status),
            }),
            Err(e) => processes
                .find_main_process(&info.uid, id)
                .map(|main| reloadlet::explain::MainProcessView {
                    pid: main.pid,
                    status: Err(e.to_string()),
                })
                .map_err(|e| e.to_string()),
        }
    };
    let ctx = explain::Context {
        scope: &scope,
        pod_node: pod_node.as_deref(),
        other_node,
        budgets: Some(budgets),
    };
    print!(
        "{}",
        explain::report(&info, &ctx, &pod_convert::env_only_sources(&pod), &main_pid)
    );
    print!("{}", reloadlet::controller::nudge::qualify::explain(&info));
    print!("{}", reloadlet::controller::env::hash::explain(&info));
    ExitCode::SUCCESS
}

/// The namespace and identifying labels of the pod `explain` runs in (to name the agent on
/// another node): POD_NAMESPACE (else the ServiceAccount's namespace file) and POD_NAME (else
/// HOSTNAME), read from the API; per-revision labels are left out. Falls back to the labels
/// the manifests set.
async fn own_pod_identity(client: kube::Client) -> (String, BTreeMap<String, String>) {
    let namespace = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "reloadlet".into());
    let fallback: BTreeMap<String, String> = [(
        "app.kubernetes.io/name".to_string(),
        "reloadlet".to_string(),
    )]
    .into();
    let name = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default();
    if name.is_empty() {
        return (namespace, fallback);
    }
    let api: kube::Api<PodView> = kube::Api::namespaced(client, &namespace);
    let labels = match api.get(&name).await {
        Ok(p) => p
            .metadata
            .labels
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "controller-revision-hash" | "pod-template-generation" | "pod-template-hash"
                )
            })
            .collect(),
        Err(_) => BTreeMap::new(),
    };
    (namespace, if labels.is_empty() { fallback } else { labels })
}
