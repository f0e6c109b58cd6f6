use super::*;
use crate::core::model::{
    ContainerInfo, ContainerPort, ContainerRuntime, SourceKind, VolumeMount, VolumeSpec,
};

/// A fluent pod fixture: `pod().annotate(..).volume(..).container(..)`.
struct Fixture(PodInfo);

fn pod() -> Fixture {
    Fixture(PodInfo {
        uid: "uid-1".into(),
        namespace: "web".into(),
        name: "web-0".into(),
        has_controller: true,
        phase: "Running".into(),
        ..Default::default()
    })
}

fn cm(name: &str) -> SourceRef {
    SourceRef {
        kind: SourceKind::ConfigMap,
        name: name.into(),
    }
}

fn secret(name: &str) -> SourceRef {
    SourceRef {
        kind: SourceKind::Secret,
        name: name.into(),
    }
}

impl Fixture {
    fn annotate(mut self, k: &str, v: &str) -> Self {
        self.0.annotations.insert(k.into(), v.into());
        self
    }
    fn volume(mut self, name: &str, sources: Vec<SourceRef>) -> Self {
        self.0.volumes.push(VolumeSpec {
            name: name.into(),
            sources,
            ..Default::default()
        });
        self
    }
    fn token_volume(mut self, name: &str) -> Self {
        self.0.volumes.push(VolumeSpec {
            name: name.into(),
            sources: vec![cm("kube-root-ca.crt")],
            service_account_token: true,
            source_paths: vec![(cm("kube-root-ca.crt"), vec!["ca.crt".into()])],
            source_keys: Vec::new(),
            source_items: Vec::new(),
            other_paths: vec!["token".into(), "namespace".into()],
            csi: None,
        });
        self
    }
    fn container(self, name: &str, mounts: &[&str]) -> Self {
        self.container_of(name, ContainerKind::Regular, mounts)
    }
    /// Mount names ending in `@sub` are subPath mounts.
    fn container_of(mut self, name: &str, kind: ContainerKind, mounts: &[&str]) -> Self {
        let n = self.0.containers.len();
        self.0.containers.push(ContainerInfo {
            name: name.into(),
            kind,
            mounts: mounts
                .iter()
                .map(|m| match m.strip_suffix("@sub") {
                    Some(v) => VolumeMount {
                        volume: v.into(),
                        sub_path: true,
                    },
                    None => VolumeMount {
                        volume: (*m).into(),
                        sub_path: false,
                    },
                })
                .collect(),
            container_id: Some(ContainerId {
                runtime: ContainerRuntime::Containerd,
                id: format!("{n:064x}"),
            }),
            running: true,
            ports: Vec::new(),
        });
        self
    }
    /// Gives the last container an unnamed port.
    fn unnamed_port(mut self, port: u16) -> Self {
        let c = self.0.containers.last_mut().unwrap();
        c.ports.push(ContainerPort::unnamed(port));
        self
    }
    fn host_network(mut self) -> Self {
        self.0.host_network = true;
        self
    }
    /// Gives the last container a named port.
    fn port(mut self, name: &str, port: u16) -> Self {
        let c = self.0.containers.last_mut().unwrap();
        c.ports.push(ContainerPort::named(name, port));
        self
    }
    fn unowned(mut self) -> Self {
        self.0.has_controller = false;
        self
    }
    fn terminating(mut self) -> Self {
        self.0.terminating = true;
        self
    }
}

