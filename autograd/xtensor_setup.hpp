// Checks that this translation unit builds xtensor containers the way headroom's
// libraries were built. Every headroom header that includes xtensor includes this
// file first.
//
// Two settings change the type xt::xarray<T> (its allocator), so every translation
// unit that shares a container with headroom must agree on them:
//   XTENSOR_USE_XSIMD                 fast broadcasting (docs/design.md, "Performance model");
//   XTENSOR_DEFAULT_ALLOCATOR(T)      xsimd::aligned_allocator<T, 64>.
// Both are usage requirements of the headroom::autograd CMake target
// (autograd/CMakeLists.txt), so they are on the compiler's command line of every
// target that links it, before any header is read, in whatever order a file then
// includes xtensor and headroom.
//
// docs/design.md ("Performance model") asks for 64-byte-aligned storage: with XTENSOR_USE_XSIMD alone, xsimd
// aligns to the compile-time SIMD width (16 bytes without -march flags), and 16-byte
// alignment made OpenBLAS's two-thread GEMMs erratic here. 64 bytes is a cache line
// and an AVX-512 register.
#pragma once

#if !defined(XTENSOR_USE_XSIMD) || !defined(XTENSOR_DEFAULT_ALLOCATOR)
#error "headroom: this translation unit lacks XTENSOR_USE_XSIMD and XTENSOR_DEFAULT_ALLOCATOR(T)=xsimd::aligned_allocator<T, 64>, which change the type xt::xarray<T>. Link the CMake target headroom::autograd (or a target that links it), which puts both on the command line, instead of adding headroom's include directory by hand."
#endif

#include <cstddef>
#include <type_traits>

#include <xtensor/xtensor_config.hpp>  // includes xsimd under XTENSOR_USE_XSIMD

namespace headroom {

// The alignment of every xtensor container's storage, in bytes.
inline constexpr std::size_t kArrayAlignment = 64;

}  // namespace headroom

static_assert(std::is_same_v<XTENSOR_DEFAULT_ALLOCATOR(float), xsimd::aligned_allocator<float, headroom::kArrayAlignment>>,
              "headroom: XTENSOR_DEFAULT_ALLOCATOR(T) must be xsimd::aligned_allocator<T, 64>, as in headroom's "
              "libraries (link the CMake target headroom::autograd, and define no allocator of your own)");
