#!/usr/bin/env python3
"""Peer baseline for `onecard bench`: transformers' DeepseekV4ForCausalLM, bf16, random weights.

Runs on the GPU machine (torch + transformers with DeepseekV4, no network). Builds the DeepSeek-V4-Flash
config (the official config.json the flash preset writes, translated by scripts/golden/hf_mapping.py
exactly as the golden scripts do) with fewer layers and routed experts, then measures:
  * decode: for each batch size, a short random prompt fills a DynamicCache, then single-token steps
    are timed one by one (torch.cuda.synchronize around each); tok/s = batch / median step time;
  * prefill: one random prompt of --prefill tokens through a fresh cache (logits of the last token
    only where the model accepts logits_to_keep); tok/s = tokens / median time.
A failure (OOM, unsupported path) is recorded as the error string and traceback; the script always
writes its JSON (also after every measurement, so a killed run leaves what it had).

Scaling to the real 43 layers: t_eh (embedding + HC head + final norm + LM head, measured by running
the same model with its decoder layers removed) is separated from the per-layer part:
    t_43 = t_eh + 43/N * (t_N - t_eh)
When t_eh cannot be measured, t_43 = 43/N * t_N (recorded in "scaling"). The N layers follow the
Flash schedule truncated (N = 4: SWA, SWA, CSA, HCA; the real model has 2 SWA, 21 CSA, 20 HCA), and
routed-expert work per token is top-6 whatever E is (E only changes memory), so the scaled figure is
an estimate of the full model, stated as such.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "golden"))

FULL_LAYERS = 43


def flash_official_config() -> dict:
    """The official root config.json of deepseek-ai/DeepSeek-V4-Flash (the flash preset's values)."""
    ratios = [0, 0] + [4, 128] * 20 + [4] + [0]  # 43 main layers, then the MTP block
    return {
        "architectures": ["DeepseekV4ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 0, "compress_ratios": ratios, "compress_rope_theta": 160000, "eos_token_id": 1,
        "expert_dtype": "fp4", "hc_eps": 1e-6, "hc_mult": 4, "hc_sinkhorn_iters": 20, "head_dim": 512,
        "hidden_act": "silu", "hidden_size": 4096, "index_head_dim": 128, "index_n_heads": 64, "index_topk": 512,
        "initializer_range": 0.02, "max_position_embeddings": 1048576, "model_type": "deepseek_v4",
        "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True,
        "num_attention_heads": 64, "num_experts_per_tok": 6, "num_hash_layers": 3, "num_hidden_layers": 43,
        "num_key_value_heads": 1, "num_nextn_predict_layers": 1, "o_groups": 8, "o_lora_rank": 1024,
        "q_lora_rank": 1024, "qk_rope_head_dim": 64,
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
        "rms_norm_eps": 1e-6,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 16, "original_max_position_embeddings": 65536,
                         "type": "yarn"},
        "rope_theta": 10000, "routed_scaling_factor": 1.5, "scoring_func": "sqrtsoftplus", "sliding_window": 128,
        "swiglu_limit": 10.0, "tie_word_embeddings": False, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
        "use_cache": True, "vocab_size": 129280,
    }


def shrunk_config(n_layers: int, n_experts: int) -> dict:
    off = flash_official_config()
    off["num_hidden_layers"] = n_layers
    off["compress_ratios"] = off["compress_ratios"][:n_layers]  # no MTP block: transformers has none
    off["num_nextn_predict_layers"] = 0
    off["n_routed_experts"] = n_experts
    off["num_experts_per_tok"] = min(6, n_experts)
    off["num_hash_layers"] = min(3, n_layers)
    return off


def log(msg: str) -> None:
    print(f"[peer {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def error_record(exc: BaseException) -> dict:
    return {"error": f"{type(exc).__name__}: {exc}"[:2000], "traceback": traceback.format_exc()[-6000:]}


class Result:
    """The JSON document, rewritten after every step so a killed run keeps what it measured."""

    def __init__(self, path: Path, doc: dict):
        self.path, self.doc = path, doc

    def save(self) -> None:
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.doc, indent=2, default=str) + "\n")
        os.replace(tmp, self.path)


