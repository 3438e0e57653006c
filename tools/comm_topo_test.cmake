# ctest tools.comm_topo:
#   cmake -DCOMM_TOPO=<comm_topo> -DTOPO_DIR=<tests/topo> -DWORK=<scratch dir> [-DCOMM_IB_BUILT=ON
#         -DCOMM_IB_FAKE_LIB=<libcomm-verbs-fake.so>] -P comm_topo_test.cmake
# Runs comm_topo on the topology files of tests/topo and on this machine and checks what could go wrong: the
# DGX's GPUs are NVLink peers and its rings stay on NVLink, a PCIe box falls back to shared memory across
# CPUs, the cluster's rings enter node 0 through a different NIC per channel, the DOT and XML outputs (the
# XML must load back to the same hosts), a malformed file (exit 1, line-numbered WARN), files that are not
# regular files (a FIFO, /dev/zero, a directory: exit 1 at once, with their type) and a bad option (exit 2).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(ENV{COMM_TOPO_FILE} "")
set(ENV{COMM_TOPO_DUMP_FILE} "")
set(ENV{COMM_DEBUG} "WARN")

# run(<name> <expected exit status> args...): output in ${name}_out, ${name}_err.
function(run name expect)
  execute_process(COMMAND ${COMM_TOPO} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL expect)
    message("${out}${err}")
    message(FATAL_ERROR "comm_topo ${ARGN}: exit status ${rc}, expected ${expect}")
  endif()
  set(${name}_out "${out}" PARENT_SCOPE)
  set(${name}_err "${err}" PARENT_SCOPE)
endfunction()

function(expect name text regex what)
  if(NOT text MATCHES "${regex}")
    message("${text}")
    message(FATAL_ERROR "${name}: ${what} (no match for /${regex}/)")
  endif()
endfunction()

# The host summary lines of an output, for comparisons.
function(hostLines text var)
  string(REGEX MATCHALL "\nhosts? [^\n]*" lines "${text}")
  set(${var} "${lines}" PARENT_SCOPE)
endfunction()

# DGX H100: full output, DOT and XML.
run(dgx 0 -f ${TOPO_DIR}/dgx_h100.xml -d ${WORK}/dgx.dot -x ${WORK}/dgx.xml)
message("${dgx_out}")
expect(dgx "${dgx_out}" "host 0 \"dgx-h100\": 2 CPUs, 8 GPUs, 8 NICs" "summary line")
expect(dgx "${dgx_out}" "\n  GPU0 +X +NVL/[0-9]" "path matrix: GPU0-GPU1 is not NVL")
expect(dgx "${dgx_out}" "\n  GPU0 +[^\n]* PIX/[0-9.]+ +PXB/" "path matrix: GPU0-NIC0 is not PIX")
expect(dgx "${dgx_out}" "NVLink x18 -> NVS 450.0 GB/s" "NVLinks of the GPUs")
expect(dgx "${dgx_out}" "CPU0 <-> CPU1 SYS" "inter-CPU link")
expect(dgx "${dgx_out}" "\nRing 00: 0 [^\n]*\\[intra NVL/" "ring 0 leaves NVLink")
string(REGEX MATCHALL "\nRing [0-9]+:" rings "${dgx_out}")
list(LENGTH rings nRings)
if(NOT nRings EQUAL 8)
  message(FATAL_ERROR "dgx: ${nRings} rings, expected one per NIC (8)")
endif()
expect(dgx "${dgx_out}" "topology loaded in [0-9.]+ ms, paths included; rings and trees for 8 ranks in" "timing")
file(READ ${WORK}/dgx.dot dot)
expect(dgx.dot "${dot}" "^(di)?graph " "the DOT file does not start with graph/digraph")
expect(dgx.dot "${dot}" "NVL x18 [^\n]*style=bold" "the DOT file lacks bold NVLink edges")
run(dgx_q 0 -f ${TOPO_DIR}/dgx_h100.xml -q)
run(dgx_xml 0 -f ${WORK}/dgx.xml -q)
hostLines("${dgx_q_out}" a)
hostLines("${dgx_xml_out}" b)
if(NOT a STREQUAL b OR a STREQUAL "")
  message(FATAL_ERROR "dgx: the -x output reloads to other hosts:\n${a}\nvs\n${b}")
