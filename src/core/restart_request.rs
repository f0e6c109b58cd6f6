//! The restart request ids (docs/restart.md, "The grant"): whose it is, and which of the
//! pod's containers have started anew since it was made. Two makers: the agent
//! ([`request_id`], below) and the controller for an env restart ([`controller_request_id`],
//! keyed with the controller's key and labelled apart).
//!
//! `<content>-<mac>[-<tags>]`:
//! - `content`: 8 hex digits of a digest of the change (the kubelet writes seen, the sources,
//!   the moment of the decision);
//! - `tags`: for each container a recovered restart would stop
//!   ([`crate::core::policy::recovered_restart`], in that order), 4 hex digits of an HMAC of
//!   its name and the container ID it ran under when the request was made; omitted past
//!   [`MAX_TAGGED`] containers (the id stays within the 64 characters the admission policy
//!   allows);
//! - `mac`: 16 hex digits of an HMAC of the pod's UID, `content` and `tags`.
//!
//! Every HMAC is keyed with the agent's own key (its state file on the node, which no pod
//! author can read). Only the agent can make an id, one made for a pod is worth nothing on
//! another (a pod template carrying a request and its grant restarts nothing), and no tag can
//! be altered without breaking the `mac`.
//!
//! **Why the tags.** An agent that restarts between stopping a granted container and writing
//! `reloadlet.io/restarted` finds the request granted and not restarted. The container it
//! stopped already runs again under a new container ID, and has read the new config (it
//! started after the change the request is for); stopping it again would be a second
//! restart. A container whose tag still matches runs as it did at the request: that one is
//! stopped (again: while the first agent's stop was in its grace period, the same
//! container, so one restart).

use super::volume_digest::HashKey;
use hmac::Mac;
use sha2::{Digest, Sha256};

/// The most containers an id carries a tag for: `8 + 1 + 16 + 1 + 4 × 9 = 62` characters.
pub const MAX_TAGGED: usize = 9;

/// A container as it runs: its name, and the ID of its container (`None`: none started).
pub type Instance<'a> = (&'a str, Option<&'a str>);

