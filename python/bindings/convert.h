// Host arrays hold f32 (NumPy has no bf16): the ops round them to the kernel's 16-bit type on the
// way into the emulator and widen its 16-bit results on the way out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "python/bindings/arrays.h"

namespace kiln::py {

// The f32 values of contiguous `a` as bf16 or f16 ("bf16", "f16") or f32 bytes ("f32"); with
// `column_major`, those of a 2-D `a` column after column.
std::vector<uint8_t> Narrowed(const Array& a, const std::string& type, bool column_major = false);
// Writes `bytes` (elements of `type`; with `column_major`, a 2-D `out` column after column) into
// contiguous f32 `out`, widened.
void Widen(const std::vector<uint8_t>& bytes, const std::string& type, Array& out,
           bool column_major = false);
// `count` elements of `type` that read as NaN: an output no one wrote shows.
std::vector<uint8_t> Poisoned(size_t count, const std::string& type);

}  // namespace kiln::py
