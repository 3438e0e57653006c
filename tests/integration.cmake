# Integration tests: programs that use the public API only (include/comm.h) and link libcomm.so.
# Included by tests/CMakeLists.txt. Labels: "integration" on all; "mp" on the mp_colls runs; "heavy" on
# runs that oversubscribe a small machine (scripts/test.sh leaves those out of the sanitizer pass);
# "threads" on the runs whose ranks are threads of one process (the optional ThreadSanitizer pass).
set(COMM_IT_DIR ${CMAKE_CURRENT_SOURCE_DIR}/integration)

foreach(prog mp_colls test_args test_faults test_group_init test_sender_leaves test_p2p_split test_net_name
             test_shrink_gather)
  add_executable(${prog} ${COMM_IT_DIR}/${prog}.c)
  target_include_directories(${prog} PRIVATE ${COMM_IT_DIR})
  target_link_libraries(${prog} PRIVATE comm Threads::Threads m)
endforeach()
# mp_colls: the cases and the host reference are a file of their own.
target_sources(mp_colls PRIVATE ${COMM_IT_DIR}/mp_cases.c)

function(comm_it_test name)
  cmake_parse_arguments(T "SERIAL" "" "COMMAND;ENV;LABELS" ${ARGN})
  add_test(NAME integration.${name} COMMAND ${T_COMMAND})
  set_tests_properties(integration.${name} PROPERTIES TIMEOUT 300 LABELS "integration;${T_LABELS}")
  if(T_ENV)
    set_tests_properties(integration.${name} PROPERTIES ENVIRONMENT "${T_ENV}")
  endif()
  if(T_SERIAL)
    set_tests_properties(integration.${name} PROPERTIES RUN_SERIAL TRUE)
  endif()
endfunction()

# One thread initialises, splits and finalizes several communicators inside groups.
comm_it_test(test_group_init COMMAND test_group_init LABELS threads)
comm_it_test(mp_colls.groupsplit4 COMMAND mp_colls -w 200 -np 4 -G LABELS "mp;threads")

# Every collective, type, op, root, count, in- and out-of-place, on forked ranks (shm between them).
comm_it_test(mp_colls.np2 COMMAND mp_colls -w 200 -np 2 LABELS mp)
comm_it_test(mp_colls.np3 COMMAND mp_colls -w 200 -np 3 LABELS mp)
comm_it_test(mp_colls.np4 COMMAND mp_colls -w 200 -np 4 LABELS mp)
comm_it_test(mp_colls.np5 COMMAND mp_colls -w 200 -np 5 LABELS mp)
# 8 ranks on a 2-core machine: nothing else running beside it.
comm_it_test(mp_colls.np8 COMMAND mp_colls -w 200 -np 8 LABELS "mp;heavy" SERIAL)
# The variants below that exist for a setting run through knob_check.sh, which also checks in the INFO log
# (or mp_colls' own output) that the setting took effect: a variable that were misspelt, ignored or refused
# (a WARN and the default) would otherwise pass as the plain run does.
set(COMM_KNOB_CHECK ${COMM_IT_DIR}/knob_check.sh $<TARGET_FILE:mp_colls>)
# On sockets: every connection logged goes via NET(Socket), because COMM_SHM_DISABLE said so (none via SHM).
set(COMM_KNOB_SOCKET -a "-> rank [0-9]+ via =via NET\\(Socket\\) \\(same node, COMM_SHM_DISABLE set\\)")
# Ranks as threads of one process (one process logs, mp_colls says so); and one thread driving 4 communicators
# from commInitAll in groups.
comm_it_test(mp_colls.threads4 COMMAND ${COMM_KNOB_CHECK} -p 1 -e "^mp_colls: 4 ranks \\(threads\\)" --
  -w 200 -np 4 -t LABELS "mp;threads")
comm_it_test(mp_colls.group4 COMMAND mp_colls -w 200 -np 4 -g LABELS mp)
# Non-blocking communicators: init and split return commInProgress and are polled.
comm_it_test(mp_colls.nonblocking.np3 COMMAND mp_colls -w 200 -np 3 -nb LABELS mp)
# The socket (NET) transport between processes of one host.
comm_it_test(mp_colls.socket.np2 COMMAND ${COMM_KNOB_CHECK} ${COMM_KNOB_SOCKET} -- -w 200 -np 2
  ENV "COMM_SHM_DISABLE=1" LABELS mp)
