#include "ops/attention/kernels/blackwell_bwd_parts.h"

#include "absl/strings/str_cat.h"

namespace kiln::examples::attention_sm100 {

void RunBackwardRoles(Kernel& k, const Tmem& tmem, const std::function<void()>& init,
                      const std::function<void()>& load, const std::function<void()>& mma,
                      const std::function<void()>& softmax) {
  Value warp = k.WarpId();
  k.If(k.ThreadIdx() == 0, init);
  k.If(warp == 5, [&] { k.TmemAlloc(tmem); });
  k.SyncThreads();
  k.TcgenFenceAfterSync();
  k.If(warp == 4, load);
  k.If(warp == 5, mma);
  k.If(warp < 4, softmax);
  k.TcgenFenceBeforeSync();
  k.SyncThreads();
  k.If(warp == 5, [&] { k.TmemFree(tmem); });
}

std::vector<std::string> BlackwellBackwardVariants() {
  std::vector<std::string> v;
  for (const char* d : {"d64", "d128"})
    for (const char* type : {"", ".f16"})
      for (const char* causal : {"", ".causal"}) v.push_back(absl::StrCat(d, type, causal));
  return v;
}

}  // namespace kiln::examples::attention_sm100