endif()

# PCIe box: GPUs on different CPUs fall back to shared memory.
run(pcie 0 -f ${TOPO_DIR}/pcie_4gpu.xml)
message("${pcie_out}")
expect(pcie "${pcie_out}" "\n  GPU0 +X +PIX/" "GPU0-GPU1 is not PIX")
expect(pcie "${pcie_out}" "\\(GPUs on different CPUs\\): SHM \\(fallback\\), path SYS" "SYS pair is not SHM")
expect(pcie "${pcie_out}" "\\(ring 0 next\\): P2P" "ring 0 next is not P2P")

# Cluster of 4 DGX: 32 ranks, rings enter node 0 through NIC0 on channel 0 and NIC1 on channel 1.
run(cluster 0 -f ${TOPO_DIR}/cluster_4x_dgx.xml -n 32 -q -x ${WORK}/cluster.xml)
message("${cluster_out}")
string(REGEX MATCHALL "\nRing [0-9]+:" rings "${cluster_out}")
list(LENGTH rings nRings)
if(nRings LESS 2)
  message(FATAL_ERROR "cluster: ${nRings} rings, expected at least 2")
endif()
expect(cluster "${cluster_out}" "\nRing 00: 0 [^\n]*node0 in NIC0 out" "channel 0 does not enter node 0 through NIC0")
expect(cluster "${cluster_out}" "\nRing 01: [^\n]*node0 in NIC1 out" "channel 1 does not enter node 0 through NIC1")
expect(cluster "${cluster_out}" "\nRing 00: [^\n]*inter NET/" "no inter-node hop")
expect(cluster "${cluster_out}" "\nhost 3 \"node3\": 2 CPUs, 8 GPUs, 8 NICs" "summary of the other hosts")
run(cluster_xml 0 -f ${WORK}/cluster.xml -n 32 -q)
hostLines("${cluster_out}" a)
hostLines("${cluster_xml_out}" b)
if(NOT a STREQUAL b)
  message(FATAL_ERROR "cluster: the -x output reloads to other hosts:\n${a}\nvs\n${b}")
endif()
run(cluster_full 0 -f ${TOPO_DIR}/cluster_4x_dgx.xml -d ${WORK}/cluster.dot)
expect(cluster_full "${cluster_full_out}" "tree 0: root node [0-3], depth [1-3]:" "no inter-node tree")
expect(cluster_full "${cluster_full_out}" "\\(another host\\): NET" "no network transport to another host")
expect(cluster_full "${cluster_full_out}" "ch 01 tree 1: node0 \\[1 "
       "channel 1's chain of node 0 does not start at rank 1")

# NCCL's topology format (tests/topo/nccl_*.xml): the DGX in NCCL's format has dgx_h100.xml's paths and
# rings, the cloud VM its GPU-NIC pairs and one Ethernet NIC; -X writes NCCL's format, which loads back to the
# same hosts; a malformed NCCL file is refused with its line.
run(ndgx 0 -f ${TOPO_DIR}/nccl_dgx_h100.xml -X ${WORK}/ndgx.xml)
expect(ndgx "${ndgx_out}" "host 0 \"\": 2 CPUs, 8 GPUs, 8 NICs, 12 PCI, NVSwitch" "summary line")
expect(ndgx "${ndgx_out}" "\n  GPU0 +[^\n]* PIX/[0-9.]+ +PXB/" "path matrix: GPU0-NIC0 is not PIX")
expect(ndgx "${ndgx_out}" "NVLink x18 -> NVS 450.0 GB/s" "NVLinks of the GPUs")
expect(ndgx "${ndgx_out}" "XML \\(NCCL's format\\) written to " "-X output")
string(REGEX MATCHALL "\nRing [0-9]+:" rings "${ndgx_out}")
list(LENGTH rings nRings)
if(NOT nRings EQUAL 8)
  message(FATAL_ERROR "ndgx: ${nRings} rings, expected one per NIC (8)")
