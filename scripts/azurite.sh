#!/usr/bin/env bash
# Installs (once) and starts Azurite's blob service on 127.0.0.1:10000 (the
# address object_store's emulator mode, AZURE_STORAGE_USE_EMULATOR=true,
# expects) with a container `detafs`, unless one already answers there.
set -euo pipefail
cd "$(dirname "$0")/.."
# Azurite's well-known development account (public, the same everywhere).
ACCOUNT=devstoreaccount1
KEY=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==
# PUT (create) or GET (properties) of the container, signed with the key.
container() {
  python3 - "$1" "$ACCOUNT" "$KEY" <<'PY'
import base64, hashlib, hmac, sys, urllib.request, urllib.error
from email.utils import formatdate
verb, account, key = sys.argv[1:]
date, version = formatdate(usegmt=True), "2021-08-06"
length = ""  # empty when 0, since version 2015-02-21
resource = f"/{account}/{account}/detafs\nrestype:container"
ctype = "application/octet-stream" if verb == "PUT" else ""
signed = f"{verb}\n\n\n{length}\n\n{ctype}\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n{resource}"
sig = base64.b64encode(hmac.new(base64.b64decode(key), signed.encode(), hashlib.sha256).digest()).decode()
req = urllib.request.Request(f"http://127.0.0.1:10000/{account}/detafs?restype=container", method=verb,
    data=b"" if verb == "PUT" else None,
    headers={**({"Content-Type": ctype} if ctype else {}), "x-ms-date": date, "x-ms-version": version, "Authorization": f"SharedKey {account}:{sig}"})
try:
    urllib.request.urlopen(req, timeout=5)
except urllib.error.HTTPError as e:
    if not (verb == "PUT" and e.code == 409):
        sys.exit(f"Azurite: {verb} container: {e.code} {e.read()[:300]!r}")
except OSError as e:
    sys.exit(f"Azurite: {e}")
PY
}
container GET 2>/dev/null && exit 0
DIR=${AZURITE_DIR:-/opt/azurite}
BIN=$DIR/node_modules/.bin/azurite-blob
source scripts/npm-tool.sh
npm_tool "$DIR" azurite@3.35.0
DATA=/var/tmp/azurite-data
rm -rf "$DATA" && mkdir -p "$DATA"
setsid nohup "$BIN" --blobHost 127.0.0.1 --blobPort 10000 --location "$DATA" --silent --disableTelemetry \
  >/var/tmp/azurite.log 2>&1 </dev/null &
for _ in $(seq 1 50); do
  if container PUT 2>/dev/null; then exit 0; fi
  sleep 0.2
done
echo "Azurite did not start:" >&2
container PUT || true
cat /var/tmp/azurite.log >&2
exit 1