fn changed(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn targets(d: &Decision) -> Vec<String> {
    match d {
        Decision::Signal { targets, .. } => targets.iter().map(|t| t.container.clone()).collect(),
        other => panic!("expected Signal, got {other:?}"),
    }
}

fn nginx_pod() -> Fixture {
    pod()
        .annotate("reloadlet.io/action", "signal")
        .volume("conf", vec![cm("nginx-conf")])
        .volume("tls", vec![secret("tls")])
        .token_volume("kube-api-access-x1y2z")
        .container("nginx", &["conf", "tls", "kube-api-access-x1y2z"])
        .container("exporter", &["kube-api-access-x1y2z"])
}

#[test]
fn signals_only_the_containers_that_mount_the_changed_volume() {
    let d = decide(&nginx_pod().0, &changed(&["conf"]));
    assert_eq!(targets(&d), vec!["nginx"]);
    let Decision::Signal { signal, cause, .. } = d else {
        unreachable!()
    };
    assert_eq!(signal, ReloadSignal::Hup);
    assert_eq!(cause.to_string(), "configmap nginx-conf changed");
}

#[test]
fn the_decision_carries_the_pods_signal_check() {
    let check = |p: Fixture| match decide(&p.0, &changed(&["conf"])) {
        Decision::Signal { check, .. } => check,
        other => panic!("{other:?}"),
    };
    assert_eq!(check(nginx_pod()), SignalCheck::On);
    assert_eq!(
        check(nginx_pod().annotate("reloadlet.io/signal-check", "off")),
        SignalCheck::Off
    );
}

#[test]
fn pods_without_the_annotation_are_never_touched() {
    let p = pod()
        .volume("conf", vec![cm("c")])
        .container("app", &["conf"]);
    assert_eq!(decide(&p.0, &changed(&["conf"])), Decision::NotOptedIn);
}

fn changes(list: &[(&str, Option<Vec<SourceRef>>)]) -> crate::core::policy::ChangedVolumes {
    list.iter()
        .map(|(v, s)| (v.to_string(), s.clone().map(|s| s.into_iter().collect())))
        .collect()
}

#[test]
fn a_projected_volume_with_a_token_triggers_on_its_configmap_and_names_only_what_changed() {
    // `[serviceAccountToken(audience: vault), configMap app-config, secret db]`.
    let p = pod()
        .annotate("reloadlet.io/action", "signal")
        .volume("mixed", vec![cm("app-config"), secret("db")])
        .container("app", &["mixed"]);
    let mut p = p;
    p.0.volumes[0].service_account_token = true;
    p.0.volumes[0].other_paths = vec!["vault-token".into()];
    let Decision::Signal { cause, .. } =
        decide_changes(&p.0, &changes(&[("mixed", Some(vec![cm("app-config")]))]))
    else {
        panic!("a ConfigMap change in a token volume must signal");
    };
    assert_eq!(cause.to_string(), "configmap app-config changed");
    // Nothing of it changed (e.g. parts that cancel out): nothing to do.
    assert!(matches!(
        decide_changes(&p.0, &changes(&[("mixed", Some(vec![]))])),
        Decision::NothingToDo { .. }
    ));
}

#[test]
fn kube_root_ca_never_triggers_unless_named() {
    let p = pod()
        .annotate("reloadlet.io/action", "signal")
        .volume("mixed", vec![cm("app-config"), cm("kube-root-ca.crt")])
        .token_volume("kube-api-access-x1y2z")
        .container("app", &["mixed", "kube-api-access-x1y2z"]);
    let ca_only = changes(&[
        ("mixed", Some(vec![cm("kube-root-ca.crt")])),
        ("kube-api-access-x1y2z", Some(vec![cm("kube-root-ca.crt")])),
    ]);
    let d = decide_changes(&p.0, &ca_only);
    assert!(matches!(d, Decision::NothingToDo { .. }), "{d:?}");
    // Both changed: the CA is not named in the cause.
    let Decision::Signal { cause, .. } = decide_changes(
        &p.0,
        &changes(&[(
            "mixed",
            Some(vec![cm("app-config"), cm("kube-root-ca.crt")]),
        )]),
    ) else {
        panic!("expected a signal");
    };
    assert_eq!(cause.to_string(), "configmap app-config changed");
    // Named: it counts.
    let named = p.annotate("reloadlet.io/configmaps", "kube-root-ca.crt");
    let Decision::Signal { cause, targets, .. } = decide_changes(&named.0, &ca_only) else {
        panic!("a named kube-root-ca.crt must signal");
    };
    assert_eq!(cause.to_string(), "configmap kube-root-ca.crt changed");
    assert_eq!(targets.len(), 1);
}

#[test]
fn token_volume_rotation_never_triggers() {
    let d = decide(&nginx_pod().0, &changed(&["kube-api-access-x1y2z"]));
    assert!(matches!(d, Decision::NothingToDo { .. }), "{d:?}");
}

#[test]
fn volumes_without_configmap_or_secret_sources_never_trigger() {
    let p = nginx_pod()
        .volume("podinfo", vec![])
        .container("c2", &["podinfo"]);
    assert!(matches!(
        decide(&p.0, &changed(&["podinfo"])),
        Decision::NothingToDo { .. }
    ));
    assert!(matches!(
        decide(&p.0, &changed(&["unknown-volume"])),
        Decision::NothingToDo { .. }
    ));
}

#[test]
fn narrowing_by_configmaps_ignores_other_sources() {
    let p = nginx_pod().annotate("reloadlet.io/configmaps", "nginx-conf");
    assert_eq!(targets(&decide(&p.0, &changed(&["conf"]))), vec!["nginx"]);
    assert!(matches!(
        decide(&p.0, &changed(&["tls"])),
        Decision::NothingToDo { .. }
    ));
    let p = nginx_pod().annotate("reloadlet.io/secrets", "tls");
    assert!(matches!(
        decide(&p.0, &changed(&["conf"])),
        Decision::NothingToDo { .. }
    ));
    assert_eq!(targets(&decide(&p.0, &changed(&["tls"]))), vec!["nginx"]);
}

#[test]
fn narrowing_to_a_source_no_volume_projects_is_invalid() {
    let p = nginx_pod().annotate("reloadlet.io/configmaps", "nginx-cnf");
    let Decision::Invalid { message } = decide(&p.0, &changed(&["conf"])) else {
        panic!()
    };
    assert!(message.contains("nginx-cnf"), "{message}");
}

#[test]
fn several_changes_make_one_decision_with_every_cause() {
    let d = decide(&nginx_pod().0, &changed(&["conf", "tls"]));
    let Decision::Signal { cause, targets, .. } = d else {
        panic!()
    };
    assert_eq!(targets.len(), 1);
    assert_eq!(
        cause.to_string(),
        "configmap nginx-conf, secret tls changed"
    );
}

#[test]
fn container_annotation_selects_and_validates() {
    let p = pod()
        .annotate("reloadlet.io/action", "signal")
        .annotate("reloadlet.io/containers", "b")
        .volume("conf", vec![cm("c")])
        .container("a", &["conf"])
        .container("b", &["conf"]);
    assert_eq!(targets(&decide(&p.0, &changed(&["conf"]))), vec!["b"]);
    let p = p.annotate("reloadlet.io/containers", "b,zz");
    let Decision::Invalid { message } = decide(&p.0, &changed(&["conf"])) else {
        panic!()
    };
    assert!(
        message.contains("\"zz\"") && message.contains("known: a, b"),
        "{message}"
    );
}

#[test]
fn invalid_annotations_give_no_action() {
    for (k, v) in [
        ("reloadlet.io/signal", "KILL"),
        ("reloadlet.io/signal", "9"),
        ("reloadlet.io/containers", ""),
        ("reloadlet.io/action", "reboot"),
    ] {
        let p = nginx_pod().annotate(k, v);
        assert!(
            matches!(decide(&p.0, &changed(&["conf"])), Decision::Invalid { .. }),
            "{k}={v}"
        );
    }
}

#[test]
fn sub_path_only_mounts_warn_instead_of_signalling() {
    let p = pod()
        .annotate("reloadlet.io/action", "signal")
        .volume("conf", vec![cm("c")])
        .container("app", &["conf@sub"]);
    let Decision::SubPathOnly { message, .. } = decide(&p.0, &changed(&["conf"])) else {
        panic!()
    };
    assert!(
        message.contains("subPath") && message.contains("app"),
        "{message}"
    );
    // A container with both a subPath and a full mount is signalled.
    let p = p.container("both", &["conf@sub", "conf"]);
    assert_eq!(targets(&decide(&p.0, &changed(&["conf"]))), vec!["both"]);
}

#[test]
fn restartable_init_containers_are_targets_classic_init_containers_are_not() {
    let p = pod()
        .annotate("reloadlet.io/action", "signal")
        .volume("conf", vec![cm("c")])
        .container_of("init", ContainerKind::Init, &["conf"])
        .container_of("proxy", ContainerKind::SidecarInit, &["conf"])
        .container("app", &["conf"]);
    assert_eq!(
        targets(&decide(&p.0, &changed(&["conf"]))),
        vec!["proxy", "app"]
    );
    let p = p.annotate("reloadlet.io/containers", "init");
    assert!(matches!(
        decide(&p.0, &changed(&["conf"])),
        Decision::Invalid { .. }
    ));
}

#[test]
fn evict_decisions() {
    let base = || {
        pod()
            .annotate("reloadlet.io/action", "evict")
            .volume("conf", vec![cm("app-conf")])
            .token_volume("kube-api-access-abcde")
            .container("app", &["conf@sub", "kube-api-access-abcde"])
    };
    // subPath consumers do get the new content from a fresh pod.
    let d = decide(&base().0, &changed(&["conf"]));
    assert_eq!(
        d,
        Decision::Evict {
            cause: Cause {
                sources: vec![cm("app-conf")]
            }
        }
    );
    assert!(matches!(
        decide(&base().0, &changed(&["kube-api-access-abcde"])),
        Decision::NothingToDo { .. }
    ));
    assert!(matches!(
        decide(&base().unowned().0, &changed(&["conf"])),
        Decision::EvictRefused { .. }
    ));
    let allowed = base()
        .unowned()
        .annotate("reloadlet.io/evict-unowned", "true");
    assert!(matches!(
        decide(&allowed.0, &changed(&["conf"])),
        Decision::Evict { .. }
    ));
    assert_eq!(
        decide(&base().terminating().0, &changed(&["conf"])),
        Decision::AlreadyTerminating
    );
}

#[test]
fn empty_change_set_does_nothing() {
    assert!(matches!(
        decide(&nginx_pod().0, &BTreeSet::new()),
        Decision::NothingToDo { .. }
    ));
}

fn prometheus_pod(port: &str) -> Fixture {
    pod()
        .annotate("reloadlet.io/action", "http")
        .annotate("reloadlet.io/http-port", port)
        .volume("config", vec![cm("prometheus-config")])
        .volume("rules", vec![cm("rules")])
        .container("prometheus", &["config"])
        .port("web", 9090)
        .unnamed_port(8081)
        .container("thanos", &["rules"])
        .port("grpc", 10901)
}

fn http_port(d: &Decision) -> (u16, Vec<String>) {
    match d {
        Decision::Http { target, .. } => (
            target.port,
            target
                .containers
                .iter()
                .map(|t| t.container.clone())
                .collect(),
        ),
        other => panic!("expected Http, got {other:?}"),
    }
}

#[test]
fn http_table() {
    // (port annotation, changed volume, want: Ok((port, containers)) or Err(decision text))
    type Case<'a> = (&'a str, &'a str, Result<(u16, Vec<&'a str>), &'a str>);
    let cases: Vec<Case> = vec![
        ("9090", "config", Ok((9090, vec!["prometheus"]))),
        ("web", "config", Ok((9090, vec!["prometheus"]))),
        // A number: declared by any container of the pod (the request goes to the pod's IP).
        ("10901", "config", Ok((10901, vec!["prometheus"]))),
        ("8081", "config", Ok((8081, vec!["prometheus"]))),
        (
            "8080",
            "config",
            Err("Invalid: reloadlet.io/http-port: 8080 is not a port any container of the pod declares (declared: 9090/web, 8081, 10901/grpc)"),
        ),
        (
            "22",
            "rules",
            Err("Invalid: reloadlet.io/http-port: 22 is not a port any container of the pod declares (declared: 9090/web, 8081, 10901/grpc)"),
        ),
        ("grpc", "rules", Ok((10901, vec!["thanos"]))),
        (
            "grpc",
            "config",
            Err("Invalid: reloadlet.io/http-port: no container that mounts the changed volume (prometheus) declares a port named \"grpc\""),
        ),
        (
            "metrics",
            "config",
            Err("Invalid: reloadlet.io/http-port: no container declares a port named \"metrics\" (declared: 9090/web, 8081, 10901/grpc)"),
        ),
        ("0", "config", Err("Invalid: reloadlet.io/http-port: \"0\" is neither a port number (1-65535) nor a port name (1-15 lowercase letters, digits and '-', with at least one letter)")),
    ];
    for (port, volume, want) in cases {
        let d = decide(&prometheus_pod(port).0, &changed(&[volume]));
        match want {
            Ok((p, containers)) => {
                assert_eq!(
                    http_port(&d),
                    (p, containers.iter().map(|c| c.to_string()).collect()),
                    "{port} {volume}"
                )
            }
            Err(text) => {
                let Decision::Invalid { message } = &d else {
                    panic!("{port} {volume}: {d:?}");
                };
                assert_eq!(format!("Invalid: {message}"), text);
            }
        }
    }
}

