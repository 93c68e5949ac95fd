#!/usr/bin/env bash
# Installs the independent Bluetooth peers the interop tests use into ./.venv: Bumble (a complete Python
# host stack) and rootcanal 1.10.0 (Google's virtual controller; newer wheels need a newer glibc than
# Debian 12 has). Idempotent and quick when already done; safe to run from several processes at once.
set -euo pipefail
cd "$(dirname "$0")/.."
BUMBLE_VERSION="${BUMBLE_VERSION:-0.0.236}"
ROOTCANAL_VERSION="1.10.0"
ZEROCONF_VERSION="${ZEROCONF_VERSION:-0.154.0}"
stamp=".venv/.ocb-peers-${BUMBLE_VERSION}-${ROOTCANAL_VERSION}-zc${ZEROCONF_VERSION}"
[ -f "$stamp" ] && exit 0
exec 9>".venv.lock"
flock 9
[ -f "$stamp" ] && exit 0
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check "bumble==${BUMBLE_VERSION}" "rootcanal==${ROOTCANAL_VERSION}" "zeroconf==${ZEROCONF_VERSION}"
.venv/bin/python -c "import bumble, rootcanal, zeroconf" 
touch "$stamp"
echo "peers installed: bumble ${BUMBLE_VERSION}, rootcanal ${ROOTCANAL_VERSION} (in .venv)"
