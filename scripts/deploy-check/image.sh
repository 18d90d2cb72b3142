#!/usr/bin/env bash
# Builds deploy/Dockerfile with buildah and smoke-tests the image's filesystem under chroot.
#
#   bash scripts/deploy-check/image.sh BINARY WORKDIR
#
# No registry is reachable here and `podman run` is refused by the sandbox (setrlimit), so:
#   - the runtime base is made locally (`buildah from scratch`) from exactly the libraries
#     `ldd BINARY` names, plus /etc/passwd, CA certificates and /tmp — what the distroless
#     cc image holds for it;
#   - the Dockerfile's `build` stage is replaced by `--build-context build=DIR`, a folder with
#     BINARY (the one the test step compiled) at out/countersign. Nothing else differs from a
#     user's `docker build -f deploy/Dockerfile .`;
#   - the image's root filesystem is mounted read-only in a private mount namespace and the
#     gateway runs from it under chroot as the image's USER, with the image's ENTRYPOINT.
# Prints the image size on the last line.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BINARY="$(realpath "$1")"
WORK="$(realpath -m "$2")"
STORE="$ROOT/.tools/containers"
IMAGE=localhost/countersign:check

log() { printf 'deploy-check: image: %s\n' "$*" >&2; }
die() {
	printf 'deploy-check: image: error: %s\n' "$*" >&2
	exit 1
}
# Its own store under .tools, vfs (no overlay mounts needed), so nothing is shared with other
# users of buildah on the machine.
bah() { buildah --root "$STORE/root" --runroot "$STORE/run" --storage-driver vfs "$@"; }

# unshare --mount and chroot need root (CI runs as root).
[ "$(id -u)" -eq 0 ] || die "needs root for buildah's store, unshare --mount and chroot"

rm -rf "$WORK" && mkdir -p "$WORK/binary/out" "$WORK/base" "$WORK/context"

# Debug info only makes the image bigger; the test step's debug build is otherwise the binary.
objcopy --strip-debug "$BINARY" "$WORK/binary/out/countersign"

# --- the runtime base -----------------------------------------------------------------
libs="$(ldd "$BINARY" | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }' | sort -u)"
[ -n "$libs" ] || die "ldd found no libraries in $BINARY (a static binary needs no base: use scratch)"
for lib in $libs; do
	install -D -m 0755 "$(realpath "$lib")" "$WORK/base$lib"
done
install -d -m 1777 "$WORK/base/tmp"
install -d -m 0755 "$WORK/base/etc/ssl/certs" "$WORK/base/home/nonroot"
install -m 0644 /etc/ssl/certs/ca-certificates.crt "$WORK/base/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$WORK/base/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$WORK/base/etc/group"
base_tag="localhost/countersign-runtime-base:$(cd "$WORK/base" && find . -type f -exec sha256sum {} + | sort | sha256sum | cut -c1-16)"
if ! bah inspect --type image "$base_tag" >/dev/null 2>&1; then
	log "making the runtime base $base_tag from: $(echo $libs)"
	ctr="$(bah from scratch)"
	bah copy --quiet "$ctr" "$WORK/base" / >/dev/null
	bah config --user 65532:65532 "$ctr"
	bah commit --quiet --rm "$ctr" "$base_tag" >/dev/null
fi

# --- the image ------------------------------------------------------------------------
# The build stage is replaced, so the main context is never read: an empty folder keeps
# buildah from walking the repository's target/.
log "buildah bud -f deploy/Dockerfile"
bah bud --quiet --pull=never --layers=false \
	--build-context "build=$WORK/binary" \
	--build-arg "RUNTIME_IMAGE=$base_tag" \
	-f "$ROOT/deploy/Dockerfile" -t "$IMAGE" "$WORK/context" >/dev/null
bah push --quiet "$IMAGE" "oci-archive:$WORK/countersign.oci.tar" >/dev/null

user="$(bah inspect --type image --format '{{.OCIv1.Config.User}}' "$IMAGE")"
entrypoint="$(bah inspect --type image --format '{{range .OCIv1.Config.Entrypoint}}{{.}} {{end}}' "$IMAGE")"
[ "$user" = "65532:65532" ] || die "image USER is '$user', not 65532:65532"
[ "$entrypoint" = "/usr/local/bin/countersign " ] || die "image ENTRYPOINT is '$entrypoint'"

