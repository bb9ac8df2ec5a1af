# write_build_info.cmake — cmake -P script run at every build (target mc_build_info):
# asks git for the revision of SOURCE_DIR and whether tracked files differ from
# it, and writes OUT from TEMPLATE (configure_file leaves OUT untouched when the
# content is unchanged, so nothing recompiles needlessly).
# Inputs: SOURCE_DIR, OUT, TEMPLATE, BUILD_FLAGS.
set(MC_GIT_SHA "unknown")
set(MC_GIT_DIRTY "unknown")
find_program(GIT_EXE git)
if(GIT_EXE)
  execute_process(COMMAND ${GIT_EXE} -C ${SOURCE_DIR} rev-parse HEAD
                  OUTPUT_VARIABLE sha RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET)
  if(rc EQUAL 0 AND sha)
    set(MC_GIT_SHA "${sha}")
    execute_process(COMMAND ${GIT_EXE} -C ${SOURCE_DIR} status --porcelain --untracked-files=no
                    OUTPUT_VARIABLE st RESULT_VARIABLE rc2 ERROR_QUIET)
    if(rc2 EQUAL 0)
      if(st STREQUAL "")
        set(MC_GIT_DIRTY "clean")
      else()
        set(MC_GIT_DIRTY "dirty")
      endif()
    endif()
  endif()
endif()
string(REPLACE "|" ";" BUILD_FLAGS "${BUILD_FLAGS}")
# Quotes would break the C string literal.
string(REPLACE "\"" "'" BUILD_FLAGS "${BUILD_FLAGS}")
configure_file(${TEMPLATE} ${OUT} @ONLY)
