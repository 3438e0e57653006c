# integration.aggd (tests/integration/test_aggd.c): comm_aggd, the software SHARP daemon, and its CollNet plugin
# (both built by tools/aggd/CMakeLists.txt), driven by forked member processes through the plugin's NCCL table.
# The test links libcomm's internals only for its reference reductions. Included by tests/CMakeLists.txt.
if(TARGET comm_aggd AND TARGET comm_collnet_aggd)
  add_executable(test_aggd ${PROJECT_SOURCE_DIR}/tests/integration/test_aggd.c)
  target_include_directories(test_aggd PRIVATE ${PROJECT_SOURCE_DIR}/transports/collnet/aggd
                             ${PROJECT_SOURCE_DIR}/transports/collnet/nccl)
  target_link_libraries(test_aggd PRIVATE comm_internal ${CMAKE_DL_LIBS})
  add_dependencies(test_aggd comm_aggd comm_collnet_aggd)
  add_test(NAME integration.aggd COMMAND test_aggd $<TARGET_FILE:comm_aggd> $<TARGET_FILE:comm_collnet_aggd>)
  set_tests_properties(integration.aggd PROPERTIES TIMEOUT 120 LABELS "integration")
endif()
