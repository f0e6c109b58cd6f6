//! The Kubernetes API edge: the only place (with `wiring::status`) that imports `kube` /
//! `k8s_openapi`.

pub mod api_backoff;
pub mod client;
pub mod controller;
pub mod controller_key;
pub mod events;
pub mod eviction;
pub mod managed_fields;
pub mod pdb_watch;
pub mod pod_condition;
pub mod pod_convert;
pub mod pod_get;
pub mod pod_view;
pub mod pod_watch;
pub mod refusals;
pub mod watch_loop;
pub mod workload_meta;
pub mod workloads;

/// Pods per page when a pod watcher (re)lists. kube-runtime's default is client-go's 500
/// (`watcher::Config::page_size`, "can reduce the memory consumption during resyncs, at the
/// cost of requiring more API roundtrips"): a page is decoded whole before each pod is
/// reduced to a `PodInfo`. Decoded as k8s-openapi's full `Pod` that was about 26 KiB a pod
/// here, most of it `Vec<Volume>`, and at 250 pods on one node pages of 50 cut the agent's
/// peak RSS from 26.8 to 22.4 MiB (hack/bench.sh, 1,000 volumes); pods are now decoded as
/// [`pod_view::PodView`] (the fields read, nothing else), which took the heap's peak from
/// 5.4 to 4.2 MiB on top. Pages of 50 cost 5 list requests per relist instead of 1; the
/// kubelet's default `maxPods` of 110 is 3 pages. Lists use `ListSemantic::MostRecent`: no
/// `resourceVersion`, a consistent read (KEP-2340 "Consistent Reads from Cache"), which the
/// API server answers in chunks of `limit` with a `continue` token (API concepts, "Retrieving
/// large results sets in chunks"; from the watch cache too with KEP-4988 "Serve pagination
/// from cache") — unlike `resourceVersion=0`, which the watch cache serves whole. The controller's
/// cluster-wide pod watcher keeps the default: at 5,000 pods (benches/controller), pages of
/// 50 made it ready after 9.9 s instead of 1.6 s against nodesim, for 4.1 MiB less steady
/// RSS (35.6 against 39.7 MiB) well inside its 64 MiB.
pub const POD_LIST_PAGE: u32 = 50;
