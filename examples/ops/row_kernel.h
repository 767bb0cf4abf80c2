// The shape of kiln's row-wise kernels (softmax, RMSNorm, LayerNorm over [rows, cols] bf16, f16
// or f32: the pointers' element type): a block of 512 threads owns 16 consecutive rows. A row
// whose length is a multiple of 8 and at most 16384 is held in registers, 8 elements (one 16-byte
// access, two for f32) per thread per chunk, with one straight-line body per layout: the fewest
// threads per row that hold it in at most 4 chunks (a warp up to 1024 columns, 64 threads up to
// 2048, ..., the whole block up to 16384), the rows that fit side by side, in turn until the
// block's 16 are done. From 1024 columns up every layout keeps 32 KB of loads in flight per block
// (64 KB in f32); no thread holds more than 32 values, so ptxas fits the kernel in 64 registers
// (two blocks per SM; a test pins it; the f32 kernels ask for it, MinBlocksPerSm). Any other row
// takes the general body: a loop over the row, a warp per row.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/kernel.h"

namespace kiln::examples::ops {

inline constexpr int kRowsPerBlock = 16, kBlockThreads = 512;
inline constexpr int kVec = 8;  // elements per chunk: a 16-byte access of bf16 or f16

// One row as this thread sees it: the row, this thread's index among the `threads` that share
// it, and the chunks each of them holds (0 in the general body).
struct RowCtx {
  Value row, t;
  int threads = 0, chunks = 0;
};

// Runs `fast` (registers) or `general` (a loop) for each of the block's rows that exist.
void ForEachRow(Kernel& k, const Value& rows, const Value& cols,
                const std::function<void(const RowCtx&)>& fast,
                const std::function<void(const RowCtx&)>& general, Loc loc = Loc::current());

// A row held in registers: chunks * 8 values as f32, and per 16-byte access whether its columns
// are in the row (all or none: the row length is a multiple of 8). A chunk is one access of 8
// bf16 or f16, or two of 4 f32; a chunk's second f32 access lies threads * 4 columns past its
// first, so that each of a warp's loads reads whole sectors.
struct RowRegs {
  std::vector<Value> x;   // chunk c's element e at [c * 8 + e]
  std::vector<Value> in;  // i1 per access
  int per_access = kVec;  // elements an access
  // Whether element i's access is in the row; the masks of chunk c's accesses.
  const Value& In(size_t i) const { return in[i / per_access]; }
  std::vector<Value> ChunkIn(int c) const {
    const int accesses = kVec / per_access;
    return std::vector<Value>(in.begin() + c * accesses, in.begin() + (c + 1) * accesses);
  }
};
// Loads the row at `row_ptr` (cols elements) with masked 16-byte loads, `fill` past the end.
RowRegs LoadRow(const Value& row_ptr, const RowCtx& r, const Value& cols, double fill,
                CacheHint hint = CacheHint::kReadOnly, Loc loc = Loc::current());
// Chunk c of a row alone (8 values), e.g. a weight read just before its use.
RowRegs LoadChunk(const Value& row_ptr, const RowCtx& r, const Value& cols, int c, double fill,
                  CacheHint hint = CacheHint::kReadOnly, Loc loc = Loc::current());
void StoreChunk(Kernel& k, const Value& row_ptr, const RowCtx& r, int c,
                const std::vector<Value>& in, const std::vector<Value>& y8,
                Loc loc = Loc::current());
// Stores y (f32, one per element of `like`) as `row_ptr`'s element type (bf16, f16, f32) to it,
// masked as `like` was loaded.
void StoreRow(Kernel& k, const Value& row_ptr, const RowCtx& r, const RowRegs& like,
              const std::vector<Value>& y, Loc loc = Loc::current());

// The general body's loop: body(col) for col = t, t + threads, ... < cols.
void ForEachColumn(Kernel& k, const RowCtx& r, const Value& cols,
                   const std::function<void(Value col)>& body, Loc loc = Loc::current());

// A row kernel's name for `type`: `base` for bf16, base.f16, base.f32.
std::string RowKernelName(const std::string& base, Scalar type);

// Sum of f32 values as a balanced tree (independent adds overlap).
Value SumOf(std::vector<Value> v, Loc loc = Loc::current());

}  // namespace kiln::examples::ops