/// The agent's request id for a change of a pod whose restart would stop `instances`.
pub fn request_id(
    key: &HashKey,
    pod_uid: &str,
    change: &[u8],
    instances: &[Instance<'_>],
) -> String {
    let content = Sha256::digest(change);
    let content = hex::encode(&content[..4]);
    let tags: String = if instances.len() <= MAX_TAGGED {
        instances
            .iter()
            .map(|i| tag(key, pod_uid, &content, i))
            .collect()
    } else {
        String::new()
    };
    let mac = mac(key, pod_uid, &content, &tags);
    if tags.is_empty() {
        format!("{content}-{mac}")
    } else {
        format!("{content}-{mac}-{tags}")
    }
}

/// Whether `id` is a request id `key` made for the pod `pod_uid` ([`request_id`]).
pub fn is_own_request(key: &HashKey, pod_uid: &str, id: &str) -> bool {
    parse(id).is_some_and(|(content, m, tags)| mac(key, pod_uid, content, tags) == m)
}

/// Of the agent's own request `id`: for each of `instances` (the containers a recovered
/// restart would stop, as they run now, in the order the request was made with), whether it
/// still runs as it did when the request was made. `None`: the id does not say (not the
/// agent's, no tags, or another number of containers): stop them all.
pub fn unchanged_since(
    key: &HashKey,
    pod_uid: &str,
    id: &str,
    instances: &[Instance<'_>],
) -> Option<Vec<bool>> {
    let (content, m, tags) = parse(id)?;
    if mac(key, pod_uid, content, tags) != m || tags.is_empty() || tags.len() != 4 * instances.len()
    {
        return None;
    }
    Some(
        instances
            .iter()
            .zip(tags.as_bytes().chunks(4))
            .map(|(i, t)| tag(key, pod_uid, content, i).as_bytes() == t)
            .collect(),
    )
}

/// The controller's request id for an env restart (`reloadlet.io/env-action: restart`,
/// docs/restart.md "Env consumers"): the same shape as the agent's, `<content>-<mac>-<tags>`,
/// keyed with the controller's key (`k8s::controller_key`, which the agent follows too) and
/// with labels of its own, so that an agent's id never verifies as the controller's, nor the
/// other way round, even under one key. Its tags are a set: the containers to stop, each by
/// its name and the container ID it ran under when the request was made (`instances`, at
/// least one). `None`: nothing to stop, or more than [`MAX_TAGGED`] containers (the id would
/// not fit the 64 characters the admission policy allows).
pub fn controller_request_id(
    key: &HashKey,
    pod_uid: &str,
    change: &[u8],
    instances: &[Instance<'_>],
) -> Option<String> {
    if instances.is_empty() || instances.len() > MAX_TAGGED {
        return None;
    }
    let content = Sha256::digest(change);
    let content = hex::encode(&content[..4]);
    let tags: String = instances
        .iter()
        .map(|i| controller_tag(key, pod_uid, &content, i))
        .collect();
    let mac = controller_mac(key, pod_uid, &content, &tags);
    Some(format!("{content}-{mac}-{tags}"))
}

/// Of the controller's request `id` for the pod `pod_uid` ([`controller_request_id`]): for
/// each of `instances` (the pod's containers as they run now, any order), whether to stop it
/// — its name and current container ID are among the id's tags. A container started anew
/// since the request (another container ID) is not stopped: it read the new env already.
/// `None`: `id` is not the controller's for this pod.
pub fn controller_targets(
    key: &HashKey,
    pod_uid: &str,
    id: &str,
    instances: &[Instance<'_>],
) -> Option<Vec<bool>> {
    let (content, m, tags) = parse(id)?;
    if tags.is_empty() || controller_mac(key, pod_uid, content, tags) != m {
        return None;
    }
    let tagged: Vec<&[u8]> = tags.as_bytes().chunks(4).collect();
    Some(
        instances
            .iter()
            .map(|i| tagged.contains(&controller_tag(key, pod_uid, content, i).as_bytes()))
            .collect(),
    )
}

/// Whether `id` is a request the controller made for the pod `pod_uid`.
pub fn is_controller_request(key: &HashKey, pod_uid: &str, id: &str) -> bool {
    controller_targets(key, pod_uid, id, &[]).is_some()
}

fn controller_mac(key: &HashKey, pod_uid: &str, content: &str, tags: &str) -> String {
    let parts = [
        "reloadlet controller env restart request",
        pod_uid,
        content,
        tags,
    ];
    keyed_hex(key, &parts, 8)
}

fn controller_tag(
    key: &HashKey,
    pod_uid: &str,
    content: &str,
    (name, id): &Instance<'_>,
) -> String {
    let parts = [
        "reloadlet controller env restart request container",
        pod_uid,
        content,
        name,
        id.unwrap_or(""),
    ];
    keyed_hex(key, &parts, 2)
}

/// `(content, mac, tags)` of a well-formed id.
fn parse(id: &str) -> Option<(&str, &str, &str)> {
    let mut parts = id.splitn(3, '-');
    let (content, m) = (parts.next()?, parts.next()?);
    let tags = parts.next().unwrap_or("");
    let hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    (content.len() == 8 && m.len() == 16 && tags.len() % 4 == 0)
        .then_some(())
        .filter(|()| hex(content) && hex(m) && hex(tags))
        .map(|()| (content, m, tags))
}

/// The id's MAC. Without tags it is the MAC ids had before tags existed (an id an agent wrote
/// before its upgrade still verifies after it).
fn mac(key: &HashKey, pod_uid: &str, content: &str, tags: &str) -> String {
    let mut parts = vec!["reloadlet restart request", pod_uid, content];
    if !tags.is_empty() {
        parts.push(tags);
    }
    keyed_hex(key, &parts, 8)
}

fn tag(key: &HashKey, pod_uid: &str, content: &str, (name, id): &Instance<'_>) -> String {
    let parts = [
        "reloadlet restart request container",
        pod_uid,
        content,
        name,
        id.unwrap_or(""),
    ];
    keyed_hex(key, &parts, 2)
}

/// Hex of the first `bytes` bytes of the HMAC of `parts` joined by NUL.
fn keyed_hex(key: &HashKey, parts: &[&str], bytes: usize) -> String {
    let mut mac = key.mac();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            mac.update(b"\0");
        }
        mac.update(part.as_bytes());
    }
    hex::encode(&mac.finalize().into_bytes()[..bytes])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::restart_grant::valid_id;

    const CHANGE: &[u8] = b"configmap/app-conf ..2026_11_29";

    #[test]
    fn a_request_id_is_the_agents_own_for_that_pod_only() {
        let key = HashKey::from_bytes([7; 32]);
        let id = request_id(&key, "uid-1", CHANGE, &[("app", Some("abc"))]);
        assert!(valid_id(&id) && id.len() == 30, "{id}");
        assert!(is_own_request(&key, "uid-1", &id));
        assert!(!is_own_request(&key, "uid-2", &id), "another pod");
        assert!(
            !is_own_request(&HashKey::from_bytes([8; 32]), "uid-1", &id),
            "another key"
        );
        let (content, rest) = id.split_once('-').unwrap();
        let (m, tags) = rest.split_once('-').unwrap();
        for forged in [
            format!("{content}-0000000000000000-{tags}"),
            // another tag under the same mac: a pod author steering which container stops
            format!("{content}-{m}-0000"),
            format!("{content}-{m}"),
            content.to_owned(),
            String::new(),
        ] {
            assert!(!is_own_request(&key, "uid-1", &forged), "{forged}");
            assert_eq!(
                unchanged_since(&key, "uid-1", &forged, &[("app", Some("abc"))]),
                None,
                "{forged}"
            );
        }
        assert_ne!(id, request_id(&key, "uid-1", b"another change", &[]));
        assert_eq!(
            id,
            request_id(&key, "uid-1", CHANGE, &[("app", Some("abc"))])
        );
    }

    #[test]
    fn the_tags_tell_which_containers_started_anew_since_the_request() {
        let key = HashKey::from_bytes([7; 32]);
        let at_request = [
            ("app", Some("abc")),
            ("sidecar", Some("s1")),
            ("late", None),
        ];
        let id = request_id(&key, "uid-1", CHANGE, &at_request);
        assert!(valid_id(&id), "{id}");
        let cases: [(&[Instance<'_>], Option<Vec<bool>>); 5] = [
            (&at_request, Some(vec![true, true, true])),
            // app restarted (by the agent before its own restart), late started since
            (
                &[
                    ("app", Some("def")),
                    ("sidecar", Some("s1")),
                    ("late", Some("l1")),
                ],
                Some(vec![false, true, false]),
            ),
            // the same containers in another order are other containers
            (
                &[
                    ("sidecar", Some("s1")),
                    ("app", Some("abc")),
                    ("late", None),
                ],
                Some(vec![false, false, true]),
            ),
            // another number of containers (the annotation changed): the id does not say
            (&[("app", Some("abc"))], None),
            (&[], None),
        ];
        for (now, want) in cases {
            assert_eq!(unchanged_since(&key, "uid-1", &id, now), want, "{now:?}");
        }
    }

    #[test]
    fn past_nine_containers_the_id_has_no_tags_and_says_nothing() {
        let key = HashKey::from_bytes([7; 32]);
        let names: Vec<String> = (0..=MAX_TAGGED).map(|i| format!("c{i}")).collect();
        let many: Vec<Instance<'_>> = names.iter().map(|n| (n.as_str(), Some("x"))).collect();
        let nine = request_id(&key, "u", CHANGE, &many[..MAX_TAGGED]);
        assert!(valid_id(&nine) && nine.len() == 62, "{nine}");
        let ten = request_id(&key, "u", CHANGE, &many);
        assert!(valid_id(&ten) && ten.len() == 25, "{ten}");
        assert!(is_own_request(&key, "u", &ten));
        assert_eq!(unchanged_since(&key, "u", &ten, &many), None);
    }

    #[test]
    fn an_id_without_tags_verifies_as_ids_did_before_tags() {
        // the MAC of an id as agents wrote it before tags: label, UID and content, NUL-joined
        let key = HashKey::from_bytes([7; 32]);
        let mut old = key.mac();
        old.update(b"reloadlet restart request\0uid-1\0c0ffee00");
        let old = format!(
            "c0ffee00-{}",
            hex::encode(&old.finalize().into_bytes()[..8])
        );
        assert!(is_own_request(&key, "uid-1", &old), "{old}");
    }

    #[test]
    fn a_controller_id_names_the_containers_to_stop_for_that_pod_only() {
        let key = HashKey::from_bytes([9; 32]);
        let at_request = [("app", Some("abc")), ("worker", Some("w1"))];
        let id = controller_request_id(&key, "uid-1", CHANGE, &at_request).unwrap();
        assert!(valid_id(&id) && id.len() == 34, "{id}");
        let now = [
            ("app", Some("abc")),
            ("sidecar", Some("s1")),
            ("worker", Some("w1")),
        ];
        struct Case<'a> {
            what: &'a str,
            key: HashKey,
            uid: &'a str,
            id: String,
            now: &'a [Instance<'a>],
            want: Option<Vec<bool>>,
        }
        let (content, rest) = id.split_once('-').unwrap();
        let (m, tags) = rest.split_once('-').unwrap();
        let agent = request_id(&key, "uid-1", CHANGE, &at_request);
        let cases = [
            Case {
                what: "as made",
                key: key.clone(),
                uid: "uid-1",
                id: id.clone(),
                now: &now,
                want: Some(vec![true, false, true]),
            },
            Case {
                what: "app restarted since",
                key: key.clone(),
                uid: "uid-1",
                id: id.clone(),
                now: &[("app", Some("def")), ("worker", Some("w1"))],
                want: Some(vec![false, true]),
            },
            Case {
                what: "both restarted since",
                key: key.clone(),
                uid: "uid-1",
                id: id.clone(),
                now: &[("app", Some("def")), ("worker", Some("w2"))],
                want: Some(vec![false, false]),
            },
            Case {
                what: "copied onto another pod (a template)",
                key: key.clone(),
                uid: "uid-2",
                id: id.clone(),
                now: &now,
                want: None,
            },
            Case {
                what: "another key",
                key: HashKey::from_bytes([8; 32]),
                uid: "uid-1",
                id: id.clone(),
                now: &now,
                want: None,
            },
            Case {
                what: "a tag swapped in",
                key: key.clone(),
                uid: "uid-1",
                id: format!("{content}-{m}-{}0000", &tags[..4]),
                now: &now,
                want: None,
            },
            Case {
                what: "tags dropped",
                key: key.clone(),
                uid: "uid-1",
                id: format!("{content}-{m}"),
                now: &now,
                want: None,
            },
            Case {
                what: "forged mac",
                key: key.clone(),
                uid: "uid-1",
                id: format!("{content}-0123456789abcdef-{tags}"),
                now: &now,
                want: None,
            },
            Case {
                what: "the agent's id under the same key",
                key: key.clone(),
                uid: "uid-1",
                id: agent.clone(),
                now: &now,
                want: None,
            },
            Case {
                what: "garbage",
                key: key.clone(),
                uid: "uid-1",
                id: "x".into(),
                now: &now,
                want: None,
            },
        ];
        for c in cases {
            assert_eq!(
                controller_targets(&c.key, c.uid, &c.id, c.now),
                c.want,
                "{}",
                c.what
            );
        }
        assert!(is_controller_request(&key, "uid-1", &id));
        assert!(
            !is_own_request(&key, "uid-1", &id),
            "a controller id is no agent's id"
        );
        assert!(unchanged_since(&key, "uid-1", &id, &at_request).is_none());
        assert!(!is_controller_request(&key, "uid-1", &agent));
    }

    #[test]
    fn a_controller_id_needs_one_to_nine_containers() {
        let key = HashKey::from_bytes([9; 32]);
        assert_eq!(controller_request_id(&key, "u", CHANGE, &[]), None);
        let names: Vec<String> = (0..=MAX_TAGGED).map(|i| format!("c{i}")).collect();
        let many: Vec<Instance<'_>> = names.iter().map(|n| (n.as_str(), Some("x"))).collect();
        let nine = controller_request_id(&key, "u", CHANGE, &many[..MAX_TAGGED]).unwrap();
        assert!(valid_id(&nine) && nine.len() == 62, "{nine}");
        assert_eq!(controller_request_id(&key, "u", CHANGE, &many), None);
        let none = controller_request_id(&key, "u", CHANGE, &[("app", None)]).unwrap();
        assert_eq!(
            controller_targets(&key, "u", &none, &[("app", None)]),
            Some(vec![true])
        );
    }
}
