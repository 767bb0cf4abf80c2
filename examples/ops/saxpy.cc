// ops/saxpy: y = a * x + y over n f32 elements, one per thread, any n (threads past the end do
// nothing). Not a GEMM: its parameters are two pointers, an f32 and an i64, and its grid rule
// n/256 is evaluated from the launch's n (kiln::rt::LoadedKernel::Launch(args)).
#include "examples/registry.h"

namespace kiln::examples {
namespace {

absl::StatusOr<KernelDef> BuildSaxpy() {
  constexpr int THREADS = 256;
  Kernel k("ops/saxpy", sm80(), {THREADS});
  Value x = k.PtrParam("x", f32), y = k.PtrParam("y", f32);
  Value a = k.F32Param("a"), n = k.I64Param("n");
  k.Grid("n/256");
  Value i = k.BlockIdx(0) * THREADS + k.ThreadIdx();
  k.If(i.To(i64) < n, [&] {
    Value yi = y + i;
    k.Store(yi, Fma(a, k.Load(x + i), k.Load(yi)));
  });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("ops/saxpy", "y = a * x + y over any n f32 elements (f32 and i64 parameters)",
             BuildSaxpy);
}  // namespace kiln::examples
