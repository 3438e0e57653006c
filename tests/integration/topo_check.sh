#!/usr/bin/env bash
# topo_check.sh MP_COLLS TOPO_DIR
# The topology at init, end to end through the public API (mp_colls checks every collective's results):
#  1. COMM_TOPO_FILE=cluster_4x_dgx.xml with 8 ranks on 4 fake hosts (2 each), 2 channels: every rank is
#     placed on the file's host of its node, with a NIC; channel 0's ring enters each node at its first
#     local rank and channel 1's at its second (each through its own NIC), so ring 1 is "1 0 3 2 5 4 7 6";
#     COMM_TOPO_DUMP_FILE writes the loaded topology back byte for byte.
#  2. The discovered topology, dumped by the library, loads back (COMM_TOPO_FILE) and dumps identically.
#  3. A malformed COMM_TOPO_FILE fails init cleanly, with a WARN naming the file and line.
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
MP=${1:?usage: topo_check.sh MP_COLLS TOPO_DIR}
TOPO=${2:?topology directory}
T=$(mktemp -d "${TMPDIR:-/tmp}/topo_check.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "topo_check: FAIL: $*"; exit 1; }

# 1. Loaded cluster file
COMM_TOPO_FILE=$TOPO/cluster_4x_dgx.xml COMM_TOPO_DUMP_FILE=$T/dump1.xml COMM_NCHANNELS=2 COMM_DEBUG=INFO \
  COMM_DEBUG_SUBSYS=TOPO,INIT COMM_DEBUG_FILE="$T/rank.%p.log" "$MP" -w 150 -np 8 -rph 2 -q ||
  fail "mp_colls with COMM_TOPO_FILE failed"
cat "$T"/rank.*.log > "$T/all1.log"
grep -q "topology loaded from $TOPO/cluster_4x_dgx.xml (COMM_TOPO_FILE): 4 host(s)" "$T/all1.log" ||
  fail "no 'topology loaded' line"
# The first communicator of the run (all 8 ranks): every rank on host node/2 with a NIC.
for r in 0 1 2 3 4 5 6 7; do
  h=$((r / 2))
  grep -q "topology: rank $r on host $h (node$h: 2 CPU(s), 8 GPU(s), 8 NIC(s)), node $h, local rank $((r % 2)) of 2, device CPU0, NIC NIC$((r % 2)) mlx5_$((r % 2)) " \
    "$T/all1.log" || fail "rank $r is not placed on host $h with NIC$((r % 2))"
done
grep -q "Ring 00 : 0 1 2 3 4 5 6 7$" "$T/all1.log" || fail "ring 0 is not 0 1 2 3 4 5 6 7"
grep -q "Ring 01 : 1 0 3 2 5 4 7 6$" "$T/all1.log" || fail "ring 1 does not enter each node at its second rank"
cmp -s "$T/dump1.xml" "$TOPO/cluster_4x_dgx.xml" || fail "COMM_TOPO_DUMP_FILE differs from the loaded file"
echo "topo_check: loaded cluster file: placement, rings and dump OK"

# 2. Discovered topology: dump, load, dump again
COMM_TOPO_DUMP_FILE=$T/disc.xml "$MP" -w 60 -np 2 -q >/dev/null || fail "mp_colls (discovery) failed"
[[ -s $T/disc.xml ]] || fail "no dump of the discovered topology"
COMM_TOPO_FILE=$T/disc.xml COMM_TOPO_DUMP_FILE=$T/disc2.xml "$MP" -w 60 -np 2 -q >/dev/null ||
  fail "mp_colls with the dumped topology failed"
cmp -s "$T/disc.xml" "$T/disc2.xml" || fail "discovered -> dump -> load -> dump is not identical"
echo "topo_check: discovered topology round-trips through COMM_TOPO_DUMP_FILE / COMM_TOPO_FILE"

# 3. Malformed file
printf '<topology version="1">\n  <host name="x">\n    <cpu numa="zero"/>\n  </host>\n</topology>\n' > "$T/bad.xml"
COMM_TOPO_FILE=$T/bad.xml COMM_DEBUG=WARN "$MP" -w 30 -np 2 -q > "$T/bad.log" 2>&1 &&
  fail "init succeeded with a malformed COMM_TOPO_FILE"
grep -q "$T/bad.xml:3:" "$T/bad.log" || { cat "$T/bad.log" | head -5; fail "no WARN naming bad.xml line 3"; }
echo "topo_check: malformed COMM_TOPO_FILE fails init with: $(grep -m1 "bad.xml:3:" "$T/bad.log" | sed 's/.*WARN //')"
echo "topo_check: PASS"
