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

The schedule runs on wall-clock time, so the same command fits the device budget, and may span
several device calls (each at most 600 s): --total-minutes is the whole schedule (cosine decay, the
quantisation-aware phase in its last --qat-frac), --minutes this call's share; with --state-dir the
model, optimiser (and so the gate biases, which are buffers in the state dict), step, elapsed time and
data position are loaded from DIR/state.pt when it exists and saved there atomically every
--save-every seconds and at the end, so a call killed at its time limit loses at most that much.
The main loss is a weighted mean (data_tokens.py: prompt 0, completion and a --multi-call row's earlier
assistant turns 1, tool-call blocks 2).
--fast (not yet run on the GPU: NEXT_RUN.md) runs the steps before the quantisation-aware phase under
bf16 autocast (fp32 master weights; the router stays fp32) with the attention fused
(dsv4_torch.attend_fused, torch's scaled_dot_product_attention with the sink as one more key).

Writes OUT/model.pt (fp32 state dict), OUT/train_meta.json (config, steps), OUT/train_log.jsonl.
"""

import argparse
import gc
import json
import math
import os
import random
import signal
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dsv4_torch import Config, DeepSeekV4, Numerics, init_weights  # noqa: E402
import checkpoint_io  # noqa: E402
import data_tokens  # noqa: E402
import respace  # noqa: E402

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
# Round 14 (NEXT_RUN.md): "demo" with experts twice as wide, resumed from widen.py's output.
SHAPES["demo-wide"] = dict(SHAPES["demo"], moe_intermediate_size=256)
# NEXT_RUN round 17: "demo" two layers deeper (one more CSA and HCA pair), for a smaller vocabulary from
# scratch; the schedule is `onecard synth`'s for 8 layers, so export.py's template matches it.
SHAPES["demo-deep"] = dict(SHAPES["demo"], num_hidden_layers=8, compress_ratios=[0, 0, 4, 128, 4, 128, 4, 128, 0])


def losses(fwd, model, ids, w, num, want_index):
    """Sums (not means) of the weighted main and MTP cross-entropies over this (micro)batch, and the
    mean indexer KL; the caller divides the sums by the whole batch's weight totals."""
    x, y = ids[:, :-1], ids[:, 1:]
    m = w[:, 1:]
    logits, X = fwd(x, num, want_index_loss=want_index)
    V = logits.shape[-1]
    ce = F.cross_entropy(logits.reshape(-1, V).float(), y.reshape(-1), reduction="none").view_as(m)
    main = (ce * m).sum()
    # MTP: streams at t and token t+1 predict token t+2.
    mtp_logits, _ = model.forward_mtp(X[:, :-1], x[:, 1:], num)
    m2 = w[:, 2:]
    ce2 = F.cross_entropy(mtp_logits.reshape(-1, V).float(), y[:, 1:].reshape(-1), reduction="none").view_as(m2)
    mtp = (ce2 * m2).sum()
    idx = model.index_losses()
    index = torch.stack(idx).mean() if idx else torch.zeros((), device=ids.device)
    return main, mtp, index


def update_bias(model):
    with torch.no_grad():
        for ffn in model.moe_layers():
            if not ffn.hash_layer and ffn.last_load is not None:
                load = ffn.last_load
                ffn.gate.bias += BIAS_RATE * torch.sign(load.mean() - load)


def is_oom(e):
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(e, oom)) or "out of memory" in str(e)


def load_rows(a, enc):
    """Packed rows (ids, weights) and the token count; cached as DIR/rows_SEQ.pt beside the state, so
    later calls skip tokenising and are sure to see the same rows in the same order."""
    cache = Path(a.state_dir) / f"rows_{a.seq}.pt" if a.state_dir else None
    if cache is not None and cache.exists():
        c = torch.load(cache, map_location="cpu", weights_only=False)
        print(f"data: {c['ids'].shape[0]} rows from {cache}", flush=True)
        return c["ids"].long(), c["w"].float(), c["n_tok"]
    t0 = time.time()
    train_ex, dropped = data_tokens.load_examples(Path(a.data), enc, "train", a.seq + 1)
    n_tok = int(sum(len(e[0]) for e in train_ex))
    ids, w = data_tokens.pack_rows(train_ex, a.seq, random.Random(a.seed))
    print(f"data: {len(train_ex)} train examples, {n_tok} tokens ({dropped} too long dropped), {len(ids)} rows "
          f"of {a.seq + 1}, {time.time() - t0:.0f}s", flush=True)
    ids_t, w_t = torch.from_numpy(ids), torch.from_numpy(w)
    if cache is not None:
        # int16 ids (vocab < 32768) and fp16 weights (0, 1, 2 are exact) keep the cache small.
        assert enc.vocab_size < 32768
        tmp = cache.with_suffix(".tmp")
        torch.save({"ids": ids_t.to(torch.int16), "w": w_t.half(), "n_tok": n_tok}, tmp)
        os.replace(tmp, cache)
    return ids_t, w_t, n_tok


