#include "python/bindings/arrays.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "python/bindings/status.h"

namespace kiln::py {

namespace dl = nanobind::dlpack;

std::string DtypeName(const Array& a) {
  const dl::dtype t = a.dtype();
  const auto code = static_cast<dl::dtype_code>(t.code);
  if (t.lanes != 1) return "?";
  if (code == dl::dtype_code::Bfloat && t.bits == 16) return "bf16";
  if (code == dl::dtype_code::Float) return absl::StrCat("f", t.bits);
  if (code == dl::dtype_code::Int) return absl::StrCat("i", t.bits);
  if (code == dl::dtype_code::UInt) return absl::StrCat("u", t.bits);
  if (code == dl::dtype_code::Bool) return "bool";
  if (code == dl::dtype_code::Complex) return absl::StrCat("complex", t.bits);
  return absl::StrCat("?(DLPack type code ", t.code, ", ", t.bits, " bits)");
}

Where WhereOf(const Array& a, const std::string& what) {
  const int type = a.device_type();
  if (type == nanobind::device::cpu::value) return Where::kHost;
  if (type == nanobind::device::cuda::value) return Where::kCuda;
  throw Error(absl::StrCat(what, " lives on a device kiln cannot use (DLPack device type ", type,
                           "): pass a CUDA tensor or a host array"));
}

uint64_t Address(const Array& a) {
  return reinterpret_cast<uint64_t>(a.data_handle()) + a.byte_offset();
}

bool IsContiguous(const Array& a) {
  for (size_t i = 0; i < a.ndim(); ++i)
    if (a.shape(i) == 0) return true;  // no elements: any strides (NumPy's and torch's differ)
  int64_t expect = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expect) return false;
    expect *= static_cast<int64_t>(a.shape(i));
  }
  return true;
}

bool IsDense(const Array& a) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, extent) of the dimensions past 1
  for (size_t i = 0; i < a.ndim(); ++i) {
    if (a.shape(i) == 0) return true;
    if (a.shape(i) != 1) dims.push_back({a.stride(i), static_cast<int64_t>(a.shape(i))});
  }
  std::sort(dims.begin(), dims.end());
  int64_t expect = 1;
  for (const auto& [stride, extent] : dims) {
    if (stride != expect) return false;
    expect *= extent;
  }
  return true;
}

std::vector<int64_t> ShapeOf(const Array& a) {
  std::vector<int64_t> s(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) s[i] = static_cast<int64_t>(a.shape(i));
  return s;
}

std::string ShapeText(const Array& a) {
  return absl::StrCat("(", absl::StrJoin(ShapeOf(a), ", "), a.ndim() == 1 ? ",)" : ")");
}

void Require(const Array& a, const std::string& call, const std::string& what, int rank,
             const std::vector<std::string>& dtypes, bool contiguous, bool result) {
  if (rank >= 0 && static_cast<int>(a.ndim()) != rank)
    throw Error(absl::StrCat(call, ": ", what, " must have rank ", rank, ", not ", a.ndim(),
                             " (shape ", ShapeText(a), ")"));
  const std::string t = DtypeName(a);
  bool known = false;
  for (const std::string& d : dtypes) known |= d == t;
  if (!known)
    throw Error(
        absl::StrCat(call, ": ", what, " must be ", absl::StrJoin(dtypes, " or "), ", not ", t));
  if (contiguous && !IsContiguous(a))
    throw Error(absl::StrCat(
        call, ": ", what, " of shape ", ShapeText(a), " must be contiguous (row-major, packed); ",
        result ? "give a row-major array (a packed copy would not receive the result), or leave "
                 "out= off to have the result returned"
               : "call .contiguous() (torch) or numpy.ascontiguousarray first"));
}

void RequireEpilogueShapes(const std::string& call, const std::optional<Array>& c,
                           const std::optional<Array>& bias, const std::optional<Array>& residual,
                           const Array& out, int64_t n) {
  for (const auto& [what, x] : {std::pair{"c", &c}, std::pair{"residual", &residual}})
    if (*x && ShapeOf(**x) != ShapeOf(out))
      throw Error(
          absl::StrCat(call, ": ", what, " has shape ", ShapeText(**x), "; out ", ShapeText(out)));
  if (bias && (bias->ndim() != 1 || static_cast<int64_t>(bias->shape(0)) != n))
    throw Error(absl::StrCat(call, ": bias has shape ", ShapeText(*bias),
                             "; one value per column of out: (", n, ",)"));
}

void RequirePackedBias(const std::string& call, const Array& bias) {
  if (bias.ndim() == 1 && bias.shape(0) > 1 && bias.stride(0) != 1)
    throw Error(absl::StrCat(
        call, ": bias of shape ", ShapeText(bias), " has a stride of ", bias.stride(0),
        "; it must be packed: call .contiguous() (torch) or numpy.ascontiguousarray first"));
}

}  // namespace kiln::py
