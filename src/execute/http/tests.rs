//! HTTP reload jobs against the fake endpoint, under tokio's paused clock: what is sent,
//! which answers end a job, retry pacing, replacement and cancellation.

use super::*;
use crate::core::annotations::{HttpMethod, HttpPort, HttpSpec, DEFAULT_HTTP_PATH};
use crate::core::model::{ContainerId, ContainerInfo, ContainerKind, ContainerPort, SourceKind};
use crate::ports::fake::{self, Reply};
use crate::serve::metrics::Metrics;
use tokio::time::Instant as TokioInstant;

const UID: &str = "u1";

struct World {
    http: HttpReloads,
    endpoint: Arc<fake::Http>,
    events: Arc<fake::Events>,
    index: Arc<RwLock<PodIndex>>,
    registry: prometheus_client::registry::Registry,
    stop: CancellationToken,
    tracker: TaskTracker,
}

fn pod(uid: &str, container_id: &str) -> PodInfo {
    PodInfo {
        uid: uid.into(),
        namespace: "monitoring".into(),
        name: format!("prometheus-{uid}"),
        pod_ip: Some("10.1.2.3".parse().unwrap()),
        containers: vec![ContainerInfo {
            name: "prometheus".into(),
            kind: ContainerKind::Regular,
            mounts: vec![],
            container_id: ContainerId::parse(&format!("containerd://{container_id}")),
            running: true,
            ports: vec![ContainerPort::named("web", 9090)],
        }],
        ..Default::default()
    }
}

fn world_with(replies: Vec<Reply>, dry_run: bool, max_in_flight: usize) -> World {
    let endpoint = Arc::new(fake::Http::answering(replies));
    let events = Arc::new(fake::Events::default());
    let mut registry = prometheus_client::registry::Registry::with_prefix("reloadlet");
    let metrics = Metrics::new(&mut registry);
    let report = Reporter::new(
        events.clone(),
        crate::outbound::notify::Notifier::disabled(),
        metrics,
        dry_run,
        "node-1".into(),
    );
    let mut index = PodIndex::default();
    index.apply(pod(UID, "abc"));
    let index = Arc::new(RwLock::new(index));
    let stop = CancellationToken::new();
    let tracker = TaskTracker::new();
    let http = HttpReloads::new(
        HttpSettings {
            max_in_flight,
            ..HttpSettings::default()
        },
        endpoint.clone(),
        report,
        index.clone(),
        stop.clone(),
        tracker.clone(),
    );
    World {
        http,
        endpoint,
        events,
        index,
        registry,
        stop,
        tracker,
    }
}

fn world(replies: Vec<Reply>) -> World {
    world_with(replies, false, 16)
}

fn cm(name: &str) -> SourceRef {
    SourceRef {
        kind: SourceKind::ConfigMap,
        name: name.into(),
    }
}

fn job_for(uid: &str, container_id: &str, source: &str) -> HttpJob {
    HttpJob {
        seen: Default::default(),
        pod_uid: uid.into(),
        target: HttpTarget {
            spec: HttpSpec {
                port: HttpPort::Named("web".into()),
                path: DEFAULT_HTTP_PATH.into(),
                method: HttpMethod::Post,
                body: String::new(),
                scheme: HttpScheme::Http,
            },
            port: 9090,
            containers: vec![SignalTarget {
                container: "prometheus".into(),
                container_id: ContainerId::parse(&format!("containerd://{container_id}")),
            }],
        },
        sources: vec![cm(source)],
        first_seen: Instant::now(),
    }
}

fn job() -> HttpJob {
    job_for(UID, "abc", "prometheus-config")
}

impl World {
    /// Waits (on the paused clock) until every job has ended.
    async fn settle(&self) {
        self.tracker.close();
        let limit = Duration::from_secs(3600);
        tokio::time::timeout(limit, self.tracker.wait())
            .await
            .expect("jobs end");
    }

