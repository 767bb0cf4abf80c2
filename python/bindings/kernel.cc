// kiln.load(bundle_dir, name): any bundle as a callable. Its arguments are the manifest's
// parameters in order (arrays for pointers and tensor maps, ints for i32/i64, floats for f32; a
// kernel's work tables and workspaces are supplied by the runtime, not passed), checked as
// rt::LoadedKernel checks them; the grid is the kernel's rule unless grid= is given.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "python/bindings/bindings.h"
#include "python/bindings/call_device.h"
#include "python/bindings/status.h"

namespace nb = nanobind;

namespace kiln::py {
namespace {

using Kind = rt::ParamSpec::Kind;

bool Supplied(Kind k) { return k == Kind::kScheduleTable || k == Kind::kWorkspace; }

// The element type the kernel reads through a pointer or tensor map parameter ("" : not
// recorded, any array is taken).
std::string ElementOf(const rt::ParamSpec& p) {
  if (p.kind == Kind::kPointer) return p.elem;
  switch (p.tensor_map.dtype) {
    case rt::TmaDtype::kBF16:
      return "bf16";
    case rt::TmaDtype::kF16:
      return "f16";
    case rt::TmaDtype::kF32:
      return "f32";
    case rt::TmaDtype::kU8:
      return "bytes";
    case rt::TmaDtype::kU16:
      return "16-bit";
  }
  return "";
}

// Whether an array of `dtype` ("bf16", "u8", ...; `bits` wide) holds what a kernel reading
// `elem` expects. Floats must match, but 16-bit floats may come as their bits in 16-bit integers
// (NumPy has no bf16); 8-bit floats and bytes come as any 8-bit type (torch's float8 tensors
// reach kiln as uint8 views); integers as either signedness of their width, or as bytes where
// the kernel reads packed bytes in wider words (block scales, say).
bool Holds(const std::string& elem, const std::string& dtype, int bits) {
  if (elem.empty()) return true;
  if (elem == "bf16" || elem == "f16") return dtype == elem || dtype == "u16" || dtype == "i16";
  if (elem == "f32") return dtype == elem;
  if (elem == "e4m3" || elem == "e5m2" || elem == "bytes") return bits == 8 && dtype != "bool";
  if (elem == "16-bit") return bits == 16;
  if (elem == "i1") return dtype == "bool" || dtype == "u8" || dtype == "i8";
  const std::string width = elem.substr(1);
  return dtype == "i" + width || dtype == "u" + width || (bits == 8 && dtype != "bool");
}

// Python's bool or NumPy's (a flag where a number belongs is a mistake, not 0 or 1).
bool IsBool(nb::handle value) {
  if (nb::isinstance<nb::bool_>(value)) return true;
  const std::string type = nb::type_name(value.type()).c_str();
  return type == "bool" || type == "bool_" || type == "numpy.bool" || type == "numpy.bool_";
}

// Python's complex or NumPy's (complex64, complex128).
bool IsComplex(nb::handle value) {
  return PyComplex_Check(value.ptr()) ||
         std::string(nb::type_name(value.type()).c_str()).find("complex") != std::string::npos;
}

// A real number as the f32 a kernel parameter takes: one that f32 makes inf (1e300) or that is
// past a double's range (10**400) is refused; inf and NaN given as such pass.
float F32Of(nb::handle value, const std::string& where, const std::string& name) {
  double d = 0;
  try {
    d = nb::cast<double>(nb::float_(value));
  } catch (const nb::python_error& e) {
    if (!e.matches(PyExc_OverflowError) && !e.matches(PyExc_ValueError) &&
        !e.matches(PyExc_TypeError))
      throw;  // (an interrupt, memory exhausted: as they are)
    throw Error(absl::StrCat(where, ": argument '", name, "' is not a number an f32 holds (",
                             nb::str(e.value()).c_str(), ")"));
  }
  if (std::isfinite(d) && std::isinf(static_cast<float>(d)))
    throw Error(absl::StrCat(where, ": argument '", name, "' = ", nb::str(value).c_str(),
                             " does not fit its f32 (at most 3.4e38 in magnitude)"));
  return static_cast<float>(d);
}

class LoadedBundle {
 public:
  LoadedBundle(const std::string& dir, const std::string& name) : bundle_(BundleNamed(name, dir)) {}