def save_state(path, model, opt, st):
    """DIR/state.pt, written to a temporary file and renamed, so a kill mid-write keeps the last one."""
    tmp = path.with_suffix(".tmp")
    torch.save({"model": {k: v.detach().cpu() for k, v in model.state_dict().items()}, "opt": opt.state_dict(), **st},
               tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", default="demo", choices=list(SHAPES))
    ap.add_argument("--minutes", type=float, default=6.0, help="this call's training time")
    ap.add_argument("--total-minutes", type=float, default=0.0,
                    help="the whole schedule's length over all calls (default: --minutes, one call)")
    ap.add_argument("--final", action="store_true",
                    help="end the schedule in this call whatever the earlier calls managed: total = time "
                         "already trained + this call's budget (so the quantisation-aware phase happens)")
    ap.add_argument("--stop-at", type=float, default=0.0,
                    help="unix time at which training stops at the latest (the device call's deadline)")
    ap.add_argument("--state-dir", default="", help="continue from DIR/state.pt and save it there")
    ap.add_argument("--save-every", type=float, default=60.0, help="seconds between state saves")
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--seq", type=int, default=1024)
    # Steps are latency-bound (thousands of small kernels): 4x round 2's batch costs far less than 4x
    # the time per step. lr scaled up from 2e-3 at batch 32 (less than sqrt(4)x: a 13 M model at 3e-3
    # trained stably in round 1's sweeps' range).
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--micro", type=int, default=0,
                    help="rows per forward (gradient accumulation); 0 = the whole batch, halved on out-of-memory")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    # Round 2's quantised and fp32 perplexities were equal to 0.1%, so a shorter QAT phase suffices.
    ap.add_argument("--qat-frac", type=float, default=0.15)
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the main forward before the quantisation-aware phase (eager on failure, "
                         "and in that phase)")
    ap.add_argument("--fast", action="store_true",
                    help="steps before the quantisation-aware phase run under bf16 autocast with the fused attention "
                         "(dsv4_torch.attend_fused); the QAT phase stays fp32 as before")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resume", default="",
                    help="model.pt, or an official-format checkpoint directory (export.py's, e.g. models/demo, "
                         "dequantised), to start from (weights only; the schedule restarts)")
    ap.add_argument("--tie-twins", action="store_true",
                    help="tie every bare word piece's embedding and output row to its space-led twin's plus one shared "
                         "offset (dsv4_torch.DeepSeekV4.tie_twins; respace.twin_pairs); model.pt holds the tied rows")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(a.seed)
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    enc = data_tokens.Encoder(Path(a.tokenizer))
    state_path = None
    if a.state_dir:
        Path(a.state_dir).mkdir(parents=True, exist_ok=True)
        state_path = Path(a.state_dir) / "state.pt"
    ids_all_t, w_all_t, n_tok = load_rows(a, enc)
    n_rows = ids_all_t.shape[0]

    cfg = Config(vocab_size=enc.vocab_size, **SHAPES[a.shape])
    model = DeepSeekV4(cfg)
    init_weights(model, a.seed)
    pairs = torch.tensor(respace.twin_pairs(json.loads(Path(a.tokenizer).read_text())) if a.tie_twins else [],
                         dtype=torch.long).view(-1, 2)

    def load_fitting(weights, source):  # a checkpoint of another shape stops the run, naming --shape
        checkpoint_io.load_fitting(model, weights, source, f"--shape {a.shape}", "pass the shape it was trained with")

    st = None
    if state_path is not None and state_path.exists():
        st = torch.load(state_path, map_location="cpu", weights_only=False)
        if a.tie_twins:  # the state's offsets (and tied routes) are loaded over the fresh ones
            model.tie_twins(pairs[:, 0], pairs[:, 1])
        load_fitting(st["model"], state_path)
        print(f"continuing from {state_path}: step {st['step']}, {st['elapsed'] / 60:.1f} min trained", flush=True)
    else:
        if a.resume:
            load_fitting(checkpoint_io.load_weights(Path(a.resume)), a.resume)
            print(f"resumed from {a.resume}", flush=True)
        if a.tie_twins:  # offsets from the loaded rows: the pairs' mean difference
            model.tie_twins(pairs[:, 0], pairs[:, 1])
    if a.tie_twins:
        print(f"tied {len(pairs)} bare word pieces to their space-led twins", flush=True)
    model.to(a.device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f} M parameters, vocab {cfg.vocab_size}", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "hc_" not in n and ".fn" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "hc_" not in n and ".fn" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    step, epoch, pos, elapsed0, qat_started = 0, 0, 0, 0.0, None
    # Rows per forward, halved on running out of memory: one count for the steps before the quantisation-aware
    # phase and one for that phase, whose eager fp32 fake-quantised forward needs more memory than the
    # compiled bf16 one and would otherwise inherit its count (or fall from it).
    micro = qat_micro = a.micro or a.batch
    perm = None
    if st is not None:
        opt.load_state_dict(st["opt"])  # moves the moments to the parameters' device
        step, epoch, pos, elapsed0, qat_started = st["step"], st["epoch"], st["pos"], st["elapsed"], st["qat_started"]
        micro = min(micro, st.get("micro", micro))
        if st.get("qat_micro"):  # saved only once the phase has run: what its own forwards fell to
            qat_micro = min(qat_micro, st["qat_micro"])
        if st["n_rows"] == n_rows:
            perm = st["perm"]
            torch.set_rng_state(st["rng"])
        else:
            print(f"WARNING: {n_rows} rows now, {st['n_rows']} when saved: a new data order", flush=True)
    if perm is None or pos > len(perm):
        perm, pos = torch.randperm(n_rows), 0

    fwd = model
    fast = a.fast  # cleared if a --fast step fails (then the plain fp32 path, as without the flag)
    if a.compile:
        try:
            fwd = torch.compile(model)
            print("torch.compile: main forward compiled lazily at the first step", flush=True)
        except Exception as e:  # noqa: BLE001 (any failure: train eagerly)
            print(f"WARNING: torch.compile failed ({type(e).__name__}: {e}); eager forward", flush=True)
            fwd = model
    compiled = fwd is not model  # train_meta's record: stays true when the QAT phase releases the graph

    stop = {"flag": False}

    def on_term(signum, frame):  # the device's time limit: save what we have at the next step
        stop["flag"] = True
    signal.signal(signal.SIGTERM, on_term)

    start = time.time()
    budget = a.minutes * 60.0
    if a.stop_at:
        budget = min(budget, a.stop_at - start)
    total = (a.total_minutes or a.minutes) * 60.0
    if a.final and elapsed0 < total:  # a finished schedule is not reopened
        total = elapsed0 + max(budget, 1.0)
    budget = min(budget, max(total - elapsed0, 0.0))
    print(f"schedule: {total / 60:.2f} min in all, {elapsed0 / 60:.2f} done, this call {budget / 60:.2f} min; "
          f"batch {a.batch} (micro {micro}), lr {a.lr}", flush=True)
    log = open(out / "train_log.jsonl", "a")
    last_save = time.time()

    def state_now():
        return {"step": step, "epoch": epoch, "pos": pos, "elapsed": elapsed0 + (time.time() - start),
                "qat_started": qat_started, "perm": perm, "n_rows": n_rows, "micro": micro,
                "qat_micro": qat_micro if qat_started is not None else None,
                "rng": torch.get_rng_state(), "total_seconds": total}

    steps_here = 0
    while True:
        here = time.time() - start
        frac = (elapsed0 + here) / total
        if here >= budget or frac >= 1.0 or stop["flag"] or (a.max_steps and step >= a.max_steps):
            break
        if a.max_steps:
            frac = max(frac, step / a.max_steps)
        qat = frac >= 1.0 - a.qat_frac
        if qat and qat_started is None:
            qat_started = step
            print(f"step {step}: quantisation-aware phase starts", flush=True)
        if qat and fwd is not model:
            # The compiled forward is not used again in this call: drop it and its caches, and hand the
            # allocator's cached blocks back, before the eager phase. Round 15 kept them, and its first
            # quantisation-aware step ran out of memory down to 8 rows per forward (53 steps in 2.8 min).
            fwd = model
            torch._dynamo.reset()
            gc.collect()
            if a.device == "cuda":
                torch.cuda.empty_cache()
            print(f"step {step}: compiled forward released for the quantisation-aware phase "
                  f"({qat_micro} rows per forward)", flush=True)
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
        for g in opt.param_groups:
            g["lr"] = lr
        if pos + a.batch > len(perm):
            perm, pos, epoch = torch.randperm(n_rows), 0, epoch + 1
        idx = perm[pos:pos + a.batch]
        ids = ids_all_t[idx].to(a.device, non_blocking=True)
        w = w_all_t[idx].to(a.device, non_blocking=True)
        wsum, wsum2 = w[:, 1:].sum().clamp_min(1.0), w[:, 2:].sum().clamp_min(1.0)
        while True:
            num = Numerics("reference", ste=True, quantize_weights=True) if qat else Numerics("exact", sdpa=fast)
            mixed = fast and not qat and a.device == "cuda"
            # The quantisation-aware steps run eagerly: compiling their graph too would cost minutes of a
            # phase that lasts a few, so a last call can keep --compile for its steps before that phase
            # (their graph loads from the machine's inductor cache in seconds).
            step_fwd = model if qat else fwd
            rows = qat_micro if qat else micro
            try:
                opt.zero_grad(set_to_none=True)
                main_s, mtp_s, index_s = 0.0, 0.0, 0.0
                for s in range(0, a.batch, rows):
                    with torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=mixed):
                        main_l, mtp_l, index_l = losses(step_fwd, model, ids[s:s + rows], w[s:s + rows], num,
                                                        True)
                    share = ids[s:s + rows].shape[0] / a.batch
                    loss = main_l / wsum + MTP_WEIGHT * mtp_l / wsum2 + INDEX_WEIGHT * share * index_l
                    loss.backward()
                    main_s += main_l.item() / wsum.item()
                    mtp_s += mtp_l.item() / wsum2.item()
                    index_s += share * index_l.item()
                break
            except Exception as e:  # noqa: BLE001 (out of memory or a compiled forward's failure)
                oom, msg = is_oom(e), f"{type(e).__name__}: {str(e)[:300]}"
                if not (oom and rows > 1) and step_fwd is model and not (fast and not qat):
                    raise
            # Past the except block, the traceback and the activations its frames hold are released.
            main_l = mtp_l = index_l = loss = None
            opt.zero_grad(set_to_none=True)
            if a.device == "cuda":
                torch.cuda.empty_cache()
            if oom and rows > 1:
                if qat:
                    qat_micro //= 2
                else:
                    micro //= 2
                print(f"step {step}: out of memory; {rows // 2} rows per forward from now on"
                      f"{' (quantisation-aware)' if qat else ''}", flush=True)
            elif fast and not qat:  # --fast is the newest path: drop it before giving up the compiled forward
                fast = False
                print(f"WARNING: --fast step failed ({msg}); fp32 and dense attention from now on", flush=True)
            else:
                print(f"WARNING: compiled forward failed ({msg}); eager from now on", flush=True)
                fwd, compiled = model, False
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        pos += a.batch
        if not torch.isfinite(gn):
            print(f"step {step}: non-finite gradient norm, update skipped", flush=True)
            step += 1
            continue
        opt.step()
        update_bias(model)
        if step % 25 == 0:
            rec = {"step": step, "epoch": epoch, "t": round(elapsed0 + time.time() - start, 1), "lr": lr,
                   "loss": main_s, "mtp": mtp_s, "index_kl": index_s, "grad_norm": gn.item(), "qat": bool(qat)}
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print(json.dumps(rec), flush=True)
        step += 1
        steps_here += 1
        if state_path is not None and time.time() - last_save >= a.save_every:
            save_state(state_path, model, opt, state_now())
            last_save = time.time()
    if state_path is not None:
        save_state(state_path, model, opt, state_now())
    train_s = elapsed0 + time.time() - start
    cfg_json = {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}
    meta = {"steps": step, "steps_this_call": steps_here, "train_seconds": round(train_s, 1),
            "schedule_seconds": round(total, 1), "qat_from_step": qat_started, "epochs": epoch, "rows": n_rows,
            "train_tokens_per_epoch": int(n_tok), "params": n_params, "config": cfg_json, "seq": a.seq,
            "batch": a.batch, "micro": micro, "qat_micro": qat_micro, "lr": a.lr,
            "call_weight": data_tokens.CALL_WEIGHT,
            "compiled": compiled, "fast": fast, "tied_twins": len(pairs),
            "device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu"}
    (out / "train_meta.json").write_text(json.dumps(meta, indent=1))
    torch.save(model.export_state(), out / "model.pt")
    print(f"trained {steps_here} steps in this call, {step} in all, {train_s / 60:.1f} min; saved {out / 'model.pt'}"
          f"{'' if qat_started is not None else ' (WARNING: no quantisation-aware phase yet)'}", flush=True)


if __name__ == "__main__":
    main()
