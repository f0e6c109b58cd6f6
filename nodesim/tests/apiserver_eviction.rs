//! The eviction subresource and PodDisruptionBudgets through the real kube client.

mod apiserver_support;

use apiserver_support::*;
use axum::http::{header, Method, Request, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, EvictParams, PostParams};
use kube::client::Body;
use kube::Client;
use nodesim::apiserver::{ApiServer, ApiServerOptions};
use std::time::Duration;
use test_support::wait::until;

const NS: &str = "shop";

fn min(n: i32) -> Option<IntOrString> {
    Some(IntOrString::Int(n))
}

/// A server with a ReplicaSet `web` of `replicas` Ready pods and a PDB `web-pdb`.
async fn setup(
    opts: ApiServerOptions,
    replicas: i32,
    min_available: i32,
) -> (ApiServer, Api<Pod>, Client) {
    let server = ApiServer::start_with(opts).await.unwrap();
    server.create_replicaset(NS, "web", replicas, template(&[("app", "web")]), "node-a");
    make_all_ready(&server, NS);
    server.create_pdb(pdb(
        NS,
        "web-pdb",
        &[("app", "web")],
        min(min_available),
        None,
    ));
    let client = client(&server);
    (server, Api::namespaced(client.clone(), NS), client)
}

fn names(server: &ApiServer) -> Vec<String> {
    server
        .pods_of_replicaset(NS, "web")
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect()
}

fn expect_api_err(r: Result<kube::core::Status, kube::Error>) -> kube::core::Status {
    match r {
        Err(kube::Error::Api(st)) => *st,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Evicts through kube-rs and returns the success Status's code (panics on an error).
async fn evicted(api: &Api<Pod>, name: &str) -> u16 {
    api.evict(name, &EvictParams::default()).await.unwrap().code
}

/// Evicts through kube-rs, expecting the API server to refuse: its Status.
async fn refused(api: &Api<Pod>, name: &str) -> kube::core::Status {
    expect_api_err(api.evict(name, &EvictParams::default()).await)
}

/// POST an eviction with a raw body; returns (status, Retry-After header).
async fn raw_evict(
    client: &Client,
    pod: &str,
    body: serde_json::Value,
) -> (StatusCode, Option<String>) {
    let req = Request::builder()
        .method(Method::POST)
        .uri(format!("/api/v1/namespaces/{NS}/pods/{pod}/eviction"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap();
    let resp = client.send(req).await.unwrap();
    let retry = resp
        .headers()
        .get(header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap().to_string());
    (resp.status(), retry)
}

fn policy_body(name: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}})
}

#[tokio::test]
async fn allowed_eviction_answers_201_and_the_pod_terminates_then_is_replaced() {
    let (server, api, _) = setup(ApiServerOptions::default(), 3, 2).await;
    let victim = names(&server)[0].clone();
    let uid = server.get_pod(NS, &victim).unwrap().metadata.uid;

    let st = api.evict(&victim, &EvictParams::default()).await.unwrap();
    assert!(st.is_success());
    assert_eq!(st.code, 201);

    let pod = server.get_pod(NS, &victim).unwrap();
    assert!(
        pod.metadata.deletion_timestamp.is_some(),
        "graceful delete in progress"
    );
    let cond = pod
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .unwrap();
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_deref()),
        ("True", Some("EvictionByEvictionAPI"))
    );

    // The budget is spent until the replacement is Ready.
    let status = server.get_pdb(NS, "web-pdb").unwrap().status.unwrap();
    assert_eq!(
        (
            status.current_healthy,
            status.desired_healthy,
            status.disruptions_allowed
        ),
        (2, 2, 0)
    );

    // The ReplicaSet already made a replacement; the kubelet finalizes the old pod.
    assert_eq!(names(&server).len(), 4);
    server.finalize_pod(NS, &victim);
    let now = names(&server);
    assert_eq!(now.len(), 3);
    assert!(!now.contains(&victim));
    assert!(server.list_pods().iter().all(|p| p.metadata.uid != uid));
    make_all_ready(&server, NS);
    assert_eq!(
        server
            .get_pdb(NS, "web-pdb")
            .unwrap()
            .status
            .unwrap()
            .disruptions_allowed,
        1
    );

    let log = server.invariant_log();
    assert_eq!(log.len(), 1);
    assert_eq!(
        (
            log[0].healthy_before,
            log[0].healthy_after,
            log[0].desired_healthy
        ),
        (3, 2, 2)
    );
    assert!(server.invariant_violations().is_empty());
    let ev = server.evictions();
    assert_eq!((ev.len(), ev[0].code, ev[0].dry_run), (1, 201, false));
    assert_eq!(ev[0].uid, uid);
}