    /// Lets time pass until the endpoint has seen `n` calls.
    async fn calls_reach(&self, n: usize) {
        let deadline = TokioInstant::now() + Duration::from_secs(3600);
        while self.endpoint.calls().len() < n {
            assert!(TokioInstant::now() < deadline, "never {n} calls");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn notes(&self) -> Vec<(&'static str, String)> {
        let events = self.events.0.lock().unwrap();
        events
            .iter()
            .map(|(_, e)| (e.reason, e.note.clone()))
            .collect()
    }

    fn count(&self, outcome: &str) -> String {
        let text = crate::serve::metrics::encode(&self.registry);
        let series = format!("reloadlet_actions_total{{action=\"http\",outcome=\"{outcome}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .unwrap_or("missing")
            .to_owned()
    }

    /// Gaps between consecutive calls, in seconds.
    fn gaps(&self) -> Vec<f64> {
        let times = self.endpoint.times();
        times
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64())
            .collect()
    }
}

#[tokio::test(start_paused = true)]
async fn a_2xx_is_reloaded_with_the_request_in_the_note() {
    let w = world(vec![Reply::Status(200, "")]);
    w.http.request(job());
    w.settle().await;
    assert_eq!(
        w.endpoint.calls(),
        [HttpCall {
            method: HttpMethod::Post,
            url: "http://10.1.2.3:9090/-/reload".into(),
            body: String::new(),
        }]
    );
    assert_eq!(
        w.notes(),
        [(
            "Reloaded",
            "POST http://10.1.2.3:9090/-/reload → 200: configmap prometheus-config changed".into()
        )]
    );
    assert_eq!(w.count("reloaded"), "1");
    assert_eq!(w.http.in_progress(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_403_is_final_at_once_and_quotes_the_body() {
    let w = world(vec![Reply::Status(403, "Lifecycle API is not enabled.")]);
    w.http.request(job());
    w.settle().await;
    assert_eq!(w.endpoint.calls().len(), 1);
    assert_eq!(
        w.notes(),
        [(
            "ReloadFailed",
            "POST http://10.1.2.3:9090/-/reload → 403 \"Lifecycle API is not enabled.\": configmap prometheus-config changed".into()
        )]
    );
    assert_eq!(w.count("reload_failed"), "1");
}

#[tokio::test(start_paused = true)]
async fn a_500_is_retried_about_a_second_later_then_reloaded() {
    let w = world(vec![Reply::Status(500, "busy")]);
    w.http.request(job());
    w.settle().await;
    assert_eq!(w.endpoint.calls().len(), 2);
    let gap = w.gaps()[0];
    assert!((0.8..=1.2).contains(&gap), "first retry after {gap} s");
    assert_eq!(w.notes().len(), 1);
    assert_eq!(w.notes()[0].0, "Reloaded");
}

#[tokio::test(start_paused = true)]
async fn status_408_429_5xx_and_connection_errors_are_retried_other_4xx_are_not() {
    for (reply, retried) in [
        (Reply::Status(408, ""), true),
        (Reply::Status(429, ""), true),
        (Reply::Status(503, ""), true),
        (Reply::Fail("tcp connect error: Connection refused"), true),
        (Reply::Status(404, "not found"), false),
        (Reply::Status(405, ""), false),
        (Reply::Status(301, ""), false),
    ] {
        let w = world(vec![reply.clone()]);
        w.http.request(job());
        w.settle().await;
        let want = if retried { 2 } else { 1 };
        assert_eq!(w.endpoint.calls().len(), want, "{reply:?}");
        let reason = if retried { "Reloaded" } else { "ReloadFailed" };
        assert_eq!(w.notes()[0].0, reason, "{reply:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_endpoint_that_never_answers_is_timed_out_after_10_s_and_retried() {
    let w = world(vec![Reply::Hang]);
    w.http.request(job());
    w.settle().await;
    assert_eq!(w.endpoint.calls().len(), 2);
    let gap = w.gaps()[0];
    // 10 s timeout, then 1 s ± 20 %.
    assert!((10.8..=11.2).contains(&gap), "retry after {gap} s");
    assert_eq!(w.notes()[0].0, "Reloaded");
}

#[tokio::test(start_paused = true)]
async fn a_failing_endpoint_is_retried_with_backoff_for_five_minutes_then_reload_failed() {
    let w = world(vec![Reply::Status(503, "starting"); 1000]);
    w.http.request(job());
    w.settle().await;
    let gaps = w.gaps();
    let want = [1.0, 2.0, 4.0, 8.0, 16.0, 30.0];
    for (i, gap) in gaps.iter().enumerate() {
        let base = want.get(i).copied().unwrap_or(30.0);
        assert!(
            (base * 0.8..=base * 1.2).contains(gap),
            "gap {i} is {gap} s, want {base} s ± 20 %: {gaps:?}"
        );
    }
    let span: f64 = gaps.iter().sum();
    assert!(span <= 300.0, "retried for {span} s");
    // Without jitter 13 retries fit in 5 minutes (1+2+4+8+16+30×8 = 271 s).
    assert!((11..=16).contains(&gaps.len()), "{} retries", gaps.len());
    let notes = w.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0].0, "ReloadFailed");
    let attempts = gaps.len() + 1;
    assert!(
        notes[0].1.starts_with(&format!(
            "POST http://10.1.2.3:9090/-/reload failed {attempts} time(s) in 4m"
        )) && notes[0]
            .1
            .ends_with("last: → 503 \"starting\": configmap prometheus-config changed"),
        "{}",
        notes[0].1
    );
}

#[tokio::test(start_paused = true)]
async fn a_newer_change_replaces_a_retrying_request_and_keeps_its_sources() {
    let w = world(vec![Reply::Status(503, ""); 3]);
    w.http.request(job_for(UID, "abc", "rules"));
    w.calls_reach(1).await;
    w.http.request(job_for(UID, "abc", "prometheus-config"));
    w.settle().await;
    // The first job's retries never happen: the second job made the other calls.
    let calls = w.endpoint.calls().len();
    assert!(calls <= 4, "{calls} calls");
    let notes = w.notes();
    assert_eq!(notes.len(), 1, "one outcome for both changes: {notes:?}");
    assert_eq!(notes[0].0, "Reloaded");
    assert!(
        notes[0]
            .1
            .ends_with(": configmap prometheus-config, configmap rules changed"),
        "{}",
        notes[0].1
    );
}

#[tokio::test(start_paused = true)]
async fn a_deleted_pod_ends_its_request() {
    let w = world(vec![Reply::Status(503, ""); 1000]);
    w.http.request(job());
    w.calls_reach(1).await;
    w.index.write().unwrap().delete(UID);
    w.http.pod_deleted(UID);
    w.settle().await;
    assert_eq!(w.endpoint.calls().len(), 1, "no retry after the deletion");
    assert!(w.notes().is_empty(), "{:?}", w.notes());
    assert_eq!(w.http.in_progress(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_restarted_container_ends_its_request() {
    let w = world(vec![Reply::Status(503, ""); 1000]);
    w.http.request(job());
    w.calls_reach(1).await;
    // Another pod's update changes nothing.
    w.http.pod_updated(&pod("other", "abc"));
    let restarted = pod(UID, "def");
    w.http.pod_updated(&restarted);
    w.index.write().unwrap().apply(restarted);
    w.settle().await;
    assert_eq!(w.endpoint.calls().len(), 1, "no retry after the restart");
    assert!(w.notes().is_empty(), "{:?}", w.notes());
}

#[tokio::test(start_paused = true)]
async fn a_container_whose_status_came_after_the_change_is_still_asked() {
    // The change was decided while the pod's status showed no container ID yet (the kubelet
    // reports status after it starts containers): the status that follows is not a restart.
    let w = world(vec![Reply::Status(503, ""), Reply::Status(200, "")]);
    let mut job = job();
    job.target.containers[0].container_id = None;
    w.http.request(job);
    w.calls_reach(1).await;
    w.http.pod_updated(&pod(UID, "abc"));
    w.settle().await;
    assert_eq!(w.endpoint.calls().len(), 2);
    assert_eq!(w.notes()[0].0, "Reloaded");
}

#[tokio::test(start_paused = true)]
async fn an_unrelated_pod_update_keeps_the_request() {
    let w = world(vec![Reply::Status(503, "")]);
    w.http.request(job());
    w.calls_reach(1).await;
    let mut same = pod(UID, "abc");
    same.labels.insert("x".into(), "y".into());
    w.http.pod_updated(&same);
    w.settle().await;
    assert_eq!(w.endpoint.calls().len(), 2);
    assert_eq!(w.notes()[0].0, "Reloaded");
}

#[tokio::test(start_paused = true)]
async fn a_pod_without_an_ip_yet_is_asked_once_it_has_one() {
    let w = world(vec![]);
    w.index.write().unwrap().apply(PodInfo {
        pod_ip: None,
        ..pod(UID, "abc")
    });
    w.http.request(job());
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(w.endpoint.calls().is_empty());
    w.index.write().unwrap().apply(pod(UID, "abc"));
    w.settle().await;
    assert_eq!(w.endpoint.calls().len(), 1);
    assert_eq!(w.notes()[0].0, "Reloaded");
}

#[tokio::test(start_paused = true)]
async fn dry_run_sends_nothing_publishes_nothing_and_counts_dry_run() {
    let w = world_with(vec![], true, 16);
    w.http.request(job());
    w.settle().await;
    assert!(w.endpoint.calls().is_empty());
    assert!(w.notes().is_empty());
    assert_eq!(w.count("dry_run"), "1");
}

#[tokio::test(start_paused = true)]
async fn dry_run_waits_for_the_pod_ip_like_a_real_request() {
    let w = world_with(vec![], true, 16);
    w.index.write().unwrap().apply(PodInfo {
        pod_ip: None,
        ..pod(UID, "abc")
    });
    w.http.request(job());
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(w.count("dry_run"), "0", "logged before the pod had an IP");
    w.index.write().unwrap().apply(pod(UID, "abc"));
    w.settle().await;
    assert!(w.endpoint.calls().is_empty());
    assert_eq!(w.count("dry_run"), "1");
}

#[tokio::test(start_paused = true)]
async fn at_most_max_in_flight_requests_at_once() {
    let w = world_with(vec![Reply::Hang; 3], false, 2);
    for uid in ["a", "b", "c"] {
        w.index.write().unwrap().apply(pod(uid, "abc"));
        w.http.request(job_for(uid, "abc", "cfg"));
    }
    w.calls_reach(2).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(w.endpoint.calls().len(), 2, "the third waits for a permit");
    // The hung calls time out after 10 s and free their permits.
    w.settle().await;
    let reloaded = w.notes().iter().filter(|(r, _)| *r == "Reloaded").count();
    assert_eq!(reloaded, 3);
}

/// One namespace whose endpoints hang holds at most three quarters of the slots; a pod of
/// another namespace is still asked at once.
#[tokio::test(start_paused = true)]
async fn a_namespace_of_hanging_endpoints_leaves_a_quarter_of_the_slots_to_the_others() {
    assert_eq!(
        HttpSettings {
            max_in_flight: 16,
            ..HttpSettings::default()
        }
        .per_namespace(),
        12
    );
    let w = world_with(vec![Reply::Hang; 8], false, 4);
    for i in 0..6 {
        let uid = format!("flood-{i}");
        w.index.write().unwrap().apply(pod(&uid, "abc"));
        w.http.request(job_for(&uid, "abc", "cfg"));
    }
    w.calls_reach(3).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(w.endpoint.calls().len(), 3, "the flood holds three of four");
    let mut quiet = pod("quiet", "abc");
    quiet.namespace = "payments".into();
    w.index.write().unwrap().apply(quiet);
    w.http.request(job_for("quiet", "abc", "cfg"));
    // Well before any hung call times out (10 s): the fourth slot is the quiet one's.
    w.calls_reach(4).await;
    assert!(w.endpoint.times()[3] - w.endpoint.times()[0] < Duration::from_secs(10));
    w.settle().await;
}

#[tokio::test(start_paused = true)]
async fn at_shutdown_no_retry_is_waited_for() {
    let w = world(vec![Reply::Status(503, ""); 1000]);
    w.http.request(job());
    w.calls_reach(1).await;
    w.stop.cancel();
    w.settle().await;
    assert_eq!(w.endpoint.calls().len(), 1);
}

#[test]
fn ipv6_pod_ips_are_bracketed() {
    let mut j = job();
    j.target.spec.path = "/api/v2/reload".into();
    let c = call(&j.target, "fd00::1".parse().unwrap());
    assert_eq!(c.url, "http://[fd00::1]:9090/api/v2/reload");
}

#[test]
fn answer_bodies_are_quoted_short_and_on_one_line() {
    let ansi = "\u{1b}[31mred\u{1b}[0m";
    let cases: Vec<(&str, Option<&str>)> = vec![
        (
            "Lifecycle API is not enabled.\n",
            Some("\"Lifecycle API is not enabled.\""),
        ),
        ("", None),
        (" \n\r\n\t ", None),
        // One answer cannot forge more lines: every run of whitespace is one space.
        (
            "bad\nPOST http://x → 200: configmap y changed\r\n",
            Some("\"bad POST http://x → 200: configmap y changed\""),
        ),
        ("a\u{2028}b\u{2029}c\u{85}d", Some("\"a b c d\"")),
        // Terminal escapes, NUL, DEL and C1 controls are no longer controls.
        (ansi, Some("\"\u{fffd}[31mred\u{fffd}[0m\"")),
        (
            "nul\0del\u{7f}csi\u{9b}",
            Some("\"nul\u{fffd}del\u{fffd}csi\u{fffd}\""),
        ),
        // Bidirectional overrides cannot reorder the note around them.
        (
            "abc\u{202e}fed\u{2066}x",
            Some("\"abc\u{fffd}fed\u{fffd}x\""),
        ),
        // The quote cannot be closed from inside.
        (r#"x": ok "y\"#, Some(r#""x\": ok \"y\\""#)),
    ];
    for (body, want) in cases {
        assert_eq!(quoted_body(body).as_deref(), want, "{body:?}");
    }
}

#[test]
fn a_long_body_is_cut_at_a_character_with_an_ellipsis() {
    let megabyte = "line\n".repeat(1 << 18);
    let q = quoted_body(&megabyte).unwrap();
    assert!(q.len() <= QUOTED_BODY_BYTES + "\"…\"".len(), "{}", q.len());
    assert!(q.starts_with("\"line line ") && q.ends_with("…\""), "{q}");
    assert!(!q.contains('\n'));
    // Two-byte characters: cut between two, never inside one.
    let q = quoted_body(&"é".repeat(300)).unwrap();
    assert_eq!(q, format!("\"{}…\"", "é".repeat(QUOTED_BODY_BYTES / 2)));
    // An escape is kept whole or left out.
    let q = quoted_body(&format!("{}\"", "x".repeat(QUOTED_BODY_BYTES - 1))).unwrap();
    assert_eq!(q, format!("\"{}…\"", "x".repeat(QUOTED_BODY_BYTES - 1)));
    // Exactly the limit: no ellipsis.
    let q = quoted_body(&"x".repeat(QUOTED_BODY_BYTES)).unwrap();
    assert_eq!(q.len(), QUOTED_BODY_BYTES + 2);
}

#[test]
fn invalid_utf8_is_quoted_as_replacement_characters() {
    // What the client makes of the bytes it read (lossy UTF-8), then quoted.
    let read = String::from_utf8_lossy(b"\xff\xfe ok \xc3");
    assert_eq!(
        quoted_body(&read).unwrap(),
        "\"\u{fffd}\u{fffd} ok \u{fffd}\""
    );
}

#[tokio::test(start_paused = true)]
async fn a_refusal_with_a_megabyte_of_lines_is_one_short_line_in_the_event() {
    let body: &'static str = "FAKE\n\u{1b}[2J".repeat(1 << 17).leak();
    let w = world(vec![Reply::Status(403, body)]);
    w.http.request(job());
    w.settle().await;
    let notes = w.notes();
    assert_eq!(notes.len(), 1);
    let (reason, note) = &notes[0];
    assert_eq!(*reason, "ReloadFailed");
    assert!(
        note.starts_with("POST http://10.1.2.3:9090/-/reload → 403 \"FAKE \u{fffd}[2JFAKE "),
        "{note}"
    );
    assert!(
        note.ends_with("…\": configmap prometheus-config changed"),
        "{note}"
    );
    assert!(
        note.len() < 320 && !note.contains('\n') && !note.contains('\u{1b}'),
        "{note}"
    );
}
