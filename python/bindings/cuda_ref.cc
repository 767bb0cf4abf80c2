// kiln._kiln._cuda_ref: a DLPack capsule over a CUDA tensor's memory, made from its fields
// (address, shape, strides, type, device), which the bindings then take as they take any DLPack
// producer's. torch's own export (__dlpack__) costs more than the rest of a small kiln call
// (docs/perf/2026-11-30-python-call-host-cost-2.md); the kiln package uses this for torch CUDA
// tensors of the types kiln reads and keeps __dlpack__ for everything else.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "python/bindings/bindings.h"
#include "python/bindings/status.h"

namespace nb = nanobind;

namespace kiln::py {
namespace {

constexpr int kMaxRank = 8;
constexpr const char* kCapsule = "dltensor";  // an unused DLPack capsule's name, by the protocol

// DLPack's DLManagedTensor, with room for the shape and strides it points at.
struct ManagedRef {
  nb::dlpack::dltensor tensor;
  void* manager_ctx = nullptr;
  void (*deleter)(ManagedRef*) = nullptr;
  int64_t shape[kMaxRank] = {}, strides[kMaxRank] = {};
};

void DeleteRef(ManagedRef* ref) { delete ref; }

// A capsule nobody consumed still owns its tensor; a consumer renames it and calls the deleter.
void DeleteUnusedCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsule)) return;
  auto* ref = static_cast<ManagedRef*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (ref && ref->deleter) ref->deleter(ref);
}

nb::object CudaRef(uint64_t address, const nb::tuple& shape, const nb::tuple& strides, uint8_t code,
                   uint8_t bits, int32_t device) {
  const size_t rank = nb::len(shape);
  if (rank > kMaxRank || nb::len(strides) != rank)
    throw Error(absl::StrCat("kiln: a tensor of rank ", rank, " with ", nb::len(strides),
                             " strides (at most ", kMaxRank, " dimensions)"));
  auto* ref = new ManagedRef();
  ref->deleter = DeleteRef;
  ref->tensor.data = reinterpret_cast<void*>(address);
  ref->tensor.device = {nb::device::cuda::value, device};
  ref->tensor.ndim = static_cast<int32_t>(rank);
  ref->tensor.dtype = {code, bits, 1};
  for (size_t i = 0; i < rank; ++i) {
    ref->shape[i] = nb::cast<int64_t>(shape[i]);
    ref->strides[i] = nb::cast<int64_t>(strides[i]);
  }
  ref->tensor.shape = ref->shape;
  ref->tensor.strides = ref->strides;
  PyObject* capsule = PyCapsule_New(ref, kCapsule, DeleteUnusedCapsule);
  if (!capsule) {
    delete ref;
    throw nb::python_error();
  }
  return nb::steal(capsule);
}

}  // namespace

void BindCudaRef(nb::module_& m) {
  m.def("_cuda_ref", &CudaRef, nb::arg("address"), nb::arg("shape"), nb::arg("strides"),
        nb::arg("code"), nb::arg("bits"), nb::arg("device"),
        "A DLPack capsule over CUDA memory: address, shape and strides (elements), DLPack type "
        "code and bits, device ordinal. It does not keep the memory alive.");
}

}  // namespace kiln::py
