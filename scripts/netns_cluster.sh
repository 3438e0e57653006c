#!/usr/bin/env bash
# netns_cluster.sh: a small cluster on one machine, for multi-host tests and benchmarks.
#
#   scripts/netns_cluster.sh [-H hosts] [-R ranks-per-host] [-n nics-per-host] [-r rate] [-d delay]
#                            [-D aggd-servers] [-S aggd-rate] [-l logdir] [-a] [-q] -- COMMAND [ARGS...]
#
# Makes H network namespaces ("hosts") and one "switch" namespace holding one Linux bridge per rail.
# Host h gets n NICs: NIC i is a veth pair from the host into bridge i, address 10.(240+i).0.(h+1)/24 (rail
# i is its own subnet, as on rail-optimised clusters). With -r, every NIC's egress on both sides is
# shaped to RATE (tc tbf, e.g. 1gbit, 500mbit), and with -d delayed (tc netem, e.g. 50us). Then H x R
# copies of COMMAND run, ranks h*R .. h*R+R-1 in host h, started as a launcher would: COMM_ROOT (rank 0's
# host, NIC 0), COMM_RANK, COMM_NRANKS, and COMM_SOCKET_IFNAME = the NIC of the rank's rail (local rank
# modulo n); with -a, no COMM_SOCKET_IFNAME: the library picks each rank's NICs from the topology it
# discovers in its host (the veths, in NIC order). Every other variable of the caller's environment
# passes through (COMM_ALGO, COMM_DEBUG...).
# With -D K, K more namespaces are aggregation servers (collnet without SHARP switches): server k has one NIC
# into bridge 0, address 10.240.0.(101+k), shaped to -S RATE (default: -r's), and runs COMM_AGGD_BIN (default
# comm_aggd on PATH) --listen ADDR:PORT; once every server says it listens, the ranks get
# COMM_AGGD=addr:port,... Server k's pid is in LOGDIR/aggd<k>.pid and its output in LOGDIR/aggd<k>.log, so a
# test can kill one while the ranks run.
# Output: each rank's stdout+stderr in LOGDIR/rankN.log; rank 0's is printed at the end (all with -q
# off and a failure). Exit: 0 when every rank exits 0; 1 when some rank fails, or a namespace, bridge or
# shaper cannot be made although root and ip netns are there; 77 only for a named absence (not root, no ip,
# no ip netns, no tc). Everything is removed on exit.
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail

H=4 R=2 NICS=1 RATE="" DELAY="" LOGDIR="" QUIET=0 AUTO_NIC=0 NAGGD=0 AGGD_RATE=""
usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while getopts "H:R:n:r:d:D:S:l:aqh" opt; do
  case $opt in
    H) H=$OPTARG ;; R) R=$OPTARG ;; n) NICS=$OPTARG ;; r) RATE=$OPTARG ;; d) DELAY=$OPTARG ;;
    D) NAGGD=$OPTARG ;; S) AGGD_RATE=$OPTARG ;;
    l) LOGDIR=$OPTARG ;; a) AUTO_NIC=1 ;; q) QUIET=1 ;; *) usage ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 ]] || usage
[[ $H -ge 1 && $H -le 16 && $R -ge 1 && $R -le 16 && $NICS -ge 1 && $NICS -le 4 && $NAGGD -ge 0 && $NAGGD -le 8 ]] || {
  echo "netns_cluster: need 1 <= hosts <= 16, 1 <= ranks-per-host <= 16, 1 <= nics <= 4, 0 <= aggd servers <= 8" >&2
  exit 2
}
AGGD_BIN=${COMM_AGGD_BIN:-$(command -v comm_aggd || true)}
[[ $NAGGD -eq 0 || -x "$AGGD_BIN" ]] || { echo "netns_cluster: -D needs COMM_AGGD_BIN (or comm_aggd on PATH)" >&2; exit 2; }