endif()
run(ndgx_q 0 -f ${TOPO_DIR}/nccl_dgx_h100.xml -q)
run(ndgx_x 0 -f ${WORK}/ndgx.xml -q)
hostLines("${ndgx_q_out}" a)
hostLines("${ndgx_x_out}" b)
if(NOT a STREQUAL b OR a STREQUAL "")
  message(FATAL_ERROR "ndgx: the -X output reloads to other hosts:\n${a}\nvs\n${b}")
endif()
run(nvm 0 -f ${TOPO_DIR}/nccl_cloud_vm.xml)
expect(nvm "${nvm_out}" "host 0 \"\": 2 CPUs, 8 GPUs, 9 NICs, 8 PCI, NVSwitch" "summary line")
expect(nvm "${nvm_out}" "NIC4 eth0 eth 40 Gb/s" "the VM's Ethernet NIC below CPU0")
expect(nvm "${nvm_out}" "\n  GPU4 +[^\n]* SYS/[0-9.]+ +PIX/" "path matrix: GPU4-NIC5 (mlx5_ib4) is not PIX")
file(WRITE ${WORK}/bad_nccl.xml "<system version=\"1\">\n  <cpu numaid=\"0\">\n    <gpu dev=\"0\"/>\n  </cpu>\n</system>\n")
run(badnccl 1 -f ${WORK}/bad_nccl.xml)
expect(badnccl "${badnccl_err}" "bad_nccl\\.xml:3: <gpu> is not allowed inside <cpu>" "no line-numbered message")

# This machine.
run(live 0)
message("${live_out}${live_err}")
expect(live "${live_out}" "host 0 \"[^\"]*\": [0-9]+ CPUs?, " "summary line")
expect(live "${live_out}" "\nRing 00: 0" "ring")

# -p: a PNG when Graphviz is installed, else exit status 3.
find_program(DOT_EXE dot)
if(DOT_EXE)
  run(png 0 -f ${TOPO_DIR}/pcie_4gpu.xml -q -p ${WORK}/pcie.png)
  if(NOT EXISTS ${WORK}/pcie.png)
    message(FATAL_ERROR "png: no ${WORK}/pcie.png")
  endif()
else()
  run(png 3 -f ${TOPO_DIR}/pcie_4gpu.xml -q -p ${WORK}/pcie.png)
  expect(png "${png_err}" "dot \\(graphviz\\) not installed" "message")
endif()

# -i: the RDMA devices, here the fake verbs' (COMM_IB_FAKE) on this machine's discovery: ports, link layers,
# GIDs with their types and the one the transport addresses the port by, COMM_IB_HCA's selection, and the GPU
# line (the fake NICs are not in the machine's topology). Without the IB transport, a clear note.
set(ENV{COMM_IB_FAKE} "2:roce")
if(DEFINED COMM_IB_FAKE_LIB)
  set(ENV{COMM_IB_FAKE_LIB} "${COMM_IB_FAKE_LIB}") # the verbs fake module (tests/fakes/ib_verbs/)
