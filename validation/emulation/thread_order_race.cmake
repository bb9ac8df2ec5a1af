# thread_order_race.cmake — runs the emulated scan suite twice, threads of each
# block in ascending and in descending order between barriers, and requires the
# same FNV-1a hash of every device-to-host copy (EMU_D2H_HASH): a kernel whose
# results depend on that order reads shared memory that another thread writes
# without a barrier in between. usage: cmake -DEXE=<test_scan_emulated> -P this
foreach(order 0 1)
  set(ENV{MC_SCAN_EMU_REVERSE} ${order})
  execute_process(COMMAND ${EXE} --gtest_filter=Cases* --gtest_brief=1
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "thread order ${order}: the suite failed (rc ${rc})\n${err}")
  endif()
  string(REGEX MATCH "EMU_D2H_HASH [0-9a-f]+ over [0-9]+ bytes" h${order} "${out}")
  if(NOT h${order})
    message(FATAL_ERROR "thread order ${order}: no EMU_D2H_HASH line in the output")
  endif()
endforeach()
if(NOT h0 STREQUAL h1)
  message(FATAL_ERROR "results depend on the thread order: ascending '${h0}', descending '${h1}'")
endif()
message(STATUS "same bytes in both thread orders: ${h0}")
