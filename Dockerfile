# syntax=docker/dockerfile:1
# reloadlet image: a static (musl) binary on distroless/static.
#   docker buildx build --platform linux/amd64,linux/arm64 -t IMAGE:TAG .
# The builder runs on the target platform (emulated for a foreign one), so
# each architecture's musl toolchain is native; see docs/install.md.

FROM rust:1-bookworm AS builder
# Set by BuildKit; the build script falls back to uname -m without it.
ARG TARGETARCH
# musl-tools: musl-gcc for ring's C code. Debian's version is fine unpinned.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY hack/build-release.sh hack/build-release.sh
RUN rustup target add "$(hack/build-release.sh --arch "${TARGETARCH:-$(uname -m)}" --print-target)"

# Dependency layer: rebuilt only when the manifests or the lock file change.
COPY Cargo.toml Cargo.lock ./
COPY nodesim/Cargo.toml nodesim/Cargo.toml
RUN hack/build-release.sh --arch "${TARGETARCH:-$(uname -m)}" --deps-only

COPY . .
RUN hack/build-release.sh --arch "${TARGETARCH:-$(uname -m)}" --out /out

# Pin by digest in release pipelines (gcr.io/distroless/static-debian12@sha256:...).
# hadolint ignore=DL3007
FROM gcr.io/distroless/static-debian12:latest
COPY --from=builder /out/reloadlet /reloadlet
# UID 0 on purpose, with every capability dropped but KILL and DAC_READ_SEARCH
# by the DaemonSet: Kubernetes grants added capabilities to root only (no
# ambient capabilities for other users), and no_new_privs
# (allowPrivilegeEscalation: false) ignores file capabilities.
# hadolint ignore=DL3002
USER 0:0
ENTRYPOINT ["/reloadlet"]
