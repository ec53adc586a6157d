# Finds BLIS (Debian: libblis-pthread-dev, or the -openmp or -serial variant), the
# BLAS-like library whose kernels are chosen at run time from the CPU's features
# (AVX2, AVX-512) rather than from a table of CPU models.
#
# Defines BLIS_FOUND, BLIS_INCLUDE_DIR (holding blis.h and BLIS's own cblas.h),
# BLIS_LIBRARY and the imported target BLIS::BLIS. The pthread variant comes first:
# it is the one whose thread count bli_thread_set_num_threads sets at run time.
set(_blis_variants blis-pthread blis-openmp blis-serial blis)
find_path(BLIS_INCLUDE_DIR blis.h PATH_SUFFIXES ${_blis_variants})
find_library(BLIS_LIBRARY blis PATH_SUFFIXES ${_blis_variants})
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(BLIS REQUIRED_VARS BLIS_LIBRARY BLIS_INCLUDE_DIR)
if(BLIS_FOUND AND NOT TARGET BLIS::BLIS)
  add_library(BLIS::BLIS UNKNOWN IMPORTED)
  set_target_properties(BLIS::BLIS PROPERTIES
    IMPORTED_LOCATION "${BLIS_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${BLIS_INCLUDE_DIR}")
endif()
mark_as_advanced(BLIS_INCLUDE_DIR BLIS_LIBRARY)
