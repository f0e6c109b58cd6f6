//! Pod volumes on the real kernel (root): dirs, tmpfs mounts, token rotation, teardown.

use inotify::{Inotify, WatchMask};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, Pod, PodSpec, Secret,
    SecretVolumeSource, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use nodesim::projection::{inject_kube_api_access, root_ca_configmap, SourceLookup};
use nodesim::volumes::{PodVolumes, Rotation};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

struct Objects(Vec<ConfigMap>, Vec<Secret>);

impl SourceLookup for Objects {
    fn configmap(&self, ns: &str, name: &str) -> Option<ConfigMap> {
        self.0
            .iter()
            .find(|c| {
                c.metadata.namespace.as_deref() == Some(ns)
                    && c.metadata.name.as_deref() == Some(name)
            })
            .cloned()
    }
    fn secret(&self, ns: &str, name: &str) -> Option<Secret> {
        self.1
            .iter()
            .find(|c| {
                c.metadata.namespace.as_deref() == Some(ns)
                    && c.metadata.name.as_deref() == Some(name)
            })
            .cloned()
    }
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("ns".into()),
        ..Default::default()
    }
}

fn objects(config: &str) -> Objects {
    Objects(
        vec![
            ConfigMap {
                metadata: meta("cfg"),
                data: Some(BTreeMap::from([("app.conf".into(), config.into())])),
                ..Default::default()
            },
            root_ca_configmap("ns"),
        ],
        vec![Secret {
            metadata: meta("creds"),
            data: Some(BTreeMap::from([(
                "token".into(),
                ByteString(b"s3cret".to_vec()),
            )])),
            ..Default::default()
        }],
    )
}

fn pod() -> Pod {
    let uid = nodesim::runtime::random_container_id()[..32].to_string();
    let mut pod = Pod {
        metadata: ObjectMeta {
            uid: Some(uid),
            ..meta("web")
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                ..Default::default()
            }],
            volumes: Some(vec![
                Volume {
                    name: "config".into(),
                    config_map: Some(ConfigMapVolumeSource {
                        name: "cfg".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                Volume {
                    name: "creds".into(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some("creds".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                Volume {
                    name: "scratch".into(),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
        ..Default::default()
    };
    inject_kube_api_access(&mut pod).unwrap();
    pod
}

/// The filesystem type mounted exactly at `dir`, if any.
fn fstype_at(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    text.lines().rev().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        (pre.split(' ').nth(4)? == dir.to_str()?)
            .then(|| post.split(' ').next().unwrap().to_owned())
    })
}

fn data_target(dir: &Path) -> std::path::PathBuf {
    std::fs::read_link(dir.join("..data")).unwrap()
}

#[test]
fn volumes_are_laid_out_mounted_rotated_and_torn_down() {
    let tmp = tempfile::tempdir().unwrap();
    let pod = pod();
    let uid = pod.metadata.uid.clone().unwrap();
    let mut vols = PodVolumes::create(tmp.path(), &pod).unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let vol = |plugin: &str, name: &str| {
        root.join("pods")
            .join(&uid)
            .join("volumes")
            .join(plugin)
            .join(name)
    };
    let api_access = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap()[3]
        .name
        .clone();
    let (config, creds, token, scratch) = (
        vol("kubernetes.io~configmap", "config"),
        vol("kubernetes.io~secret", "creds"),
        vol("kubernetes.io~projected", &api_access),
        vol("kubernetes.io~empty-dir", "scratch"),
    );
    for dir in [&config, &creds, &token, &scratch] {
        assert_eq!(
            std::fs::metadata(dir).unwrap().permissions().mode() & 0o7777,
            0o777,
            "{}",
            dir.display()
        );
    }

    // a watch added before the tmpfs is mounted watches the covered dir: it never sees a write
    let mut early = Inotify::init().unwrap();
    early.watches().add(&creds, WatchMask::ALL_EVENTS).unwrap();

    vols.mount_tmpfs().unwrap();
    assert_eq!(fstype_at(&creds).as_deref(), Some("tmpfs"));
    assert_eq!(fstype_at(&token).as_deref(), Some("tmpfs"));
    assert_eq!(fstype_at(&config), None, "configMap volumes are plain dirs");
    assert_eq!(fstype_at(&scratch), None);

    let written = vols.project_all(&pod, &objects("v1")).unwrap();
    assert_eq!(written.len(), 3, "{written:?}");
    assert_eq!(
        std::fs::read_to_string(config.join("app.conf")).unwrap(),
        "v1"
    );
    assert_eq!(
        std::fs::read_to_string(creds.join("token")).unwrap(),
        "s3cret"
    );
    assert_eq!(
        std::fs::read_to_string(token.join("namespace")).unwrap(),
        "ns"
    );
    assert!(std::fs::read_to_string(token.join("ca.crt"))
        .unwrap()
        .starts_with("-----BEGIN CERTIFICATE-----"));
    let mut buf = [0u8; 4096];
    assert!(
        early
            .read_events(&mut buf)
            .map(|e| e.count() == 0)
            .unwrap_or(true),
        "covered dir saw the write"
    );

    // a resync with the same content writes nothing
    let before = (data_target(&config), data_target(&token));
    let again = vols.project_all(&pod, &objects("v1")).unwrap();
    assert!(
        again
            .iter()
            .all(|(_, o, _)| *o == nodesim::atomic_writer::WriteOutcome::Unchanged),
        "{again:?}"
    );

    // token rotation swaps only the token volume
    let old_token = std::fs::read(token.join("token")).unwrap();
    let rotated = vols.rotate(Rotation::Tokens, &pod, &objects("v1")).unwrap();
    assert_eq!(rotated.len(), 1);
    assert_eq!(rotated[0].0, api_access);
    assert_ne!(data_target(&token), before.1);
    assert_eq!(data_target(&config), before.0);
    assert_ne!(std::fs::read(token.join("token")).unwrap(), old_token);

    // a ConfigMap change reaches only the volumes it feeds
    assert_eq!(
        vols.volumes_referencing(nodesim::volumes::SourceKind::ConfigMap, "cfg"),
        vec!["config".to_string()]
    );
    vols.project_volume("config", &pod, &objects("v2")).unwrap();
    assert_eq!(
        std::fs::read_to_string(config.join("app.conf")).unwrap(),
        "v2"
    );

    let pod_dir = vols.pod_dir().to_owned();
    vols.teardown().unwrap();
    assert!(!pod_dir.exists());
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains(pod_dir.to_str().unwrap()),
        "a mount was left behind"
    );
}

#[test]
fn a_missing_configmap_fails_projection_and_drop_cleans_up() {
    let tmp = tempfile::tempdir().unwrap();
    let pod = pod();
    let mut vols = PodVolumes::create(tmp.path(), &pod).unwrap();
    vols.mount_tmpfs().unwrap();
    let empty = Objects(vec![], vec![]);
    let err = vols.project_all(&pod, &empty).unwrap_err().to_string();
    assert!(err.contains("configmap \"ns/cfg\" not found"), "{err}");
    let pod_dir = vols.pod_dir().to_owned();
    drop(vols);
    assert!(!pod_dir.exists());
    assert!(!std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .contains(pod_dir.to_str().unwrap()));
}
