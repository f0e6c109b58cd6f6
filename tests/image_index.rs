//! The archive hack/build-image.sh saves, read as an OCI image layout without any container
//! tool: one image index with linux/amd64 and linux/arm64, each platform's image holding only
//! its own static binary and the CA bundle, with the user, entrypoint and
//! `org.opencontainers.image.*` labels the chart and scanners rely on; and the CycloneDX SBOM
//! attached to the index as an OCI 1.1 referrer, listing every crate compiled into either
//! binary (as the binary's own cargo-auditable dependency list names them) with its version
//! and license.
//!
//! Skips in one line where the archive is missing; `RELOADLET_REQUIRE_IMAGE=1` (hack/test.sh)
//! makes that a failure instead.

use test_support::wait;

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn archive() -> Option<PathBuf> {
    let out = Command::new(repo().join("hack/build-image.sh"))
        .arg("--print-archive")
        .output()
        .expect("hack/build-image.sh --print-archive");
    assert!(out.status.success());
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if path.exists() {
        return Some(path);
    }
    let why = format!("no image at {} (hack/build-image.sh)", path.display());
    assert!(
        std::env::var("RELOADLET_REQUIRE_IMAGE").as_deref() != Ok("1"),
        "RELOADLET_REQUIRE_IMAGE=1 but {why}"
    );
    wait::skipped(why);
    None
}

/// The archive unpacked into a temp dir.
struct Layout {
    dir: tempfile::TempDir,
}

impl Layout {
    fn open(archive: &Path) -> Layout {
        let dir = tempfile::tempdir().unwrap();
        run(Command::new("tar")
            .arg("-xf")
            .arg(archive)
            .arg("-C")
            .arg(dir.path()));
        Layout { dir }
    }

    fn blob_path(&self, digest: &str) -> PathBuf {
        let (algo, hex) = digest.split_once(':').expect("algo:hex");
        self.dir.path().join("blobs").join(algo).join(hex)
    }

    /// The blob's bytes, after checking they hash to its digest.
    fn blob(&self, digest: &str) -> Vec<u8> {
        use sha2::Digest;
        let bytes = std::fs::read(self.blob_path(digest)).unwrap();
        assert_eq!(
            format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes))),
            digest
        );
        bytes
    }

    fn json(&self, digest: &str) -> Value {
        serde_json::from_slice(&self.blob(digest)).unwrap()
    }

    fn index_json(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.dir.path().join("index.json")).unwrap()).unwrap()
    }

    /// The files of a layer (paths without the leading `./`), unpacked under `dest`.
    fn unpack_layer(&self, digest: &str, dest: &Path) -> BTreeSet<String> {
        std::fs::create_dir_all(dest).unwrap();
        run(Command::new("tar")
            .arg("-xf")
            .arg(self.blob_path(digest))
            .arg("-C")
            .arg(dest));
        let mut files = BTreeSet::new();
        walk(dest, dest, &mut files);
        files
    }
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(root, &p, out);
        } else {
            out.insert(p.strip_prefix(root).unwrap().display().to_string());
        }
    }
}

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `image.repository` of the chart's values and its appVersion: `REPO:APPVERSION`.
fn chart_image() -> String {
    let values =
        std::fs::read_to_string(repo().join("deploy/chart/reloadlet/values.yaml")).unwrap();
    let repository = values
        .lines()
        .find_map(|l| l.strip_prefix("  repository: "))
        .expect("image.repository");
    let chart = std::fs::read_to_string(repo().join("deploy/chart/reloadlet/Chart.yaml")).unwrap();
    let app_version = chart
        .lines()
        .find_map(|l| l.strip_prefix("appVersion: "))
        .expect("appVersion")
        .trim_matches('"');
    assert_eq!(app_version, env!("CARGO_PKG_VERSION"));
    format!("{}:{app_version}", repository.trim())
}

