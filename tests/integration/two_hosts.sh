#!/usr/bin/env bash
# two_hosts.sh MP_COLLS: two "hosts" on one machine. Two network namespaces joined by a veth pair
# (10.231.0.1/24 and 10.231.0.2/24, only inside the namespaces), 2 ranks of mp_colls in each, launched the
# way a launcher does (COMM_ROOT, COMM_RANK, COMM_NRANKS). libcomm tells hosts apart by hostname + boot id +
# network namespace, so ranks in one namespace must connect through SHM and ranks in different namespaces
# through NET (socket); the INFO logs say which.
# Exit 0: all ranks passed and the transports were the expected ones; 1: fail (also namespaces or veths that
# cannot be made on a machine that can make them); 77: skipped for a named absence (netns_preflight.sh: not
# root, no iproute2, no ip netns).
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail

MP=${1:?usage: two_hosts.sh path/to/mp_colls}
HERE=$(cd "$(dirname "$0")" && pwd)
skip() { echo "two_hosts: SKIP: $*"; exit 77; }
fail() { echo "two_hosts: FAIL: $*"; exit 1; }

. "$HERE/netns_preflight.sh"
[[ -x "$MP" ]] || fail "$MP is not an executable"

NS0=lc-h0-$$
NS1=lc-h1-$$
IF0=lcv0-$$ # interface names: at most 15 characters
IF1=lcv1-$$
ADDR0=10.231.0.1
ADDR1=10.231.0.2
PORT=$((20000 + $$ % 30000))
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/two_hosts.XXXXXX")
PIDS=()

cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  ip netns del "$NS0" 2>/dev/null
  ip netns del "$NS1" 2>/dev/null
  if [[ -n "${KEEP_LOGS:-}" ]]; then echo "two_hosts: logs kept in $LOGS"; else rm -rf "$LOGS"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Namespaces of earlier runs of this script that were killed before their trap ran (e.g. a ctest timeout
# sends SIGKILL): their names end with the pid of a script that no longer exists.
for ns in $(ip netns list 2>/dev/null | grep -oE '^lc-h[01]-[0-9]+'); do
  kill -0 "${ns##*-}" 2>/dev/null || ip netns del "$ns" 2>/dev/null
done

# Root with ip netns (netns_preflight.sh): not being able to make one is a failure, with ip's own message.
ip netns add "$NS0" || fail "cannot create a network namespace as root although 'ip netns list' works"
ip netns add "$NS1" || fail "cannot create the second namespace"
ip -n "$NS0" link add "$IF0" type veth peer name "$IF1" netns "$NS1" || fail "cannot create the veth pair"
ip -n "$NS0" addr add "$ADDR0/24" dev "$IF0" || fail "address in $NS0"
ip -n "$NS1" addr add "$ADDR1/24" dev "$IF1" || fail "address in $NS1"
for ns in "$NS0" "$NS1"; do ip -n "$ns" link set lo up || fail "lo up in $ns"; done
ip -n "$NS0" link set "$IF0" up || fail "$IF0 up"
ip -n "$NS1" link set "$IF1" up || fail "$IF1 up"

NRANKS=4
echo "two_hosts: $NS0 ($ADDR0, ranks 0 1) <-> $NS1 ($ADDR1, ranks 2 3), root $ADDR0:$PORT"
for rank in 0 1 2 3; do
  if [[ $rank -lt 2 ]]; then ns=$NS0; ifname=$IF0; else ns=$NS1; ifname=$IF1; fi
  ip netns exec "$ns" env COMM_ROOT="$ADDR0:$PORT" COMM_RANK=$rank COMM_NRANKS=$NRANKS \
    COMM_SOCKET_IFNAME="$ifname" COMM_DEBUG=INFO COMM_TIMEOUT_MS=60000 \
    "$MP" -w 240 >"$LOGS/rank$rank.log" 2>&1 &
  PIDS+=($!)
done

status=0
for rank in 0 1 2 3; do
  if ! wait "${PIDS[$rank]}"; then
    echo "two_hosts: rank $rank failed; the end of its log:"
    tail -n 30 "$LOGS/rank$rank.log"
    status=1
  fi
done
PIDS=()
[[ $status -eq 0 ]] || fail "some ranks failed"
for rank in 0 1 2 3; do
  grep -q "mp_colls: rank $rank: PASS" "$LOGS/rank$rank.log" || fail "rank $rank did not report PASS"
done

# Every connection of the 4-rank communicator, logged as "rank A -> rank B via SHM|NET(...)", must use SHM
# within a namespace and NET across. Lines after mp_colls' split marker belong to split children, whose
# ranks are numbered differently: leave them out.
host() { echo $(($1 / 2)); }
nshm=0
nnet=0
while read -r a b via; do
  if [[ $(host "$a") -eq $(host "$b") ]]; then want=SHM; else want=NET; fi
  [[ "$via" == "$want" ]] || fail "rank $a -> rank $b went via $via, expected $want"
  if [[ "$via" == SHM ]]; then nshm=$((nshm + 1)); else nnet=$((nnet + 1)); fi
done < <(for f in "$LOGS"/rank*.log; do sed '/^mp_colls: commSplit tests/q' "$f"; done | grep -oE 'rank [0-9]+ -> rank [0-9]+ via [A-Z]+' |
  sed -E 's/rank ([0-9]+) -> rank ([0-9]+) via ([A-Z]+)/\1 \2 \3/')
grep -h "via SHM" "$LOGS"/rank*.log | head -n 2
grep -h "via NET" "$LOGS"/rank*.log | head -n 2
[[ $nshm -gt 0 ]] || fail "no connection via SHM logged between ranks of one namespace"
[[ $nnet -gt 0 ]] || fail "no connection via NET logged between the namespaces"
echo "two_hosts: PASS ($nshm connections via SHM within a namespace, $nnet via NET across)"
