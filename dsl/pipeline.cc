#include "kiln/pipeline.h"

#include "absl/strings/str_cat.h"

namespace kiln {

Pipeline::Pipeline(Kernel& k, int stages, int consumers, int cluster, Loc loc)
    : k_(k),
      stages_(stages),
      consumers_(consumers),
      cluster_(cluster),
      uses_(std::make_shared<Uses>()) {
  if (stages < 1 || consumers < 1 || cluster < 1) {
    k.Fail(absl::StrCat("a pipeline of ", stages, " stages, ", consumers, " consumers and ",
                        cluster, " CTAs"),
           loc);
    stages_ = consumers_ = cluster_ = 1;
  }
  full_ = k.SmemBarriers(stages_, loc);
  empty_ = k.SmemBarriers(stages_, loc);
  std::shared_ptr<Uses> uses = uses_;
  k.CheckAtBuild([&k, uses, loc, stages = stages_] {
    if (!uses->consumed.empty() && uses->produced.empty())
      k.Fail(
          "this pipeline stage is consumed but nothing produces it (no Produce on the "
          "pipeline declared at " +
              LocString(loc) + "); the consumer would wait forever",
          uses->consumed.front());
    if (!uses->produced.empty() && uses->consumed.empty())
      k.Fail(
          "this pipeline stage is produced but never consumed; the producer would wait "
          "forever for a free stage",
          uses->produced.front());
    if (!uses->consumed.empty() && !uses->produced.empty() && !uses->released && stages > 0)
      k.Fail(absl::StrCat("pipeline stages are acquired here but never released (no Release, and "
                          "no commit to an "
                          "EmptyBarrier, on the pipeline declared at ",
                          LocString(loc),
                          "): the producer would wait "
                          "forever to reuse the first of its ",
                          stages, " stages"),
             uses->consumed.front());
    if ((!uses->produced.empty() || !uses->consumed.empty()) && !uses->initialised)
      k.Fail("the pipeline is used but never initialised (Init)", loc);
  });
}

void Pipeline::Init(Loc loc) {
  uses_->initialised = true;
  for (int i = 0; i < stages_; ++i) {
    // The producer's arrive.expect_tx, the bytes complete the phase; or the filling threads'
    // arrivals as their copies land.
    full_[i].Init(fill_threads_ ? fill_threads_ : 1, loc);
    empty_[i].Init(consumers_ * cluster_, loc);
  }
  k_.FenceBarrierInit(loc);
}

RingPosition::RingPosition(Kernel& k, int size, Loc loc)
    : k_(&k), regs_(k.Registers(Type::Of(i32), 2, loc)), size_(size) {
  if (size < 1) k.Fail(absl::StrCat("a ring needs at least one slot, not ", size), loc);
}

void RingPosition::Advance(Loc loc) {
  if (size_ == 1) {  // one slot: every step wraps
    regs_[1] = Operand(phase() ^ Operand(1, loc), loc);
    return;
  }
  Value next = stage() + Operand(1, loc);
  Value wrap = next == Operand(size_, loc);
  regs_[0] = Operand(Select(wrap, 0, next), loc);
  regs_[1] = Operand(phase() ^ Select(wrap, k_->I32(1, loc), 0), loc);
}

Pipeline::Cursor Pipeline::Start(Loc loc) { return RingPosition(k_, stages_, loc); }

void Pipeline::FillByThreads(int threads, Loc loc) {
  if (uses_->initialised)
    return k_.Fail("FillByThreads changes the full barriers' count: call it before Init", loc);
  if (threads < 1 || cluster_ != 1)
    return k_.Fail(
        absl::StrCat("a pipeline filled by ", threads, " threads' cp.async in ", cluster_,
                     " CTAs: cp.async fills its own CTA, by 1 or more "
                     "threads"),
        loc);
  fill_threads_ = threads;
}

void Pipeline::ProduceByThreads(Cursor& at, const std::function<void(Value)>& issue, Loc loc) {
  if (!fill_threads_)
    return k_.Fail(
        "ProduceByThreads fills a pipeline declared FillByThreads; this one takes TMA "
        "boxes (Produce)",
        loc);
  uses_->produced.push_back(loc);
  Value stage = at.stage();
  empty_[stage].Wait(at.phase() ^ Operand(1, loc), loc);  // (parity 1 passes on a fresh barrier)
  issue(stage);
  full_[stage].ArriveWhenCopiesLand(loc);
  at.Advance(loc);
}

void Pipeline::Produce(Cursor& at, const std::vector<TmaCopy>& copies, Loc loc) {
  if (fill_threads_)
    return k_.Fail("this pipeline is filled by threads' cp.async (FillByThreads): ProduceByThreads",
                   loc);
  uses_->produced.push_back(loc);
  Value stage = at.stage();
  // A fresh empty barrier counts its (virtual) previous phase as complete: parity 1 passes.
  empty_[stage].Wait(at.phase() ^ Operand(1, loc), loc);
  Barrier full = full_[stage];
  std::vector<std::pair<const TensorMap*, Value>> boxes;  // the bytes the stage waits for
  for (const TmaCopy& c : copies) {
    if (c.only_if.valid() && c.cta_mask.valid())
      return k_.Fail("a multicast TMA copy of a stage cannot be conditional (only_if)", loc);
    boxes.push_back({c.map, c.only_if});
  }
  full.ArriveExpectTxIf(boxes, loc);
  for (const TmaCopy& c : copies) {
    auto issue = [&] {
      SmemTile dst = c.tile.Stage(stage, loc);
      if (c.cta_mask.valid())
        k_.TmaLoadMulticast(*c.map, dst, full, c.coords, c.cta_mask, c.l2_policy, loc);
      else
        k_.TmaLoad(*c.map, dst, full, c.coords, c.l2_policy, loc);
    };
    const Value when = c.only_if.valid() && c.issue_if.valid() ? c.only_if & c.issue_if
                       : c.only_if.valid()                     ? c.only_if
                                                               : c.issue_if;
    if (when.valid())
      k_.If(when, issue, loc);
    else
      issue();
  }
  at.Advance(loc);
}

void Pipeline::Consume(Cursor& at, const Value& thread_in_wg,
                       const std::function<void(Value)>& body, Loc loc) {
  Value stage = Acquire(at, loc);
  body(stage);
  Release(stage, thread_in_wg, loc);
}

Value Pipeline::Acquire(Cursor& at, Loc loc) {
  uses_->consumed.push_back(loc);
  Value stage = at.stage();
  full_[stage].Wait(at.phase(), loc);
  if (fill_threads_) k_.FenceProxyAsync(loc);  // the stage's cp.async bytes, for wgmma
  at.Advance(loc);
  return stage;
}

void Pipeline::Release(const Value& stage, const Value& thread_in_wg, Loc loc) {
  uses_->released = true;
  if (cluster_ == 1) {
    k_.If(
        thread_in_wg == Operand(0, loc), [&] { empty_[stage].Arrive(loc); }, loc);
  } else {
    // Every CTA of the cluster may have multicast into this stage: release it everywhere.
    k_.If(
        thread_in_wg < Operand(cluster_, loc),
        [&] { empty_[stage].ArriveCluster(thread_in_wg, loc); }, loc);
  }
}

}  // namespace kiln