/// `(e_machine, the named section's bytes)` of an ELF64 little-endian file.
fn elf_section(bytes: &[u8], name: &str) -> (u16, Option<Vec<u8>>) {
    let u16_at = |o: usize| u16::from_le_bytes(bytes[o..o + 2].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&bytes[..4], b"\x7fELF");
    let (shoff, shentsize, shnum, shstrndx) = (
        u64_at(0x28),
        u16_at(0x3a) as usize,
        u16_at(0x3c) as usize,
        u16_at(0x3e) as usize,
    );
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18);
    let section = (0..shnum).find_map(|i| {
        let h = header(i);
        let start = strtab + u32_at(h) as usize;
        let end = start + bytes[start..].iter().position(|b| *b == 0)?;
        (&bytes[start..end] == name.as_bytes()).then(|| {
            let (off, size) = (u64_at(h + 0x18), u64_at(h + 0x20));
            bytes[off..off + size].to_vec()
        })
    });
    (u16_at(0x12), section)
}

/// The packages cargo-auditable embedded (`.dep-v0`: zlib-compressed JSON) that are compiled
/// into the binary: `name -> versions`, build-time-only packages (proc macros, build scripts)
/// and the root package left out.
fn compiled_in(binary: &[u8]) -> BTreeMap<String, BTreeSet<String>> {
    let (_, section) = elf_section(binary, ".dep-v0");
    let compressed = section.expect("a .dep-v0 section: the binary was built with cargo auditable");
    // zlib: Python's, as the repository has no inflate crate of its own.
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import sys, zlib; sys.stdout.buffer.write(zlib.decompress(sys.stdin.buffer.read()))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&compressed).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let deps: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in deps["packages"].as_array().unwrap() {
        if p["kind"] == "build" || p["root"] == true {
            continue;
        }
        map.entry(p["name"].as_str().unwrap().to_string())
            .or_default()
            .insert(p["version"].as_str().unwrap().to_string());
    }
    map
}

