#!/usr/bin/env bash
# README's first command on a fresh stock Debian, as a new user meets it:
# for each suite (DETAFS_CHECK_SUITES, default Debian 12 and 13), a minimal
# root made by debootstrap with the distribution's own python3 (externally
# managed: pip may not install into it, PEP 668) and nothing else, this
# machine's Rust toolchain and this checkout bound in at the same paths (so
# the release build made here is the one the quickstart finds fresh). Runs
# ./scripts/quickstart.sh there with a fresh HOME, then reads the demo
# through its mount and unmounts it. Root only (debootstrap, chroot, mounts).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "check-quickstart.sh needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || {
  apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null
}
cargo build --release -q
repo=$PWD
target=$(realpath "${CARGO_TARGET_DIR:-target}")
cargo_home=$(realpath "${CARGO_HOME:-$HOME/.cargo}")
rustup_home=$(realpath "${RUSTUP_HOME:-$HOME/.rustup}")
work=$(mktemp -d /tmp/detafs-quickstart.XXXXXX)
# Everything mounted below $work, deepest first (the demo's FUSE mount too).
mounts_below() { awk -v w="$work/" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r; }
cleanup() {
  for m in $(mounts_below); do umount -l "$m" 2>/dev/null || true; done
  # A bind of this checkout still attached would let rm reach it: keep all.
  if [ -n "$(mounts_below)" ]; then
    echo "still mounted below $work; left in place: $(mounts_below)" >&2
    return
  fi
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT
bind() { mkdir -p "$2"; mount --bind "$1" "$2"; }
passed=0
for suite in ${DETAFS_CHECK_SUITES:-bookworm trixie}; do
  root=$work/$suite
  debootstrap --variant=minbase --include=python3 "$suite" "$root" http://deb.debian.org/debian >/dev/null
  ls "$root"/usr/lib/python3*/EXTERNALLY-MANAGED >/dev/null  # the stock, PEP 668 python3
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  bind /proc "$root/proc"
  bind /dev "$root/dev"
  bind /sys "$root/sys"
  bind "$repo" "$root$repo"
  case "$target" in "$repo"/*) ;; *) bind "$target" "$root$target" ;; esac
  bind "$cargo_home" "$root$cargo_home"
  bind "$rustup_home" "$root$rustup_home"
  demo=/home/new/detafs-demo
  chroot "$root" env -i HOME=/home/new TERM=dumb LANG=C.UTF-8 \
    PATH="$cargo_home/bin:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin" \
    CARGO_HOME="$cargo_home" RUSTUP_HOME="$rustup_home" CARGO_TARGET_DIR="$target" \
    bash -euc "mkdir -p /home/new && cd '$repo' && ./scripts/quickstart.sh >/home/new/quickstart.log 2>&1 || { cat /home/new/quickstart.log; exit 1; }
      grep -q Nairobi $demo/versions/latest/tables/weather.csv
      ls $demo/versions | grep -qx v2
      grep -q 'created the embedded store' /home/new/quickstart.log
      grep -q 'back it up' /home/new/quickstart.log
      test -s /home/new/.local/share/man/man1/detafs-commit.1
      grep -q _detafs /home/new/.local/share/bash-completion/completions/detafs
      '$target/release/detafs' umount $demo"
  echo "quickstart on a fresh Debian $suite: ok"
  passed=$((passed + 1))
done
echo "$passed passed, 0 failed: README's quickstart on fresh Debian roots"
