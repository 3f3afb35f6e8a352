#!/usr/bin/env bash
# Installs (once) and starts s3rver on 127.0.0.1:4568 with a bucket `liar`,
# unless one already answers there. s3rver ignores If-None-Match and
# overwrites: the tests use it to show that detafs refuses such a store.
set -euo pipefail
answers() { curl -fs http://127.0.0.1:4568/liar >/dev/null 2>&1; }
answers && exit 0
DIR=${S3RVER_DIR:-/opt/s3rver}
BIN=$DIR/node_modules/.bin/s3rver
source "$(dirname "$0")/npm-tool.sh"
npm_tool "$DIR" s3rver@3.7.1
DATA=/var/tmp/s3rver-data
rm -rf "$DATA" && mkdir -p "$DATA"
setsid nohup "$BIN" -d "$DATA" -a 127.0.0.1 -p 4568 --silent --configure-bucket liar \
  >/var/tmp/s3rver.log 2>&1 </dev/null &
for _ in $(seq 1 100); do
  answers && exit 0
  sleep 0.1
done
echo "s3rver did not start:" >&2
cat /var/tmp/s3rver.log >&2
exit 1
