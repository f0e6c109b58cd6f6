//! `reloadlet controller`: wiring of settings, kube edges, election, HTTP and the loop.

use crate::config::controller::ControllerSettings;
use crate::controller::consumer_states::metrics::ConsumerMetrics;
use crate::controller::consumer_states::versions::PublishedVersions;
use crate::controller::consumer_states::ConsumerStates;
use crate::controller::elect::{self, ElectionSettings};
use crate::controller::env::{EnvConsumers, EnvDeps};
use crate::controller::metrics::ControllerMetrics;
use crate::controller::nudge::Nudges;
use crate::controller::publish::{DataVersions, PublishDeps};
use crate::controller::restart_grant::{GrantDeps, RestartGrants};
use crate::controller::rollout::{RolloutDeps, RolloutFeature};
use crate::controller::router::Controller;
use crate::core::model::SourceKind;
use crate::core::permission::Feature;
use crate::core::pod_index::PodIndex;
use crate::execute::evict::{EvictionSettings, Evictions};
use crate::execute::patch::{PatchSettings, Patches};
use crate::execute::report::Reporter;
use crate::execute::rollout::Rollouts;
use crate::k8s::api_backoff::ApiMetrics;
use crate::k8s::client::Clients;
use crate::k8s::controller::{
    now_rfc3339, watch_objects, watch_pods, KubeEnvApi, KubeLeaseStore, KubePatcher,
};
use crate::k8s::events::QueuedRecorder;
use crate::k8s::eviction::KubeEvictor;
use crate::k8s::pdb_watch::{self, SharedBudgets};
use crate::k8s::workloads::KubeWorkloads;
use crate::ports::Patcher;
use crate::ports::{Input, OwnDataVersions};
use crate::serve::denials::{own_pod_ref, Denials};
use crate::serve::health::{self, Health};
use crate::serve::metrics::Metrics;
use crate::wiring::Failed;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::RwLock;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// Runs until `shutdown`. `Err`: a reason to print before exiting with a failure.
pub async fn serve(
    settings: ControllerSettings,
    shutdown: CancellationToken,
) -> Result<(), Failed> {
    let clients = Clients::infer().await.map_err(|e| {
        Failed::because("no Kubernetes configuration (in-cluster or KUBECONFIG)", e)
    })?;
    let mut registry = Registry::with_prefix("reloadlet");
    let metrics = ControllerMetrics::new(&mut registry);
    // reloadlet_consumers{namespace,state} (what `reloadlet status` would show, counted).
    let consumer_metrics = ConsumerMetrics::new(&mut registry, settings.status_metrics_per_object);
    // The executor's metrics (reloadlet_actions_total{action="evict"} …) and notifications.
    let action_metrics = Metrics::new(&mut registry);
    let notify_metrics = crate::outbound::notify::NotifyMetrics::new(&mut registry);
    // The PodDisruptionBudget watch's failures (reloadlet_api_errors_total{resource="poddisruptionbudgets"}).
    let api_metrics = ApiMetrics::new(&mut registry);
    let health = Arc::new(Health::default());
    health.beat();
    let denials = Denials::new(&mut registry, health.clone());
    let refusals: crate::ports::RefusalSink = Arc::new(denials.clone());
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|e| Failed::because(format!("cannot listen on {}", settings.listen), e))?;
    let app = health::router(health.clone(), Arc::new(registry));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    });

    let (tx, rx) = mpsc::channel::<Input>(1024);
    // The data versions the controller writes: the object watches leave their echo unrouted.
    let own = OwnDataVersions::default();
    tokio::spawn(watch_pods(
        clients.main.clone(),
        settings.scope.pod_selector.clone(),
        settings.rollout.enabled && settings.rollout.reloader_compat,
        refusals.clone(),
        tx.clone(),
    ));
    tokio::spawn(watch_objects(
        clients.main.clone(),
        SourceKind::ConfigMap,
        Feature::Nudges,
        refusals.clone(),
        own.clone(),
        tx.clone(),
    ));
    // Secrets' metadata: for nudges (--secrets) and for env consumers (--env-consumers-secrets).
    if settings.secrets || settings.env.secrets {
        let feature = if settings.secrets {
            Feature::Secrets
        } else {
            Feature::EnvConsumersSecrets
        };
        tokio::spawn(watch_objects(
            clients.main.clone(),
            SourceKind::Secret,
            feature,
            refusals.clone(),
            own.clone(),
            tx.clone(),
        ));
    }

    // Reloader's annotations sit on the workloads: their metadata, only with the compat on.
    if settings.rollout.enabled && settings.rollout.reloader_compat {
        crate::k8s::workload_meta::spawn_watches(
            clients.main.clone(),
            settings.rollout.argo,
            refusals.clone(),
            tx.clone(),
        );
    }

    let mut election_task = None;
    if let Some(target) = &settings.election {
        let (leader_tx, mut leader_rx) = watch::channel(false);
        let store = KubeLeaseStore::new(
            clients.main.clone(),
            &target.namespace,
            &target.name,
            refusals.clone(),
        );
        let election = ElectionSettings {
            identity: target.identity.clone(),
            lease_duration: target.lease_duration,
            renew_deadline: target.renew_deadline,
            retry_period: target.retry_period,
        };
        election_task = Some(tokio::spawn(elect::run(
            store,
            election,
            leader_tx,
            shutdown.clone(),
            now_rfc3339,
        )));
        let tx = tx.clone();
        tokio::spawn(async move {
            while leader_rx.changed().await.is_ok() {
                let leader = *leader_rx.borrow_and_update();
                if tx.send(Input::Leader(leader)).await.is_err() {
                    return;
                }
            }
        });
    }
    drop(tx);
    tracing::info!(
        secrets = settings.secrets,
        env_consumers = settings.env.configmaps,
        env_consumers_secrets = settings.env.secrets,
        max_nudges_per_second = settings.max_nudges_per_second,
        dry_run = settings.scope.dry_run,
        rollout = settings.rollout.enabled,
        argo_rollouts = settings.rollout.argo,
        reloader_compat = settings.rollout.reloader_compat,
        leader_elect = settings.election.is_some(),
        identity = settings.election.as_ref().map(|e| e.identity.as_str()).unwrap_or(""),
        listen = %settings.listen,
        "reloadlet controller started"
    );
    // No HTTP client at all while notifications are off.
    let notifier = if !settings.notify.enabled() {
        crate::outbound::notify::Notifier::disabled()
    } else {
        let poster = crate::outbound::notify::HttpPoster::for_settings(&settings.notify)
            .map_err(|e| Failed::because("notifications", e))?;
        tracing::info!(notify = %settings.notify.describe(), "notifications on");
        crate::outbound::notify::Notifier::start(
            &settings.notify,
            poster,
            notify_metrics,
            CancellationToken::new(),
        )
    };
    // Every write goes through the executor, which decides --dry-run and timeouts.
    let events = Arc::new(QueuedRecorder::spawn(
        clients.main.clone(),
        settings.instance.clone(),
        refusals.clone(),
    ));
    if let Some(own_pod) = own_pod_ref(settings.own_pod.as_ref()) {
        denials.publish_to(events.clone(), own_pod);
    }
    // What the controller did to a pod (env evictions, rollouts) is recorded on it, in the
    // agent's `reloadlet.io/applied` format (issue #46 §2); under --dry-run as dryRun=All.
    let recorder =
        crate::execute::applied::AppliedRecorder::controller(Arc::new(KubePatcher::status_record(
            clients.main.clone(),
            refusals.clone(),
            settings.scope.dry_run,
        )));
    let reporter = Reporter::new(
        events,
        notifier,
        action_metrics,
        settings.scope.dry_run,
        settings.instance.clone(),
    )
    .with_applied(Some(recorder));
    let patcher: Arc<dyn Patcher> =
        Arc::new(KubePatcher::new(clients.main.clone(), refusals.clone()));
    let patches = |settings: PatchSettings| {
        Patches::new(
            settings,
            patcher.clone(),
            reporter.clone(),
            shutdown.clone(),
        )
    };
    let nudges = Nudges::new(
        settings.secrets,
        settings.max_nudges_per_second,
        patches(PatchSettings::nudges()),
        metrics.clone(),
    );
    let mut controller = Controller::new(
        settings.scope.filter.clone(),
        settings.election.is_none(),
        metrics,
        health,
    )
    .reporting(reporter.clone())
    .with(Box::new(nudges));
    // The key of the digests and baselines the env consumers and rollouts write, and of the
    // data versions published on ConfigMaps/Secrets (`reloadlet status`).
    let key = match &settings.key_namespace {
        Some(namespace) => {
            crate::k8s::controller_key::load_or_create(clients.main.clone(), namespace)
                .await
                .map_err(|e| Failed::because("the controller's key", e))?
        }
        None => {
            tracing::warn!("no namespace of its own (POD_NAMESPACE or --lease-namespace): the controller's key is made anew at each start, so the baselines written before a restart are taken afresh, a change made while it was down is not acted on, and every data version is published anew");
            crate::core::volume_digest::HashKey::generate()
                .map_err(|e| Failed::because("the kernel's random source", e))?
        }
    };
    let keyed = || key.clone();
    let versions = PublishedVersions::default();
    // reloadlet.io/data-version on every ConfigMap (with --secrets, Secret) a pod reads.
    controller = controller.with(Box::new(DataVersions::new(PublishDeps {
        api: Arc::new(KubeEnvApi::new(
            clients.main.clone(),
            refusals.clone(),
            (Feature::DataVersions, Feature::DataVersions),
        )),
        patches: patches(PatchSettings::baselines()),
        secrets: settings.secrets,
        own,
        key: keyed(),
        stop: shutdown.clone(),
        now: jiff::Timestamp::now,
        versions: versions.clone(),
    })));
    controller = controller.with(Box::new(ConsumerStates::new(
        consumer_metrics,
        versions.clone(),
        settings.secrets,
        settings.status_metrics_per_object,
    )));
    // The PodDisruptionBudgets (read-only list/watch): the restart grant's budget
    // (docs/restart.md, "The grant") and on-blocked: rollout's structural blocks
    // (docs/evictions-blocked.md).
    let budgets = SharedBudgets::default();
    tokio::spawn(pdb_watch::run(
        clients.main.clone(),
        budgets.clone(),
        api_metrics.clone(),
        refusals.clone(),
    ));
    // action: restart: the grant of the agents' restart requests, paced by the budgets.
    controller = controller.with(Box::new(RestartGrants::new(GrantDeps {
        patches: patches(PatchSettings::baselines()),
        reporter: reporter.clone(),
        budgets: Some(budgets.clone()),
        rolls: settings.rollout.enabled,
    })));
    if settings.env.configmaps || settings.env.secrets {
        let index = Arc::new(RwLock::new(PodIndex::default()));
        let evictions = Evictions::new(
            EvictionSettings::default(),
            Arc::new(KubeEvictor::new(clients.eviction.clone(), refusals.clone())),
            reporter.clone(),
            index.clone(),
            shutdown.clone(),
        );
        controller = controller.with(Box::new(EnvConsumers::new(EnvDeps {
            api: Arc::new(KubeEnvApi::new(
                clients.main.clone(),
                refusals.clone(),
                (Feature::EnvConsumers, Feature::EnvConsumersSecrets),
            )),
            evictions,
            index,
            baselines: patches(PatchSettings::baselines()),
            reporter: reporter.clone(),
            configmaps: settings.env.configmaps,
            secrets: settings.env.secrets,
            stop: shutdown.clone(),
            pacing: settings.pacing.clone(),
            key: keyed(),
            versions: versions.clone(),
        })));
    }
    if settings.rollout.enabled {
        let workloads = Arc::new(KubeWorkloads::new(clients.main.clone(), refusals.clone()));
        let rollout = RolloutFeature::new(RolloutDeps {
            api: Arc::new(KubeEnvApi::new(
                clients.main.clone(),
                refusals.clone(),
                (Feature::Rollout, Feature::Rollout),
            )),
            workloads: workloads.clone(),
            rollouts: Rollouts::new(
                workloads,
                reporter.clone(),
                std::time::Duration::from_secs(10),
                shutdown.clone(),
            ),
            baselines: patches(PatchSettings::baselines()),
            secrets: settings.secrets,
            argo: settings.rollout.argo,
            reloader_compat: settings.rollout.reloader_compat,
            now: now_rfc3339,
            stop: shutdown.clone(),
            key: keyed(),
            versions: versions.clone(),
        })
        .with_budgets(budgets)
        .with_pacing(settings.pacing.clone());
        controller = controller.with(Box::new(rollout));
    }
    controller.run(rx, shutdown.clone()).await;
    if let Some(task) = election_task {
        // Releases the Lease so a standby takes over at once.
        let _ = task.await;
    }
    Ok(())
}