def build_model(torch, official: dict, seed: int):
    import hf_mapping
    try:
        from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    except ImportError:
        from transformers.models.deepseek_v4 import DeepseekV4Config, DeepseekV4ForCausalLM

    kwargs = hf_mapping.hf_config_kwargs(official)
    config = DeepseekV4Config(**kwargs)
    try:
        config._attn_implementation = "eager"  # V4 supports nothing else
    except Exception as exc:  # noqa: BLE001
        log(f"could not set _attn_implementation: {exc}")
    torch.manual_seed(seed)
    how = ""
    model = None
    # _from_config with a dtype keeps the modules transformers wants in fp32 (HC, router bias) in fp32.
    for kw in ("dtype", "torch_dtype"):
        try:
            with torch.device("cuda"):
                model = DeepseekV4ForCausalLM._from_config(config, **{kw: torch.bfloat16})
            how = f"_from_config({kw}=bfloat16)"
            break
        except Exception as exc:  # noqa: BLE001
            log(f"_from_config({kw}=...) failed: {type(exc).__name__}: {exc}")
    if model is None:
        with torch.device("cuda"):
            model = DeepseekV4ForCausalLM(config)
        model = model.to(torch.bfloat16)
        how = "constructor + .to(bfloat16)"
    model.eval()
    # transformers initialises tid2eid to zeros (real values come from a checkpoint): every token would
    # pick expert 0 K times. Give each vocabulary row K distinct random experts, as a checkpoint has.
    n_tables = 0
    g = torch.Generator(device="cuda")
    g.manual_seed(seed + 1)
    for name, buf in model.named_buffers():
        if name.endswith("tid2eid"):
            vocab, k = buf.shape
            n_exp = official["n_routed_experts"]
            table = torch.rand(vocab, n_exp, device=buf.device, generator=g).argsort(dim=1)[:, :k]
            buf.copy_(table.to(buf.dtype))
            n_tables += 1
    n_params = int(sum(p.numel() for p in model.parameters()))
    info = {"built_with": how, "n_parameters": n_params, "tid2eid_tables_randomised": n_tables,
            "config_kwargs": kwargs, "experts_implementation": getattr(config, "_experts_implementation", None)}
    return model, config, info


