//! `reloadlet`: thin wiring of settings, edges and the agent loop.

use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use prometheus_client::registry::Registry;
use reloadlet::agent::evictions::EvictionSettings;
use reloadlet::agent::{Agent, Deps};
use reloadlet::config::{Cli, Command, LogFormat, Settings};
use reloadlet::filters::NamespaceFilter;
use reloadlet::http::{self, Health};
use reloadlet::k8s::client::Clients;
use reloadlet::k8s::events::QueuedRecorder;
use reloadlet::k8s::eviction::KubeEvictor;
use reloadlet::k8s::pod_convert;
use reloadlet::k8s::pod_watch::{self, PodWatchConfig};
use reloadlet::metrics::Metrics;
use reloadlet::process::{ContainerProcesses, ProcFs};
use reloadlet::state::StateStore;
use reloadlet::watch::{VolumeWatcher, WatcherOptions};
use std::process::ExitCode;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    reloadlet::memory::limit_malloc_arenas();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Signals and /proc scans run here; a node agent never needs many at once.
        .max_blocking_threads(4)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&format!("cannot start the async runtime: {e}")),
    };
    match cli.command {
        Some(Command::Explain {
            pod,
            proc_root,
            namespaces,
            exclude_namespaces,
        }) => {
            init_tracing(LogFormat::Text);
            let filter = NamespaceFilter {
                include: namespaces.into_iter().filter(|s| !s.is_empty()).collect(),
                exclude: exclude_namespaces
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect(),
            };
            runtime.block_on(explain(pod, proc_root, filter))
        }
        Some(Command::Controller(args)) => {
            let hostname = nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok());
            let settings = match args.settings(hostname) {
                Ok(s) => s,
                Err(e) => return fail(&e),
            };
            init_tracing(settings.log_format);
            runtime.block_on(async {
                let shutdown = CancellationToken::new();
                tokio::spawn(shutdown_on_signal(shutdown.clone()));
                match reloadlet::k8s::controller_serve::serve(settings, shutdown).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => fail(&e),
                }
            })
        }
        None => {
            let settings = match cli.run.settings() {
                Ok(s) => s,
                Err(e) => return fail(&e),
            };
            init_tracing(settings.log_format);
            runtime.block_on(run(settings))
        }
    }
}

fn fail(reason: &str) -> ExitCode {
    eprintln!("reloadlet: {reason}");
    ExitCode::from(2)
}

fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

async fn run(settings: Settings) -> ExitCode {
    let store = match StateStore::open(&settings.state_dir) {
        Ok(s) => Some(s),
        Err(e) => return fail(&format!("{e} (set --state-dir to a writable directory)")),
    };
    let arming = std::time::Instant::now();
    let watcher = match VolumeWatcher::new(
        &settings.kubelet_root,
        WatcherOptions {
            rescan_interval: settings.rescan_interval,
        },
    ) {
        Ok(w) => w,
        Err(e) => {
            return fail(&format!(
                "cannot watch {}: {e}",
                settings.kubelet_root.display()
            ))
        }
    };
    let stats = watcher.stats();
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
    let health = Arc::new(Health::default());
    health.beat();
    let listener = match tokio::net::TcpListener::bind(settings.listen).await {
        Ok(l) => l,
        Err(e) => return fail(&format!("cannot listen on {}: {e}", settings.listen)),
    };
    let app = http::router(health.clone(), Arc::new(registry));
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
            label_selector: settings.pod_selector.clone(),
        },
        pod_tx,
    ));
    let deps = Deps {
        events: Arc::new(QueuedRecorder::spawn(
            clients.main.clone(),
            format!("reloadlet-{}", settings.node_name),
        )),
        processes: Arc::new(ProcFs::new(&settings.proc_root)),
        evictor: Arc::new(KubeEvictor::new(clients.eviction.clone())),
    };
    let eviction = EvictionSettings {
        dry_run: settings.dry_run,
        max_in_flight: settings.max_evictions_in_flight,
        initial_backoff: settings.eviction_backoff,
        max_backoff: settings.eviction_backoff_max,
        ..EvictionSettings::default()
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_on_signal(shutdown.clone()));
    tracing::info!(node = %settings.node_name, kubelet_root = %settings.kubelet_root.display(), debounce = ?settings.debounce, dry_run = settings.dry_run, listen = %settings.listen, "reloadlet started");
    let agent = Agent::new(
        settings,
        eviction,
        deps,
        metrics,
        health,
        store,
        shutdown.child_token(),
    );
    match agent.run(watcher, pod_rx, shutdown).await {
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

async fn explain(
    pod_ref: (String, String),
    proc_root: std::path::PathBuf,
    filter: NamespaceFilter,
) -> ExitCode {
    let (namespace, name) = pod_ref;
    let clients = match Clients::infer().await {
        Ok(c) => c,
        Err(e) => {
            return fail(&format!(
                "no Kubernetes configuration (in-cluster or KUBECONFIG): {e}"
            ))
        }
    };
    let api: kube::Api<Pod> = kube::Api::namespaced(clients.main, &namespace);
    let pod = match api.get(&name).await {
        Ok(p) => p,
        Err(e) => return fail(&format!("cannot get pod {namespace}/{name}: {e}")),
    };
    let Some(info) = pod_convert::pod_info(&pod) else {
        return fail(&format!("pod {namespace}/{name} has no uid or spec"));
    };
    let processes = ProcFs::new(proc_root);
    let main_pid = |container: &str| -> Result<i32, String> {
        let c = info
            .containers
            .iter()
            .find(|c| c.name == container)
            .ok_or("unknown container")?;
        let id = c.container_id.as_ref().ok_or("no container id yet")?;
        processes
            .find_main_process(&info.uid, id)
            .map(|p| p.pid)
            .map_err(|e| e.to_string())
    };
    print!(
        "{}",
        reloadlet::explain::report(
            &info,
            &filter,
            &pod_convert::env_only_sources(&pod),
            &main_pid
        )
    );
    print!("{}", reloadlet::controller::qualify::explain(&info));
    ExitCode::SUCCESS
}
