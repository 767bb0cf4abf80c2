// gemm/restride16: a copy of a rows x cols matrix of 16-bit elements whose rows are `lds`
// elements apart into one whose rows are `ldd` apart, `ldd` a multiple of 8. The GEMM entry point
// runs it on an operand TMA cannot stride (K, or an MN-major operand's M or N, no multiple of 8;
// a leading dimension or a pointer off 16 bytes) before the tile kernel reads the copy. Two bytes
// an element through any stride, coalesced along the row; the columns past `cols` are left as
// they are (the tile kernel's map ends at `cols`, so TMA reads zeros there).
#include "absl/strings/str_cat.h"
#include "examples/registry.h"
#include "kiln/memory_ops.h"

namespace kiln::examples {
namespace {

constexpr int THREADS = 256, PER_THREAD = 8, SPAN = THREADS * PER_THREAD;

absl::StatusOr<KernelDef> BuildRestride() {
  Kernel k("gemm/restride16", sm80(), {THREADS});
  Value src = k.PtrParam("src", bf16), dst = k.PtrParam("dst", bf16);
  Value rows = k.I32Param("rows"), cols = k.I32Param("cols"), lds = k.I32Param("lds"),
        ldd = k.I32Param("ldd");
  (void)rows;  // the grid's x
  k.Grid("rows", absl::StrCat("cols/", SPAN));
  Value row = k.BlockIdx(0).To(i64), first = k.BlockIdx(1) * SPAN + k.ThreadIdx();
  Value from = src + row * lds.To(i64), to = dst + row * ldd.To(i64);
  // Every load of the thread issued before the first store waits on one.
  std::vector<Value> inside, v;
  for (int i = 0; i < PER_THREAD; ++i) {
    Value col = first + i * THREADS;
    inside.push_back(col < cols);
    v.push_back(LoadGlobal(from + col.To(i64), 1, {.mask = inside.back()}));
  }
  for (int i = 0; i < PER_THREAD; ++i)
    StoreGlobal(to + (first + i * THREADS).To(i64), v[i], {.mask = inside[i]});
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("gemm/restride16",
             "the GEMM entry point's copy of an operand TMA cannot stride into rows 16 bytes apart "
             "(any 16-bit "
             "elements, any source stride)",
             BuildRestride);
}  // namespace kiln::examples