# --- smoke test -----------------------------------------------------------------------
ctr="$(bah from --pull=never "$IMAGE")"
rootfs="$(bah mount "$ctr")"
gateway_pid=""
upstream_pid=""
cleanup() {
	[ -z "$gateway_pid" ] || kill "$gateway_pid" 2>/dev/null || true
	[ -z "$upstream_pid" ] || kill "$upstream_pid" 2>/dev/null || true
	wait 2>/dev/null || true
	bah umount "$ctr" >/dev/null 2>&1 || true
	bah rm "$ctr" >/dev/null 2>&1 || true
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

python3 "$ROOT/scripts/deploy-check/fake_upstream.py" "$WORK/upstream.port" "$WORK/upstream.calls" &
upstream_pid=$!
for _ in $(seq 50); do [ -s "$WORK/upstream.port" ] && break; sleep 0.1; done
upstream_port="$(cat "$WORK/upstream.port")"
: >"$WORK/upstream.calls"
mcp_port="$(free_port)"
admin_port="$(free_port)"

# The chroot shares the host's network, so the gateway in it reaches the upstream on loopback.
log "countersign serve from the image's filesystem (read-only, user $user)"
# shellcheck disable=SC2016 # expanded by the inner shell
unshare --mount --propagation private sh -c '
	root="$1"; user="$2"; shift 2
	mount --bind "$root" "$root" && mount -o remount,bind,ro "$root" "$root"
	exec chroot --userspec="$user" "$root" "$@"
' sh "$rootfs" "$user" $entrypoint serve \
	--upstream "http://127.0.0.1:$upstream_port/mcp" \
	--listen "127.0.0.1:$mcp_port" --admin "127.0.0.1:$admin_port" --audit off \
	>"$WORK/gateway.log" 2>&1 &
gateway_pid=$!

for _ in $(seq 100); do
	curl -fsS "http://127.0.0.1:$admin_port/healthz" >/dev/null 2>&1 && break
	kill -0 "$gateway_pid" 2>/dev/null || { cat "$WORK/gateway.log" >&2; die "the gateway exited"; }
	sleep 0.1
done
[ "$(curl -fsS "http://127.0.0.1:$admin_port/healthz")" = "ok" ] || die "/healthz did not answer ok"

mcp() {
	curl -fsS "http://127.0.0.1:$mcp_port/mcp" -H 'Content-Type: application/json' \
		-H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2025-06-18' \
		${session:+-H "Mcp-Session-Id: $session"} -D "$WORK/headers" -d "$1"
}
session=""
mcp '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"smoke","version":"1"}}}' >/dev/null
session="$(awk 'tolower($1) == "mcp-session-id:" { print $2 }' "$WORK/headers" | tr -d '\r')"
mcp '{"jsonrpc":"2.0","method":"notifications/initialized"}' >/dev/null
mcp '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' >/dev/null

read_answer="$(mcp '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"get_item","arguments":{"id":"1"}}}')"
case "$read_answer" in *teapot*) ;; *) die "the read was not forwarded: $read_answer" ;; esac
held_answer="$(mcp '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"delete_item","arguments":{"id":"1"}}}')"
case "$held_answer" in *requires_confirmation*) ;; *) die "the destructive call was not held: $held_answer" ;; esac
[ "$(cat "$WORK/upstream.calls")" = "get_item" ] ||
	die "the upstream saw calls other than the read: $(tr '\n' ' ' <"$WORK/upstream.calls")"
[ "$(curl -fsS -o /dev/null -w '%{http_code}' "http://127.0.0.1:$admin_port/readyz")" = 200 ] || die "/readyz not 200"

# SIGTERM: drain (nothing in flight) and exit 0, as the pod's lifecycle expects.
kill -TERM "$gateway_pid"
status=0
wait "$gateway_pid" || status=$?
gateway_pid=""
[ "$status" -eq 0 ] || { cat "$WORK/gateway.log" >&2; die "the gateway exited $status on SIGTERM"; }
log "ok: /healthz, a read forwarded, a destructive call held and not forwarded, SIGTERM exit 0"

size="$(stat -c %s "$WORK/countersign.oci.tar")"
log "image $IMAGE: $((size / 1024 / 1024)) MiB as an OCI archive ($(bah images --format '{{.Size}}' "$IMAGE") in the store)"
