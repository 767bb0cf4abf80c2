// Registers and memory as the builder sees them: register arrays, global tensors, and shared
// tiles with their layouts (padding, XOR/rotate swizzles, the TMA/wgmma swizzles, rings), and the
// ops that make and use them (MemoryOps, a part of Kernel); more ops are free functions
// (kiln/memory_ops.h). Built in dsl/memory.cc.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kiln/value.h"

namespace kiln {

class Kernel;

// A compile-time register index, carrying the source line that used it.
struct RegIndex {
  RegIndex(int v, Loc l = Loc::current()) : value(v), loc(l) {}
  int value;
  Loc loc;
};

// A register array: indices are C++ integers, so every access is static and the array lives in
// registers (a run-time index would push it to local memory; it is not offered).
class Regs {
 public:
  Regs() = default;
  RegRef operator[](RegIndex i) const;
  int size() const { return size_; }
  const Type& type() const { return type_; }

 private:
  friend class Kernel;
  friend class MemoryOps;
  friend class AmpereOps;
  friend class HopperOps;
  friend class BlackwellOps;
  detail::KernelState* state_ = nullptr;
  int array_ = -1, size_ = 0;
  Type type_;
};

// A global tensor: base pointer plus shape and strides in elements (row-major index order).
class GlobalTensor {
 public:
  GlobalTensor() = default;
  GlobalTensor(Value base, std::vector<Value> shape, std::vector<Value> strides)
      : base_(base), shape_(std::move(shape)), strides_(std::move(strides)) {}
  // Pointer to element (i, j, ...).
  Value At(std::initializer_list<Operand> index, Loc loc = Loc::current()) const;
  const Value& base() const { return base_; }
  const Value& dim(int i) const { return shape_.at(i); }
  const Value& stride(int i) const { return strides_.at(i); }  // in elements

 private:
  Value base_;
  std::vector<Value> shape_, strides_;
};

// Shared-memory swizzle of TMA and wgmma: within each 8-row atom, 16-byte chunk c of row r is
// stored at chunk c ^ (r % 8) (128B; 64B and 32B swizzle XOR fewer bits).
enum class Swizzle : uint8_t { kNone = 0, k32B = 1, k64B = 2, k128B = 3 };
int SwizzleBytes(Swizzle s);  // 0, 32, 64, 128

// Ampere-style swizzle of a row's `unit_bytes` units (ldmatrix/cp.async tiles): in row r, unit c
// is stored at c ^ f(r) (XOR), or at (c + f(r)) % units_per_row (rotate), f(r) = (r % period) /
// divide. Seed 003's two XORs: Row8() = col ^ (row % 8) for rows of 128 bytes or more,
// HalfRow8() = col ^ ((row % 8) / 2) for 64-byte rows. cuda_hgemm's permuted layout rotates:
// RotateHalfRow8() on its 64-byte A/B rows, Rotate8() on its C staging rows. period 1: none.
struct UnitSwizzle {
  int unit_bytes = 16, period = 1, divide = 1;
  bool rotate = false;
  static UnitSwizzle Row8() { return {16, 8, 1}; }
  static UnitSwizzle HalfRow8() { return {16, 8, 2}; }
  static UnitSwizzle Rotate8() { return {16, 8, 1, true}; }
  static UnitSwizzle RotateHalfRow8() { return {16, 8, 2, true}; }
};
// How a tile's rows sit in shared memory: padded (pad elements after each row) or XOR-swizzled,
// and a ring of `stages` copies.
struct SmemLayout {
  int pad = 0;
  UnitSwizzle swizzle;
  int stages = 1;
};

// A tile of shared memory placed by the kernel's planner: rows x cols elements, each row
// `row_stride` elements apart (cols + padding), optionally swizzled, optionally a ring of
// `stages` copies (select one with Stage()).
class SmemTile {
 public:
  SmemTile() = default;
  // Pointer to element (row, col) of the selected stage, through the swizzle.
  Value At(const Operand& row, const Operand& col, Loc loc = Loc::current()) const;
  // The same tile, stage `s` of the ring.
  SmemTile Stage(const Operand& s, Loc loc = Loc::current()) const;
  // Pointer to the first byte of the selected stage.
  Value Base(Loc loc = Loc::current()) const;
  // Rows row0..row0+rows of each stage as a tile of their own (e.g. one TMA box of several that
  // fill the tile; of a ring, still a ring with the same stages). A swizzled tile splits only at
  // whole 8-row atoms.
  SmemTile Rows(int row0, int rows, Loc loc = Loc::current()) const;
  // Of an interleaved tile (SmemInterleaved): its 8-column slab `s` (rows x 8, 16-byte rows) as
  // a plain tile, e.g. the destination of one 2D TMA box.
  SmemTile Slab(int s, Loc loc = Loc::current()) const;
  bool interleaved() const { return interleaved_; }
  Scalar elem() const { return elem_; }
  int rows() const { return rows_; }
  int cols() const { return cols_; }
  int row_stride() const { return row_stride_; }
  int stages() const { return stages_; }
  Swizzle swizzle() const { return swizzle_; }
  const UnitSwizzle& unit_swizzle() const { return xor_; }
  int offset_bytes() const { return offset_; }
  int stage_bytes() const { return rows_ * row_stride_ * ScalarBytes(elem_); }
  // Bytes from one stage of the ring to the next: stage_bytes(), or the whole ring's stage for
  // Rows() of a ring.
  int stage_stride() const { return stage_stride_ ? stage_stride_ : stage_bytes(); }
  int bytes() const { return stage_bytes() * stages_; }
  const Loc& loc() const { return loc_; }

