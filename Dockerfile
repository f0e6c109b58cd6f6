# syntax=docker/dockerfile:1
# reloadlet image: a static (musl) binary on an empty base (scratch).
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" -t IMAGE:TAG .
# The builder runs on the target platform (emulated for a foreign one), so
# each architecture's musl toolchain is native; see docs/install.md. Without
# Docker, hack/build-image.sh cross-compiles both platforms on one amd64 host
# (docs/arm64.md) and builds only the runtime stage below.
# Base images are pinned to version tags (hack/check-manifests.sh checks it);
# bump the Rust one with the toolchain. Release pipelines may add a digest.

FROM rust:1.95.0-bookworm AS builder
# Set by BuildKit; the build script falls back to uname -m without it.
ARG TARGETARCH
# musl-tools: musl-gcc for ring's C code. Debian's version is fine unpinned.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY hack/build-release.sh hack/cargo-tools.sh hack/
RUN rustup target add "$(hack/build-release.sh --arch "${TARGETARCH:-$(uname -m)}" --print-target)"
# cargo-auditable (crates.io, --locked): the binary carries its dependency list.
RUN hack/cargo-tools.sh cargo-auditable
# BuildKit passes it through (docs: "SOURCE_DATE_EPOCH"); hack/build-release.sh otherwise
# takes the commit's time, and 0 without a git checkout.
ARG SOURCE_DATE_EPOCH

# Dependency layer: rebuilt only when the manifests or the lock file change.
COPY Cargo.toml Cargo.lock ./
COPY nodesim/Cargo.toml nodesim/Cargo.toml
COPY bench-support/Cargo.toml bench-support/Cargo.toml
COPY test-support/Cargo.toml test-support/Cargo.toml
RUN hack/build-release.sh --arch "${TARGETARCH:-$(uname -m)}" --deps-only

COPY . .
RUN hack/build-release.sh --arch "${TARGETARCH:-$(uname -m)}" --out /out

# The binary is static and needs nothing from a base image: no libc, no shell,
# no passwd entry (numeric USER below). distroless/static, the usual choice,
# publishes no version tags (only latest/nonroot/debug and digests), so the
# runtime stage starts empty. The CA bundle is only for a kubeconfig outside
# the cluster: in a pod the agent trusts the service account's ca.crt.
# hack/build-image.sh builds this stage alone (--target runtime), offline, with a local
# directory standing in for the builder stage.
FROM scratch AS runtime
ARG VERSION=dev
ARG REVISION=""
LABEL org.opencontainers.image.title="reloadlet" \
      org.opencontainers.image.description="Node agent that reloads Kubernetes pods in place (a signal to the main process) or evicts them when their projected ConfigMaps and Secrets change" \
      org.opencontainers.image.source="https://github.com/reloadlet/reloadlet" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=builder /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=builder /out/reloadlet /reloadlet
# UID 0 on purpose, with every capability dropped but KILL and DAC_READ_SEARCH
# by the DaemonSet: Kubernetes grants added capabilities to root only (no
# ambient capabilities for other users), and no_new_privs
# (allowPrivilegeEscalation: false) ignores file capabilities.
# hadolint ignore=DL3002
USER 0:0
ENTRYPOINT ["/reloadlet"]
