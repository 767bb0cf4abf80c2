#include "examples/cublas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kiln/runtime/driver.h"

namespace kiln::examples {
namespace {

// cublas_api.h / library_types.h values.
constexpr int kOpN = 0, kOpT = 1, kR16F = 2, kR16BF = 14, kR32F = 0, kCompute32F = 68,
              kCompute16F = 64, kGemmDefault = -1;

int DataType(const std::string& t) { return t == "f16" ? kR16F : t == "f32" ? kR32F : kR16BF; }

// One matrix as a cuBLAS (column-major) operand: op and leading dimension, for the matrix itself
// or its transpose.
struct Operand {
  int op, ld;
};
Operand AsOperand(const std::string& order, int64_t rows, int64_t cols, bool transposed) {
  const bool col = order == "col";
  if (!transposed) return {col ? kOpN : kOpT, static_cast<int>(col ? rows : cols)};
  return {col ? kOpT : kOpN, static_cast<int>(col ? rows : cols)};
}

}  // namespace

absl::StatusOr<Cublas*> Cublas::Get() {
  static Cublas* instance = nullptr;
  static absl::Status status;
  static std::once_flag once;
  std::call_once(once, [] {
    if (absl::StatusOr<rt::Driver*> d = rt::Driver::Get(); !d.ok()) {
      status = d.status();
      return;
    }
    if (const char* ref = std::getenv("KILN_REFERENCE"); ref && std::string(ref) == "kiln") {
      status = absl::UnavailableError("cuBLAS disabled by KILN_REFERENCE=kiln");
      return;
    }
    void* lib = nullptr;
    std::string name;
    for (const char* candidate :
         {"libcublas.so.13", "libcublas.so.12", "libcublas.so",
          "/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.12"}) {
      if ((lib = dlopen(candidate, RTLD_NOW | RTLD_LOCAL))) {
        name = candidate;
        break;
      }
    }
    if (!lib) {
      status = absl::UnavailableError("no libcublas found");
      return;
    }
    auto create = reinterpret_cast<CreateFn>(dlsym(lib, "cublasCreate_v2"));
    auto gemm = reinterpret_cast<GemmExFn>(dlsym(lib, "cublasGemmEx"));
    if (!create || !gemm) {
      status = absl::UnavailableError(absl::StrCat(name, " lacks cublasCreate_v2/cublasGemmEx"));
      return;
    }
    auto* c = new Cublas();
    c->gemm_ex_ = gemm;
    c->library_ = name;
    if (int rc = create(&c->handle_); rc != 0) {
      status = absl::UnavailableError(absl::StrCat("cublasCreate failed with status ", rc));
      return;
    }
    instance = c;
  });
  if (!status.ok()) return status;
  return instance;
}

absl::Status Cublas::Gemm(const GemmSpec& spec, const rt::GemmSize& size, uint64_t a, uint64_t b,
                          uint64_t c, bool spec_accumulator) const {
  const float alpha32 = 1.0f, beta32 = 0.0f;
  const uint16_t alpha16 = 0x3c00, beta16 = 0;  // fp16 1.0 and 0.0: compute-16F scalars are half
  const bool half_compute = spec_accumulator && spec.acc_type == "f16";
  const void* alpha = half_compute ? static_cast<const void*>(&alpha16) : &alpha32;
  const void* beta = half_compute ? static_cast<const void*>(&beta16) : &beta32;
  const int compute = half_compute ? kCompute16F : kCompute32F;
  const int in = DataType(spec.in_type), out = DataType(spec.out_type);
  int rc;
  if (spec.c_order == "col") {  // C = A B
    Operand oa = AsOperand(spec.a_order, size.m, size.k, false);
    Operand ob = AsOperand(spec.b_order, size.k, size.n, false);
    rc = gemm_ex_(handle_, oa.op, ob.op, size.m, size.n, size.k, alpha, reinterpret_cast<void*>(a),
                  in, oa.ld, reinterpret_cast<void*>(b), in, ob.ld, beta,
                  reinterpret_cast<void*>(c), out, size.m, compute, kGemmDefault);
  } else {  // row-major C: C^T = B^T A^T in column-major terms
    Operand ob = AsOperand(spec.b_order, size.k, size.n, true);
    Operand oa = AsOperand(spec.a_order, size.m, size.k, true);
    rc = gemm_ex_(handle_, ob.op, oa.op, size.n, size.m, size.k, alpha, reinterpret_cast<void*>(b),
                  in, ob.ld, reinterpret_cast<void*>(a), in, oa.ld, beta,
                  reinterpret_cast<void*>(c), out, size.n, compute, kGemmDefault);
  }
  if (rc != 0) return absl::InternalError(absl::StrCat("cublasGemmEx failed with status ", rc));
  return absl::OkStatus();
}

}  // namespace kiln::examples