# Helper threads carry messages from 64 KiB (the default on machines of 8 cores and more): the setting is
# read, and connections start their helper threads with it.
comm_it_test(mp_colls.socket.threaded.np2 COMMAND ${COMM_KNOB_CHECK} ${COMM_KNOB_SOCKET}
  -e "COMM_SOCKET_INLINE set by environment to 65536$" -e "helper threads carry messages from 65536 bytes$" --
  -w 200 -np 2
  ENV "COMM_SHM_DISABLE=1;COMM_SOCKET_INLINE=64K" LABELS mp)
comm_it_test(mp_colls.socket.np3 COMMAND ${COMM_KNOB_CHECK} ${COMM_KNOB_SOCKET} -- -w 200 -np 3
  ENV "COMM_SHM_DISABLE=1" LABELS mp)
comm_it_test(mp_colls.socket.threads2 COMMAND ${COMM_KNOB_CHECK} ${COMM_KNOB_SOCKET} -p 1
  -e "^mp_colls: 2 ranks \\(threads\\)" -- -w 200 -np 2 -t ENV "COMM_SHM_DISABLE=1" LABELS "mp;threads")
# Small FIFOs (8 KiB slots: every large case is many chunks) and more channels; on shm and on sockets
# with every message on the data sockets (no inline path). Every communicator's init line shows both.
comm_it_test(mp_colls.smallbuf.np3 COMMAND ${COMM_KNOB_CHECK} -a "Init COMPLETE=channels 4 slot 8192 B - Init COMPLETE"
  -- -w 200 -np 3 ENV "COMM_BUFFSIZE=65536;COMM_NCHANNELS=4" LABELS mp)
comm_it_test(mp_colls.socket.smallbuf.np3 COMMAND ${COMM_KNOB_CHECK} ${COMM_KNOB_SOCKET}
  -a "Init COMPLETE=channels 3 slot 8192 B - Init COMPLETE" -e "COMM_SOCKET_INLINE set by environment to 0$"
  -- -w 200 -np 3 ENV "COMM_BUFFSIZE=65536;COMM_NCHANNELS=3;COMM_SHM_DISABLE=1;COMM_SOCKET_INLINE=0" LABELS mp)

# Every algorithm, forced with COMM_ALGO, for every collective it implements (the log must show it ran,
# and mp_colls checks every result against a host reference). -rph K: K ranks per (fake) host, so the
# hierarchical algorithm has nodes (shm within, sockets across).
set(COMM_ALGO_CHECK ${COMM_IT_DIR}/algo_check.sh $<TARGET_FILE:mp_colls>)
comm_it_test(algo.ring.np4 COMMAND ${COMM_ALGO_CHECK} ring AllReduce,Broadcast,Reduce,AllGather,ReduceScatter
  -w 200 -np 4 LABELS "mp;algo")
comm_it_test(algo.tree.np2 COMMAND ${COMM_ALGO_CHECK} tree AllReduce,Broadcast,Reduce -w 200 -np 2 LABELS "mp;algo")
comm_it_test(algo.tree.np5 COMMAND ${COMM_ALGO_CHECK} tree AllReduce,Broadcast,Reduce -w 200 -np 5 LABELS "mp;algo")
comm_it_test(algo.tree.ll.np3 COMMAND ${COMM_ALGO_CHECK} tree AllReduce,Broadcast,Reduce -w 200 -np 3
  ENV "COMM_PROTO=ll" LABELS "mp;algo")
comm_it_test(algo.colltree.np6.rph2 COMMAND ${COMM_ALGO_CHECK} colltree AllReduce,Broadcast,Reduce
  -w 240 -np 6 -rph 2 LABELS "mp;algo;heavy")
comm_it_test(algo.colltree.np5.rph3 COMMAND ${COMM_ALGO_CHECK} colltree AllReduce,Broadcast,Reduce
  -w 240 -np 5 -rph 3 ENV "COMM_NCHANNELS=2" LABELS "mp;algo")
