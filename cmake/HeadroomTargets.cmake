# How headroom's own targets are built. Nothing here reaches a project that links
# headroom: warnings and sanitizers are PRIVATE, and what a consumer must share with
# the libraries (C++20, XTENSOR_USE_XSIMD, the aligned allocator) is a usage
# requirement of headroom_autograd (autograd/CMakeLists.txt).

# Warnings, -Werror on request, and the sanitizer or fuzzer instrumentation, for one
# of headroom's libraries, executables or tests.
function(headroom_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
  if(HEADROOM_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(HEADROOM_SANITIZE)
    target_compile_options(${target} PRIVATE
      -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
  if(HEADROOM_FUZZ)
    # The fuzzer sees the branches of the parser and the model code, and stops at the
    # first memory error or undefined behaviour (fuzz/README.md).
    target_compile_options(${target} PRIVATE
      -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# One layer's library, headroom_<layer> in <layer>/: the headroom::<layer> alias, the
# include root (the source tree here, include/ once installed), the defaults above,
# and, with HEADROOM_INSTALL, its archive and its headers under include/<layer>/.
function(headroom_library target)
  string(REGEX REPLACE "^headroom_" "" layer ${target})
  add_library(headroom::${layer} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${layer})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  headroom_target_defaults(${target})
  if(HEADROOM_INSTALL)
    install(TARGETS ${target} EXPORT headroomTargets
      ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
      LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
    install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${layer}
      FILES_MATCHING PATTERN "*.hpp")
  endif()
endfunction()
