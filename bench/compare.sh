#!/usr/bin/env bash
# Compare libcomm's allreduce with its peers on this host: 2 local ranks, float32 sum, 8 B .. 64 MiB.
#   bench/compare.sh BUILD_DIR [REPETITIONS (default 5)] [extra args for every binary, e.g. -n 50]
# Runs, interleaved, REPETITIONS times each: libcomm over shm (allreduce_perf -np 2), libcomm over
# sockets (COMM_SHM_DISABLE=1), OpenMPI default (shared memory), OpenMPI over TCP (--mca btl tcp,self)
# and Gloo ring_chunked over TCP; peers whose binary or launcher is missing are skipped. Prints per size
# the median out-of-place bus bandwidth (GB/s) of each, the libcomm/OpenMPI ratios, and the median
# 8-byte latency (us). Raw outputs stay in the directory printed at the end. Each run is limited to
# COMPARE_TIMEOUT seconds (default 600).
set -u
if [ $# -lt 1 ] || [ ! -d "$1" ]; then
  echo "usage: $0 BUILD_DIR [REPETITIONS] [extra args]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
reps=${2:-5}
shift $(( $# >= 2 ? 2 : 1 ))
common=(-b 8 -e 64M -f 2 "$@")
out=$(mktemp -d /tmp/comm_compare.XXXXXX)
mpirun_cmd=(mpirun --allow-run-as-root --oversubscribe -np 2)

impls=()
declare -A cmd
add() { impls+=("$1"); cmd[$1]="$2"; }
perf="$build/perf/allreduce_perf"
if [ -x "$perf" ]; then
  add libcomm_shm "$perf -np 2 -d float -o sum ${common[*]}"
  add libcomm_socket "env COMM_SHM_DISABLE=1 $perf -np 2 -d float -o sum ${common[*]}"
else
  echo "# $perf not found: libcomm skipped" >&2
fi
if [ -x "$build/bench/mpi_allreduce" ] && command -v mpirun > /dev/null; then
  add ompi_shm "${mpirun_cmd[*]} $build/bench/mpi_allreduce ${common[*]}"
  add ompi_tcp "${mpirun_cmd[*]} --mca btl tcp,self $build/bench/mpi_allreduce ${common[*]}"
else
  echo "# mpi_allreduce or mpirun not found: OpenMPI skipped" >&2
fi
if [ -x "$build/bench/gloo_allreduce" ]; then
  add gloo "$build/bench/gloo_allreduce -np 2 ${common[*]}"
else
  echo "# gloo_allreduce not found: Gloo skipped" >&2
fi
[ ${#impls[@]} -gt 0 ] || { echo "nothing to run" >&2; exit 1; }

failed=0
for ((r = 1; r <= reps; r++)); do
  for i in "${impls[@]}"; do
    echo "# rep $r/$reps: $i" >&2
    if ! timeout "${COMPARE_TIMEOUT:-600}" ${cmd[$i]} > "$out/$i.$r.txt" 2> "$out/$i.$r.err"; then
      echo "# $i (rep $r) failed; see $out/$i.$r.err" >&2
      failed=1
    fi
  done
done

# "impl size busbw time" for every data line of the out-of-place block (time $6). busbw is recomputed
# from size and time (2 ranks: busbw = algbw) for more digits than the tables print.
for i in "${impls[@]}"; do
  for ((r = 1; r <= reps; r++)); do
    awk -v impl="$i" '!/^#/ && NF >= 8 && $1 ~ /^[0-9]+$/ && $6 > 0 { print impl, $1, $1 / ($6 * 1000), $6 }' \
      "$out/$i.$r.txt"
  done
done > "$out/all.txt"

# Medians per (impl, size) of busbw and time.
sort -k1,1 -k2,2n -k3,3g "$out/all.txt" | awk '
  { key = $1 " " $2; n[key]++; bw[key, n[key]] = $3 }
  END { for (k in n) { c = n[k]; m = (c % 2) ? bw[k, (c + 1) / 2] : (bw[k, c / 2] + bw[k, c / 2 + 1]) / 2; print k, m } }
' > "$out/bw_median.txt"
sort -k1,1 -k2,2n -k4,4g "$out/all.txt" | awk '
  { key = $1 " " $2; n[key]++; t[key, n[key]] = $4 }
  END { for (k in n) { c = n[k]; m = (c % 2) ? t[k, (c + 1) / 2] : (t[k, c / 2] + t[k, c / 2 + 1]) / 2; print k, m } }
' > "$out/time_median.txt"

echo "# allreduce, 2 ranks, float32 sum: median busbw (GB/s) over $reps repetitions"
awk -v list="${impls[*]}" '
  BEGIN { ni = split(list, im, " ") }
  { v[$1, $2] = $3; sizes[$2] = 1 }
  END {
    hdr = sprintf("%12s", "size(B)");
    for (j = 1; j <= ni; j++) hdr = hdr sprintf("  %14s", im[j]);
    hdr = hdr sprintf("  %16s  %18s", "shm/ompi_shm", "socket/ompi_tcp");
    print hdr;
    n = 0; for (s in sizes) ss[++n] = s + 0;
    for (a = 1; a <= n; a++) for (b = a + 1; b <= n; b++) if (ss[b] < ss[a]) { t = ss[a]; ss[a] = ss[b]; ss[b] = t }
    for (a = 1; a <= n; a++) {
      s = ss[a]; line = sprintf("%12d", s);
      for (j = 1; j <= ni; j++) line = line sprintf("  %14s", ((im[j], s) in v) ? sprintf("%.4f", v[im[j], s]) : "n/a");
      r1 = ((("libcomm_shm", s) in v) && (("ompi_shm", s) in v) && v["ompi_shm", s] > 0) ? sprintf("%.2f", v["libcomm_shm", s] / v["ompi_shm", s]) : "n/a";
      r2 = ((("libcomm_socket", s) in v) && (("ompi_tcp", s) in v) && v["ompi_tcp", s] > 0) ? sprintf("%.2f", v["libcomm_socket", s] / v["ompi_tcp", s]) : "n/a";
      print line sprintf("  %16s  %18s", r1, r2);
    }
  }' "$out/bw_median.txt"
echo "#"
echo "# 8-byte allreduce latency, median (us)"
for i in "${impls[@]}"; do
  awk -v impl="$i" '$1 == impl && $2 == 8 { printf "%-16s %10.2f\n", impl, $3; found = 1 }
                    END { if (!found) printf "%-16s %10s\n", impl, "n/a" }' "$out/time_median.txt"
done
echo "# raw outputs: $out"
exit $failed