def sync_time(torch, fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def new_cache(config):
    from transformers import DynamicCache
    return DynamicCache(config=config)


def measure_decode(torch, model, config, batch: int, prompt_len: int, warmup: int, repeats: int, vocab: int) -> dict:
    """Median time of one cached single-token step for `batch` sequences after a prompt of prompt_len."""
    ids = torch.randint(0, vocab, (batch, prompt_len), device="cuda")
    with torch.inference_mode():
        cache = new_cache(config)
        t_prompt, _ = sync_time(torch, lambda: model(input_ids=ids, past_key_values=cache, use_cache=True))
        times = []
        for i in range(warmup + repeats):
            nxt = torch.randint(0, vocab, (batch, 1), device="cuda")
            t, _ = sync_time(torch, lambda: model(input_ids=nxt, past_key_values=cache, use_cache=True))
            if i >= warmup:
                times.append(t)
    med = statistics.median(times)
    return {"step_s_median": med, "step_s_all": times, "tok_s_measured": batch / med, "prompt_len": prompt_len,
            "prompt_s": t_prompt}


def forward_prefill(model, config, ids):
    cache = new_cache(config)
    try:
        return model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    except TypeError:
        return model(input_ids=ids, past_key_values=cache, use_cache=True)


def measure_prefill(torch, model, config, n_tokens: int, warmup: int, repeats: int, vocab: int) -> dict:
    ids = torch.randint(0, vocab, (1, n_tokens), device="cuda")
    times = []
    with torch.inference_mode():
        for i in range(warmup + repeats):
            t, out = sync_time(torch, lambda: forward_prefill(model, config, ids))
            del out
            if i >= warmup:
                times.append(t)
    med = statistics.median(times)
    return {"tokens": n_tokens, "s_median": med, "s_all": times, "tok_s_measured": n_tokens / med}


def measure_embed_head(torch, model, fn):
    """Runs fn() with the decoder layers removed: embedding, HC head, final norm and LM head only."""
    layers = model.model.layers
    try:
        model.model.layers = torch.nn.ModuleList()
        return fn()
    finally:
        model.model.layers = layers


def scale(t_n: float, t_eh, n_layers: int) -> tuple:
    if t_eh is not None and 0.0 <= t_eh < t_n:
        return t_eh + FULL_LAYERS / n_layers * (t_n - t_eh), "t_43 = t_eh + 43/N * (t_N - t_eh)"
    return FULL_LAYERS / n_layers * t_n, "t_43 = 43/N * t_N (embed/head time not separated)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--decode-batch", default="1,8,64", help="comma-separated batch sizes")
    ap.add_argument("--prefill", type=int, default=8192, help="prompt tokens for the prefill measurement (0: skip)")
    ap.add_argument("--prompt-len", type=int, default=64, help="cached context before the timed decode steps")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--prefill-repeats", type=int, default=3, help="at most --repeats")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-budget", type=float, default=210.0,
                    help="seconds; later measurements are skipped (and recorded as such) past it")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    start = time.perf_counter()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)

    res = Result(Path(args.out), {
        "layers": args.layers, "experts": args.experts, "python": platform.python_version(),
        "decode": {}, "prefill": {}, "method": {
            "dtype": "bfloat16 weights and activations, random init (torch.manual_seed), eager attention",
            "decode": "DynamicCache filled by a random prompt of --prompt-len tokens per sequence, then "
                      f"{args.warmup} warm-up and {args.repeats} timed single-token steps, each between "
                      "torch.cuda.synchronize calls; tok/s = batch / median step time",
            "prefill": "one random prompt through a fresh DynamicCache (logits_to_keep=1 where accepted), "
                       "1 warm-up, median of the timed runs; tok/s = tokens / median time",
            "scaling": f"t_43 = t_eh + {FULL_LAYERS}/N * (t_N - t_eh), t_eh = the same call with the decoder "
                       "layers removed (embedding, HC head, norm, LM head); falls back to 43/N * t_N. The N "
                       "layers are the Flash schedule truncated and routed work per token is top-6 for any E, "
                       "so the scaled figure estimates the full model",
        }})
    try:
        import torch
        import transformers
        res.doc.update(torch=torch.__version__, transformers=transformers.__version__,
                       cuda_available=torch.cuda.is_available())
        res.doc["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
        res.save()
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        official = shrunk_config(args.layers, args.experts)
        model, config, info = build_model(torch, official, args.seed)
        res.doc["model"] = info
        res.doc["build_s"] = time.perf_counter() - start
        res.save()
        log(f"model built: {info['n_parameters'] / 1e9:.2f} B parameters, {info['built_with']}")
    except Exception as exc:  # noqa: BLE001
        res.doc["fatal"] = error_record(exc)
        res.save()
        log(f"fatal: {res.doc['fatal']['error']}")
        return 1

    vocab = official["vocab_size"]

    def over_budget() -> bool:
        return time.perf_counter() - start > args.time_budget

    for b in [int(x) for x in args.decode_batch.split(",") if x.strip()]:
        key = str(b)
        if over_budget():
            res.doc["decode"][key] = {"error": f"skipped: past the {args.time_budget} s time budget"}
            res.save()
            continue
        try:
            rec = measure_decode(torch, model, config, b, args.prompt_len, args.warmup, args.repeats, vocab)
            try:
                # Stateless single-token call of the layer-less model: the per-step cost outside the layers.
                ids = torch.randint(0, vocab, (b, 1), device="cuda")
                with torch.inference_mode():
                    def eh():
                        for _ in range(args.warmup):
                            sync_time(torch, lambda: model(input_ids=ids, use_cache=False))
                        return statistics.median(
                            sync_time(torch, lambda: model(input_ids=ids, use_cache=False))[0]
                            for _ in range(args.repeats))
                    rec["embed_head_s"] = measure_embed_head(torch, model, eh)
            except Exception as exc:  # noqa: BLE001
                rec["embed_head_error"] = error_record(exc)["error"]
            t43, formula = scale(rec["step_s_median"], rec.get("embed_head_s"), args.layers)
            rec.update(step_s_scaled_43=t43, tok_s_scaled_43=b / t43, scaling=formula)
            log(f"decode batch {b}: {rec['tok_s_measured']:.1f} tok/s measured, {rec['tok_s_scaled_43']:.1f} scaled")
        except Exception as exc:  # noqa: BLE001
            rec = error_record(exc)
            log(f"decode batch {b} failed: {rec['error']}")
        finally:
            torch.cuda.empty_cache()
        res.doc["decode"][key] = rec
        res.save()

    if args.prefill > 0:
        reps = max(1, min(args.prefill_repeats, args.repeats))
        if over_budget():
            res.doc["prefill"] = {"tokens": args.prefill, "error": f"skipped: past the {args.time_budget} s budget"}
        else:
            try:
                torch.cuda.reset_peak_memory_stats()
                rec = measure_prefill(torch, model, config, args.prefill, 1, reps, vocab)
                rec["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
                try:
                    ids = torch.randint(0, vocab, (1, args.prefill), device="cuda")
                    with torch.inference_mode():
                        def eh():
                            sync_time(torch, lambda: forward_prefill(model, config, ids))
                            return statistics.median(
                                sync_time(torch, lambda: forward_prefill(model, config, ids))[0] for _ in range(reps))
                        rec["embed_head_s"] = measure_embed_head(torch, model, eh)
                except Exception as exc:  # noqa: BLE001
                    rec["embed_head_error"] = error_record(exc)["error"]
                t43, formula = scale(rec["s_median"], rec.get("embed_head_s"), args.layers)
                rec.update(s_scaled_43=t43, tok_s_scaled_43=args.prefill / t43, scaling=formula)
                log(f"prefill {args.prefill}: {rec['tok_s_measured']:.1f} tok/s measured, "
                    f"{rec['tok_s_scaled_43']:.1f} scaled")
            except Exception as exc:  # noqa: BLE001
                rec = {"tokens": args.prefill, **error_record(exc)}
                log(f"prefill failed: {rec['error']}")
            finally:
                torch.cuda.empty_cache()
            res.doc["prefill"] = rec
    res.doc["total_s"] = time.perf_counter() - start
    res.save()
    log(f"wrote {args.out} ({res.doc['total_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
