#!/usr/bin/env bash
# ib_fake_check.sh MP_COLLS IB_BUILT FAKE_LIB
# The built-in IB network (transports/net/ib/net_ib.c, chosen in transports/net/net_plugin.c) end to end, over the
# verbs fake (COMM_IB_FAKE, for tests only; the module FAKE_LIB, libcomm-verbs-fake.so of tests/fakes/ib_verbs/,
# given to the library as COMM_IB_FAKE_LIB): mp_colls with 4 ranks as threads of one process
# (the fake connects QPs only within a process), COMM_SHM_DISABLE=1 so every connection uses the network.
# Checks, from the INFO log, that
#  - COMM_NET=IB over 2 fake InfiniBand devices: every collective passes, every connection goes
#    "via NET(IB)" and no line mentions the Socket network;
#  - the same with COMM_IB_QPS_PER_CONNECTION=4 (the plugin logs 4 QPs per connection);
#  - COMM_IB_FAKE=2:roce without COMM_NET: the automatic choice is IB (RoCE v2 fake devices);
#  - without COMM_IB_FAKE on a machine with no RDMA device: the automatic choice is Socket, with the INFO
#    line giving the reason; and COMM_NET=IB (or NCCL_NET=ib) there fails init with a WARN saying why, as NCCL
#    does (no fallback);
#  - COMM_IB_FAKE with a module that cannot be loaded: a WARN saying so, IB not used (the automatic choice is
#    Socket with the reason; COMM_NET=IB fails init with the reason);
#  - NCCL_IB_DISABLE=1 over the fake: Socket (INFO line); COMM_IB_DISABLE=1 with COMM_NET=IB fails init.
# IB_BUILT is 1 when the library has the IB transport (COMM_HAVE_IBVERBS); otherwise the test is skipped (77).
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
MP=${1:?usage: ib_fake_check.sh MP_COLLS IB_BUILT FAKE_LIB}
BUILT=${2:?usage: ib_fake_check.sh MP_COLLS IB_BUILT FAKE_LIB}
FAKE=${3:-}
case "$BUILT" in
  1 | ON | TRUE | true | on) ;;
  *)
    echo "ib_fake_check: SKIP: the IB transport is not built (no <infiniband/verbs.h>, or COMM_IB=OFF)"
    exit 77
    ;;
esac
[[ -f $FAKE ]] || { echo "ib_fake_check: FAIL: no verbs fake module '$FAKE' (libcomm-verbs-fake.so)"; exit 1; }
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/ib_fake_check.XXXXXX")
trap 'if [[ -n "${KEEP_LOGS:-}" ]]; then echo "ib_fake_check: logs kept in $LOGS"; else rm -rf "$LOGS"; fi' EXIT
# Only what each run sets below may steer the choice.
unset COMM_NET COMM_NET_PLUGIN COMM_IB_FAKE COMM_IB_FAKE_LIB COMM_IB_HCA COMM_IB_QPS_PER_CONNECTION COMM_DEBUG_SUBSYS \
  COMM_DEBUG_FILE COMM_HOSTID COMM_IB_DISABLE NCCL_NET NCCL_NET_PLUGIN NCCL_IB_HCA NCCL_IB_DISABLE NCCL_HOSTID

fails=0
fail() { echo "ib_fake_check: FAIL: $*"; fails=$((fails + 1)); }

# run NAME [VAR=VALUE...] -- MP_COLLS ARGS: runs mp_colls, its log in $LOGS/NAME.log.
run() {
  local name=$1
  shift
  local envs=()
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  env ${envs[@]+"${envs[@]}"} COMM_SHM_DISABLE=1 COMM_DEBUG=INFO COMM_DEBUG_FILE="$LOGS/$name.log" \
    COMM_TIMEOUT_MS=60000 "$MP" -w 240 "$@" >"$LOGS/$name.out" 2>&1
  local status=$?
  if [[ $status -ne 0 ]] || ! grep -q "^mp_colls: PASS" "$LOGS/$name.out"; then
    fail "$name: mp_colls exited with $status; the end of its output:"
    tail -n 20 "$LOGS/$name.out"
    return 1
  fi
  echo "ib_fake_check: $name: mp_colls passed"
  return 0
}

