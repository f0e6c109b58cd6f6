//! `metav1.Status` bodies, built exactly as kube-apiserver's `k8s.io/apimachinery/pkg/api/errors`
//! helpers build them, and turned into HTTP responses.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// An API answer that is a `metav1.Status` (an error, or the Success of an eviction).
#[derive(Clone, Debug, PartialEq)]
pub struct ApiStatus {
    /// HTTP status code, also written as `code` in the body.
    pub code: u16,
    /// The JSON body (`kind: Status`).
    pub body: Value,
    /// `Retry-After` header value in seconds, when the status asks the client to wait.
    pub retry_after: Option<u32>,
}

impl ApiStatus {
    /// `{status: Success, code}`.
    pub fn success(code: u16) -> Self {
        Self {
            code,
            body: json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}),
            retry_after: None,
        }
    }

    /// A Failure status with a reason (empty reason is omitted, as Go's `omitempty` does).
    pub fn failure(code: u16, reason: &str, message: impl Into<String>) -> Self {
        let mut body = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message.into(), "code": code,
        });
        if !reason.is_empty() {
            body["reason"] = Value::String(reason.to_string());
        }
        Self {
            code,
            body,
            retry_after: None,
        }
    }

    /// `errors.NewNotFound`: `<resource> "<name>" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        let qualified = qualified(resource, group);
        let mut s = Self::failure(404, "NotFound", format!("{qualified} \"{name}\" not found"));
        s.body["details"] = details(group, resource, name);
        s
    }

    /// `errors.NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "ListOptions"}, "", errs)`
    /// of `field.Forbidden` errors (`(field, detail)`): 422 Invalid, one cause per error.
    pub fn invalid_list_options(errors: &[(&str, String)]) -> Self {
        let text: Vec<String> = errors
            .iter()
            .map(|(field, detail)| format!("{field}: Forbidden: {detail}"))
            .collect();
        let joined = if text.len() == 1 {
            text[0].clone()
        } else {
            format!("[{}]", text.join(", "))
        };
        let mut s = Self::failure(
            422,
            "Invalid",
            format!("ListOptions.meta.k8s.io \"\" is invalid: {joined}"),
        );
        let causes: Vec<Value> = errors
            .iter()
            .map(|(field, detail)| {
                json!({"reason": "FieldValueForbidden", "message": format!("Forbidden: {detail}"), "field": field})
            })
            .collect();
        s.body["details"] =
            json!({"group": "meta.k8s.io", "kind": "ListOptions", "causes": causes});
        s
    }

    /// `errors.NewBadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::failure(400, "BadRequest", message)
    }

    /// `errors.NewForbidden`: `<resource> "<name>" is forbidden: <why>`.
    pub fn forbidden(group: &str, resource: &str, name: &str, why: &str) -> Self {
        let qualified = qualified(resource, group);
        let mut s = Self::failure(
            403,
            "Forbidden",
            format!("{qualified} \"{name}\" is forbidden: {why}"),
        );
        s.body["details"] = details(group, resource, name);
        s
    }

    /// `errors.NewAlreadyExists`.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        let qualified = qualified(resource, group);
        let mut s = Self::failure(
            409,
            "AlreadyExists",
            format!("{qualified} \"{name}\" already exists"),
        );
        s.body["details"] = details(group, resource, name);
        s
    }

    /// `errors.NewTooManyRequests(message, retryAfterSeconds)` plus the given causes
    /// (`(type, message)` pairs). A zero `retry_after` writes no `Retry-After` header.
    pub fn too_many_requests(message: &str, retry_after: u32, causes: &[(&str, String)]) -> Self {
        let mut s = Self::failure(429, "TooManyRequests", message);
        let mut details = json!({});
        if retry_after > 0 {
            details["retryAfterSeconds"] = json!(retry_after);
            s.retry_after = Some(retry_after);
        }
        if !causes.is_empty() {
            details["causes"] = Value::Array(
                causes
                    .iter()
                    .map(|(t, m)| json!({"reason": t, "message": m}))
                    .collect(),
            );
        }
        s.body["details"] = details;
        s
    }

    /// `410 Gone`, reason `Expired` (a compacted resourceVersion).
    pub fn expired(message: impl Into<String>) -> Self {
        Self::failure(410, "Expired", message)
    }

    /// `errors.NewInternalError`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::failure(
            500,
            "InternalError",
            format!("Internal error occurred: {}", message.into()),
        )
    }

    /// The status answered during a simulated outage.
    pub fn outage(code: u16) -> Self {
        let reason = match code {
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "",
        };
        Self::failure(code, reason, format!("simulated outage (HTTP {code})"))
    }

    /// `reason` of the body, if any.
    pub fn reason(&self) -> Option<&str> {
        self.body.get("reason").and_then(Value::as_str)
    }
}

fn qualified(resource: &str, group: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

fn details(group: &str, resource: &str, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": resource});
    if !group.is_empty() {
        d["group"] = Value::String(group.to_string());
    }
    d
}

impl IntoResponse for ApiStatus {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = (code, axum::Json(self.body)).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cause_type_is_written_as_reason_field_like_go_status_cause() {
        // metav1.StatusCause serialises its Type as "reason".
        let s = ApiStatus::too_many_requests("m", 0, &[("DisruptionBudget", "x".into())]);
        assert_eq!(s.body["details"]["causes"][0]["reason"], "DisruptionBudget");
        assert_eq!(s.retry_after, None);
        assert!(s.body["details"].get("retryAfterSeconds").is_none());
        let s = ApiStatus::too_many_requests("m", 10, &[]);
        assert_eq!(s.retry_after, Some(10));
        assert_eq!(s.body["details"]["retryAfterSeconds"], 10);
    }

    #[test]
    fn not_found_message_matches_apiserver() {
        let s = ApiStatus::not_found("", "pods", "web-1");
        assert_eq!(s.body["message"], "pods \"web-1\" not found");
        assert_eq!(s.reason(), Some("NotFound"));
        let s = ApiStatus::forbidden("policy", "poddisruptionbudget", "pdb", "why");
        assert_eq!(
            s.body["message"],
            "poddisruptionbudget.policy \"pdb\" is forbidden: why"
        );
    }
}