#[test]
fn http_follows_the_same_narrowing_as_signal() {
    let narrowed = prometheus_pod("web").annotate("reloadlet.io/configmaps", "rules");
    assert!(matches!(
        decide(&narrowed.0, &changed(&["config"])),
        Decision::NothingToDo { .. }
    ));
    let only_thanos = prometheus_pod("grpc").annotate("reloadlet.io/containers", "thanos");
    assert!(matches!(
        decide(&only_thanos.0, &changed(&["config"])),
        Decision::NothingToDo { .. }
    ));
    // A named port must belong to a selected container.
    let d = decide(
        &prometheus_pod("web")
            .annotate("reloadlet.io/containers", "thanos")
            .0,
        &changed(&["rules"]),
    );
    assert!(matches!(d, Decision::Invalid { .. }), "{d:?}");
    let sub = pod()
        .annotate("reloadlet.io/action", "http")
        .annotate("reloadlet.io/http-port", "9090")
        .volume("config", vec![cm("prometheus-config")])
        .container("prometheus", &["config@sub"])
        .port("web", 9090);
    // Reported as the http action that could not be taken, not as a signal.
    assert!(matches!(
        decide(&sub.0, &changed(&["config"])),
        Decision::SubPathOnly {
            action: crate::core::outcome::ActionKind::Http,
            ..
        }
    ));
    let Decision::Http { cause, .. } = decide(&prometheus_pod("9090").0, &changed(&["config"]))
    else {
        panic!()
    };
    assert_eq!(cause.to_string(), "configmap prometheus-config changed");
}