# run_fails NAME [VAR=VALUE...] -- MP_COLLS ARGS: mp_colls must fail init (exit status 2, a commInitRank
# failure) instead of running anything; its log in $LOGS/NAME.log, its output in $LOGS/NAME.out.
run_fails() {
  local name=$1
  shift
  local envs=()
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  env ${envs[@]+"${envs[@]}"} COMM_SHM_DISABLE=1 COMM_DEBUG=INFO COMM_DEBUG_FILE="$LOGS/$name.log" \
    COMM_TIMEOUT_MS=60000 "$MP" -w 240 "$@" >"$LOGS/$name.out" 2>&1
  local status=$?
  if [[ $status -ne 2 ]] || ! grep -q "commInitRank returned 5 " "$LOGS/$name.out"; then
    fail "$name: mp_colls exited with $status, not an init failure (commInvalidUsage); the end of its output:"
    tail -n 20 "$LOGS/$name.out"
    return 1
  fi
  echo "ib_fake_check: $name: init failed as it must"
  return 0
}

# has NAME [grep options] PATTERN: run NAME's log has a matching line.
has() {
  local name=$1
  shift
  grep -q "$@" "$LOGS/$name.log" 2>/dev/null
}

# check_net NAME NET: connections were logged and every one went through NET(NET).
check_net() {
  local name=$1 net=$2 total good
  total=$(grep -c " via " "$LOGS/$name.log" 2>/dev/null)
  good=$(grep -cF " via NET($net) " "$LOGS/$name.log" 2>/dev/null)
  if [[ ${total:-0} -eq 0 ]]; then
    fail "$name: no connection was logged"
  elif [[ $good -ne $total ]]; then
    fail "$name: $((total - good)) of $total connections did not go via NET($net):"
    grep " via " "$LOGS/$name.log" | grep -vF " via NET($net) " | head -n 3
  else
    echo "ib_fake_check: $name: all $total connections via NET($net)"
  fi
}

# 1. COMM_NET=IB over two fake InfiniBand devices.
if run ib.fake2 COMM_IB_FAKE=2 COMM_IB_FAKE_LIB="$FAKE" COMM_NET=IB -- -np 4 -t; then
  check_net ib.fake2 IB
  has ib.fake2 -F "NET : using the built-in IB network (COMM_NET=IB)" ||
    fail "ib.fake2: no INFO line saying COMM_NET=IB chose the built-in IB network"
  has ib.fake2 -F "NET/IB : 2 device(s) over fake" || fail "ib.fake2: the IB plugin did not find the 2 fake devices"
  if has ib.fake2 -F "Socket"; then
    fail "ib.fake2: the log mentions the Socket network:"
    grep -F "Socket" "$LOGS/ib.fake2.log" | head -n 3
  fi
fi

# 2. The same with 4 QPs per connection.
if run ib.qps4 COMM_IB_FAKE=2 COMM_IB_FAKE_LIB="$FAKE" COMM_NET=IB COMM_IB_QPS_PER_CONNECTION=4 -- -np 4 -t; then
  check_net ib.qps4 IB
  has ib.qps4 -E "NET/IB : .* with 4 QP\(s\)" || fail "ib.qps4: no connection logged with 4 QPs"
  if has ib.qps4 -E "with [0-35-9] QP\(s\)"; then fail "ib.qps4: a connection without 4 QPs"; fi
  if has ib.qps4 -F "Socket"; then fail "ib.qps4: the log mentions the Socket network"; fi
fi

# 3. Automatic choice over fake RoCE devices: IB.
if run ib.roce.auto COMM_IB_FAKE=2:roce COMM_IB_FAKE_LIB="$FAKE" -- -np 4 -t -q; then
  check_net ib.roce.auto IB
  has ib.roce.auto -F "NET : using the built-in IB network (automatic" ||
    fail "ib.roce.auto: no INFO line saying the automatic choice was IB"
