// The pieces of the _kiln extension module, each binding its part of the host API.
#pragma once

#include <nanobind/nanobind.h>

namespace kiln::py {

void BindKernels(nanobind::module_& m);      // kiln.Kernel (kiln.load)
void BindRowOps(nanobind::module_& m);       // rms_norm, layer_norm, softmax
void BindGemm(nanobind::module_& m);         // gemm
void BindGemmFp8(nanobind::module_& m);      // gemm of 8-bit inputs
void BindGroupedGemm(nanobind::module_& m);  // grouped_gemm
void BindAttention(nanobind::module_& m);    // attention
void BindCudaRef(nanobind::module_& m);      // _cuda_ref: torch CUDA tensors without __dlpack__

}  // namespace kiln::py