comm_it_test(algo.colltree.np4 COMMAND ${COMM_ALGO_CHECK} colltree AllReduce,Broadcast,Reduce -w 200 -np 4
  LABELS "mp;algo")
comm_it_test(algo.pat.np3 COMMAND ${COMM_ALGO_CHECK} pat AllGather,ReduceScatter -w 200 -np 3 LABELS "mp;algo")
comm_it_test(algo.pat.np8 COMMAND ${COMM_ALGO_CHECK} pat AllGather,ReduceScatter -w 240 -np 8 LABELS "mp;algo;heavy"
  SERIAL)
comm_it_test(algo.oneshot.np3 COMMAND ${COMM_ALGO_CHECK} oneshot AllReduce -w 200 -np 3
  ENV "COMM_ALLREDUCE_ONESHOT_MAX=1G" LABELS "mp;algo")

# The topology at init: a loaded cluster file places ranks and orders rings, dumps round-trip, a malformed
# file fails init with its line.
comm_it_test(topo_check COMMAND ${COMM_IT_DIR}/topo_check.sh $<TARGET_FILE:mp_colls> ${PROJECT_SOURCE_DIR}/tests/topo
  LABELS "mp;topo" SERIAL)

# Point-to-point over sockets where one rank of a pair makes both directions in one round and the other in
# two: connections are paired only when both sides do.
comm_it_test(test_p2p_split COMMAND test_p2p_split LABELS "mp;net")

# commGather, commScatter, commGroupSimulateEnd, and commShrink after a rank has left.
comm_it_test(test_shrink_gather COMMAND test_shrink_gather LABELS "mp;faults")

# commConfig_t.netName picks the built-in network (IB over the verbs fake module, or Socket). Every test that
# sets COMM_IB_FAKE also names the module (tests/fakes/ib_verbs/, libcomm-verbs-fake.so) with COMM_IB_FAKE_LIB.
set(COMM_IT_IB_FAKE_ENV "COMM_IB_FAKE=1")
if(COMM_HAVE_IBVERBS)
  list(APPEND COMM_IT_IB_FAKE_ENV "COMM_IB_FAKE_LIB=$<TARGET_FILE:comm_verbs_fake>")
endif()
comm_it_test(net_name.ib COMMAND test_net_name IB ENV ${COMM_IT_IB_FAKE_ENV} LABELS "net;threads")
comm_it_test(net_name.socket COMMAND test_net_name Socket ENV ${COMM_IT_IB_FAKE_ENV} LABELS "net;threads")
set_tests_properties(integration.net_name.ib PROPERTIES SKIP_RETURN_CODE 77)

# Argument validation: errors, WARNs, buffers untouched.
comm_it_test(test_args COMMAND test_args LABELS "args;threads")

# Faults: a killed peer (shm and socket), commAbort from another thread, an init that times out.
# Timing assertions: run alone.
comm_it_test(test_faults COMMAND test_faults LABELS faults SERIAL)

# A sender that stops calling libcomm after its send returned: the network proxy delivers the rest.
comm_it_test(test_sender_leaves COMMAND test_sender_leaves LABELS net)

# Two hosts: two network namespaces joined by a veth pair, 2 ranks in each (needs root; else skipped).
comm_it_test(two_hosts COMMAND ${COMM_IT_DIR}/two_hosts.sh $<TARGET_FILE:mp_colls> LABELS "twohost;heavy" SERIAL)
set_tests_properties(integration.two_hosts PROPERTIES SKIP_RETURN_CODE 77)

# The algorithms across namespace hosts (2 x 2 ranks, 2 NICs each), forced one by one (needs root).
comm_it_test(cluster_algos COMMAND ${COMM_IT_DIR}/cluster_algos.sh $<TARGET_FILE:mp_colls> LABELS "twohost;heavy;algo"
  SERIAL)
set_tests_properties(integration.cluster_algos PROPERTIES SKIP_RETURN_CODE 77)
# NIC choice from the discovered topology (2 x 2 ranks, 2 NICs each, no COMM_SOCKET_IFNAME; needs root).
comm_it_test(cluster_nics COMMAND ${COMM_IT_DIR}/cluster_nics.sh $<TARGET_FILE:mp_colls> LABELS "twohost;heavy;topo"
  SERIAL)
