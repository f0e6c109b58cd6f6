//! Notifications end to end: a local HTTP server stands in for Slack, Teams, Google Chat
//! and a plain webhook (and, once, for a CONNECT proxy); the real hyper/rustls poster
//! sends to it. Retry pacing runs on a paused tokio clock with the fake poster.

#[path = "support/notify.rs"]
mod notify_support;

use axum::http::Method;
use notify_support::*;
use reloadlet::outbound::notify::poster::Scripted;
use reloadlet::outbound::notify::{
    FakePoster, Format, Notifier, NotifyArgs, NotifyMetrics, NotifyOn, NotifySettings,
    PostResponse, SecretUrl, Submitted,
};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

// ---------------------------------------------------------------- payloads per service

#[tokio::test]
async fn each_service_gets_exactly_its_payload() {
    let slack_body = format!(
        r#"{{"attachments":[{{"author_name":"reloadlet","color":"danger","text":"{LINE}"}}]}}"#
    );
    let text_body = format!(r#"{{"text":"{LINE}"}}"#);
    let json_body = format!(
        r#"{{"action":"signal","message":"kill(SIGHUP) of pid 4242: EPERM","namespace":"shop","node":"node-1","outcome":"SignalFailed","pod":"web-0","sources":[{{"kind":"configmap","name":"app-config"}}],"suppressed":0,"text":"{LINE}"}}"#
    );
    let table = [
        (Format::Slack, "application/json", slack_body),
        (Format::Teams, "application/json", text_body.clone()),
        (Format::Gchat, "application/json", text_body),
        (Format::Raw, "text/plain; charset=utf-8", LINE.to_owned()),
        (Format::Json, "application/json", json_body),
    ];
    for (format, content_type, body) in table {
        let svc = Service::start([]).await;
        let (notifier, metrics, cancel) = start(&settings(&[svc.url()], format));
        assert_eq!(
            notifier.notify(&failure("web-0", "app-config")),
            Submitted::Queued { dropped: 0 }
        );
        until("the request", Duration::from_secs(10), || {
            metrics.sent.get() == 1
        })
        .await;
        let seen = svc.seen();
        assert_eq!(seen.len(), 1, "{format:?}");
        let req = &seen[0];
        assert_eq!(req.method, Method::POST, "{format:?}");
        assert_eq!(req.path, format!("/services/{TOKEN}"), "{format:?}");
        assert_eq!(req.query.as_deref(), Some("key=k1"), "{format:?}");
        assert_eq!(
            req.content_type.as_deref(),
            Some(content_type),
            "{format:?}"
        );
        assert_eq!(req.user_agent.as_deref(), Some("reloadlet/0.1.0"));
        assert_eq!(String::from_utf8_lossy(&req.body), body, "{format:?}");
        cancel.cancel();
    }
}

// ---------------------------------------------------------------- answers

#[tokio::test]
async fn each_answer_is_sent_retried_or_given_up_as_it_deserves() {
    struct Case {
        script: Vec<Reply>,
        requests: usize,
        sent: u64,
        failed: (&'static str, u64),
        retries: u64,
    }
    let cases = [
        // 200: sent once.
        Case {
            script: vec![],
            requests: 1,
            sent: 1,
            failed: ("status_4xx", 0),
            retries: 0,
        },
        // 403 (a revoked webhook): final at once, no retry.
        Case {
            script: vec![Reply::Status(403, "invalid_token")],
            requests: 1,
            sent: 0,
            failed: ("status_4xx", 1),
            retries: 0,
        },
        // 302: not followed, final.
        Case {
            script: vec![Reply::Status(302, "")],
            requests: 1,
            sent: 0,
            failed: ("redirect", 1),
            retries: 0,
        },
        // 500 then 200: retried once.
        Case {
            script: vec![Reply::Status(500, "oops")],
            requests: 2,
            sent: 1,
            failed: ("status_5xx", 0),
            retries: 1,
        },
        // 500 four times: the first attempt and 3 retries, then given up.
        Case {
            script: vec![Reply::Status(500, ""); 4],
            requests: 4,
            sent: 0,
            failed: ("status_5xx", 1),
            retries: 3,
        },
        // 429 and 503 are retried too.
        Case {
            script: vec![Reply::Status(429, "rate limited"), Reply::Status(503, "")],
            requests: 3,
            sent: 1,
            failed: ("status_4xx", 0),
            retries: 2,
        },
    ];
    for (i, c) in cases.into_iter().enumerate() {
        let svc = Service::start(c.script).await;
        let (notifier, m, cancel) = start(&settings(&[svc.url()], Format::Slack));
        notifier.notify(&failure("web-0", "app-config"));
        until("an outcome", Duration::from_secs(10), || delivered(&m) == 1).await;
        assert_eq!(svc.seen().len(), c.requests, "case {i}");
        assert_eq!(m.sent.get(), c.sent, "case {i}");
        assert_eq!(m.failed_for(c.failed.0), c.failed.1, "case {i}");
        assert_eq!(m.retries.get(), c.retries, "case {i}");
        cancel.cancel();
    }
}

#[tokio::test]
async fn a_reply_slower_than_the_timeout_is_retried_and_a_slow_one_within_it_is_not() {
    // Slower than the timeout: abandoned and retried; the retry is answered.
    let svc = Service::start([Reply::After(Duration::from_secs(3))]).await;
    let mut s = settings(&[svc.url()], Format::Raw);
    s.timeout = Duration::from_millis(300);
    let (notifier, m, cancel) = start(&s);
    notifier.notify(&failure("web-0", "app-config"));
    until("the retry", Duration::from_secs(10), || m.sent.get() == 1).await;
    assert_eq!(svc.seen().len(), 2);
    assert_eq!(m.retries.get(), 1);
    cancel.cancel();

    // Slow but within the timeout: one request, sent.
    let svc = Service::start([Reply::After(Duration::from_millis(200))]).await;
    let (notifier, m, cancel) = start(&settings(&[svc.url()], Format::Raw));
    notifier.notify(&failure("web-0", "app-config"));
    until("the answer", Duration::from_secs(10), || m.sent.get() == 1).await;
    assert_eq!(svc.seen().len(), 1);
    assert_eq!(m.retries.get(), 0);
    cancel.cancel();
}

#[tokio::test]
async fn nobody_listening_is_retried_then_given_up() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (notifier, m, cancel) = start(&settings(
        &[format!("http://127.0.0.1:{port}/services/{TOKEN}")],
        Format::Raw,
    ));
    notifier.notify(&failure("web-0", "app-config"));
    until("giving up", Duration::from_secs(10), || {
        m.failed_for("connect") == 1
    })
    .await;
    assert_eq!(m.retries.get(), 3);
    cancel.cancel();
}

#[tokio::test]
async fn an_https_webhook_is_only_spoken_to_over_tls() {
    // A plain-HTTP server behind an https:// URL: the TLS handshake fails, every attempt
    // is a connection error, and no request ever reaches the server in clear text.
    let svc = Service::start([]).await;
    let url = svc.url().replacen("http://", "https://", 1);
    let (notifier, m, cancel) = start(&settings(&[url], Format::Raw));
    notifier.notify(&failure("web-0", "app-config"));
    until("giving up", Duration::from_secs(10), || {
        m.failed_for("connect") == 1
    })
    .await;
    assert_eq!(m.retries.get(), 3);
    assert!(svc.seen().is_empty());
    cancel.cancel();
}

// ---------------------------------------------------------------- pacing (paused clock)

fn paced(jitter: bool) -> NotifySettings {
    NotifySettings {
        urls: vec![SecretUrl::parse(&format!("https://hooks.slack.com/services/{TOKEN}")).unwrap()],
        jitter,
        ..NotifySettings::default()
    }
}

fn gaps(p: &FakePoster) -> Vec<Duration> {
    let at: Vec<Instant> = p.requests().iter().map(|r| r.at).collect();
    at.windows(2).map(|w| w[1] - w[0]).collect()
}

#[tokio::test(start_paused = true)]
async fn retries_back_off_1s_2s_4s_and_a_hung_attempt_ends_after_5s() {
    let poster = FakePoster::new([
        Scripted::Answer(PostResponse::status(500)),
        Scripted::Fail("connection refused".into()),
        Scripted::Hang,
        Scripted::Answer(PostResponse::status(503)),
        // Never reached: 3 retries are all there is.
        Scripted::Answer(PostResponse::status(200)),
    ]);
    let m = NotifyMetrics::default();
    let cancel = CancellationToken::new();
    let n = Notifier::start(&paced(false), poster.clone(), m.clone(), cancel.clone());
    n.notify(&failure("web-0", "app-config"));
    until("giving up", Duration::from_secs(120), || {
        m.failed_total() == 1
    })
    .await;
    let s = Duration::from_secs;
    // The third attempt hangs: its 5 s timeout comes before the 4 s backoff.
    assert_eq!(gaps(&poster), [s(1), s(2), s(5) + s(4)]);
    assert_eq!(m.failed_for("status_5xx"), 1);
    assert_eq!(m.retries.get(), 3);
    assert_eq!(m.sent.get(), 0);
    cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn jitter_stays_within_one_more_backoff_step() {
    for _ in 0..20 {
        let poster = FakePoster::new(vec![Scripted::Answer(PostResponse::status(500)); 4]);
        let m = NotifyMetrics::default();
        let cancel = CancellationToken::new();
        let n = Notifier::start(&paced(true), poster.clone(), m.clone(), cancel.clone());
        n.notify(&failure("web-0", "app-config"));
        until("giving up", Duration::from_secs(120), || {
            m.failed_total() == 1
        })
        .await;
        let g = gaps(&poster);
        assert_eq!(g.len(), 3);
        // backon adds `delay * rng.f32()` (in [0, 1)): under 2 x base. Tokio's timer works
        // in whole milliseconds and rounds a deadline up to the next one (tokio::time::sleep:
        // "operates at millisecond granularity"), so a draw within 1 ms of 2 x base is seen
        // as exactly 2 x base: the bound is inclusive.
        for (gap, base) in g.iter().zip([1, 2, 4]) {
            let base = Duration::from_secs(base);
            assert!(*gap >= base && *gap <= base * 2, "{g:?}");
        }
        cancel.cancel();
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_up_to_the_backoff_ceiling() {
    let with_retry_after = |secs| {
        Scripted::Answer(PostResponse {
            status: 429,
            retry_after: Some(Duration::from_secs(secs)),
            body_prefix: "rate_limited".into(),
        })
    };
    let poster = FakePoster::new([with_retry_after(10), with_retry_after(600)]);
    let m = NotifyMetrics::default();
    let cancel = CancellationToken::new();
    let n = Notifier::start(&paced(false), poster.clone(), m.clone(), cancel.clone());
    n.notify(&failure("web-0", "app-config"));
    until("sent", Duration::from_secs(120), || m.sent.get() == 1).await;
    assert_eq!(
        gaps(&poster),
        [Duration::from_secs(10), Duration::from_secs(30)]
    );
    cancel.cancel();
}

// ---------------------------------------------------------------- dedupe, queue

#[tokio::test(start_paused = true)]
async fn one_configmap_failing_in_forty_pods_is_one_message_per_window() {
    let poster = FakePoster::default();
    let m = NotifyMetrics::default();
    let cancel = CancellationToken::new();
    let n = Notifier::start(&paced(false), poster.clone(), m.clone(), cancel.clone());
    let mut verdicts = Vec::new();
    for i in 0..40 {
        verdicts.push(n.notify(&failure(&format!("web-{i}"), "app-config")));
    }
    assert_eq!(verdicts[0], Submitted::Queued { dropped: 0 });
    assert!(verdicts[1..].iter().all(|v| *v == Submitted::Deduped));
    // Another reason for the same ConfigMap is news.
    let mut other = failure("web-0", "app-config");
    other.outcome = Outcome::SignalNotHandled;
    assert_eq!(n.notify(&other), Submitted::Queued { dropped: 0 });
    until("two sent", Duration::from_secs(10), || m.sent.get() == 2).await;
    assert_eq!(m.deduped.get(), 39);

    // After the window the next one goes out and says how many were held back.
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(
        n.notify(&failure("web-7", "app-config")),
        Submitted::Queued { dropped: 0 }
    );
    until("three sent", Duration::from_secs(10), || m.sent.get() == 3).await;
    let last = poster.requests().pop().unwrap();
    let text = String::from_utf8(last.payload.body.to_vec()).unwrap();
    assert!(text.contains("shop/web-7"), "{text}");
    assert!(
        text.ends_with("(+39 similar held back since the last notification)"),
        "{text}"
    );
    cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_drops_the_oldest_and_counts_it() {
    let poster = FakePoster::default();
    let m = NotifyMetrics::default();
    let cancel = CancellationToken::new();
    let mut s = paced(false);
    s.queue_capacity = 2;
    let n = Notifier::start(&s, poster.clone(), m.clone(), cancel.clone());
    // notify() never yields, so the sender has taken nothing yet: 5 into a queue of 2.
    let verdicts: Vec<_> = (0..5)
        .map(|i| n.notify(&failure(&format!("web-{i}"), &format!("cm-{i}"))))
        .collect();
    assert_eq!(
        verdicts,
        [0, 0, 1, 1, 1].map(|dropped| Submitted::Queued { dropped })
    );
    assert_eq!(m.dropped.get(), 3);
    until("two sent", Duration::from_secs(10), || m.sent.get() == 2).await;
    let pods: Vec<String> = poster
        .requests()
        .iter()
        .map(|r| String::from_utf8(r.payload.body.to_vec()).unwrap())
        .collect();
    assert!(pods[0].contains("shop/web-3 "), "{pods:?}");
    assert!(pods[1].contains("shop/web-4 "), "{pods:?}");
    cancel.cancel();
}

/// A namespace that floods the queue pushes out its own oldest, never a quiet namespace's
/// notification, and the namespaces are sent in turn.
#[tokio::test(start_paused = true)]
async fn a_flooding_namespace_never_pushes_out_a_quiet_one() {
    let poster = FakePoster::default();
    let m = NotifyMetrics::default();
    let cancel = CancellationToken::new();
    let mut s = paced(false);
    s.queue_capacity = 3;
    let n = Notifier::start(&s, poster.clone(), m.clone(), cancel.clone());
    let mut quiet = failure("api-0", "api-config");
    quiet.namespace = "payments".into();
    assert_eq!(n.notify(&quiet), Submitted::Queued { dropped: 0 });
    // notify() never yields: 30 more into a queue of 3 before the sender takes one.
    let mut dropped = 0;
    for i in 0..30 {
        let mut flood = failure(&format!("web-{i}"), &format!("cm-{i}"));
        flood.namespace = "flood".into();
        if let Submitted::Queued { dropped: d } = n.notify(&flood) {
            dropped += d;
        }
    }
    assert_eq!(dropped, 28, "the flood lost its own oldest");
    until("three sent", Duration::from_secs(10), || m.sent.get() == 3).await;
    let sent: Vec<String> = poster
        .requests()
        .iter()
        .map(|r| String::from_utf8(r.payload.body.to_vec()).unwrap())
        .collect();
    // Positive control and the point: the quiet namespace's one notification went out,
    // beside the flood's two newest.
    assert!(
        sent.iter().any(|t| t.contains("payments/api-0 ")),
        "{sent:?}"
    );
    assert!(sent.iter().any(|t| t.contains("flood/web-28 ")), "{sent:?}");
    assert!(sent.iter().any(|t| t.contains("flood/web-29 ")), "{sent:?}");
    cancel.cancel();
}

/// Hangs for one host, answers 200 for the others.
#[derive(Clone, Default)]
struct DeadHost(Arc<Mutex<Vec<String>>>);

impl reloadlet::outbound::notify::Poster for DeadHost {
    async fn post(
        &self,
        url: &SecretUrl,
        _: &reloadlet::outbound::notify::Payload,
    ) -> Result<PostResponse, reloadlet::outbound::notify::PostError> {
        let host = url.expose().host().unwrap_or_default().to_owned();
        self.0.lock().unwrap().push(host.clone());
        if host == "dead.example" {
            std::future::pending::<()>().await;
        }
        Ok(PostResponse::status(200))
    }
}

#[tokio::test(start_paused = true)]
async fn a_dead_webhook_does_not_hold_up_a_live_one() {
    let poster = DeadHost::default();
    let m = NotifyMetrics::default();
    let cancel = CancellationToken::new();
    let s = NotifySettings {
        urls: [
            "https://dead.example/hook/SECRET",
            "https://live.example/hook/SECRET",
        ]
        .map(|u| SecretUrl::parse(u).unwrap())
        .to_vec(),
        ..paced(false)
    };
    let n = Notifier::start(&s, poster.clone(), m.clone(), cancel.clone());
    n.notify(&failure("web-0", "cm-a"));
    n.notify(&failure("web-0", "cm-b"));
    // Well within the dead webhook's first 5 s timeout.
    until("the live webhook", Duration::from_secs(1), || {
        m.sent.get() == 2
    })
    .await;
    let hosts = poster.0.lock().unwrap().clone();
    assert_eq!(hosts.iter().filter(|h| *h == "live.example").count(), 2);
    assert_eq!(hosts.iter().filter(|h| *h == "dead.example").count(), 1);
    cancel.cancel();
}

#[tokio::test]
async fn filtered_and_disabled_notifications_send_nothing() {
    let svc = Service::start([]).await;
    let (n, m, cancel) = start(&settings(&[svc.url()], Format::Raw));
    let mut ok = failure("web-0", "app-config");
    ok.outcome = Outcome::Signaled;
    assert_eq!(n.notify(&ok), Submitted::Filtered);
    let blocked = |mins: u64| {
        let mut b = failure("web-0", "app-config");
        b.action = ActionKind::Evict;
        b.outcome = Outcome::EvictionBlocked;
        b.blocked_for = Duration::from_secs(60 * mins);
        b
    };
    assert_eq!(n.notify(&blocked(3)), Submitted::Filtered);
    assert_eq!(n.notify(&blocked(11)), Submitted::Queued { dropped: 0 });
    until("sent", Duration::from_secs(10), || m.sent.get() == 1).await;
    assert!(String::from_utf8_lossy(&svc.seen()[0].body).starts_with("EvictionBlocked: shop/web-0"));
    assert_eq!(
        Notifier::disabled().notify(&failure("a", "b")),
        Submitted::Disabled
    );
    cancel.cancel();
}

// ---------------------------------------------------------------- Reloader's variables

#[tokio::test]
async fn reloader_alert_variables_alone_configure_a_slack_webhook() {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        notify: NotifyArgs,
    }
    let svc = Service::start([]).await;
    let url = svc.url();
    let env = move |k: &str| match k {
        "ALERT_ON_RELOAD" => Some("true".to_owned()),
        "ALERT_SINK" => Some("slack".to_owned()),
        "ALERT_WEBHOOK_URL" => Some(format!(" {url}\n")),
        "ALERT_ADDITIONAL_INFO" => Some("prod-eu".to_owned()),
        _ => None,
    };
    let cli = <Cli as clap::Parser>::try_parse_from(["reloadlet"]).unwrap();
    let s = cli.notify.settings(&env).unwrap();
    assert_eq!(s.on, NotifyOn::All);
    let (n, m, cancel) = start(&NotifySettings {
        backoff_min: Duration::from_millis(20),
        ..s
    });
    let mut ok = failure("web-0", "app-config");
    ok.outcome = Outcome::Signaled;
    ok.message = "SIGHUP to pid 4242".into();
    n.notify(&ok);
    until("sent", Duration::from_secs(10), || m.sent.get() == 1).await;
    let body: serde_json::Value = serde_json::from_slice(&svc.seen()[0].body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"attachments": [{
            "color": "good", "author_name": "reloadlet",
            "text": "prod-eu : Signaled: shop/web-0 on node-1 (signal; configmap app-config): SIGHUP to pid 4242",
        }]})
    );
    cancel.cancel();
}

// ---------------------------------------------------------------- proxy

/// A minimal HTTP CONNECT proxy: checks the Proxy-Authorization, then pipes bytes.
async fn connect_proxy(expect_auth: &'static str) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                return;
            };
            let heads = heads.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if client.read_exact(&mut byte).await.is_err() {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                heads.lock().unwrap().push(head.clone());
                let target = head
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_owned();
                let authorized = head.lines().any(|l| {
                    l.eq_ignore_ascii_case(&format!("proxy-authorization: {expect_auth}"))
                });
                if !head.starts_with("CONNECT ") || !authorized {
                    let _ = client
                        .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
                        .await;
                    return;
                }
                let Ok(mut upstream) = TcpStream::connect(&target).await else {
                    return;
                };
                let _ = client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await;
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    (addr, seen)
}

#[tokio::test]
async fn alert_webhook_proxy_is_used_with_connect_and_basic_auth() {
    let svc = Service::start([]).await;
    let (proxy, heads) = connect_proxy("Basic YWw6czNjcmV0").await;
    let mut s = settings(&[svc.url()], Format::Gchat);
    s.proxy = Some(SecretUrl::parse(&format!("http://al:s3cret@{proxy}")).unwrap());
    let (n, m, cancel) = start(&s);
    n.notify(&failure("web-0", "app-config"));
    until("sent", Duration::from_secs(10), || m.sent.get() == 1).await;
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(
        heads[0].starts_with(&format!("CONNECT {} HTTP/1.1\r\n", svc.addr)),
        "{heads:?}"
    );
    assert_eq!(
        svc.seen()[0].body,
        format!(r#"{{"text":"{LINE}"}}"#).as_bytes()
    );
    cancel.cancel();
}
