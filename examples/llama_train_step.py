#!/usr/bin/env python3
"""A training step (forward, backward, AdamW step) of the Llama-3-8B-shaped decoder layer with
kiln's attention, against the same layer with PyTorch's SDPA: same weights, same inputs. Both are
transformers' LlamaDecoderLayer (hidden 4096, 32 query heads over 8 KV heads, MLP 14336, bf16);
kiln's copy calls torch.ops.kiln.attention (forward and backward kiln kernels, through
torch.library's autograd) from a registered attention function. An fp32 copy of the layer is the
reference for the loss and every gradient. Then the time per step, kiln against SDPA's default
backend and against SDPA forced to cuDNN, CUDA events, median of --iters steps.

    PYTHONPATH=build/python KILN_BUNDLE_DIR=build/bundles python3 examples/llama_train_step.py

Passes when, at every shape, kiln's gradients are as close to the fp32 layer's as SDPA's are
(within 2x, or 1e-2 relative), kiln agrees with SDPA within 3e-2, and the losses of --steps
optimizer steps (each taken before its step) agree within 1e-2. The losses are printed beside the
fp32 layer's.
"""

import argparse
import copy
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AttentionInterface
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

import kiln.torch  # noqa: F401  (registers torch.ops.kiln.*)
from llama_layer import HIDDEN, hf_layer, llama_config, median_ms, rel  # (this directory's)
kiln_calls = 0


def kiln_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                   **kwargs):
    """transformers' attention interface over kiln: query [B, Hq, S, D], key and value
    [B, Hkv, S, D] (views of the projections' [B, S, H, D] rows); returns o [B, S, Hq, D]."""
    global kiln_calls
    if attention_mask is not None or dropout:
        raise ValueError("kiln_attention: causal self-attention without a mask or dropout only")
    kiln_calls += 1
    rows = lambda x: x.transpose(1, 2)  # [B, S, H, D]: kiln's "bshd" layout
    o, _ = torch.ops.kiln.attention(rows(query), rows(key), rows(value), True,
                                    float(scaling or 0.0), "bshd")
    return o, None


def make_layers():
    config = llama_config()
    sdpa = hf_layer(config).train()
    ours = copy.deepcopy(sdpa)
    ours.self_attn.config = copy.deepcopy(config)
    ours.self_attn.config._attn_implementation = "kiln"
    reference = copy.deepcopy(sdpa).float()
    return config, {"kiln": ours, "sdpa": sdpa, "fp32": reference}


def loss_and_grads(layer, x, emb, pos, target):
    """The loss (mean square against target, in f32) and the gradients of every weight and x."""
    layer.zero_grad(set_to_none=True)
    xi = x.detach().to(next(layer.parameters()).dtype).requires_grad_()
    out = layer(xi, position_embeddings=tuple(e.to(xi.dtype) for e in emb), position_ids=pos)
    out = out[0] if isinstance(out, tuple) else out
    loss = F.mse_loss(out.float(), target)
    loss.backward()
    grads = {name: p.grad for name, p in layer.named_parameters()}
    grads["x"] = xi.grad
    return loss.detach(), grads