fi

# 4. Without the fake on a machine with no RDMA device: Socket, with the reason; COMM_NET=IB fails init.
if compgen -G "/sys/class/infiniband/*" >/dev/null; then
  echo "ib_fake_check: this machine has RDMA devices (/sys/class/infiniband): the no-device checks are skipped"
else
  if run socket.auto -- -np 2 -t -q; then
    check_net socket.auto Socket
    has socket.auto -F "NET : using the built-in Socket network (automatic: IB cannot be used: " ||
      fail "socket.auto: no INFO line giving the reason for the automatic choice of Socket"
    echo "ib_fake_check: socket.auto: $(grep -m1 -o "NET : using the built-in Socket network (automatic.*" \
      "$LOGS/socket.auto.log")"
  fi
  if run_fails socket.forced_ib COMM_NET=IB -- -np 2 -t -q; then
    has socket.forced_ib -F "COMM WARN NET : COMM_NET=IB, but IB cannot be used: " ||
      fail "socket.forced_ib: no WARN saying why IB could not be used"
  fi
  if run_fails socket.forced_ib_nccl NCCL_NET=ib -- -np 2 -t -q; then
    has socket.forced_ib_nccl -F "COMM WARN NET : NCCL_NET=ib, but IB cannot be used: " ||
      fail "socket.forced_ib_nccl: no WARN naming NCCL_NET saying why IB could not be used"
  fi
fi

# 5. COMM_IB_FAKE with a module that cannot be loaded: a WARN, and IB is not used.
nolib=$LOGS/no-such-libcomm-verbs-fake.so
if run nolib.auto COMM_IB_FAKE=2 COMM_IB_FAKE_LIB="$nolib" -- -np 2 -t -q; then
  check_net nolib.auto Socket
  has nolib.auto -F "COMM WARN NET/IB : COMM_IB_FAKE=2 but the verbs fake module $nolib cannot be loaded" ||
    fail "nolib.auto: no WARN saying the verbs fake module cannot be loaded"
  has nolib.auto -F "NET : using the built-in Socket network (automatic: IB cannot be used: COMM_IB_FAKE=2 but" ||
    fail "nolib.auto: no INFO line giving the module as the reason for the automatic choice of Socket"
fi
if run_fails nolib.forced_ib COMM_IB_FAKE=2 COMM_IB_FAKE_LIB="$nolib" COMM_NET=IB -- -np 2 -t -q; then
  has nolib.forced_ib -F "COMM WARN NET : COMM_NET=IB, but IB cannot be used: COMM_IB_FAKE=2 but" ||
    fail "nolib.forced_ib: no WARN saying why IB could not be used"
fi

# 6. COMM_IB_DISABLE=1 (NCCL_IB_DISABLE): Socket even where IB could be used; COMM_NET=IB then fails init.
if run ibdisable.auto COMM_IB_FAKE=2 COMM_IB_FAKE_LIB="$FAKE" NCCL_IB_DISABLE=1 -- -np 2 -t -q; then
  check_net ibdisable.auto Socket
  has ibdisable.auto -F "NET : using the built-in Socket network (automatic: NCCL_IB_DISABLE=1 disables IB)" ||
    fail "ibdisable.auto: no INFO line saying NCCL_IB_DISABLE=1 made it Socket"
fi
if run_fails ibdisable.forced COMM_IB_FAKE=2 COMM_IB_FAKE_LIB="$FAKE" COMM_IB_DISABLE=1 COMM_NET=IB -- -np 2 -t -q; then
  has ibdisable.forced -F "COMM WARN NET : COMM_NET=IB, but IB cannot be used: COMM_IB_DISABLE=1 disables it" ||
    fail "ibdisable.forced: no WARN saying COMM_IB_DISABLE=1 disables IB"
fi

if [[ $fails -ne 0 ]]; then
  echo "ib_fake_check: $fails failure(s)"
  exit 1
fi
echo "ib_fake_check: PASS"
