// The key of an attention call in AttentionRunner's LaunchMemo (kiln/ops/op_device.h).
#pragma once

#include <string>

#include "kiln/ops/attention.h"
#include "kiln/ops/op_device.h"

namespace kiln::rt {

// Every input that decides an attention call's launches on one device and stream (the runner's
// LaunchMemo): the size, the options and the operands' addresses. `pass` tells the forward's
// ('f') from the backward's ('b') calls; `operands` is one of their operand structs.
template <typename Operands>
std::string AttentionCallKey(char pass, const AttentionSize& z, const AttentionOptions& o,
                             const Operands& operands, int cc, cu::CUcontext context,
                             cu::CUstream stream) {
  // A field added to these structs must join the key: a call differing only there would repeat
  // another's launches. (The operand structs hold addresses alone, added as their bytes.)
  static_assert(
      sizeof(AttentionSize) == 128 && sizeof(AttentionOptions) == 2 * sizeof(std::string) + 16,
      "AttentionCallKey: add the new field");
  static_assert(sizeof(Operands) % sizeof(cu::CUdeviceptr) == 0);
  CallKey k;
  k.Add(pass).Add(context).Add(stream).Add(cc);
  k.Add(z.b).Add(z.hq).Add(z.hkv).Add(z.s).Add(z.skv).Add(z.d).Add(z.lens).Add(z.page);
  k.Add(z.pages).Add(z.max_pages).Add(z.varlen).Add(z.total).Add(z.rows).Add(z.q_stride);
  k.Add(z.kv_stride).Add(z.o_stride);
  k.Add(o.dtype).Add(o.causal).Add(o.scale).Add(o.dq_atomics).Add(o.deterministic).Add(o.kernel);
  k.Add(operands);
  return k.Take();
}

}  // namespace kiln::rt