def check_shape(layers, rotary, b, s, steps):
    """Loss and gradients of the three layers on one batch, then `steps` AdamW steps from the
    same weights; returns the number of failed checks."""
    g = torch.Generator(device="cuda").manual_seed(b * 100003 + s)
    x = torch.randn(b, s, HIDDEN, device="cuda", generator=g)
    target = torch.randn(b, s, HIDDEN, device="cuda", generator=g)
    pos = torch.arange(s, device="cuda")[None].expand(b, s)
    emb = rotary(x, pos)
    results = {name: loss_and_grads(layer, x, emb, pos, target) for name, layer in layers.items()}
    failures = 0
    ref_loss, ref_grads = results["fp32"]
    print(f"B={b} S={s}: loss fp32 {ref_loss.item():.6f}, kiln {results['kiln'][0].item():.6f}, "
          f"sdpa {results['sdpa'][0].item():.6f}")
    worst = {"kiln": 0.0, "sdpa": 0.0, "kiln vs sdpa": 0.0}
    for name in ref_grads:
        e_kiln = rel(results["kiln"][1][name], ref_grads[name])
        e_sdpa = rel(results["sdpa"][1][name], ref_grads[name])
        e_pair = rel(results["kiln"][1][name], results["sdpa"][1][name])
        ok = e_kiln <= max(2 * e_sdpa, 1e-2) and e_pair <= 3e-2
        failures += 0 if ok else 1
        worst = {"kiln": max(worst["kiln"], e_kiln), "sdpa": max(worst["sdpa"], e_sdpa),
                 "kiln vs sdpa": max(worst["kiln vs sdpa"], e_pair)}
        print(f"    grad {name:<42} vs fp32: kiln {e_kiln:.2e}  sdpa {e_sdpa:.2e};"
              f" kiln vs sdpa {e_pair:.2e}  {'ok' if ok else 'FAIL'}")
    print("    worst gradient error: " + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
    # Optimizer steps from the same weights: the losses must follow the same path.
    trained = {name: copy.deepcopy(layers[name]) for name in ("kiln", "sdpa")}
    optims = {name: torch.optim.AdamW(layer.parameters(), lr=1e-4)
              for name, layer in trained.items()}
    for step in range(steps):
        losses = {}
        for name, layer in trained.items():
            losses[name], _ = loss_and_grads(layer, x, emb, pos, target)
            optims[name].step()
        d = abs(losses["kiln"].item() - losses["sdpa"].item()) / abs(losses["sdpa"].item())
        ok = d <= 1e-2
        failures += 0 if ok else 1
        print(f"    step {step}: loss kiln {losses['kiln'].item():.6f} sdpa "
              f"{losses['sdpa'].item():.6f} (relative difference {d:.1e}) {'ok' if ok else 'FAIL'}")
    return failures, trained, optims, (x, emb, pos, target)


def time_steps(trained, optims, batch, iters):
    x, emb, pos, target = batch

    def step(name):
        loss_and_grads(trained[name], x, emb, pos, target)
        optims[name].step()

    kiln_ms = median_ms(lambda: step("kiln"), iters)
    sdpa_ms = median_ms(lambda: step("sdpa"), iters)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        cudnn_ms = median_ms(lambda: step("sdpa"), iters)
    return kiln_ms, sdpa_ms, cudnn_ms


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="1x4096,4x2048", help="BxS,...")
    p.add_argument("--steps", type=int, default=3, help="optimizer steps compared")
    p.add_argument("--iters", type=int, default=20, help="timed steps (median)")
    args = p.parse_args()
    torch.manual_seed(0)
    AttentionInterface.register("kiln", kiln_attention)
    config, layers = make_layers()
    rotary = LlamaRotaryEmbedding(config).to("cuda")
    print(f"Llama-3-8B-shaped decoder layer, training step, on {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}")
    failures = 0
    for shape in args.shapes.split(","):
        b, s = (int(v) for v in shape.split("x"))
        calls = kiln_calls
        fails, trained, optims, batch = check_shape(layers, rotary, b, s, args.steps)
        if kiln_calls == calls:
            print("    FAIL: the kiln layer never called kiln's attention")
            fails += 1
        failures += fails
        kiln_ms, sdpa_ms, cudnn_ms = time_steps(trained, optims, batch, args.iters)
        print(f"    time per step (forward, backward, AdamW), median of {args.iters}: kiln "
              f"{kiln_ms:.3f} ms, SDPA default {sdpa_ms:.3f} ms ({sdpa_ms / kiln_ms:.2f}x), "
              f"SDPA cuDNN {cudnn_ms:.3f} ms ({cudnn_ms / kiln_ms:.2f}x)")
        del trained, optims
        torch.cuda.empty_cache()
    print("PASS" if not failures else f"FAIL: {failures} checks")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
