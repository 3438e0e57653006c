#!/usr/bin/env bash
# Install what building and testing libcomm needs (Debian/Ubuntu). Idempotent: packages already present
# are not touched, and apt is not run at all when everything is installed.
#   --bench   also install the peers the benchmarks compare against (OpenMPI, Gloo)
set -euo pipefail

want=(build-essential cmake pkg-config libhwloc-dev libcmocka-dev iproute2)
for arg in "$@"; do
  case "$arg" in
    --bench) want+=(openmpi-bin libopenmpi-dev libgloo-dev) ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) echo "install_deps.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps.sh: all dependencies present"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_deps.sh: missing ${missing[*]} and apt-get is not available; install them by hand" >&2
  exit 1
fi
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install_deps.sh: missing ${missing[*]}; run as root (or install sudo)" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
echo "install_deps.sh: installing ${missing[*]}"
# Refresh the package lists once, only when they are absent or the install cannot resolve a package.
if ! compgen -G "/var/lib/apt/lists/*_Packages" >/dev/null; then
  "${SUDO[@]}" apt-get update -q
fi
if ! "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"; then
  "${SUDO[@]}" apt-get update -q
  "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
