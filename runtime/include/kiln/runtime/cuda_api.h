// The slice of the CUDA Driver API that kiln calls, declared here so that nothing links against
// CUDA and the runtime builds on machines without the toolkit. Values follow cuda.h (CUDA 12/13);
// tests/unit/cuda_api_test.cc checks them against cuda.h wherever the toolkit is installed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::cu {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
inline constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
inline constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
inline constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
inline constexpr int CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3;
inline constexpr int CU_FUNC_ATTRIBUTE_NUM_REGS = 4;
inline constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
inline constexpr int CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14;
inline constexpr int CU_JIT_INFO_LOG_BUFFER = 3;
inline constexpr int CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4;
inline constexpr int CU_JIT_ERROR_LOG_BUFFER = 5;
inline constexpr int CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
inline constexpr int CU_JIT_LOG_VERBOSE = 12;
inline constexpr int CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4;
inline constexpr int CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;
inline constexpr unsigned CU_EVENT_DEFAULT = 0;

// CUlaunchAttributeValue is a 64-byte union; kiln sets the cluster dimension and programmatic
// dependent launch.
union CUlaunchAttributeValue {
  char pad[64];
  unsigned long long align;  // the driver's union holds pointers
  struct {
    unsigned x, y, z;
  } clusterDim;
  int programmaticStreamSerializationAllowed;
};
struct CUlaunchAttribute {
  int id;
  char pad[8 - sizeof(int)];
  CUlaunchAttributeValue value;
};
struct CUlaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned numAttrs;
};

// CUtensorMap: 128 bytes, 128-byte aligned (as cuda.h declares it), opaque.
struct alignas(128) CUtensorMap {
  unsigned long long opaque[16];
};

// Function pointer types, one per entry point (the _v2 names are what cuda.h maps them to).
using PFN_cuInit = CUresult (*)(unsigned);
using PFN_cuDriverGetVersion = CUresult (*)(int*);
using PFN_cuDeviceGet = CUresult (*)(CUdevice*, int);
using PFN_cuDeviceGetCount = CUresult (*)(int*);
using PFN_cuDeviceGetName = CUresult (*)(char*, int, CUdevice);
using PFN_cuDeviceGetAttribute = CUresult (*)(int*, int, CUdevice);
using PFN_cuDevicePrimaryCtxRetain = CUresult (*)(CUcontext*, CUdevice);
using PFN_cuCtxSetCurrent = CUresult (*)(CUcontext);
using PFN_cuCtxGetCurrent = CUresult (*)(CUcontext*);
using PFN_cuCtxGetDevice = CUresult (*)(CUdevice*);
using PFN_cuCtxSynchronize = CUresult (*)();
using PFN_cuModuleLoadDataEx = CUresult (*)(CUmodule*, const void*, unsigned, int*, void**);
using PFN_cuModuleUnload = CUresult (*)(CUmodule);
using PFN_cuModuleGetFunction = CUresult (*)(CUfunction*, CUmodule, const char*);
using PFN_cuFuncSetAttribute = CUresult (*)(CUfunction, int, int);
using PFN_cuFuncGetAttribute = CUresult (*)(int*, int, CUfunction);
using PFN_cuLaunchKernelEx = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
using PFN_cuOccupancyMaxActiveClusters = CUresult (*)(int*, CUfunction, const CUlaunchConfig*);
using PFN_cuMemAlloc = CUresult (*)(CUdeviceptr*, size_t);
using PFN_cuMemFree = CUresult (*)(CUdeviceptr);
using PFN_cuMemcpyHtoD = CUresult (*)(CUdeviceptr, const void*, size_t);
using PFN_cuMemcpyDtoH = CUresult (*)(void*, CUdeviceptr, size_t);
using PFN_cuMemcpyDtoD = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t);
using PFN_cuMemsetD8 = CUresult (*)(CUdeviceptr, unsigned char, size_t);
using PFN_cuEventCreate = CUresult (*)(CUevent*, unsigned);
using PFN_cuEventRecord = CUresult (*)(CUevent, CUstream);
using PFN_cuEventSynchronize = CUresult (*)(CUevent);
using PFN_cuEventElapsedTime = CUresult (*)(float*, CUevent, CUevent);
using PFN_cuEventDestroy = CUresult (*)(CUevent);
using PFN_cuGetErrorString = CUresult (*)(CUresult, const char**);
using PFN_cuGetErrorName = CUresult (*)(CUresult, const char**);
using PFN_cuMemHostAlloc = CUresult (*)(void**, size_t, unsigned);
using PFN_cuMemHostGetDevicePointer = CUresult (*)(CUdeviceptr*, void*, unsigned);
using PFN_cuMemFreeHost = CUresult (*)(void*);
using PFN_cuModuleGetGlobal = CUresult (*)(CUdeviceptr*, size_t*, CUmodule, const char*);
using PFN_cuStreamIsCapturing = CUresult (*)(CUstream, int*);  // CUstreamCaptureStatus
inline constexpr int CU_STREAM_CAPTURE_STATUS_NONE = 0;
inline constexpr unsigned CU_MEMHOSTALLOC_PORTABLE = 0x01, CU_MEMHOSTALLOC_DEVICEMAP = 0x02;
using PFN_cuTensorMapEncodeTiled = CUresult (*)(CUtensorMap*, int dataType, unsigned rank,
                                                void* globalAddress, const uint64_t* globalDim,
                                                const uint64_t* globalStrides,
                                                const unsigned* boxDim,
                                                const unsigned* elementStrides, int interleave,
                                                int swizzle, int l2Promotion, int oobFill);

}  // namespace kiln::cu
