//! The Eviction API edge: `POST /api/v1/namespaces/{ns}/pods/{name}/eviction` (policy/v1).
//!
//! Sent as a proper policy/v1 `Eviction` with a UID precondition (so a replaced pod of the same
//! name is never evicted for its predecessor's change), on a client whose retry layer is off:
//! reloadlet owns pacing. Answers are classified per kube-apiserver's `EvictionREST.Create`.

use crate::core::permission::Feature;
use crate::core::permission::Request as DenialRequest;
use crate::ports::RefusalSink;
use futures::future::BoxFuture;
use http::{Request, StatusCode};
use kube::Client;
use serde_json::json;
use std::time::Duration;

pub use crate::ports::{EvictOutcome, EvictRequest, Evictor};

pub struct KubeEvictor {
    client: Client,
    denials: RefusalSink,
}

/// What an eviction asks the API server for.
const CREATE_EVICTION: DenialRequest =
    DenialRequest::new(Feature::Evictions, "create", "", "pods/eviction");

impl KubeEvictor {
    /// `client` must have `default_retry = false` (see [`super::client::Clients`]);
    /// `denials`: where a refused eviction is reported (`crate::serve::denials`).
    pub fn new(client: Client, denials: RefusalSink) -> Self {
        Self { client, denials }
    }

    async fn send(&self, req: &EvictRequest) -> EvictOutcome {
        let mut path = format!(
            "/api/v1/namespaces/{}/pods/{}/eviction",
            req.namespace, req.name
        );
        if req.dry_run {
            path.push_str("?dryRun=All");
        }
        let body = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": req.name, "namespace": req.namespace},
            "deleteOptions": {"preconditions": {"uid": req.uid}}
        });
        let request = match Request::post(path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&body).unwrap_or_default())
        {
            Ok(r) => r,
            Err(e) => {
                return EvictOutcome::Failed {
                    code: None,
                    message: e.to_string(),
                }
            }
        };
        let response = match self.client.send(request.map(Into::into)).await {
            Ok(r) => r,
            Err(e) => {
                return EvictOutcome::Failed {
                    code: None,
                    message: e.to_string(),
                }
            }
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes = match response.into_body().collect_bytes().await {
            Ok(b) => b,
            Err(e) => {
                return EvictOutcome::Failed {
                    code: Some(status.as_u16()),
                    message: e.to_string(),
                }
            }
        };
        classify(status, retry_after, &bytes)
    }
}

impl Evictor for KubeEvictor {
    fn evict(&self, req: &EvictRequest) -> BoxFuture<'_, EvictOutcome> {
        let req = req.clone();
        Box::pin(async move {
            let outcome = self.send(&req).await;
            match &outcome {
                EvictOutcome::Failed {
                    code: Some(code),
                    message,
                } => self.denials.outcome(
                    CREATE_EVICTION,
                    Some(&req.namespace),
                    Err((*code, message)),
                ),
                EvictOutcome::Failed { code: None, .. } => {}
                // Any other answer was authorized.
                _ => self
                    .denials
                    .outcome(CREATE_EVICTION, Some(&req.namespace), Ok(())),
            }
            outcome
        })
    }
}

/// Maps the API server's answer to an outcome (pure).
pub fn classify(status: StatusCode, retry_after: Option<Duration>, body: &[u8]) -> EvictOutcome {
    let parsed: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let message = parsed["message"].as_str().unwrap_or_default().to_owned();
    match status.as_u16() {
        200 | 201 => EvictOutcome::Evicted,
        404 | 409 => EvictOutcome::Gone,
        429 => {
            let causes: Vec<&str> = parsed["details"]["causes"]
                .as_array()
                .map(|a| a.iter().filter_map(|c| c["message"].as_str()).collect())
                .unwrap_or_default();
            let cause = if causes.is_empty() {
                message
            } else {
                causes.join("; ")
            };
            EvictOutcome::Blocked { cause, retry_after }
        }
        code => EvictOutcome::Failed {
            code: Some(code),
            message: if message.is_empty() {
                format!("HTTP {code}")
            } else {
                message
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_the_api_servers_answers() {
        let budget = br#"{"kind":"Status","status":"Failure","message":"Cannot evict pod as it would violate the pod's disruption budget.","reason":"TooManyRequests","details":{"causes":[{"reason":"DisruptionBudget","message":"The disruption budget web needs 2 healthy pods and has 2 currently"}]},"code":429}"#;
        assert_eq!(
            classify(StatusCode::TOO_MANY_REQUESTS, None, budget),
            EvictOutcome::Blocked {
                cause: "The disruption budget web needs 2 healthy pods and has 2 currently".into(),
                retry_after: None
            }
        );
        let ten = Some(Duration::from_secs(10));
        assert!(matches!(
            classify(StatusCode::TOO_MANY_REQUESTS, ten, b"{}"),
            EvictOutcome::Blocked {
                retry_after: Some(_),
                ..
            }
        ));
        assert_eq!(
            classify(StatusCode::CREATED, None, b"{}"),
            EvictOutcome::Evicted
        );
        assert_eq!(
            classify(StatusCode::NOT_FOUND, None, b"{}"),
            EvictOutcome::Gone
        );
        assert_eq!(
            classify(StatusCode::CONFLICT, None, b"{}"),
            EvictOutcome::Gone
        );
        let many = br#"{"message":"This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.","code":500}"#;
        assert_eq!(
            classify(StatusCode::INTERNAL_SERVER_ERROR, None, many),
            EvictOutcome::Failed {
                code: Some(500),
                message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into()
            }
        );
        assert_eq!(
            classify(StatusCode::FORBIDDEN, None, b"not json"),
            EvictOutcome::Failed {
                code: Some(403),
                message: "HTTP 403".into()
            }
        );
    }
}