#[tokio::test]
async fn spent_budget_is_429_with_the_exact_cause_and_no_retry_after() {
    let (server, api, client) = setup(ApiServerOptions::default(), 2, 2).await;
    let victim = names(&server)[0].clone();
    let st = refused(&api, &victim).await;
    assert_eq!(st.code, 429);
    assert_eq!(st.reason, "TooManyRequests");
    assert_eq!(
        st.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    let details = st.details.unwrap();
    assert_eq!(details.retry_after_seconds, 0);
    assert_eq!(details.causes.len(), 1);
    assert_eq!(details.causes[0].reason, "DisruptionBudget");
    assert_eq!(
        details.causes[0].message,
        "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"
    );

    let (code, retry) = raw_evict(&client, &victim, policy_body(&victim)).await;
    assert_eq!((code, retry), (StatusCode::TOO_MANY_REQUESTS, None));
    assert!(server
        .get_pod(NS, &victim)
        .unwrap()
        .metadata
        .deletion_timestamp
        .is_none());
    assert_eq!(names(&server).len(), 2);
    assert!(server.evictions().iter().all(|e| e.code == 429));
}

#[tokio::test]
async fn unobserved_generation_is_429_with_retry_after_10_until_the_controller_catches_up() {
    let lag = Duration::from_millis(500);
    let (server, api, client) = setup(
        ApiServerOptions {
            controller_lag: lag,
            ..Default::default()
        },
        3,
        1,
    )
    .await;
    let victim = names(&server)[0].clone();

    let st = refused(&api, &victim).await;
    assert_eq!(st.code, 429);
    let details = st.details.unwrap();
    assert_eq!(details.retry_after_seconds, 10);
    assert_eq!(
        details.causes[0].message,
        "The disruption budget web-pdb is still being processed by the server."
    );
    let (code, retry) = raw_evict(&client, &victim, policy_body(&victim)).await;
    assert_eq!(
        (code, retry.as_deref()),
        (StatusCode::TOO_MANY_REQUESTS, Some("10"))
    );

    // Once observed, the same eviction goes through.
    let pdb_status = || server.get_pdb(NS, "web-pdb").unwrap().status.unwrap();
    until(
        "controller observes generation 1",
        Duration::from_secs(10),
        || pdb_status().observed_generation == Some(1),
    )
    .await;
    assert_eq!(evicted(&api, &victim).await, 201);

    // Updating the PDB bumps its generation: 429 + Retry-After again.
    let mut p = server.get_pdb(NS, "web-pdb").unwrap();
    p.spec.as_mut().unwrap().min_available = min(2);
    let p = server.update_pdb(p);
    assert_eq!(p.metadata.generation, Some(2));
    let other = names(&server)
        .into_iter()
        .find(|n| {
            *n != victim
                && server
                    .get_pod(NS, n)
                    .unwrap()
                    .status
                    .unwrap()
                    .phase
                    .as_deref()
                    == Some("Running")
        })
        .unwrap();
    let (code, retry) = raw_evict(&client, &other, policy_body(&other)).await;
    assert_eq!(
        (code, retry.as_deref()),
        (StatusCode::TOO_MANY_REQUESTS, Some("10"))
    );
}

#[tokio::test]
async fn two_pdbs_answer_500() {
    let (server, api, _) = setup(ApiServerOptions::default(), 3, 1).await;
    server.create_pdb(pdb(
        NS,
        "second",
        &[("app", "web")],
        None,
        Some(IntOrString::String("50%".into())),
    ));
    let victim = names(&server)[0].clone();
    let st = refused(&api, &victim).await;
    assert_eq!(st.code, 500);
    assert_eq!(st.message, "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.");
    assert!(server
        .get_pod(NS, &victim)
        .unwrap()
        .metadata
        .deletion_timestamp
        .is_none());
}

#[tokio::test]
async fn missing_pod_is_404() {
    let (_server, api, _) = setup(ApiServerOptions::default(), 1, 1).await;
    let st = refused(&api, "ghost").await;
    assert_eq!((st.code, st.reason.as_str()), (404, "NotFound"));
    assert_eq!(st.message, "pods \"ghost\" not found");
}

#[tokio::test]
async fn dry_run_validates_and_changes_nothing() {
    let (server, api, _) = setup(ApiServerOptions::default(), 3, 2).await;
    let victim = names(&server)[0].clone();
    let before_pod = server.get_pod(NS, &victim).unwrap();
    let before_pdb = server.get_pdb(NS, "web-pdb").unwrap();
    let dry = EvictParams {
        post_options: PostParams {
            dry_run: true,
            ..Default::default()
        },
        ..Default::default()
    };

    assert_eq!(api.evict(&victim, &dry).await.unwrap().code, 201);
    assert_eq!(server.get_pod(NS, &victim).unwrap(), before_pod);
    assert_eq!(server.get_pdb(NS, "web-pdb").unwrap(), before_pdb);
    assert_eq!(names(&server).len(), 3);
    assert!(server.invariant_log().is_empty());
    assert!(server.evictions()[0].dry_run);

    // A dry run still reports a refusal.
    server.scale_replicaset(NS, "web", 2);
    let remaining = names(&server)
        .into_iter()
        .find(|n| {
            server
                .get_pod(NS, n)
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_none()
        })
        .unwrap();
    let st = expect_api_err(api.evict(&remaining, &dry).await);
    assert_eq!(st.code, 429);
}

#[tokio::test]
async fn body_name_must_match_and_both_body_shapes_are_accepted() {
    let (server, _api, client) = setup(
        ApiServerOptions {
            auto_finalize: true,
            ..Default::default()
        },
        4,
        1,
    )
    .await;
    let pods = names(&server);
    let (code, _) = raw_evict(&client, &pods[0], policy_body("someone-else")).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    let (code, _) = raw_evict(&client, &pods[0], policy_body(&pods[0])).await;
    assert_eq!(code, StatusCode::CREATED);
    // kube-rs's own shape: no apiVersion/kind, snake-case delete_options.
    let kube_rs = serde_json::json!({"delete_options": {"gracePeriodSeconds": 0}, "metadata": {"name": pods[1]}});
    let (code, _) = raw_evict(&client, &pods[1], kube_rs).await;
    assert_eq!(code, StatusCode::CREATED);
    // auto_finalize: the evicted pods are gone at once and replaced.
    assert!(server.get_pod(NS, &pods[0]).is_none());
    assert!(server.get_pod(NS, &pods[1]).is_none());
    assert_eq!(names(&server).len(), 4);
}

#[tokio::test]
async fn unready_pods_follow_the_unhealthy_pod_eviction_policy() {
    // 3 pods, 2 Ready; minAvailable 2: IfHealthyBudget lets the unready one go for free.
    let (server, api, _) = setup(ApiServerOptions::default(), 3, 2).await;
    let all = names(&server);
    server.set_pod_status(NS, &all[2], running(false));
    assert_eq!(evicted(&api, &all[2]).await, 201);
    assert!(server.invariant_violations().is_empty());

    // minAvailable 3 with 2 healthy: the unready pod is blocked under IfHealthyBudget…
    let server = ApiServer::start().await.unwrap();
    server.create_replicaset(NS, "web", 3, template(&[("app", "web")]), "node-a");
    make_all_ready(&server, NS);
    let all = names(&server);
    server.set_pod_status(NS, &all[0], running(false));
    let mut p = pdb(NS, "web-pdb", &[("app", "web")], min(3), None);
    server.create_pdb(p.clone());
    let api: Api<Pod> = Api::namespaced(client(&server), NS);
    let st = refused(&api, &all[0]).await;
    assert_eq!(
        st.details.unwrap().causes[0].message,
        "The disruption budget web-pdb needs 3 healthy pods and has 2 currently"
    );

    // …and allowed under AlwaysAllow, without touching the budget of the Ready ones.
    p.spec.as_mut().unwrap().unhealthy_pod_eviction_policy = Some("AlwaysAllow".into());
    server.update_pdb(p);
    assert_eq!(evicted(&api, &all[0]).await, 201);
    let st = refused(&api, &all[1]).await;
    assert_eq!(st.code, 429);
}

#[tokio::test]
async fn pending_pods_and_pods_without_pdb_are_evicted_without_a_check() {
    let (server, api, _) = setup(ApiServerOptions::default(), 2, 2).await;
    // A new pod matching the PDB, still Pending (no status from a kubelet yet).
    server.create_pod(pod(NS, "fresh", "node-a", &[("app", "web")]));
    assert_eq!(evicted(&api, "fresh").await, 201);
    // A Ready pod no PDB selects.
    server.create_pod(pod(NS, "lonely", "node-a", &[("app", "batch")]));
    server.set_pod_status(NS, "lonely", running(true));
    assert_eq!(evicted(&api, "lonely").await, 201);
    // Nothing recreates an unowned pod.
    server.finalize_pod(NS, "lonely");
    assert!(server.get_pod(NS, "lonely").is_none());
}

#[tokio::test]
async fn percentage_budgets_use_the_replicaset_scale() {
    let server = ApiServer::start().await.unwrap();
    server.create_replicaset(NS, "web", 4, template(&[("app", "web")]), "node-a");
    make_all_ready(&server, NS);
    server.create_pdb(pdb(
        NS,
        "web-pdb",
        &[("app", "web")],
        None,
        Some(IntOrString::String("25%".into())),
    ));
    let s = server.get_pdb(NS, "web-pdb").unwrap().status.unwrap();
    assert_eq!(
        (s.expected_pods, s.desired_healthy, s.disruptions_allowed),
        (4, 3, 1)
    );
    let api: Api<Pod> = Api::namespaced(client(&server), NS);
    let all = names(&server);
    assert_eq!(evicted(&api, &all[0]).await, 201);
    let st = refused(&api, &all[1]).await;
    assert_eq!(
        st.details.unwrap().causes[0].message,
        "The disruption budget web-pdb needs 3 healthy pods and has 3 currently"
    );
}

#[tokio::test]
async fn eviction_requests_are_logged_for_rate_checks() {
    let (server, api, _) = setup(ApiServerOptions::default(), 2, 2).await;
    let victim = names(&server)[0].clone();
    for _ in 0..3 {
        let _ = api.evict(&victim, &EvictParams::default()).await;
    }
    let posts = server
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/eviction"))
        .count();
    assert_eq!(posts, 3, "no hidden retries with default_retry off");
    assert!(server
        .requests()
        .iter()
        .all(|r| !r.path.contains("/configmaps") && !r.path.contains("/secrets")));
}

#[tokio::test]
async fn subscribers_see_the_pod_terminate_then_go() {
    let (server, api, _) = setup(ApiServerOptions::default(), 3, 1).await;
    let victim = names(&server)[0].clone();
    let mut changes = server.subscribe();
    api.evict(&victim, &EvictParams::default()).await.unwrap();
    server.finalize_pod(NS, &victim);
    let mut seen = Vec::new();
    while let Ok(c) = changes.try_recv() {
        match c {
            nodesim::apiserver::ApiChange::PodUpserted(p)
                if p.metadata.name.as_deref() == Some(victim.as_str()) =>
            {
                seen.push(if p.metadata.deletion_timestamp.is_some() {
                    "terminating"
                } else {
                    "updated"
                })
            }
            nodesim::apiserver::ApiChange::PodDeleted(p)
                if p.metadata.name.as_deref() == Some(victim.as_str()) =>
            {
                seen.push("deleted")
            }
            _ => {}
        }
    }
    assert_eq!(seen, ["updated", "terminating", "deleted"]);
}

#[tokio::test]
async fn pinned_statuses_give_403s_and_a_stale_budget_shows_as_a_violation() {
    use k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let (server, api, _) = setup(ApiServerOptions::default(), 2, 2).await;
    let victim = names(&server)[0].clone();
    let base = server.get_pdb(NS, "web-pdb").unwrap().status.unwrap();

    let negative = PodDisruptionBudgetStatus {
        disruptions_allowed: -1,
        ..base.clone()
    };
    assert!(server.pin_pdb_status(NS, "web-pdb", Some(negative)));
    let st = refused(&api, &victim).await;
    assert_eq!((st.code, st.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        st.message,
        "poddisruptionbudget.policy \"web-pdb\" is forbidden: pdb disruptions allowed is negative"
    );

    let now = Time(
        server
            .get_pod(NS, &victim)
            .unwrap()
            .metadata
            .creation_timestamp
            .unwrap()
            .0,
    );
    let big = (0..2001).map(|i| (format!("p{i}"), now.clone())).collect();
    let crowded = PodDisruptionBudgetStatus {
        disrupted_pods: Some(big),
        disruptions_allowed: 1,
        ..base.clone()
    };
    server.pin_pdb_status(NS, "web-pdb", Some(crowded));
    let st = refused(&api, &victim).await;
    assert_eq!(st.code, 403);
    assert!(st.message.ends_with(
        "DisruptedPods map too big - too many evictions not confirmed by PDB controller"
    ));

    // A stale status that still allows one disruption lets the eviction through, and the
    // invariant log catches that it left fewer than desiredHealthy pods.
    let stale = PodDisruptionBudgetStatus {
        disruptions_allowed: 1,
        ..base
    };
    server.pin_pdb_status(NS, "web-pdb", Some(stale));
    assert!(server.invariant_violations().is_empty());
    assert_eq!(evicted(&api, &victim).await, 201);
    let v = server.invariant_violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].contains(&victim) && v[0].contains("web-pdb"),
        "{}",
        v[0]
    );

    // Unpinned, the controller takes over again.
    server.pin_pdb_status(NS, "web-pdb", None);
    let s = server.get_pdb(NS, "web-pdb").unwrap().status.unwrap();
    assert_eq!((s.current_healthy, s.disruptions_allowed), (1, 0));
}