#[test]
fn a_pod_without_declared_ports_reaches_nothing() {
    let bare = pod()
        .annotate("reloadlet.io/action", "http")
        .annotate("reloadlet.io/http-port", "10250")
        .volume("config", vec![cm("prometheus-config")])
        .container("prometheus", &["config"]);
    let d = decide(&bare.0, &changed(&["config"]));
    assert_eq!(
        d,
        Decision::Invalid {
            message: "reloadlet.io/http-port: 10250 is not a port any container of the pod declares (declared: none)".into()
        }
    );
}

#[test]
fn host_network_http_pods_need_the_operators_fence() {
    const REFUSED: &str = "reloadlet.io/action: http is refused on a hostNetwork pod: its IP is the node's own address, so the request would go to a service of the node; the operator has not allowed that (agent flag --http-allow-host-network)";
    let allowed = HttpFence {
        allow_host_network: true,
    };
    // (pod, fence, want: Ok(port) or Err(message))
    type Case = (Fixture, HttpFence, Result<u16, String>);
    let cases: Vec<Case> = vec![
        (prometheus_pod("web"), HttpFence::default(), Ok(9090)),
        (prometheus_pod("web"), allowed, Ok(9090)),
        (
            prometheus_pod("web").host_network(),
            HttpFence::default(),
            Err(REFUSED.into()),
        ),
        (prometheus_pod("9090").host_network(), allowed, Ok(9090)),
        // Allowed, still only to a declared port.
        (
            prometheus_pod("10250").host_network(),
            allowed,
            Err("reloadlet.io/http-port: 10250 is not a port any container of the pod declares (declared: 9090/web, 8081, 10901/grpc)".into()),
        ),
    ];
    for (i, (fixture, fence, want)) in cases.into_iter().enumerate() {
        let pod = &fixture.0;
        let checked = validated_policy_with(pod, fence);
        let d = decide_with(
            pod,
            &checked,
            &changed(&["config"])
                .into_iter()
                .map(|v| (v, None))
                .collect(),
        );
        match want {
            Ok(port) => assert_eq!(http_port(&d).0, port, "case {i}"),
            Err(message) => {
                assert_eq!(checked, Err(message.clone().into()), "case {i}");
                assert_eq!(d, Decision::Invalid { message }, "case {i}");
            }
        }
    }
    // The default check (explain, and any caller without the agent's flag) refuses.
    assert_eq!(
        validated_policy(&prometheus_pod("web").host_network().0),
        Err(REFUSED.into())
    );
    // Signal and evict do not go over the network: hostNetwork changes nothing for them.
    let signal = nginx_pod().host_network();
    assert!(matches!(
        decide(&signal.0, &changed(&["conf"])),
        Decision::Signal { .. }
    ));
}

