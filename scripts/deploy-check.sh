#!/usr/bin/env bash
# Checks everything under deploy/ and helm/ (scripts/test.sh runs it as its own step):
#   1. hadolint on deploy/Dockerfile;
#   2. the Helm chart rendered offline once per helm/countersign/ci/*-values.yaml (schema
#      checked, `helm lint --strict`), and every kustomize base and example built;
#   3. every manifest validated against the Kubernetes OpenAPI schemas of the two newest
#      minors kubernetes-validate knows, strictly (unknown fields are errors);
#   4. checkov over all of it and the Dockerfile, failing on any finding not skipped with a
#      reason in scripts/deploy-check/checkov.yaml;
#   5. `countersign check` on the configuration and policy every rendered manifest mounts;
#   6. the image built from deploy/Dockerfile and smoke-tested (scripts/deploy-check/image.sh).
#
#   bash scripts/deploy-check.sh [BINARY]
#
# BINARY defaults to the newer of target/release/countersign and target/debug/countersign:
# the image reuses what the test step built instead of compiling again. The tools go into
# .tools/deploy-venv (pinned in scripts/deploy-check/requirements.txt) and buildah comes from
# apt; a second run reinstalls nothing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
HERE=scripts/deploy-check
VENV="$ROOT/.tools/deploy-venv"
OUT="$ROOT/target/deploy-check"
# Current and previous minor of the newest schemas kubernetes-validate ships.
KUBE_VERSIONS=(1.37.0 1.36.0)

log() { printf 'deploy-check: %s\n' "$*" >&2; }
die() {
	printf 'deploy-check: error: %s\n' "$*" >&2
	exit 1
}
started=$SECONDS

# --- tools ------------------------------------------------------------------------------
mkdir -p "$ROOT/.tools"
if command -v flock >/dev/null 2>&1; then
	exec 8>"$ROOT/.tools/.deploy-install.lock"
	flock 8
fi
stamp="$(sha256sum "$HERE/requirements.txt" | cut -d' ' -f1) $(python3 --version 2>&1)"
if [ "$(cat "$VENV/.countersign-stamp" 2>/dev/null || true)" != "$stamp" ] ||
	! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
	log "installing $HERE/requirements.txt into ${VENV#"$ROOT"/}"
	rm -rf "$VENV"
	python3 -m venv "$VENV"
	PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/pip" install --quiet --no-input -r "$HERE/requirements.txt" >&2
	printf '%s\n' "$stamp" >"$VENV/.countersign-stamp"
fi
need_apt=()
command -v buildah >/dev/null 2>&1 || need_apt+=(buildah)
command -v objcopy >/dev/null 2>&1 || need_apt+=(binutils)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
if [ "${#need_apt[@]}" -gt 0 ]; then
	log "apt-get install ${need_apt[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
exec 8>&-
export PATH="$VENV/bin:$PATH"

rm -rf "$OUT" && mkdir -p "$OUT/manifests"

# --- 1. Dockerfile lint -------------------------------------------------------------------
log "hadolint deploy/Dockerfile"
hadolint deploy/Dockerfile

# --- 2. render and build ----------------------------------------------------------------
log "helm: rendering helm/countersign for each of $(find helm/countersign/ci -name '*-values.yaml' | wc -l) values files"
python "$HERE/render_chart.py" helm/countersign "$OUT/manifests"
grep -q "MCP clients connect to" "$OUT/manifests/helm-ingress.NOTES.txt" || die "NOTES.txt does not print the client URL"
mv "$OUT"/manifests/*.NOTES.txt "$OUT/"

kustomizations=()
for dir in deploy/kustomize/*/; do
	dir="${dir%/}"
	# A Component is built through the example that uses it.
	grep -q '^kind: Component' "$dir/kustomization.yaml" && continue
	kustomizations+=("$dir")
	kubectl kustomize "$dir" >"$OUT/manifests/kustomize-$(basename "$dir").yaml"
done
log "kustomize: built ${kustomizations[*]}"

# --- 3. schema validation ---------------------------------------------------------------
# kubernetes-validate knows the built-in kinds only; the CRD kinds (HTTPRoute, ServiceMonitor)
# are reported and counted, not schema-checked.
documents="$(cat "$OUT"/manifests/*.yaml | grep -c '^kind: ')"
crds="$(cat "$OUT"/manifests/*.yaml | grep -Ec '^apiVersion: (gateway.networking.k8s.io|monitoring.coreos.com)/')"
for version in "${KUBE_VERSIONS[@]}"; do
	log "kubernetes-validate --strict -k $version: $documents manifests in $(ls "$OUT/manifests" | wc -l) files ($crds of CRD kinds, not schema-checked)"
	kubernetes-validate --strict --quiet -k "$version" "$OUT"/manifests/*.yaml 2>&1 |
		{ grep -v "Couldn't find schema for kind \(HTTPRoute\|ServiceMonitor\)" || true; } >"$OUT/validate-$version.log"
	if [ "${PIPESTATUS[0]}" -ne 0 ] || [ -s "$OUT/validate-$version.log" ]; then
		cat "$OUT/validate-$version.log" >&2
		die "manifests do not validate against Kubernetes $version"
	fi
done

# --- 4. policy scan ---------------------------------------------------------------------
mkdir -p "$OUT/scan" && cp "$OUT"/manifests/*.yaml deploy/Dockerfile "$OUT/scan/"
log "checkov over $(ls "$OUT/scan" | wc -l) files"
if ! checkov --config-file "$HERE/checkov.yaml" -d "$OUT/scan" --output cli >"$OUT/checkov.txt" 2>&1; then
	cat "$OUT/checkov.txt" >&2
	die "checkov found problems (fix them, or skip with a reason in $HERE/checkov.yaml)"
fi
grep -E '^(kubernetes|dockerfile) scan results|Passed checks' "$OUT/checkov.txt" | paste - - | sed 's/^/deploy-check: checkov: /' >&2

binary="${1:-}"
if [ -z "$binary" ]; then
	for candidate in target/release/countersign target/debug/countersign; do
		if [ -x "$candidate" ] && { [ -z "$binary" ] || [ "$candidate" -nt "$binary" ]; }; then
			binary="$candidate"
		fi
	done
fi
[ -n "$binary" ] || die "no countersign binary: run cargo build --bin countersign first, or pass one"

# --- 5. the configurations the pods load --------------------------------------------------
# The keys are a Secret (the chart's generated one is used) and the policy may be a ConfigMap
# managed elsewhere: stand-ins for those.
checked=0
keys="$("$binary" keygen)"
while read -r dir; do
	policy="$dir/policy.yaml"
	[ -f "$policy" ] || policy=policies/default.yaml
	dir_keys="$keys"
	[ -f "$dir/signing-keys" ] && dir_keys="$(cat "$dir/signing-keys")"
	if ! COUNTERSIGN_SIGNING_KEYS="$dir_keys" "$binary" check --config "$dir/gateway.yaml" --policy "$policy" \
		>"$dir/check.txt" 2>&1; then
		cat "$dir/check.txt" >&2
		die "$(basename "$dir"): the rendered configuration does not pass countersign check"
	fi
	checked=$((checked + 1))
done < <(python "$HERE/extract_configs.py" "$OUT/manifests" "$OUT/configs")
log "countersign check: $checked rendered configurations valid"

# --- 6. image ---------------------------------------------------------------------------
log "image from $binary"
bash "$HERE/image.sh" "$binary" "$OUT/image"

log "all deploy checks passed in $((SECONDS - started)) s"
