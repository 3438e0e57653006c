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
# integration.aggd_net (tests/integration/test_aggd_net.c): the library's TCP network in NCCL's net ABI
# (aggd_net.c, AggdTcp), driven through its tables: exported symbols, NCCL_SOCKET_IFNAME, strangers dropped, partial
# transfers, bounded requests, errors, no leaked descriptor (under ASan too). integration.aggd_net_plugin (heavy:
# not in the ASan pass, whose time CI bounds; the adapters' memory use is covered there by the other plugin tests)
# (tests/integration/aggd_net_check.sh): the library as COMM_NET_PLUGIN through libcomm's adapters, its network
# alone and with its CollNet over a comm_aggd, as NVIDIA's NCCL would load it with NCCL_NET_PLUGIN.
if(TARGET comm_collnet_aggd)
  add_executable(test_aggd_net ${PROJECT_SOURCE_DIR}/tests/integration/test_aggd_net.c)
  target_include_directories(test_aggd_net PRIVATE ${PROJECT_SOURCE_DIR}/transports/net/nccl)
  target_link_libraries(test_aggd_net PRIVATE ${CMAKE_DL_LIBS})
  add_dependencies(test_aggd_net comm_collnet_aggd)
  add_test(NAME integration.aggd_net COMMAND test_aggd_net $<TARGET_FILE:comm_collnet_aggd>)
  set_tests_properties(integration.aggd_net PROPERTIES TIMEOUT 120 LABELS "integration;net")
endif()
if(TARGET comm_aggd AND TARGET comm_collnet_aggd AND TARGET mp_colls)
  add_test(NAME integration.aggd_net_plugin
    COMMAND ${PROJECT_SOURCE_DIR}/tests/integration/aggd_net_check.sh $<TARGET_FILE:mp_colls>
      $<TARGET_FILE:comm_aggd> $<TARGET_FILE:comm_collnet_aggd>)
  set_tests_properties(integration.aggd_net_plugin PROPERTIES TIMEOUT 300 LABELS "integration;mp;net;collnet;heavy")
endif()