fn csi_pod() -> Fixture {
    let mut f = pod()
        .annotate("reloadlet.io/action", "signal")
        .volume("conf", vec![cm("app-conf")])
        .container("app", &["conf", "secrets", "certs"]);
    for (name, driver, class) in [
        ("secrets", "secrets-store.csi.k8s.io", Some("vault-db")),
        ("certs", "csi.cert-manager.io", None),
    ] {
        f.0.volumes.push(VolumeSpec {
            name: name.into(),
            csi: Some(crate::core::model::CsiVolumeSpec {
                driver: driver.into(),
                class: class.map(Into::into),
            }),
            ..Default::default()
        });
    }
    f
}

fn cause(d: &Decision) -> String {
    match d {
        Decision::Signal { cause, .. } => cause.to_string(),
        other => panic!("expected Signal, got {other:?}"),
    }
}

#[test]
fn csi_volumes_trigger_and_name_class_or_driver() {
    let p = csi_pod().0;
    assert_eq!(
        cause(&decide(&p, &changed(&["secrets"]))),
        "secretproviderclass vault-db (volume secrets) changed"
    );
    assert_eq!(
        cause(&decide(&p, &changed(&["certs"]))),
        "csi volume certs (csi.cert-manager.io) changed"
    );
}

#[test]
fn csi_narrowing_by_class_and_by_volume() {
    // (annotation, value, changed volume, triggers)
    let cases = [
        (
            "reloadlet.io/secretproviderclasses",
            "vault-db",
            "secrets",
            true,
        ),
        (
            "reloadlet.io/secretproviderclasses",
            "vault-db",
            "certs",
            false,
        ),
        (
            "reloadlet.io/secretproviderclasses",
            "vault-db",
            "conf",
            false,
        ),
        ("reloadlet.io/csi-volumes", "certs", "certs", true),
        ("reloadlet.io/csi-volumes", "certs", "secrets", false),
        ("reloadlet.io/csi-volumes", "secrets", "secrets", true),
        // Any narrowing list leaves unlisted CSI volumes out, as for ConfigMaps/Secrets.
        ("reloadlet.io/configmaps", "app-conf", "secrets", false),
        ("reloadlet.io/configmaps", "app-conf", "conf", true),
    ];
    for (key, value, volume, triggers) in cases {
        let p = csi_pod().annotate(key, value).0;
        let d = decide(&p, &changed(&[volume]));
        assert_eq!(
            matches!(d, Decision::Signal { .. }),
            triggers,
            "{key}={value}, {volume} changed: {d:?}"
        );
    }
}

