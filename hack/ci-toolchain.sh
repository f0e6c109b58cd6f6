#!/usr/bin/env bash
# The Rust toolchain of the Dockerfile's builder stage (rust:X.Y.Z-bookworm), with clippy,
# rustfmt and both static musl targets, made the default (GitHub's runners have rustup).
set -euo pipefail
cd "$(dirname "$0")/.."
version="$(sed -n 's/^FROM rust:\([0-9.]*\)-.* AS builder$/\1/p' Dockerfile)"
[[ -n "$version" ]] || { echo "ci-toolchain: no rust:X.Y.Z builder in the Dockerfile" >&2; exit 1; }
rustup toolchain install "$version" --profile minimal --component clippy,rustfmt \
  --target x86_64-unknown-linux-musl,aarch64-unknown-linux-musl
rustup default "$version"