#[test]
fn the_archive_is_one_index_of_two_platforms_with_an_attached_sbom() {
    let Some(archive) = archive() else { return };
    let layout = Layout::open(&archive);
    assert_eq!(
        std::fs::read_to_string(layout.dir.path().join("oci-layout")).unwrap(),
        r#"{"imageLayoutVersion": "1.0.0"}"#
    );
    let index_json = layout.index_json();
    let entries = index_json["manifests"].as_array().unwrap();
    assert_eq!(
        entries.len(),
        2,
        "the image index and the SBOM: {entries:?}"
    );
    let index_entry = entries
        .iter()
        .find(|m| m["mediaType"] == "application/vnd.oci.image.index.v1+json")
        .expect("an image index");
    assert_eq!(
        index_entry["annotations"]["org.opencontainers.image.ref.name"],
        chart_image().as_str(),
        "named as the chart pulls it"
    );
    let index_digest = index_entry["digest"].as_str().unwrap();
    let index = layout.json(index_digest);

    // Each platform's image.
    let revision = String::from_utf8(
        run(Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(repo()))
        .stdout,
    )
    .unwrap();
    let mut platforms = BTreeSet::new();
    let mut binaries = Vec::new();
    let unpacked = tempfile::tempdir().unwrap();
    for m in index["manifests"].as_array().unwrap() {
        let arch = m["platform"]["architecture"].as_str().unwrap().to_string();
        assert_eq!(m["platform"]["os"], "linux");
        platforms.insert(arch.clone());
        let manifest = layout.json(m["digest"].as_str().unwrap());
        let config = layout.json(manifest["config"]["digest"].as_str().unwrap());
        assert_eq!(config["os"], "linux");
        assert_eq!(config["architecture"], arch.as_str());
        let c = &config["config"];
        assert_eq!(c["User"], "0:0", "{arch}");
        assert_eq!(c["Entrypoint"], serde_json::json!(["/reloadlet"]), "{arch}");
        let labels = &c["Labels"];
        let label = |k: &str| {
            labels[format!("org.opencontainers.image.{k}")]
                .as_str()
                .unwrap_or("")
                .to_string()
        };
        assert_eq!(label("version"), env!("CARGO_PKG_VERSION"), "{arch}");
        assert_eq!(label("licenses"), "Apache-2.0", "{arch}");
        assert_eq!(
            label("source"),
            "https://github.com/reloadlet/reloadlet",
            "{arch}"
        );
        assert_eq!(label("title"), "reloadlet", "{arch}");
        // The revision built (hack/test.sh builds the image from the commit under test).
        assert!(
            label("revision").len() == 40
                && label("revision").chars().all(|c| c.is_ascii_hexdigit()),
            "{arch}: revision {:?}",
            label("revision")
        );
        if std::env::var("RELOADLET_REQUIRE_IMAGE").as_deref() == Ok("1") {
            assert_eq!(label("revision"), revision.trim(), "{arch}");
        }
        let dest = unpacked.path().join(&arch);
        let mut files = BTreeSet::new();
        for layer in manifest["layers"].as_array().unwrap() {
            files.extend(layout.unpack_layer(layer["digest"].as_str().unwrap(), &dest));
        }
        assert_eq!(
            files,
            BTreeSet::from([
                "etc/ssl/certs/ca-certificates.crt".to_string(),
                "reloadlet".to_string()
            ]),
            "{arch}: only the binary and the CA bundle"
        );
        let binary = std::fs::read(dest.join("reloadlet")).unwrap();
        let (machine, _) = elf_section(&binary, ".dep-v0");
        let want = match arch.as_str() {
            "amd64" => 62,  // EM_X86_64
            "arm64" => 183, // EM_AARCH64
            other => panic!("unexpected platform {other}"),
        };
        assert_eq!(machine, want, "{arch}: the binary's ELF machine");
        binaries.push((arch, binary));
    }
    assert_eq!(
        platforms,
        BTreeSet::from(["amd64".to_string(), "arm64".to_string()])
    );

    // The SBOM: an artifact whose subject is the index.
    let sbom_entry = entries
        .iter()
        .find(|m| m["artifactType"] == "application/vnd.cyclonedx+json")
        .expect("the SBOM listed in index.json");
    let artifact = layout.json(sbom_entry["digest"].as_str().unwrap());
    assert_eq!(artifact["artifactType"], "application/vnd.cyclonedx+json");
    assert_eq!(artifact["subject"]["digest"], index_digest);
    assert_eq!(
        artifact["config"]["mediaType"],
        "application/vnd.oci.empty.v1+json"
    );
    let layers = artifact["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    let sbom = layout.json(layers[0]["digest"].as_str().unwrap());
    assert_eq!(sbom["bomFormat"], "CycloneDX");
    assert_eq!(
        sbom["metadata"]["component"]["name"], "reloadlet",
        "the SBOM describes reloadlet"
    );
    assert_eq!(
        sbom["metadata"]["component"]["version"],
        env!("CARGO_PKG_VERSION")
    );
    // The same file beside the archive.
    let beside = archive.with_extension("cdx.json");
    assert_eq!(
        serde_json::from_slice::<Value>(&std::fs::read(&beside).unwrap()).unwrap(),
        sbom
    );
    let mut listed: BTreeMap<(String, String), bool> = BTreeMap::new();
    for c in sbom["components"].as_array().unwrap() {
        let licensed = c["licenses"].as_array().is_some_and(|ls| {
            ls.iter().any(|l| {
                l["expression"].as_str().is_some_and(|e| !e.is_empty())
                    || l["license"]["id"].as_str().is_some_and(|e| !e.is_empty())
                    || l["license"]["name"].as_str().is_some_and(|e| !e.is_empty())
            })
        });
        listed.insert(
            (
                c["name"].as_str().unwrap().to_string(),
                c["version"].as_str().unwrap_or("").to_string(),
            ),
            licensed,
        );
    }
    for (arch, binary) in &binaries {
        let compiled = compiled_in(binary);
        assert!(compiled.len() > 100, "{arch}: {} crates", compiled.len());
        for (name, versions) in &compiled {
            for v in versions {
                match listed.get(&(name.clone(), v.clone())) {
                    Some(true) => {}
                    Some(false) => panic!("{arch}: {name} {v} is in the SBOM without a license"),
                    None => panic!("{arch}: {name} {v} is compiled in but not in the SBOM"),
                }
            }
        }
    }
}
