# ctest tools.comm_sim: cmake -DCOMM_SIM=<comm_sim> -DTRACE=<out.json> [-DPYTHON3=<python3>] -P comm_sim_test.cmake
# Runs a ring allreduce sweep on 16 ranks (4 per node) with verification, simulation and a trace, checks the
# table, and that the trace is valid JSON with step events (python3 -m json.tool, when python3 exists).
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
