// Forced into every translation unit before anything else (the -include option on
// the headroom_options CMake target), so every xtensor container in the project has
// the same allocator.
//
// DESIGN.md asks for 64-byte-aligned storage: with XTENSOR_USE_XSIMD alone, xsimd
// aligns to the compile-time SIMD width (16 bytes without -march flags), and 16-byte
// alignment made OpenBLAS's two-thread GEMMs erratic here. 64 bytes is a cache line
// and an AVX-512 register.
#pragma once

#include <xsimd/xsimd.hpp>

#define XTENSOR_DEFAULT_ALLOCATOR(T) xsimd::aligned_allocator<T, 64>