#[test]
fn csi_narrowing_lists_must_name_the_pods_csi_volumes() {
    for (key, value) in [
        ("reloadlet.io/secretproviderclasses", "vault-typo"),
        ("reloadlet.io/csi-volumes", "conf"),
        ("reloadlet.io/csi-volumes", "nope"),
    ] {
        let p = csi_pod().annotate(key, value).0;
        match decide(&p, &changed(&["secrets"])) {
            Decision::Invalid { message } => {
                assert!(message.starts_with(key), "{message}");
                assert!(message.contains(value), "{message}");
            }
            other => panic!("{key}={value}: expected Invalid, got {other:?}"),
        }
    }
}

fn restarted(d: &Decision) -> Vec<(String, ReloadSignal)> {
    match d {
        Decision::Restart { targets, .. } => targets
            .iter()
            .map(|t| (t.target.container.clone(), t.stop.signal))
            .collect(),
        other => panic!("expected Restart, got {other:?}"),
    }
}

fn restart_pod() -> Fixture {
    pod()
        .annotate("reloadlet.io/action", "restart")
        .volume("conf", vec![cm("app-conf")])
        .volume("tls", vec![secret("tls")])
        .container("app", &["conf@sub"])
        .container("proxy", &["tls"])
        .container_of("setup", ContainerKind::Init, &["conf"])
        .container_of("agent", ContainerKind::SidecarInit, &["conf"])
}

