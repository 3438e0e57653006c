# Reliability tests (public API only, link libcomm.so): mismatched calls are errors on every rank involved,
# a failure travels to every rank, and the query calls are safe against commAbort from another thread.
# Included by tests/CMakeLists.txt after integration.cmake (comm_it_test comes from there).
foreach(prog test_mismatch test_watchdog fault_driver)
  add_executable(${prog} ${COMM_IT_DIR}/${prog}.c)
  target_include_directories(${prog} PRIVATE ${COMM_IT_DIR})
  target_link_libraries(${prog} PRIVATE comm Threads::Threads m)
endforeach()

# Different collectives, roots, ops or order on the ranks: every rank fails, no wrong result (shm, sockets).
comm_it_test(test_mismatch COMMAND test_mismatch LABELS "mp;faults")

# commAbort from the main thread while workers run allreduces and a watchdog thread polls the query calls
# (ranks are threads: the ThreadSanitizer pass of scripts/test.sh runs it too).
comm_it_test(test_watchdog COMMAND test_watchdog LABELS "threads;faults")

# A rank killed, stopped or skipping a call, in init, a collective or finalize: every survivor returns an
# error naming it, a killed one within about a second (scripts/fault_campaign.sh runs random ones for hours).
foreach(f "kill;coll;shm;1" "kill;coll;sock;2" "kill;coll;shm;3" "kill;finalize;shm;4" "kill;init;shm;5"
          "kill;init;sock;6" "stop;coll;shm;7" "stop;coll;sock;8" "skip;coll;shm;9")
  list(GET f 0 mode)
  list(GET f 1 phase)
  list(GET f 2 transport)
  list(GET f 3 seed)
  set(env "COMM_TIMEOUT_MS=3000")
  if(transport STREQUAL "sock")
    list(APPEND env "COMM_SHM_DISABLE=1")
  endif()
  comm_it_test(fault.${mode}_${phase}_${transport}_${seed}
    COMMAND fault_driver -np 4 -mode ${mode} -phase ${phase} -seed ${seed} ENV ${env} LABELS "mp;faults")
endforeach()