  std::string Signature() const {
    std::vector<std::string> parts;
    for (const rt::ParamSpec& p : bundle_.manifest.params)
      if (!Supplied(p.kind)) {
        const std::string elem =
            p.kind == Kind::kPointer || p.kind == Kind::kTensorMap ? ElementOf(p) : "";
        parts.push_back(absl::StrCat(p.name, ": ", rt::ParamKindName(p.kind),
                                     elem.empty() ? "" : " of ", elem));
      }
    return absl::StrCat(bundle_.manifest.name, "(", absl::StrJoin(parts, ", "), ")");
  }

  // Returns what the emulator says of arrays the launch wrote in part (on a GPU, nothing).
  std::vector<std::string> Call(nb::args args,
                                std::optional<std::tuple<unsigned, unsigned, unsigned>> grid,
                                uint64_t stream, std::optional<uint64_t> seed) const {
    const rt::Manifest& m = bundle_.manifest;
    const std::string where = absl::StrCat(m.name, " (", m.source, ")");
    std::vector<const rt::ParamSpec*> params;
    for (const rt::ParamSpec& p : m.params)
      if (!Supplied(p.kind)) params.push_back(&p);
    if (args.size() != params.size())
      throw Error(absl::StrCat(where, " takes ", params.size(), " arguments, ", Signature(), "; ",
                               args.size(), " given"));
    std::vector<Array> arrays;
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i]->kind == Kind::kPointer || params[i]->kind == Kind::kTensorMap) {
        Array a;
        const std::string arg = absl::StrCat(where, ": argument ", i, " ('", params[i]->name, "')");
        if (!nb::try_cast(args[i], a))
          throw Error(nb::hasattr(args[i], "__dlpack__") || PyCapsule_CheckExact(args[i].ptr())
                          ? absl::StrCat(arg,
                                         " could not be taken as an array; a read-only one is "
                                         "refused, since a kernel may write any array it is "
                                         "given: pass a writable copy")
                          : absl::StrCat(arg,
                                         " must be an array (a CUDA tensor or a host array), not ",
                                         nb::type_name(args[i].type()).c_str()));
        const std::string elem = ElementOf(*params[i]);
        if (!Holds(elem, DtypeName(a), a.dtype().bits))
          throw Error(absl::StrCat(arg, " is read as ", elem, " by the kernel, not as ",
                                   DtypeName(a), " (", a.dtype().bits, "-bit elements)"));
        // The kernel reads it from its first element on, as one block (any order of its
        // dimensions: a transposed view is the kernel's to index).
        if (!IsDense(a))
          throw Error(absl::StrCat(arg, " of shape ", ShapeText(a),
                                   " has gaps or negative strides: the kernel reads one block "
                                   "from its first element; call .contiguous() (torch) or "
                                   "numpy.ascontiguousarray first"));
        arrays.push_back(a);
      }
    std::vector<const Array*> pointers;
    for (const Array& a : arrays) pointers.push_back(&a);
    CallDevice device(m.name, pointers, stream);
    if (seed && !device.emulated())
      throw Error(absl::StrCat(where,
                               ": seed= picks the emulator's order of threads (host arrays run "
                               "there); a GPU launch has no seed"));
    std::vector<rt::Arg> launch;
    size_t next_array = 0;
    for (size_t i = 0, user = 0; i < m.params.size(); ++i) {
      const rt::ParamSpec& p = m.params[i];
      if (p.kind == Kind::kScheduleTable) {
        launch.push_back(rt::Arg::Schedule());
        continue;
      }
      if (p.kind == Kind::kWorkspace) {
        launch.push_back(rt::Arg::Workspace());
        continue;
      }
      nb::handle value = args[user++];
      auto bad = [&](const char* want) {
        return Error(absl::StrCat(where, ": argument ", user - 1, " ('", p.name, "') must be ",
                                  want, ", not ", nb::type_name(value.type()).c_str()));
      };
      switch (p.kind) {
        case Kind::kPointer:
          launch.push_back(rt::Arg::Ptr(device.Bind(arrays[next_array++])));
          break;
        case Kind::kTensorMap: {
          const Array& a = arrays[next_array++];
          uint64_t bytes = a.dtype().bits / 8;  // (dense: its elements end to end)
          for (size_t d = 0; d < a.ndim(); ++d) bytes *= a.shape(d);
          launch.push_back(rt::Arg::Tensor(device.Bind(a)).Holding(bytes));
          break;
        }
        case Kind::kI32:
        case Kind::kI64: {
          // Any integer (NumPy's too: they have __index__), but not a bool or an array.
          if (!PyIndex_Check(value.ptr()) || IsBool(value) || nb::hasattr(value, "__dlpack__"))
            throw bad("an int");
          int overflow = 0;
          const long long v = PyLong_AsLongLongAndOverflow(nb::int_(value).ptr(), &overflow);
          if (overflow)
            throw Error(absl::StrCat(where, ": argument '", p.name, "' = ", nb::str(value).c_str(),
                                     " does not fit 64 bits"));
          if (p.kind == Kind::kI32 && (v < INT32_MIN || v > INT32_MAX))
            throw Error(
                absl::StrCat(where, ": argument '", p.name, "' = ", v, " does not fit its i32"));
          launch.push_back(p.kind == Kind::kI32 ? rt::Arg::I32(static_cast<int32_t>(v))
                                                : rt::Arg::I64(v));
          break;
        }
        case Kind::kF32:
          // A real number: Python's or NumPy's (float32, int64, ...), but not a bool, a string,
          // an array or a complex number (its imaginary part would be dropped).
          if ((!PyFloat_Check(value.ptr()) && !PyIndex_Check(value.ptr()) &&
               !nb::hasattr(value, "__float__")) ||
              IsBool(value) || nb::isinstance<nb::str>(value) || nb::hasattr(value, "__dlpack__") ||
              IsComplex(value))
            throw bad("a float");
          launch.push_back(rt::Arg::F32(F32Of(value, where, p.name)));
          break;
        default:
          throw Error(absl::StrCat(where, ": parameter '", p.name, "' of kind ",
                                   rt::ParamKindName(p.kind), " cannot be passed from Python"));
      }
    }
    std::optional<rt::Dim3> g;
    if (grid) g = rt::Dim3{std::get<0>(*grid), std::get<1>(*grid), std::get<2>(*grid)};
    // An empty problem launches nothing, as Triton's launcher does: grid= with a 0, a rule
    // reading a size of 0 (n/256 with n = 0), or a schedule table of no tiles (a GEMM's M or N of
    // 0). The arguments are still held to the signature.
    const rt::Symbols symbols = rt::SymbolsOf(m, launch);
    if ((g ? g->x == 0 || g->y == 0 || g->z == 0 : m.GridIsEmpty(symbols)) ||
        m.TablesAreEmpty(symbols)) {
      ThrowIfError(rt::CheckArgs(m, launch));
      return {};
    }
    std::vector<std::string> partly_written = device.Launch(bundle_, launch, g, seed);
    device.Finish();
    return partly_written;
  }

  const rt::Bundle& bundle() const { return bundle_; }

 private:
  const rt::Bundle& bundle_;
};

}  // namespace

void BindKernels(nb::module_& m) {
  nb::class_<LoadedBundle>(m, "Kernel",
                           "A bundle's kernel, launched on CUDA tensors (on `stream`) or run on "
                           "the PTX emulator with host arrays.")
      .def(nb::init<const std::string&, const std::string&>(), nb::arg("bundle_dir"),
           nb::arg("name"))
      .def("__call__", &LoadedBundle::Call, nb::arg("args"), nb::kw_only(),
           nb::arg("grid") = nb::none(), nb::arg("stream") = 0, nb::arg("seed") = nb::none())
      .def_prop_ro("signature", &LoadedBundle::Signature)
      .def_prop_ro("name", [](const LoadedBundle& k) { return k.bundle().manifest.name; })
      .def_prop_ro("source", [](const LoadedBundle& k) { return k.bundle().manifest.source; })
      .def_prop_ro("ptx", [](const LoadedBundle& k) { return k.bundle().ptx; })
      .def("__repr__", [](const LoadedBundle& k) { return "<kiln.Kernel " + k.Signature() + ">"; });
}

}  // namespace kiln::py
