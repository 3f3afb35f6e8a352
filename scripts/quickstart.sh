#!/usr/bin/env bash
# Installs what is missing, builds detafs, records a demo dataset with two
# versions in the embedded default store, and mounts it (DETAFS_DEMO_MNT,
# default ~/detafs-demo).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --release -q
TARGET=${CARGO_TARGET_DIR:-target}
[[ $TARGET = /* ]] || TARGET=$PWD/$TARGET
BIN=$TARGET/release/detafs
# Shell completion and man pages, where bash, zsh, fish and man look.
data=${XDG_DATA_HOME:-$HOME/.local/share}
fish=${XDG_CONFIG_HOME:-$HOME/.config}/fish/completions
mkdir -p "$data/bash-completion/completions" "$data/zsh/site-functions" "$fish"
"$BIN" completions bash > "$data/bash-completion/completions/detafs"
"$BIN" completions zsh > "$data/zsh/site-functions/_detafs"
"$BIN" completions fish > "$fish/detafs.fish"
"$BIN" man "$data/man/man1" 2>/dev/null
demo=$(mktemp -d)
trap 'rm -rf "$demo"' EXIT
mkdir -p "$demo/tables"
printf 'id,city,temp\n1,Oslo,3.5\n2,Lima,19.0\n' > "$demo/tables/weather.csv"
printf '# Demo dataset\nWeather readings.\n' > "$demo/README.md"

"$BIN" dataset list | grep -qx demo || "$BIN" dataset create demo
if [ -z "$("$BIN" log demo)" ]; then
  "$BIN" commit demo --from "$demo" -m "first readings"
  printf '3,Nairobi,24.1\n' >> "$demo/tables/weather.csv"
  "$BIN" commit demo --from "$demo" -m "add Nairobi"
fi
echo "--- the embedded store is encrypted (AES-256); back up its key file (detafs key list names it):"
"$BIN" key list
echo "--- detafs log demo"
"$BIN" log demo
echo "--- detafs diff demo v1 latest --stat"
"$BIN" diff demo v1 latest --stat
echo "--- detafs cat demo latest tables/weather.csv"
"$BIN" cat demo latest tables/weather.csv

mnt=${DETAFS_DEMO_MNT:-$HOME/detafs-demo}
mkdir -p "$mnt"
if ! grep -q " $mnt fuse" /proc/mounts; then
  stat "$mnt" >/dev/null 2>&1 || "$BIN" umount "$mnt"   # stale mount of a killed daemon
  "$BIN" mount demo "$mnt" --daemon >/dev/null
fi
echo
echo "--- mounted at $mnt"
ls -l "$mnt" "$mnt/versions"
echo "--- head $mnt/versions/v1/tables/weather.csv"
head "$mnt/versions/v1/tables/weather.csv"
cat <<EOF

Try:
  cp some-file.csv $mnt/staging/tables/
  cat $mnt/.detafs/status
  echo "my change" > $mnt/.detafs/commit
  ls $mnt/versions
Unmount with: $BIN umount $mnt   (the binary: $BIN)
Shell completion (bash, zsh, fish) and man pages (man detafs; MANPATH=$data/man
if man does not find them) are installed under $data.
EOF