set_tests_properties(integration.cluster_nics PROPERTIES SKIP_RETURN_CODE 77)

# Launcher-style start on this host (COMM_ROOT, COMM_RANK, COMM_NRANKS, zero id), and a rank with the
# wrong COMM_ROOT_SECRET turned away.
comm_it_test(env_launch COMMAND ${COMM_IT_DIR}/env_launch.sh $<TARGET_FILE:mp_colls> LABELS mp)

# The perf tools under nccl-tests' names (perf/nccl-tests/), driven and parsed as scripts written for
# nccl-tests do, and their -J JSON read back: every tool on 2 local ranks, host buffers (a few seconds).
if(TARGET allreduce_perf)
  comm_it_test(nccl_tests_tools COMMAND ${COMM_IT_DIR}/nccl_tests_check.sh
    $<TARGET_FILE_DIR:allreduce_perf>/nccl-tests --buffers host LABELS mp)
endif()

# commDestroy without commFinalize (issue 19): 6 ranks end their last calls unsynchronised and destroy at once;
# every call of every rank must succeed (shm, Socket, IB over the verbs fake); and a rank that destroys before
# its part of an allreduce makes the others fail with commRemoteError naming it, not time out.
add_executable(test_destroy_alone ${COMM_IT_DIR}/test_destroy_alone.c)
target_include_directories(test_destroy_alone PRIVATE ${COMM_IT_DIR})
target_link_libraries(test_destroy_alone PRIVATE comm Threads::Threads m)
comm_it_test(destroy_alone.shm COMMAND test_destroy_alone shm 3 LABELS "mp;faults")
comm_it_test(destroy_alone.socket COMMAND test_destroy_alone socket 3 LABELS "mp;net;faults")
comm_it_test(destroy_alone.ib COMMAND test_destroy_alone ib 3 ENV ${COMM_IT_IB_FAKE_ENV} LABELS "net;threads;faults")
set_tests_properties(integration.destroy_alone.ib PROPERTIES SKIP_RETURN_CODE 77)
comm_it_test(destroy_alone.missing_shm COMMAND test_destroy_alone missing-shm 2 LABELS "mp;faults")
comm_it_test(destroy_alone.missing_socket COMMAND test_destroy_alone missing-socket 2 LABELS "mp;net;faults")

# Collnet (issue 20) through NCCL's CollNet ABI: mp_colls with the example CollNet plugin of tests/plugins
# (built in tests/CMakeLists.txt), every rank group a host of its own: every allreduce case over the v11 table,
# a failing connect and collnet off; then (heavy: not in the sanitizer pass) the v8, v9, v10 tables, two ranks per
# host and operations cut below a slot.
foreach(part main versions)
  set(labels "mp;net;collnet")
  if(part STREQUAL versions)
    set(labels "mp;net;collnet;heavy")
  endif()
  comm_it_test(collnet_nccl.${part} COMMAND ${COMM_IT_DIR}/collnet_check.sh ${part} $<TARGET_FILE:mp_colls>
    $<TARGET_FILE:nccl_collnet_example> $<TARGET_FILE:nccl_collnet_example_v8> $<TARGET_FILE:nccl_collnet_example_v9>
    $<TARGET_FILE:nccl_collnet_example_v10> LABELS "${labels}")
endforeach()

# Collnet over the software aggregation service on a namespace cluster (4 hosts x 2 ranks, 2 comm_aggd servers;
# needs root, else skipped): every type and op against CollTree and a float64 reference, two communicators at
# once, a stranger refused, a server and a rank killed during operations, the servers unreachable at init.
add_executable(collnet_cluster ${COMM_IT_DIR}/collnet_cluster.c)
target_link_libraries(collnet_cluster PRIVATE comm m)
comm_it_test(cluster_collnet COMMAND ${COMM_IT_DIR}/cluster_collnet.sh $<TARGET_FILE:collnet_cluster>
  $<TARGET_FILE:comm_aggd> LABELS "twohost;heavy;collnet" SERIAL)
set_tests_properties(integration.cluster_collnet PROPERTIES SKIP_RETURN_CODE 77)