endif()
set(ENV{COMM_IB_HCA} "^fakeroce0")
run(rdma 0 -q -i)
if(COMM_IB_BUILT)
  expect(rdma "${rdma_out}" "RDMA devices \\(through fake verbs[^\n]*\\): 2" "device count")
  expect(rdma "${rdma_out}" "fakeroce0: 1 port[^\n]*\n    port 1: ACTIVE, RoCE \\(Ethernet\\), 100 Gb/s, MTU 1024[^\n]*not selected by COMM_IB_HCA" "port line of the excluded device")
  expect(rdma "${rdma_out}" "GID 3: ::ffff:10\\.0\\.1\\.1 \\(RoCE v2\\)" "GID table")
  expect(rdma "${rdma_out}" "addressed by GID 3 \\(::ffff:10\\.0\\.1\\.1, RoCE v2\\)" "GID selection")
  expect(rdma "${rdma_out}" "GPU: - \\(fakeroce1 is not in this machine's topology\\)" "GPU line")
  if(rdma_out MATCHES "fakeroce1[^\n]*\n[^\n]*not selected")
    message(FATAL_ERROR "rdma: fakeroce1 is selected by COMM_IB_HCA=^fakeroce0")
  endif()
  set(ENV{COMM_IB_FAKE} "1:ib")
  set(ENV{COMM_IB_HCA} "")
  run(rdmaib 0 -q -i)
  expect(rdmaib "${rdmaib_out}" "port 1: ACTIVE, InfiniBand, 200 Gb/s, MTU 4096, LID 1\n" "InfiniBand port")
  expect(rdmaib "${rdmaib_out}" "addressed by GID 0 \\(fe80::[0-9a-f:]+, IB\\)" "InfiniBand GID")
else()
  expect(rdma "${rdma_out}" "this build has no IB transport" "no-IB note")
endif()
set(ENV{COMM_IB_FAKE} "")
set(ENV{COMM_IB_FAKE_LIB} "")
set(ENV{COMM_IB_HCA} "")

# A malformed file: exit status 1, the parser's WARN with the line.
file(WRITE ${WORK}/bad.xml "<?xml version=\"1.0\"?>\n<topology version=\"1\">\n  <host name=\"x\">\n"
                           "    <cpu numa=\"0\" <gpu/>\n  </host>\n</topology>\n")
run(bad 1 -f ${WORK}/bad.xml)
expect(bad "${bad_err}" "bad\\.xml:4: " "no line-numbered message")
run(missing 1 -f ${WORK}/does_not_exist.xml)

# Not regular files: refused at once with their type (a FIFO used to block the reader until a writer came;
# ctest's timeout ends a run that hangs), as input (-f) and as output (-x, -d), which stays a FIFO.
run(zero 1 -f /dev/zero -q)
expect(zero "${zero_err}" "/dev/zero is a character device, not a regular file" "no refusal of /dev/zero")
run(dir 1 -f ${WORK} -q)
expect(dir "${dir_err}" "is a directory, not a regular file" "no refusal of a directory")
execute_process(COMMAND mkfifo ${WORK}/fifo RESULT_VARIABLE fifo_rc)
if(fifo_rc EQUAL 0)
  run(fifo 1 -f ${WORK}/fifo -q)
  expect(fifo "${fifo_err}" "fifo is a FIFO \\(named pipe\\), not a regular file" "no refusal of a FIFO")
  run(fifox 1 -f ${TOPO_DIR}/pcie_4gpu.xml -q -x ${WORK}/fifo)
  expect(fifox "${fifox_err}" "fifo is a FIFO" "no refusal of a FIFO as -x")
  run(fifod 1 -f ${TOPO_DIR}/pcie_4gpu.xml -q -d ${WORK}/fifo)
  expect(fifod "${fifod_err}" "fifo is a FIFO" "no refusal of a FIFO as -d")
endif()

# Bad arguments: exit status 2 and the usage.
run(badopt 2 -Z)
expect(badopt "${badopt_err}" "usage: " "no usage")
run(badc 2 -f ${TOPO_DIR}/dgx_h100.xml -c 0)
run(badn 2 -f ${TOPO_DIR}/dgx_h100.xml -n 9 -R 8)
run(extra 2 -f ${TOPO_DIR}/dgx_h100.xml extra)
message("comm_topo: all checks passed")
