// The merge of split-KV attention's parts (attention/combine's rule, combine.cc), for the kernels
// that run it: attention/combine, and attention/hopper's split, whose last part of a tile merges.
#pragma once

#include "kiln/kernel.h"

namespace kiln::examples {

// Where the parts lie: part p's row r of O at (p * rows + r) * D of o_parts, its lse at
// p * rows + r of lse_parts; the merged row r goes to o and lse.
struct SplitParts {
  Value o_parts, lse_parts, o, lse, rows, P, D;
  // The parts were written by other CTAs of the same launch (the split kernel's last part
  // merges): their loads must not take the read-only (non-coherent) path, which the PTX ISA allows
  // only for data that no one writes while the kernel runs (ld.global.nc).
  bool written_in_this_launch = false;
};

// Row `row`'s 8 elements from column d0 (D a multiple of 8), merged over the P parts in part
// order (the same inputs give the same bytes), and its lse where d0 = 0:
//   lse = log sum_p exp(lse_p),  O = sum_p exp(lse_p - lse) O_p;
// a part that saw no key weighs 0; a row no part saw gets O = 0 and lse = -inf.
void MergePartsOfRow(Kernel& k, Scalar in, const SplitParts& parts, const Value& row,
                     const Value& d0);

}  // namespace kiln::examples
