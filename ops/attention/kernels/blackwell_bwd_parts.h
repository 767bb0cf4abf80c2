// What attention/blackwell_dkdv and attention/blackwell_dq (FlashAttention's backward on tcgen05)
// share: their warp roles around one tensor memory allocation, and the variants the build bundles.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/kernel.h"

namespace kiln::examples::attention_sm100 {

// Thread 0 runs `init` (the barriers); warp 5 allocates `tmem`; the block meets; then warp 4
// runs `load`, warp 5 `mma` and warps 0-3 `softmax`; the block meets again and warp 5 frees the
// tensor memory.
void RunBackwardRoles(Kernel& k, const Tmem& tmem, const std::function<void()>& init,
                      const std::function<void()>& load, const std::function<void()>& mma,
                      const std::function<void()>& softmax);

// D 64 and 128, bf16 and f16, causal and not.
std::vector<std::string> BlackwellBackwardVariants();

}  // namespace kiln::examples::attention_sm100
