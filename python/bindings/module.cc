// The _kiln extension module: the host API for Python (the kiln package wraps it).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "kiln/emulator.h"
#include "python/bindings/bindings.h"
#include "python/bindings/call_device.h"
#include "python/bindings/status.h"

namespace nb = nanobind;

NB_MODULE(_kiln, m) {
  m.doc() = "kiln's host API: its kernels on CUDA tensors, or on the PTX emulator";
  nb::exception<kiln::py::Error>(m, "Error", PyExc_RuntimeError);
  // A long emulated call stops at Ctrl-C: the launch checks for signals as it runs (it holds the
  // GIL), and the KeyboardInterrupt they raise goes up in place of a kiln.Error (status.h).
  kiln::emu::SetInterruptCheck([] {
    return PyErr_CheckSignals() == 0 ? absl::OkStatus()
                                     : absl::CancelledError(kiln::py::kInterrupted);
  });
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
