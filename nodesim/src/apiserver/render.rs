//! How an answer is rendered: the whole object, or only its metadata as
//! `meta.k8s.io/v1` `PartialObjectMetadata` / `PartialObjectMetadataList` when the client
//! asks for it in `Accept`, as kube's `Api::get_metadata` / `list_metadata` /
//! `watch_metadata` (and so `kube::runtime::metadata_watcher`) do
//! (kube-core `request.rs`: `JSON_METADATA_MIME` =
//! `application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`, and
//! `JSON_METADATA_LIST_MIME` with `as=PartialObjectMetadataList` for lists).
//!
//! The real server (apiserver `endpoints/handlers/response.go`, `doTransformObject`):
//! `asPartialObjectMetadata` keeps the whole `ObjectMeta` and sets
//! `kind: PartialObjectMetadata, apiVersion: meta.k8s.io/v1`, and refuses a list with
//! 406 NotAcceptable; `asPartialObjectMetadataList` turns every item into one, keeps the
//! list's resourceVersion / continue / remainingItemCount, and refuses a single object
//! with 406. Watch events are transformed object by object (`watchEmbeddedEncoder`),
//! bookmarks included.

use super::model::Resource;
use super::status::ApiStatus;
use axum::http::{header, HeaderMap};
use serde_json::{json, Value};

/// What the client asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Render {
    /// The resource itself (no `as=`).
    Full,
    /// `as=PartialObjectMetadata;g=meta.k8s.io;v=v1`: single objects and watch events.
    Metadata,
    /// `as=PartialObjectMetadataList;g=meta.k8s.io;v=v1`: lists.
    MetadataList,
}

const META_API_VERSION: &str = "meta.k8s.io/v1";

/// Reads the `as=`/`g=`/`v=` parameters of the first `Accept` media type that has them.
pub(crate) fn from_headers(headers: &HeaderMap) -> Result<Render, ApiStatus> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    for media in accept.split(',') {
        let mut as_ = None;
        let (mut g, mut v) = (None, None);
        for param in media.split(';').skip(1) {
            match param.trim().split_once('=') {
                Some(("as", x)) => as_ = Some(x.trim().to_string()),
                Some(("g", x)) => g = Some(x.trim().to_string()),
                Some(("v", x)) => v = Some(x.trim().to_string()),
                _ => {}
            }
        }
        let Some(as_) = as_ else { continue };
        if g.as_deref() != Some("meta.k8s.io") || !matches!(v.as_deref(), Some("v1")) {
            return Err(not_acceptable(format!(
                "no {as_} exists in group version {}/{}",
                g.unwrap_or_default(),
                v.unwrap_or_default()
            )));
        }
        return match as_.as_str() {
            "PartialObjectMetadata" => Ok(Render::Metadata),
            "PartialObjectMetadataList" => Ok(Render::MetadataList),
            other => Err(not_acceptable(format!(
                "the simulator cannot render {other}"
            ))),
        };
    }
    Ok(Render::Full)
}

/// 406, as `errNotAcceptable` in response.go.
pub(crate) fn not_acceptable(message: String) -> ApiStatus {
    ApiStatus::failure(406, "NotAcceptable", message)
}

/// For a single object (get, or a watch event): `as=PartialObjectMetadataList` is refused.
pub(crate) fn for_object(how: Render) -> Result<Render, ApiStatus> {
    match how {
        Render::MetadataList => Err(not_acceptable(
            "you requested PartialObjectMetadataList, but the requested object is not a list"
                .into(),
        )),
        other => Ok(other),
    }
}

/// For a list: `as=PartialObjectMetadata` is refused.
pub(crate) fn for_list(how: Render) -> Result<Render, ApiStatus> {
    match how {
        Render::Metadata => Err(not_acceptable(
            "you requested PartialObjectMetadata, but the requested object is a list".into(),
        )),
        other => Ok(other),
    }
}

/// One object as asked.
pub(crate) fn object(v: Value, how: Render) -> Value {
    match how {
        Render::Full => v,
        Render::Metadata | Render::MetadataList => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": META_API_VERSION,
            "metadata": v.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }),
    }
}

/// A list body: `items` rendered as asked, `metadata` (ListMeta) kept.
pub(crate) fn list(resource: Resource, meta: Value, items: Vec<Value>, how: Render) -> Value {
    let (kind, api_version) = kind_of(resource);
    match how {
        Render::Full => json!({
            "kind": format!("{kind}List"),
            "apiVersion": api_version,
            "metadata": meta,
            "items": items,
        }),
        Render::Metadata | Render::MetadataList => json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": META_API_VERSION,
            "metadata": meta,
            "items": items.into_iter().map(|i| object(i, how)).collect::<Vec<_>>(),
        }),
    }
}

/// `kind` and `apiVersion` of a resource.
pub(crate) fn kind_of(resource: Resource) -> (&'static str, &'static str) {
    match resource {
        Resource::Pods => ("Pod", "v1"),
        Resource::ConfigMaps => ("ConfigMap", "v1"),
        Resource::Secrets => ("Secret", "v1"),
        Resource::Leases => ("Lease", "coordination.k8s.io/v1"),
        Resource::Deployments => ("Deployment", "apps/v1"),
        Resource::StatefulSets => ("StatefulSet", "apps/v1"),
        Resource::DaemonSets => ("DaemonSet", "apps/v1"),
        Resource::ReplicaSets => ("ReplicaSet", "apps/v1"),
        Resource::Rollouts => ("Rollout", "argoproj.io/v1alpha1"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn accept(v: &str) -> Result<Render, ApiStatus> {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        from_headers(&h)
    }

    #[test]
    fn reads_what_kube_sends() {
        assert_eq!(accept("application/json").unwrap(), Render::Full);
        assert_eq!(
            accept("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1").unwrap(),
            Render::Metadata
        );
        assert_eq!(
            accept("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1").unwrap(),
            Render::MetadataList
        );
        assert_eq!(
            accept("application/json;as=Table;g=meta.k8s.io;v=v1")
                .unwrap_err()
                .code,
            406
        );
        assert_eq!(
            accept("application/json;as=PartialObjectMetadata;g=apps;v=v1")
                .unwrap_err()
                .code,
            406
        );
    }

    #[test]
    fn metadata_keeps_the_whole_object_meta_and_nothing_else() {
        let cm = json!({"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": "c", "resourceVersion": "7", "labels": {"a": "b"}},
            "data": {"k": "secret-ish"}});
        let p = object(cm, Render::Metadata);
        assert_eq!(p["kind"], "PartialObjectMetadata");
        assert_eq!(p["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(p["metadata"]["resourceVersion"], "7");
        assert_eq!(p["metadata"]["labels"]["a"], "b");
        assert!(p.get("data").is_none());
    }
}
