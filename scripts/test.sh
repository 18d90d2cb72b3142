#!/usr/bin/env bash
# The project's one test command (CI runs it through .ci/run):
# install the test tools, prove the MCP peers work, then format check, lints,
# build the binaries the end-to-end tests spawn, check the image and the Kubernetes manifests
# built from them (scripts/deploy-check.sh), and run every test.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

step() { printf '\n==> %s\n' "$*" >&2; }

step "install test tools"
bash scripts/install-test-tools.sh
# shellcheck source=/dev/null
. .tools/env.sh

if [ -n "${CI:-}" ]; then
	# A fresh clone builds once; incremental artifacts would only cost time and disk.
	export CARGO_INCREMENTAL=0
fi
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"

step "cargo fmt --check"
cargo fmt --all -- --check

step "MCP peers self-test"
bash scripts/peers-selftest.sh

step "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo build --bins"
cargo build --workspace --bins

# The image is built from the binary just compiled, not compiled again.
step "deploy checks (image, kustomize, Helm chart)"
bash scripts/deploy-check.sh target/debug/countersign

step "cargo test"
cargo test --workspace
