#!/usr/bin/env bash
# Downloads Debian's Vulkan loader package (libvulkan1) into .gl/ (gitignored), for scripts/gpu-bench.sh to
# unpack on a GPU machine that has no Vulkan loader and no network. Run it here, where Debian's package
# registry is reachable, then carry .gl/ along with the repository and target/release/webtensor:
#
#   scripts/fetch-vulkan-loader.sh      # -> .gl/libvulkan1_<version>_amd64.deb
#
# Uses this machine's apt sources (`apt-get download`: no root, no install); runs `apt-get update` first when
# apt knows no candidate for libvulkan1.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gl
cd .gl
if ! apt-cache policy libvulkan1 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    apt-get update -qq
fi
apt-get download libvulkan1
ls -l "$PWD"/libvulkan1_*.deb