skip() { echo "netns_cluster: SKIP: $*" >&2; exit 77; }
# Once root and ip netns are there, a namespace, bridge or shaper that cannot be made is a failure (with ip's
# own message), never a skip: a machine that should run the test must not report it as skipped.
fail() { echo "netns_cluster: FAIL: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces)"
command -v ip >/dev/null 2>&1 || skip "the ip command (iproute2) is not installed"
ip netns list >/dev/null 2>&1 || skip "ip netns is not available"
if [[ -n "$RATE$DELAY" ]] && ! command -v tc >/dev/null 2>&1; then skip "tc (iproute2) is not installed"; fi

TAG=$$
SW=lcsw-$TAG
host_ns() { echo "lch$1-$TAG"; }
aggd_ns() { echo "lca$1-$TAG"; }
# Interface names: at most 15 characters.
if_host() { echo "lh$1n$2-$TAG"; }  # in host $1, NIC $2
if_sw() { echo "ls$1n$2-$TAG"; }    # its peer, in the switch
addr() { echo "10.$((240 + $2)).0.$(($1 + 1))"; }
PORT=$((20000 + TAG % 30000))
OWN_LOGS=0
if [[ -z "$LOGDIR" ]]; then LOGDIR=$(mktemp -d "${TMPDIR:-/tmp}/netns_cluster.XXXXXX"); OWN_LOGS=1; fi
mkdir -p "$LOGDIR"
PIDS=()

cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for ((h = 0; h < H; h++)); do ip netns del "$(host_ns $h)" 2>/dev/null; done
  for ((k = 0; k < NAGGD; k++)); do ip netns del "$(aggd_ns $k)" 2>/dev/null; done
  ip netns del "$SW" 2>/dev/null
  [[ $OWN_LOGS -eq 1 && -z "${KEEP_LOGS:-}" ]] && rm -rf "$LOGDIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Namespaces left by runs that were killed before their trap ran: their tag is a pid that is gone.
for ns in $(ip netns list 2>/dev/null | grep -oE '^lc(sw|h[0-9]+|a[0-9]+)-[0-9]+'); do
  kill -0 "${ns##*-}" 2>/dev/null || ip netns del "$ns" 2>/dev/null
done

die() { echo "netns_cluster: FAIL: $*" >&2; exit 1; }
ip netns add "$SW" || fail "cannot create a network namespace (ip's message above)"
ip -n "$SW" link set lo up
for ((i = 0; i < NICS; i++)); do
  ip -n "$SW" link add "br$i" type bridge || fail "cannot create a bridge (ip's message above)"
  ip -n "$SW" link set "br$i" up || die "bridge br$i up"
done

shape() { # namespace interface
  [[ -z "$RATE$DELAY" ]] && return 0
  if [[ -n "$DELAY" && -n "$RATE" ]]; then
    ip netns exec "$1" tc qdisc add dev "$2" root handle 1: netem delay "$DELAY" || return 1
    ip netns exec "$1" tc qdisc add dev "$2" parent 1: handle 2: tbf rate "$RATE" burst 256kb latency 50ms || return 1
  elif [[ -n "$DELAY" ]]; then
    ip netns exec "$1" tc qdisc add dev "$2" root netem delay "$DELAY" || return 1
  else
    ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$RATE" burst 256kb latency 50ms || return 1
  fi
}

for ((h = 0; h < H; h++)); do
  ns=$(host_ns $h)
  ip netns add "$ns" || die "cannot create $ns"
  ip -n "$ns" link set lo up
  for ((i = 0; i < NICS; i++)); do
    hi=$(if_host $h $i) si=$(if_sw $h $i)
    ip -n "$ns" link add "$hi" type veth peer name "$si" netns "$SW" || die "veth $hi"
    ip -n "$ns" addr add "$(addr $h $i)/24" dev "$hi" || die "address of $hi"
    ip -n "$ns" link set "$hi" up || die "$hi up"
    ip -n "$SW" link set "$si" master "br$i" || die "$si into br$i"
    ip -n "$SW" link set "$si" up || die "$si up"
    shape "$ns" "$hi" || fail "tc cannot shape $hi (sch_tbf / sch_netem missing? tc's message above)"
    shape "$SW" "$si" || fail "tc cannot shape $si (tc's message above)"
  done
done

# Aggregation servers: a namespace each on bridge 0, started before the ranks, each announcing that it listens.
AGGD_LIST=""
for ((k = 0; k < NAGGD; k++)); do
  ns=$(aggd_ns $k) hi="la${k}n0-$TAG" si="lsa${k}-$TAG" a="10.240.0.$((101 + k))"
  ip netns add "$ns" || die "cannot create $ns"
  ip -n "$ns" link set lo up
  ip -n "$ns" link add "$hi" type veth peer name "$si" netns "$SW" || die "veth $hi"
  ip -n "$ns" addr add "$a/24" dev "$hi" || die "address of $hi"
  ip -n "$ns" link set "$hi" up || die "$hi up"
  ip -n "$SW" link set "$si" master br0 || die "$si into br0"
  ip -n "$SW" link set "$si" up || die "$si up"
  if [[ -n "${AGGD_RATE:-$RATE}" ]]; then
    RATE=${AGGD_RATE:-$RATE} shape "$ns" "$hi" || fail "tc cannot shape $hi"
    RATE=${AGGD_RATE:-$RATE} shape "$SW" "$si" || fail "tc cannot shape $si"
  fi
  ip netns exec "$ns" "$AGGD_BIN" --listen "$a:$((PORT + 1 + k))" >"$LOGDIR/aggd$k.log" 2>&1 &
  echo $! >"$LOGDIR/aggd$k.pid"
  PIDS+=($!)
  AGGD_LIST+="${AGGD_LIST:+,}$a:$((PORT + 1 + k))"
done
for ((k = 0; k < NAGGD; k++)); do
  for ((t = 0; t < 200; t++)); do
    grep -q "listening" "$LOGDIR/aggd$k.log" 2>/dev/null && break
    kill -0 "$(cat "$LOGDIR/aggd$k.pid")" 2>/dev/null || die "aggregation server $k exited: $(cat "$LOGDIR/aggd$k.log")"
    sleep 0.05
  done
  grep -q "listening" "$LOGDIR/aggd$k.log" || die "aggregation server $k did not start listening in 10 s"
done
AGGD_ENV=()
[[ $NAGGD -gt 0 ]] && AGGD_ENV=(COMM_AGGD="$AGGD_LIST")
NSERVERS=${#PIDS[@]}

N=$((H * R))
ROOT="$(addr 0 0):$PORT"
[[ $QUIET -eq 1 ]] || echo "netns_cluster: $H hosts x $R ranks, $NICS NIC(s) per host${RATE:+, $RATE}${DELAY:+, delay $DELAY}${AGGD_LIST:+, aggregation servers $AGGD_LIST}; root $ROOT; logs in $LOGDIR" >&2
for ((rank = 0; rank < N; rank++)); do
  h=$((rank / R)) local=$((rank % R))
  nic=$((local % NICS))
  ifname=(COMM_SOCKET_IFNAME="=$(if_host $h $nic)")
  [[ $AUTO_NIC -eq 1 ]] && ifname=()
  ip netns exec "$(host_ns $h)" env COMM_ROOT="$ROOT" COMM_RANK=$rank COMM_NRANKS=$N \
    ${ifname[@]+"${ifname[@]}"} ${AGGD_ENV[@]+"${AGGD_ENV[@]}"} "$@" >"$LOGDIR/rank$rank.log" 2>&1 &
  PIDS+=($!)
done

status=0
for ((rank = 0; rank < N; rank++)); do
  if ! wait "${PIDS[$((NSERVERS + rank))]}"; then
    echo "netns_cluster: rank $rank failed; the end of its log:" >&2
    tail -n 20 "$LOGDIR/rank$rank.log" >&2
    status=1
  fi
done
PIDS=("${PIDS[@]:0:NSERVERS}") # the aggregation servers, killed by cleanup
cat "$LOGDIR/rank0.log"
exit $status
