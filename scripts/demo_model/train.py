#!/usr/bin/env python3
"""Trains the onecard demo model (dsv4_torch.DeepSeekV4) from scratch, main model and MTP block.

Loss = next-token cross-entropy on the masked positions (data_tokens.py) + MTP_WEIGHT x the MTP
block's cross-entropy for token t+2 (DeepSeek's MTP objective: the block sees the main model's
streams at t and the embedding of token t+1) + INDEX_WEIGHT x the indexers' KL to the main attention.
Routed (non-hash) MoE layers are balanced without an auxiliary loss: after every step each gate's
selection bias moves by BIAS_RATE towards under-used experts (DeepSeek's noaux_tc). For the last
--qat-frac of the time budget the forward runs DeepSeek's reference numerics with every rounding
straight-through and the weights fake-quantised as the export stores them (FP8 128x128, MXFP4), so
the exported checkpoint is the model that was trained.

The schedule runs on wall-clock time (--minutes), so the same command fits the device budget.
Writes OUT/model.pt (fp32 state dict), OUT/config.json (official keys), OUT/train_log.jsonl.
"""

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dsv4_torch import Config, DeepSeekV4, Numerics, init_weights  # noqa: E402
import data_tokens  # noqa: E402

MTP_WEIGHT = 0.3
INDEX_WEIGHT = 0.1
BIAS_RATE = 1e-3

# Every layer kind onecard implements: SWA, SWA, CSA, HCA, CSA, HCA (+ an SWA MTP block); the first
# two layers hash-routed. Dims respect onecard's config checks (multiples of 128 for FP8 blocks).
SHAPES = {
    "demo": dict(hidden_size=256, num_hidden_layers=6, num_attention_heads=4, head_dim=128, qk_rope_head_dim=64,
                 q_lora_rank=128, o_groups=2, o_lora_rank=128, sliding_window=512,
                 compress_ratios=[0, 0, 4, 128, 4, 128, 0], index_n_heads=4, index_head_dim=128, index_topk=16,
                 n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=128, num_hash_layers=2),
    "dry": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=2, head_dim=128, qk_rope_head_dim=64,
                q_lora_rank=128, o_groups=1, o_lora_rank=128, sliding_window=32, compress_ratios=[0, 0, 4, 128, 0],
                index_n_heads=2, index_head_dim=128, index_topk=4, n_routed_experts=4, num_experts_per_tok=2,
                moe_intermediate_size=128, num_hash_layers=1),
}


def losses(model, ids, mask, num, want_index):
    x, y = ids[:, :-1], ids[:, 1:]
    m = mask[:, 1:].float()
    logits, X = model(x, num, want_index_loss=want_index)
    V = logits.shape[-1]
    ce = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1), reduction="none").view_as(m)
    main = (ce * m).sum() / m.sum().clamp_min(1)
    # MTP: streams at t and token t+1 predict token t+2.
    mtp_logits, _ = model.forward_mtp(X[:, :-1], x[:, 1:], num)
    m2 = mask[:, 2:].float()
    ce2 = F.cross_entropy(mtp_logits.reshape(-1, V), y[:, 1:].reshape(-1), reduction="none").view_as(m2)
    mtp = (ce2 * m2).sum() / m2.sum().clamp_min(1)
    idx = model.index_losses()
    index = torch.stack(idx).mean() if idx else torch.zeros((), device=ids.device)
    return main, mtp, index


def update_bias(model):
    with torch.no_grad():
        for ffn in model.moe_layers():
            if not ffn.hash_layer and ffn.last_load is not None:
                load = ffn.last_load
                ffn.gate.bias += BIAS_RATE * torch.sign(load.mean() - load)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", default="demo", choices=list(SHAPES))
    ap.add_argument("--minutes", type=float, default=6.0)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--qat-frac", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resume", default="", help="model.pt to continue from (weights only; the schedule restarts)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(a.seed)
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    enc = data_tokens.Encoder(Path(a.tokenizer))
    t0 = time.time()
    train_ex, dropped = data_tokens.load_examples(Path(a.data), enc, "train", a.seq + 1)
    n_tok = sum(len(e[0]) for e in train_ex)
    print(f"data: {len(train_ex)} train examples, {n_tok} tokens ({dropped} too long dropped), "
          f"{time.time() - t0:.0f}s", flush=True)

    cfg = Config(vocab_size=enc.vocab_size, **SHAPES[a.shape])
    model = DeepSeekV4(cfg)
    init_weights(model, a.seed)
    if a.resume:
        model.load_state_dict(torch.load(a.resume, map_location="cpu"), strict=False)
        print(f"resumed from {a.resume}", flush=True)
    model.to(a.device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f} M parameters, vocab {cfg.vocab_size}", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "hc_" not in n and ".fn" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "hc_" not in n and ".fn" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    rng = random.Random(a.seed)
    ids_all, mask_all = data_tokens.pack_rows(train_ex, a.seq, rng)
    print(f"packed: {len(ids_all)} rows of {a.seq + 1}", flush=True)
    ids_all_t = torch.from_numpy(ids_all)
    mask_all_t = torch.from_numpy(mask_all)

    budget = a.minutes * 60.0
    start = time.time()
    step, epoch, pos = 0, 0, 0
    perm = torch.randperm(len(ids_all_t))
    log = open(out / "train_log.jsonl", "w")
    qat_started = None
    warmup = 100
    while True:
        frac = (time.time() - start) / budget
        if frac >= 1.0 or (a.max_steps and step >= a.max_steps):
            break
        qat = frac >= 1.0 - a.qat_frac or (a.max_steps and step >= a.max_steps * (1 - a.qat_frac))
        if qat and qat_started is None:
            qat_started = step
            print(f"step {step}: quantisation-aware phase starts", flush=True)
        num = Numerics("reference", ste=True, quantize_weights=True) if qat else Numerics("exact")
        lr = a.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
        for g in opt.param_groups:
            g["lr"] = lr
        if pos + a.batch > len(perm):
            perm, pos, epoch = torch.randperm(len(ids_all_t)), 0, epoch + 1
        idx = perm[pos:pos + a.batch]
        pos += a.batch
        ids = ids_all_t[idx].to(a.device, non_blocking=True)
        mask = mask_all_t[idx].to(a.device, non_blocking=True)
        main_l, mtp_l, index_l = losses(model, ids, mask, num, want_index=True)
        loss = main_l + MTP_WEIGHT * mtp_l + INDEX_WEIGHT * index_l
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if not torch.isfinite(gn):
            print(f"step {step}: non-finite gradient norm, update skipped", flush=True)
            step += 1
            continue
        opt.step()
        update_bias(model)
        if step % 25 == 0:
            rec = {"step": step, "epoch": epoch, "t": round(time.time() - start, 1), "lr": lr, "loss": main_l.item(),
                   "mtp": mtp_l.item(), "index_kl": index_l.item(), "grad_norm": gn.item(), "qat": bool(qat)}
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print(json.dumps(rec), flush=True)
        step += 1
    train_s = time.time() - start
    cfg_json = {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}
    meta = {"steps": step, "train_seconds": round(train_s, 1), "qat_from_step": qat_started, "epochs": epoch,
            "rows": len(ids_all), "train_tokens_per_epoch": int(n_tok), "params": n_params, "config": cfg_json,
            "seq": a.seq, "batch": a.batch, "device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu"}
    (out / "train_meta.json").write_text(json.dumps(meta, indent=1))
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, out / "model.pt")
    print(f"trained {step} steps in {train_s / 60:.1f} min; saved {out / 'model.pt'}", flush=True)


if __name__ == "__main__":
    main()
