# ctest tools.comm_sim: cmake -DCOMM_SIM=<comm_sim> -DTRACE=<out.json> [-DPYTHON3=<python3>] -P comm_sim_test.cmake
# Runs a ring allreduce sweep on 16 ranks (4 per node) with verification, simulation and a trace, checks the
# table, and that the trace is valid JSON with step events (python3 -m json.tool, when python3 exists); then
# a collnet sweep (below).
file(REMOVE ${TRACE})
execute_process(COMMAND ${COMM_SIM} -c allreduce -n 16 -R 4 -b 8 -e 1M -f 16 -a ring -x -T ${TRACE}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "comm_sim exited with ${rc}")
endif()
string(REGEX MATCHALL "VERIFIED" verified "${out}")
list(LENGTH verified nVerified)
if(nVerified LESS 6) # 4 sizes x 2 protocols, minus sizes that collapse: at least 3 sizes
  message(FATAL_ERROR "expected every row VERIFIED, got ${nVerified}")
endif()
if(NOT out MATCHES "# trace: ")
  message(FATAL_ERROR "no trace written")
endif()
file(READ ${TRACE} json)
if(NOT json MATCHES "\"ph\":\"X\"" OR NOT json MATCHES "rank 15 \\(node 3\\)")
  message(FATAL_ERROR "trace ${TRACE} lacks step events or rank names")
endif()
if(PYTHON3)
  execute_process(COMMAND ${PYTHON3} -m json.tool ${TRACE} RESULT_VARIABLE jrc OUTPUT_QUIET ERROR_VARIABLE jerr)
  if(NOT jrc EQUAL 0)
    message(FATAL_ERROR "trace ${TRACE} is not valid JSON: ${jerr}")
  endif()
endif()

# Collnet (-G 2: groups on two channels): 8 nodes of 2 ranks. Every collnet row must be there, verified
# (the verifier runs the virtual peer COMM_PEER_COLLNET) and simulated, and at 16 MiB the network's
# reduction (a node's NIC carries the buffer once each way) must beat the ring (twice, less 1/n) in the
# simulation as in the model.
execute_process(COMMAND ${COMM_SIM} -c allreduce -n 16 -R 2 -G 2 -b 1M -e 16M -f 4 -a ring,colltree,collnet -x
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "comm_sim with collnet exited with ${rc}")
endif()
if(NOT out MATCHES "# collnet: groups on 2 channel")
  message(FATAL_ERROR "no collnet groups in the header")
endif()
foreach(bytes 1048576 4194304 16777216)
  foreach(proto ll simple)
    # bytes algo proto ch predicted simulated ... verified
    set(row " ${bytes}  collnet +${proto} +[0-9]+ +[0-9.]+[*]? +([0-9.]+) [^\n]* VERIFIED\n")
    if(NOT out MATCHES "${row}")
      message(FATAL_ERROR "no verified and simulated collnet/${proto} row at ${bytes} B")
    endif()
    string(REGEX MATCH "${row}" line "${out}")
    set(cn_${proto}_${bytes} ${CMAKE_MATCH_1})
    string(REGEX MATCH " ${bytes}  ring +${proto} +[0-9]+ +[0-9.]+[*]? +([0-9.]+) " line "${out}")
    set(ring_${proto}_${bytes} ${CMAKE_MATCH_1})
  endforeach()
endforeach()
foreach(proto ll simple)
  if(NOT ring_${proto}_16777216 OR NOT cn_${proto}_16777216 LESS ring_${proto}_16777216)
    message(FATAL_ERROR "collnet/${proto} at 16 MiB: simulated ${cn_${proto}_16777216} us, ring "
                        "${ring_${proto}_16777216} us: expected collnet below ring")
  endif()
endforeach()
