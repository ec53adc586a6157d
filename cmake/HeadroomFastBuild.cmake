# How the build is kept fast on two cores (docs/internals.md, "Layout and build"):
# precompiled headers, unity batches, and ccache when a developer has it.
#
# Where the time went: most of a translation unit's compile time here is not our
# code. Every source parses xtensor (with xsimd), fmt and, from nn/ up, nlohmann/json
# and <filesystem>; every command file also parses CLI11. And GCC emits, in every unit
# that uses them, its own copy of each inline function and template instance it needs
# from those libraries (CLI11's validators and virtual members, json's serializer and
# parser), then optimises each copy at -O3 before the linker keeps one. So:
#
# - HEADROOM_PCH: the third-party headers are parsed once for autograd/ and once for
#   nn/, and every target above autograd/ but optim/ reuses nn/'s precompiled header.
# - HEADROOM_UNITY: the sources of a target whose units repeat the same library code
#   (data/, nn/, train/, interp/, ablate/, claims/, cli/ and each test executable) are
#   compiled in batches of up to eight, so each batch emits and optimises that code
#   once. autograd/, optim/ and plot/ stay a unit per source: their units share
#   little, and an op is the file a developer edits most.
# - Test sources are compiled at -O1 in a Release build, and at -O0 under the
#   sanitizers (tests/CMakeLists.txt): they run little code of their own, and the
#   libraries they test keep their own level.
#
# Both options are on by default; a developer editing one source over and over may
# prefer -DHEADROOM_UNITY=OFF (a touched file then recompiles alone). A source must
# not rely on a neighbour in its batch or on the precompiled header for an #include:
# a build with -DHEADROOM_PCH=OFF -DHEADROOM_UNITY=OFF compiles each source on its
# own and shows a missing one.

option(HEADROOM_PCH "Precompile the third-party headers that most sources include" ON)
option(HEADROOM_UNITY "Compile the sources of the larger targets in unity batches" ON)
option(HEADROOM_CCACHE "Compile through ccache when it is installed (not in .ci/run)" ON)

# The sets. Our own headers stay out: they change often, and a change to a set
# rebuilds every target that reuses it.
set(headroom_pch_core
  "${PROJECT_SOURCE_DIR}/autograd/xtensor_setup.hpp"  # first: checks the container settings
  <xtensor/xarray.hpp> <xtensor/xbuilder.hpp> <fmt/format.h>
  <algorithm> <cmath> <cstddef> <cstdint> <functional> <limits> <map> <memory> <optional>
  <stdexcept> <string> <utility> <vector>)
set(headroom_pch_json ${headroom_pch_core} <nlohmann/json.hpp> <filesystem> <fstream> <sstream>)

# headroom_precompile_headers(<target> core|json): <target> precompiles the set.
function(headroom_precompile_headers target set)
  if(HEADROOM_PCH)
    target_precompile_headers(${target} PRIVATE ${headroom_pch_${set}})
  endif()
endfunction()

# headroom_reuse_precompiled_headers(<target> <owner>): <target> uses the header that
# <owner> precompiled. GCC uses it only when both define the same macros that the
# headers read (-fno-math-errno defines one, -fno-trapping-math another), and
# otherwise parses the headers instead, slower but correct; so the owner is nn/,
# whose options are the defaults every headroom target has (headroom_target_defaults()
# and headroom_autograd's usage requirements), and autograd/ and optim/, which add
# such options, do not reuse it.
function(headroom_reuse_precompiled_headers target owner)
  if(HEADROOM_PCH)
    target_precompile_headers(${target} REUSE_FROM ${owner})
  endif()
endfunction()

# headroom_unity_build(<target>): compile <target>'s sources in batches of eight.
function(headroom_unity_build target)
  if(HEADROOM_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
endfunction()

# ccache, for a developer's rebuilds: it caches each unit by its preprocessed input.
# The precompiled headers need the two sloppiness settings, or ccache compiles every
# unit that uses one without caching it (ccache's manual, "Precompiled headers").
# .ci/run turns it off, so that CI never depends on a cache.
if(HEADROOM_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(HEADROOM_CCACHE_PROGRAM ccache)
  if(HEADROOM_CCACHE_PROGRAM)
    set(CMAKE_CXX_COMPILER_LAUNCHER
      ${CMAKE_COMMAND} -E env CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
      CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} ${HEADROOM_CCACHE_PROGRAM})
    message(STATUS "headroom: compiling through ${HEADROOM_CCACHE_PROGRAM} (-DHEADROOM_CCACHE=OFF to stop)")
  endif()
endif()
