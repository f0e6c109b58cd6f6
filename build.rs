//! The release build's code layout: `hack/build-release.sh` names it in
//! `RELOADLET_TEXT_LAYOUT` for the image's static builds, and the `reloadlet` binary is then
//! linked with it (GNU ld reads it as an addition to its own script). Passed here rather than
//! in `RUSTFLAGS`, so that no dependency is built with other flags than the Dockerfile's
//! dependency layer, and so that cargo links again when the script changes
//! (docs/architecture.md, "Code layout: the code that runs, first").

fn main() {
    println!("cargo::rerun-if-env-changed=RELOADLET_TEXT_LAYOUT");
    if let Some(layout) = std::env::var_os("RELOADLET_TEXT_LAYOUT") {
        let layout = std::path::PathBuf::from(layout);
        println!("cargo::rerun-if-changed={}", layout.display());
        println!(
            "cargo::rustc-link-arg-bin=reloadlet=-Wl,-T,{}",
            layout.display()
        );
    }
}
