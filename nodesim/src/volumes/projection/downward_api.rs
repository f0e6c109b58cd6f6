//! Downward API files: the fields a `downwardAPI` item writes, formatted as the kubelet
//! formats them (pkg/fieldpath/fieldpath.go, `ExtractFieldPathAsString`, `FormatMap`).

use super::*;

/// The content of a downward API file for `field_path`.
pub fn downward_api_field(pod: &Pod, field_path: &str) -> Result<Vec<u8>, ProjectionError> {
    let meta = &pod.metadata;
    let empty = BTreeMap::new();
    let labels = meta.labels.as_ref().unwrap_or(&empty);
    let annotations = meta.annotations.as_ref().unwrap_or(&empty);
    let spec = pod.spec.as_ref();
    let text = match field_path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(labels),
        "metadata.annotations" => format_map(annotations),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        other => {
            let subscript = |prefix: &str| {
                other
                    .strip_prefix(prefix)
                    .and_then(|r| r.strip_prefix("['"))
                    .and_then(|r| r.strip_suffix("']"))
            };
            if let Some(key) = subscript("metadata.labels") {
                labels.get(key).cloned().unwrap_or_default()
            } else if let Some(key) = subscript("metadata.annotations") {
                annotations.get(key).cloned().unwrap_or_default()
            } else {
                return Err(ProjectionError::UnsupportedField(other.to_owned()));
            }
        }
    };
    Ok(text.into_bytes())
}

/// `fieldpath.FormatMap`: sorted `key="value"` lines (Go `%q`), no trailing newline.
pub fn format_map(map: &BTreeMap<String, String>) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Go's `strconv.Quote` for valid UTF-8.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
