# netns_preflight.sh: sourced by the network namespace tests (two_hosts.sh, cluster_algos.sh, cluster_nics.sh)
# once they have defined skip MESSAGE (print, exit 77). A namespace test skips only where this machine lacks
# the capability altogether, and says which absence: not root, no iproute2, or `ip netns list` failing. Past
# these checks the test must run: a namespace, veth pair or bridge that cannot be made is a failure (exit 1),
# so a CI machine that cannot make namespaces where it should does not report the tests as skipped and green.
# SPDX-License-Identifier: Apache-2.0
[[ $(id -u) -eq 0 ]] || skip "needs root to make network namespaces (running as uid $(id -u))"
command -v ip >/dev/null 2>&1 || skip "the ip command (iproute2) is not installed"
ip netns list >/dev/null 2>&1 || skip "'ip netns list' fails: no network namespace support (kernel or iproute2)"
