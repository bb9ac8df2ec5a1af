# thread_order_race.cmake — runs the emulated scan suite with the threads of each
# block in descending order between barriers and requires the FNV-1a hash of
# every device-to-host copy (EMU_D2H_HASH) to equal the one the ascending run
# recorded (ctest ScanEmulation.Parity, its fixture, writes HASH_FILE). A kernel
# whose results depend on that order reads shared memory that another thread
# writes without a barrier in between. Both runs use the same (whole) suite.
# usage: cmake -DEXE=<test_scan_emulated> -DHASH_FILE=<file> -P this
if(NOT EXISTS "${HASH_FILE}")
  message(FATAL_ERROR "no ascending-order hash at '${HASH_FILE}': ScanEmulation.Parity "
                      "(this test's fixture) writes it; run it first or run both")
endif()
file(READ "${HASH_FILE}" recorded)
string(REGEX MATCH "EMU_D2H_HASH [0-9a-f]+ over [0-9]+ bytes" ascending "${recorded}")
if(NOT ascending)
  message(FATAL_ERROR "'${HASH_FILE}' holds no EMU_D2H_HASH line: '${recorded}'")
endif()
set(ENV{MC_SCAN_EMU_REVERSE} 1)
unset(ENV{MC_SCAN_EMU_HASH_FILE})
execute_process(COMMAND ${EXE} --gtest_brief=1
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "descending thread order: the suite failed (rc ${rc})\n${out}\n${err}")
endif()
string(REGEX MATCH "EMU_D2H_HASH [0-9a-f]+ over [0-9]+ bytes" descending "${out}")
if(NOT descending)
  message(FATAL_ERROR "descending thread order: no EMU_D2H_HASH line in the output")
endif()
if(NOT ascending STREQUAL descending)
  message(FATAL_ERROR "results depend on the thread order: ascending '${ascending}', "
                      "descending '${descending}'")
endif()
message(STATUS "same bytes in both thread orders: ${ascending}")