 private:
  friend class Kernel;
  friend class MemoryOps;
  friend class AmpereOps;
  friend class HopperOps;
  friend class BlackwellOps;
  friend struct detail::Access;
  detail::KernelState* state_ = nullptr;
  Scalar elem_ = Scalar::kBF16;
  int rows_ = 0, cols_ = 0, row_stride_ = 0, offset_ = 0, stages_ = 1, stage_stride_ = 0;
  Swizzle swizzle_ = Swizzle::kNone;
  UnitSwizzle xor_;
  bool interleaved_ = false;
  Value stage_;  // selected stage (invalid: stage 0)
  Loc loc_;
};

// What each part of Kernel (MemoryOps, AmpereOps, HopperOps, BlackwellOps) shares: the way back to
// the kernel its ops build into (dsl/kernel.cc).
template <typename Part>
class KernelPart {
 protected:
  KernelPart() = default;
  ~KernelPart() = default;
  Kernel& self();
  detail::KernelState& state();
};

// The builder's memory ops (Kernel derives from this; kiln/kernel.h): register arrays, shared
// tiles, vector loads and stores, barriers of the block and the warp. Built in dsl/memory.cc,
// dsl/ampere.cc (Smem, SmemOver) and dsl/kernel.cc (the syncs).
class MemoryOps : public KernelPart<MemoryOps> {
 public:
  Regs Registers(Type type, int count, Loc loc = Loc::current());  // zero-initialised
  SmemTile Smem(Scalar elem, int rows, int cols, int pad = 0, int align = 128,
                Loc loc = Loc::current());
  // A padded or XOR-swizzled tile (a ring when layout.stages > 1), 128-byte aligned.
  SmemTile Smem(Scalar elem, int rows, int cols, const SmemLayout& layout,
                Loc loc = Loc::current());
  // Shared memory sized at launch: `bytes`, a rule of the integer parameters (e.g. "cols*4"),
  // after every planned tile (declare those first), 128-byte aligned. Returns its first element.
  Value SmemDynamic(Scalar elem, const std::string& bytes, Loc loc = Loc::current());
  // A tile over the bytes of `base` (and beyond, if larger): e.g. an epilogue's staging buffer
  // over the mainloop's ring. The kernel synchronises between the two uses.
  SmemTile SmemOver(const SmemTile& base, Scalar elem, int rows, int cols, const SmemLayout& layout,
                    Loc loc = Loc::current());
  // The tensor cores' no-swizzle K-major layout (PTX ISA "canonical layouts"): the tile's
  // columns in 8-element slabs, slab after slab, each slab `rows` rows of 16 bytes. 128-aligned.
  SmemTile SmemInterleaved(Scalar elem, int rows, int cols, int stages = 1,
                           Loc loc = Loc::current());
  // A swizzled tile (rows of exactly the swizzle span), a ring of `stages` copies, 1024-aligned.
  SmemTile SmemSwizzled(Scalar elem, int rows, int cols, Swizzle swizzle, int stages = 1,
                        Loc loc = Loc::current());
  // Loads `lanes` elements (one vector access of lanes * elem bytes, which must be aligned).
  Value Load(const Value& ptr, int lanes = 1, Loc loc = Loc::current());
  void Store(const Value& ptr, const Operand& value, Loc loc = Loc::current());
  Value Vector(const std::vector<Value>& lanes, Loc loc = Loc::current());
  void SyncThreads(Loc loc = Loc::current());
  // bar.warp.sync of the whole warp. Also where ptxas schedules nothing across: loads issued
  // before it are all in flight before any instruction after it waits on one (ptxas otherwise may
  // interleave independent loads with the math that uses the first of them).
  void SyncWarp(Loc loc = Loc::current());
  // st.global.L1::no_allocate of a 16-byte vector: the line is not kept in L1.
  void StoreNoL1Allocate(const Value& ptr, const Value& value, Loc loc = Loc::current());
  // st.global.wt: a store that writes through to memory without keeping the line in L1.
  void StoreWriteThrough(const Value& ptr, const Operand& value, Loc loc = Loc::current());
};

}  // namespace kiln
