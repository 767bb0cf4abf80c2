// kiln declares the slice of the driver API it uses itself; check it against cuda.h.
#include "kiln/runtime/cuda_api.h"

#include "gtest/gtest.h"
#ifdef KILN_HAVE_CUDA_H
#include <cuda.h>
#endif

namespace {

TEST(CudaApi, MatchesCudaH) {
#ifndef KILN_HAVE_CUDA_H
  GTEST_SKIP() << "cuda.h not installed: nothing to compare against";
#else
  namespace cu = kiln::cu;
  static_assert(sizeof(cu::CUtensorMap) == sizeof(CUtensorMap));
  static_assert(alignof(cu::CUtensorMap) == alignof(CUtensorMap));
  static_assert(sizeof(cu::CUlaunchAttribute) == sizeof(CUlaunchAttribute));
  static_assert(offsetof(cu::CUlaunchAttribute, value) == offsetof(CUlaunchAttribute, value));
  static_assert(sizeof(cu::CUlaunchConfig) == sizeof(CUlaunchConfig));
  static_assert(offsetof(cu::CUlaunchConfig, attrs) == offsetof(CUlaunchConfig, attrs));
  static_assert(cu::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ==
                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  static_assert(cu::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
  static_assert(cu::CU_JIT_ERROR_LOG_BUFFER == CU_JIT_ERROR_LOG_BUFFER);
  static_assert(cu::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES);
  static_assert(cu::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT ==
                CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  static_assert(cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ==
                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  static_assert(cu::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN ==
                CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  static_assert(cu::CU_FUNC_ATTRIBUTE_NUM_REGS == CU_FUNC_ATTRIBUTE_NUM_REGS);
  SUCCEED();
#endif
}

}  // namespace