#[test]
fn restart_stops_the_containers_that_read_the_change_subpath_included() {
    let p = restart_pod().0;
    let want = |names: &[&str]| -> Vec<(String, ReloadSignal)> {
        names
            .iter()
            .map(|n| (n.to_string(), ReloadSignal::Term))
            .collect()
    };
    // subPath readers are restarted too (a start prepares the subPath mount again); a
    // native sidecar is a container like the others; a classic init container never
    let mut got = restarted(&decide(&p, &changed(&["conf"])));
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got, want(&["agent", "app"]));
    assert_eq!(restarted(&decide(&p, &changed(&["tls"]))), want(&["proxy"]));
    let all = restart_pod()
        .annotate("reloadlet.io/restart-containers", "all")
        .0;
    let mut got = restarted(&decide(&all, &changed(&["tls"])));
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got, want(&["agent", "app", "proxy"]));
    let named = restart_pod()
        .annotate("reloadlet.io/restart-containers", "app")
        .0;
    assert_eq!(
        restarted(&decide(&named, &changed(&["tls"]))),
        want(&["app"])
    );
    // the stop signal of the container, when it sets one
    let mut quit = restart_pod().0;
    quit.restart.stop_signals = vec![("proxy".into(), "SIGQUIT".into())];
    assert_eq!(
        restarted(&decide(&quit, &changed(&["tls"]))),
        vec![("proxy".to_string(), ReloadSignal::Quit)]
    );
}

#[test]
fn restart_is_refused_where_the_kubelet_would_not_bring_the_new_config() {
    for policy in ["Never", "OnFailure"] {
        let mut p = restart_pod().0;
        p.restart.restart_policy = Some(policy.into());
        match decide(&p, &changed(&["conf"])) {
            Decision::RestartRefused { message, cause } => {
                assert!(message.contains(policy), "{message}");
                assert_eq!(cause.sources, vec![cm("app-conf")]);
            }
            other => panic!("{policy}: {other:?}"),
        }
    }
    let mirror = restart_pod()
        .annotate("kubernetes.io/config.mirror", "0123")
        .0;
    assert!(matches!(
        decide(&mirror, &changed(&["conf"])),
        Decision::RestartRefused { .. }
    ));
    let mut odd = restart_pod().0;
    odd.restart.stop_signals = vec![("proxy".into(), "SIGRTMIN+3".into())];
    assert!(matches!(
        decide(&odd, &changed(&["tls"])),
        Decision::RestartRefused { .. }
    ));
    assert_eq!(
        decide(&restart_pod().terminating().0, &changed(&["conf"])),
        Decision::AlreadyTerminating
    );
}

