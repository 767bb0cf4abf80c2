// A TMA pipeline: a ring of smem stages guarded by full/empty mbarrier pairs, with the stage
// index and phase parity kept for you. Built only on Kernel's public ops (the raw mbarrier and
// TMA calls stay available for kernels that roll their own).
#pragma once

#include <memory>
#include <vector>

#include "kiln/kernel.h"

namespace kiln {

// A position in a ring of `size` slots: the slot (stage) index and the phase parity that an
// mbarrier wait on that slot needs, both in registers. Advance() moves one slot on and flips the
// parity when it wraps. Every ring in kiln is one: a pipeline's producer and consumer sides, a
// double-buffered accumulator, and (size 1) the phase of a single barrier waited on repeatedly.
class RingPosition {
 public:
  RingPosition(Kernel& k, int size, Loc loc = Loc::current());
  Value stage() const { return regs_[0]; }
  Value phase() const { return regs_[1]; }
  void Advance(Loc loc = Loc::current());

 private:
  Kernel* k_;
  Regs regs_;  // {stage, phase}
  int size_;
};

// One TMA box load of a pipeline stage. With `cta_mask`, a multicast to those cluster CTAs;
// with `issue_if`, only CTAs where it holds issue it (the others still receive its bytes); with
// `only_if` (no multicast), the copy happens, and the stage waits for its bytes, only where it
// holds (e.g. a box wholly past a ragged edge: its rows of the tile keep whatever they held).
struct TmaCopy {
  const TensorMap* map;
  SmemTile tile;  // the ring; the pipeline selects the stage
  std::vector<Operand> coords;
  Value cta_mask;
  Value issue_if;
  Value only_if;
  Value l2_policy;  // Kernel::L2Policy, or none
};

class Pipeline {
 public:
  // `consumers`: arrivals that release a stage in each CTA (one per consumer warpgroup);
  // `cluster`: CTAs that share stages through multicast (each releases every CTA's stage).
  Pipeline(Kernel& k, int stages, int consumers, int cluster = 1, Loc loc = Loc::current());

  // One thread: initialises the barriers and fences the init for the async proxy and the
  // cluster. The caller then synchronises the block (or cluster).
  void Init(Loc loc = Loc::current());

  // Stages filled by `threads` threads' cp.async (ProduceByThreads) instead of one thread's TMA
  // boxes, for rows TMA cannot gather in boxes worth their cost (e.g. a paged cache's short
  // pages). Before Init. The consumers' Acquire then fences for the async proxy (cp.async writes
  // through the generic proxy), so wgmma may read the stage.
  void FillByThreads(int threads, Loc loc = Loc::current());

  // A side's position in the ring.
  using Cursor = RingPosition;
  Cursor Start(Loc loc = Loc::current());

  // Producer (one thread): waits for the stage to be free, expects the bytes of `copies`,
  // issues them, advances.
  void Produce(Cursor& at, const std::vector<TmaCopy>& copies, Loc loc = Loc::current());
  // Every filling thread (FillByThreads): waits for the stage to be free, runs issue(stage),
  // its cp.async into the stage, arrives on the stage's full barrier once they land, advances.
  void ProduceByThreads(Cursor& at, const std::function<void(Value stage)>& issue,
                        Loc loc = Loc::current());
  // Consumer warpgroup: waits for the stage to be full, runs body(stage), releases it (thread
  // `thread_in_wg` < cluster arrives on that CTA's empty barrier), advances. One thread's arrive
  // orders what wgmma read; a body that reads the stage through k.Load must end with each
  // reader's FenceProxyAsync and a barrier of the readers (SyncWarp, NamedBarrier) first.
  void Consume(Cursor& at, const Value& thread_in_wg, const std::function<void(Value)>& body,
               Loc loc = Loc::current());
  // Consume in two halves, for consumers that release a stage later than they use it (e.g.
  // once the wgmma group reading it has retired): Acquire waits for the stage to be full,
  // advances and returns the stage; Release frees that stage.
  Value Acquire(Cursor& at, Loc loc = Loc::current());
  void Release(const Value& stage, const Value& thread_in_wg, Loc loc = Loc::current());

  // The barrier that frees `stage`: for consumers that release through an asynchronous arrive
  // (tcgen05.commit when the MMAs reading the stage complete) instead of Release.
  Barrier EmptyBarrier(const Value& stage) const {
    uses_->released = true;  // the caller releases through it
    return empty_[stage];
  }

  int stages() const { return stages_; }

 private:
  Kernel& k_;
  int stages_, consumers_, cluster_;
  int fill_threads_ = 0;  // FillByThreads; 0: one thread's TMA boxes
  Barriers full_, empty_;
  // Shared with the Build()-time check, which outlives no kernel but may outlive this object.
  struct Uses {
    bool initialised = false;
    std::vector<Loc> produced, consumed;
    bool released = false;  // a Release, or an EmptyBarrier taken to commit to
  };
  std::shared_ptr<Uses> uses_;
};

}  // namespace kiln
