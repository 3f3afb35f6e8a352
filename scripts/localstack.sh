#!/usr/bin/env bash
# Installs (once) and starts LocalStack's S3 (and KMS) on 127.0.0.1:4566 without docker,
# unless one already answers there. The S3 tests and benchmarks run against it:
# it is the S3 server runnable here that honours conditional create under races.
# Prints nothing on success; exits non-zero with LocalStack's log otherwise.
# LOCALSTACK_LISTEN, LOCALSTACK_DATA and LOCALSTACK_PIDFILE let a test run a
# second one (in a network namespace of its own).
set -euo pipefail
LISTEN=${LOCALSTACK_LISTEN:-127.0.0.1:4566}
DATA=${LOCALSTACK_DATA:-/var/tmp/localstack-s3}
PIDFILE=${LOCALSTACK_PIDFILE:-/tmp/localstack.pid}
ENDPOINT=http://127.0.0.1:${LISTEN##*:}
# S3, and KMS for the server-side encryption tests.
up() { curl -fs "$ENDPOINT/_localstack/health" 2>/dev/null | grep -q "\"$1\": \"\\(running\\|available\\)\""; }
healthy() { up s3 && up kms; }
healthy && exit 0
# One of ours without KMS (an older script's): replaced.
if up s3 && [ -f "$PIDFILE" ]; then
  kill "$(cat "$PIDFILE")" 2>/dev/null || true
  for _ in $(seq 1 50); do up s3 || break; sleep 0.2; done
fi

command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl >/dev/null; }
PYROOT=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
PY=$PYROOT/versions/3.13.0/bin/python
[ -x "$PY" ] || { echo "LocalStack needs Python 3.13 at $PY (pyenv install 3.13.0)" >&2; exit 1; }
VENV=${LOCALSTACK_VENV:-/opt/localstack-venv}
if ! [ -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import localstack' 2>/dev/null; then
  echo "installing LocalStack into $VENV" >&2
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  # Without these pins localstack-core installs, then fails to start with
  # "No component plugins found".
  "$VENV/bin/pip" install -q --disable-pip-version-check \
    "localstack-core[runtime]==2026.3.0" "cbor2<6" "pyopenssl<25" "cryptography<45" \
    "service_identity<24.3" "joserfc<1.1"
fi
mkdir -p "$DATA"
GATEWAY_LISTEN=$LISTEN SERVICES=s3,kms EAGER_SERVICE_LOADING=1 DISABLE_EVENTS=1 \
SKIP_SSL_CERT_DOWNLOAD=1 LOCALSTACK_VOLUME_DIR=$DATA FILESYSTEM_ROOT=$DATA \
  setsid nohup "$VENV/bin/python" -m localstack.runtime.main >"$DATA/localstack.log" 2>&1 </dev/null &
echo $! >"$PIDFILE"
for _ in $(seq 1 300); do
  healthy && exit 0
  kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break
  sleep 0.2
done
echo "LocalStack did not start:" >&2
cat "$DATA/localstack.log" >&2
exit 1