#[test]
fn hostile_restart_annotations_are_invalid_never_a_panic() {
    let huge = "a,".repeat(50_000);
    for (key, value) in [
        ("reloadlet.io/restart-containers", huge.as_str()),
        ("reloadlet.io/restart-containers", "nope"),
        ("reloadlet.io/restart-grace", "99999999999999999999y"),
        ("reloadlet.io/restart-timeout", "-1s"),
        ("reloadlet.io/drain", "soon"),
        ("reloadlet.io/drain", "2h"),
        ("reloadlet.io/drain", huge.as_str()),
    ] {
        let p = restart_pod().annotate(key, value).0;
        match decide(&p, &changed(&["conf"])) {
            Decision::Invalid { message } => {
                assert!(message.contains(key), "{message}");
                assert!(message.len() < 500, "bounded: {}", message.len());
            }
            other => panic!("{key}={value:.40}: {other:?}"),
        }
    }
}

#[test]
fn the_subpath_warning_points_to_restart() {
    let p = pod()
        .annotate("reloadlet.io/action", "signal")
        .volume("conf", vec![cm("app-conf")])
        .container("app", &["conf@sub"])
        .0;
    match decide(&p, &changed(&["conf"])) {
        Decision::SubPathOnly { message, .. } => {
            assert!(
                message.contains("reloadlet.io/action: restart"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
}

fn pod_cert(signer: &str) -> SourceRef {
    SourceRef {
        kind: SourceKind::PodCertificate,
        name: signer.into(),
    }
}

#[test]
fn a_pod_certificate_rotation_acts_only_for_a_pod_that_names_its_signer() {
    // `[configMap app-config, podCertificate example.com/mtls]`, as pod_convert lays it out.
    let p = pod()
        .annotate("reloadlet.io/action", "signal")
        .volume(
            "mixed",
            vec![cm("app-config"), pod_cert("example.com/mtls")],
        )
        .container("app", &["mixed"]);
    let rotation = changes(&[("mixed", Some(vec![pod_cert("example.com/mtls")]))]);
    let d = decide_changes(&p.0, &rotation);
    assert!(matches!(d, Decision::NothingToDo { .. }), "{d:?}");
    // Its ConfigMap still counts, and the certificate is not named in the cause.
    let Decision::Signal { cause, .. } = decide_changes(
        &p.0,
        &changes(&[(
            "mixed",
            Some(vec![cm("app-config"), pod_cert("example.com/mtls")]),
        )]),
    ) else {
        panic!("a ConfigMap change must signal");
    };
    assert_eq!(cause.to_string(), "configmap app-config changed");

    // Opted in: the rotation signals, and the opt-in narrows nothing.
    let opted = p.annotate("reloadlet.io/pod-certificates", "example.com/mtls");
    let Decision::Signal { cause, .. } = decide_changes(&opted.0, &rotation) else {
        panic!("a named signer's rotation must signal");
    };
    assert_eq!(
        cause.to_string(),
        "pod certificate example.com/mtls changed"
    );
    assert!(matches!(
        decide_changes(
            &opted.0,
            &changes(&[("mixed", Some(vec![cm("app-config")]))])
        ),
        Decision::Signal { .. }
    ));
}

#[test]
fn pod_certificates_must_name_a_signer_the_pod_projects() {
    let base = || {
        pod()
            .annotate("reloadlet.io/action", "signal")
            .volume("mtls", vec![pod_cert("example.com/mtls")])
            .container("app", &["mtls"])
    };
    for (value, ok) in [
        ("example.com/mtls", true),
        (" example.com/mtls , example.com/mtls ", true),
        ("example.com/other", false),
        ("mtls", false),
        ("Example.com/mtls", false),
        ("example.com/", false),
        ("example.com/a%2Fb", false),
        ("", false),
    ] {
        let p = base().annotate("reloadlet.io/pod-certificates", value);
        let d = decide_changes(
            &p.0,
            &changes(&[("mtls", Some(vec![pod_cert("example.com/mtls")]))]),
        );
        assert_eq!(matches!(d, Decision::Signal { .. }), ok, "{value:?}: {d:?}");
        if !ok {
            assert!(matches!(d, Decision::Invalid { .. }), "{value:?}: {d:?}");
        }
    }
}
