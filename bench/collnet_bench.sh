#!/usr/bin/env bash
# collnet_bench.sh BUILD_DIR [HOSTS] [REPS]: collnet against ring and CollTree where the hosts' links are the
# bound (issue 20). A namespace cluster (scripts/netns_cluster.sh) of HOSTS hosts (default 4) x COLLNET_RPH ranks
# (default 1), every host NIC shaped to COLLNET_RATE (default 1gbit), with COLLNET_SERVERS comm_aggd servers
# (default 2) whose links are COLLNET_SERVER_RATE (default 4x the hosts': they carry every host's shard) so that
# the hosts' own links are the bound; then bench/tuner_check.sh runs allreduce_perf from COLLNET_MIN (default 8 B)
# to COLLNET_MAX (default 256M) with COLLNET_ALGOS forced (default ring, CollTree and collnet; the speed-up
# columns below need ring, colltree and collnet in that order) and with the tuner free, REPS times each interleaved
# (default 3), and prints the median times, the tuner's choice and collnet's speed-up over ring per size.
# Needs root (namespaces). SPDX-License-Identifier: Apache-2.0
set -uo pipefail
build=$(cd "${1:?usage: collnet_bench.sh BUILD_DIR [HOSTS] [REPS]}" && pwd)
hosts=${2:-4}
reps=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
rate=${COLLNET_RATE:-1gbit}
srate=${COLLNET_SERVER_RATE:-4gbit}
export COMM_AGGD_BIN=$build/tools/aggd/comm_aggd COMM_COLLNET_ENABLE=1 COMM_TIMEOUT_MS=120000 COMM_AGGD_TIMEOUT_MS=120000
export TC_ALGOS=${COLLNET_ALGOS:-"ring colltree collnet"} TC_MIN=${COLLNET_MIN:-8} TC_MAX=${COLLNET_MAX:-256M}
export TC_FACTOR=${COLLNET_FACTOR:-4}
export TC_ITERS=${COLLNET_ITERS:-5} TC_TIMEOUT=${COLLNET_TIMEOUT:-1800}
export TC_LAUNCH="$here/../scripts/netns_cluster.sh -q -H $hosts -R ${COLLNET_RPH:-1} -r $rate -D ${COLLNET_SERVERS:-2} -S $srate --"
echo "# collnet_bench: $hosts hosts x ${COLLNET_RPH:-1} ranks, host links $rate, ${COLLNET_SERVERS:-2} comm_aggd servers at $srate"
"$here/tuner_check.sh" "$build" "$reps" | tee /dev/stderr | python3 -c '
import sys
rows = [l for l in sys.stdin if l.startswith("| ") and l[2].isdigit()]
print("# collnet / ring speed-up (ring time / collnet time), and over CollTree")
for l in rows:
    c = [x.strip() for x in l.strip().strip("|").split("|")]
    try:
        size, ring, ct, cn = int(c[0]), float(c[1]), float(c[2]), float(c[3])
        print(f"{size:>11}  vs ring {ring / cn:5.2f}x  vs CollTree {ct / cn:5.2f}x  tuner: {c[5]}")
    except ValueError:
        pass
'
