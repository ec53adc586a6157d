# Finds the reference LAPACK as a static archive (Debian: liblapack-dev's
# liblapack_pic.a), for headroom_interp's singular values and eigenvalues
# (docs/design.md #21). Not FindLAPACK: on Debian that finds liblapack.so.3, an
# alternative that points into OpenBLAS (or needs libblas.so.3, which does), and
# loading libopenblas next to BLIS lets its cblas_sgemm interpose on the GEMMs. The
# archive's BLAS calls (dgemm_, ...) bind to BLIS's BLAS interface instead.
#
# Defines ReferenceLAPACK_FOUND and the imported target ReferenceLAPACK::LAPACK
# (the archive, with libgfortran, its Fortran runtime).
find_library(ReferenceLAPACK_LIBRARY NAMES lapack_pic)
find_library(ReferenceLAPACK_GFORTRAN NAMES gfortran libgfortran.so.5)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(ReferenceLAPACK REQUIRED_VARS ReferenceLAPACK_LIBRARY ReferenceLAPACK_GFORTRAN)
if(ReferenceLAPACK_FOUND AND NOT TARGET ReferenceLAPACK::LAPACK)
  add_library(ReferenceLAPACK::LAPACK UNKNOWN IMPORTED)
  set_target_properties(ReferenceLAPACK::LAPACK PROPERTIES
    IMPORTED_LOCATION "${ReferenceLAPACK_LIBRARY}"
    INTERFACE_LINK_LIBRARIES "${ReferenceLAPACK_GFORTRAN}")
endif()
mark_as_advanced(ReferenceLAPACK_LIBRARY ReferenceLAPACK_GFORTRAN)
