// The _kiln extension module: the host API for Python (the kiln package wraps it).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "python/bindings/bindings.h"
#include "python/bindings/call_device.h"
#include "python/bindings/status.h"

namespace nb = nanobind;

NB_MODULE(_kiln, m) {
  m.doc() = "kiln's host API: its kernels on CUDA tensors, or on the PTX emulator";
  nb::exception<kiln::py::Error>(m, "Error", PyExc_RuntimeError);
  m.def("bundle_dir", &kiln::py::BundleDir, "The directory the ops read their kernels from.");
  m.def("set_bundle_dir", &kiln::py::SetBundleDir, nb::arg("path"));
  kiln::py::BindKernels(m);
  kiln::py::BindRowOps(m);
  kiln::py::BindGemm(m);
  kiln::py::BindGemmFp8(m);
  kiln::py::BindGroupedGemm(m);
  kiln::py::BindAttention(m);
  kiln::py::BindCudaRef(m);
}
