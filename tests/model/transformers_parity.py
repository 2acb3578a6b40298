#!/usr/bin/python3
"""The model families against transformers itself (tests/model/transformers_parity_test.cpp).

    transformers_parity.py write OUTDIR
        For each case, a tiny random model built by transformers' own classes
        and written by its save_pretrained to OUTDIR/CASE, with
        OUTDIR/CASE/expected.safetensors: input_ids and their fp32 logits,
        a greedy decode (prompt, new tokens) by transformers' generate and,
        for a mixture of experts, the router's load-balancing loss
        (aux_loss, as transformers computes it with output_router_logits).
    transformers_parity.py check MODEL_DIR EXPECTED
        Loads MODEL_DIR (a model meshrun wrote) with AutoModelForCausalLM and
        checks its logits of EXPECTED's input_ids within 1e-5.

Run with the Python of the torch meshrun builds against, where
scripts/setup.sh --test installs transformers.
"""
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import (AutoModelForCausalLM, Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM,
                          Gemma3TextConfig, MixtralConfig, MixtralForCausalLM, Olmo2Config, Olmo2ForCausalLM,
                          OlmoeConfig, OlmoeForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

# case name -> (config class, model class, config keywords). Every case has
# kv heads fewer than heads, so what is per kv head is checked apart.
CASES = {
    "olmo2": (Olmo2Config, Olmo2ForCausalLM,
              dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                   rms_norm_eps=1e-6, rope_parameters={"rope_theta": 20000.0, "rope_type": "default"},
                   tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                   initializer_range=0.2)),
    # Layer 1 dense (mlp_only_layers, of intermediate_size), layers 0 and 2
    # sparse; top-2 of 4 experts renormalised; head_dim 32 over a hidden 64.
    "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM,
                  dict(vocab_size=96, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                       num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                       num_experts=4, num_experts_per_tok=2, norm_topk_prob=True, mlp_only_layers=[1],
                       decoder_sparse_step=1, max_position_embeddings=128, rms_norm_eps=1e-6,
                       rope_parameters={"rope_theta": 10000.0, "rope_type": "default"},
                       router_aux_loss_coef=0.001, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1,
                       eos_token_id=2, initializer_range=0.2)),
    # A sliding window (8) shorter than the text (13) and the decode (16).
    "mixtral": (MixtralConfig, MixtralForCausalLM,
                dict(vocab_size=96, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                     sliding_window=8, max_position_embeddings=128, rms_norm_eps=1e-5,
                     rope_parameters={"rope_theta": 1000000.0, "rope_type": "default"},
                     tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                     initializer_range=0.2)),
    # Top-3 of 4, not renormalised; clip_qkv active; q/k norms over the whole projections.
    "olmoe": (OlmoeConfig, OlmoeForCausalLM,
              dict(vocab_size=96, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, num_experts=4, num_experts_per_tok=3,
                   norm_topk_prob=False, clip_qkv=1.0, max_position_embeddings=128, rms_norm_eps=1e-5,
                   rope_parameters={"rope_theta": 10000.0, "rope_type": "default"},
                   router_aux_loss_coef=0.01, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1,
                   eos_token_id=2, initializer_range=0.2)),
    # Soft-capping active (attention scores 2, logits 3), a window (4) on
    # layers 0 and 2 shorter than the text, full attention on layer 1; a
    # query scale other than head_dim's; GeGLU; √hidden embeddings; tied.
    "gemma2": (Gemma2Config, Gemma2ForCausalLM,
               dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24,
                    attn_logit_softcapping=2.0, final_logit_softcapping=3.0, sliding_window=4,
                    max_position_embeddings=128, rms_norm_eps=1e-6,
                    rope_parameters={"rope_theta": 10000.0, "rope_type": "default"},
                    tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                    initializer_range=0.2)),
    # Local and global layers with their own rotary bases (10000, and 1e6
    # under linear scaling), a window (4) on the local ones, per-head q/k
    # norms × (1 + w), no soft-capping.
    "gemma3_text": (Gemma3TextConfig, Gemma3ForCausalLM,
                    dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24,
                         sliding_window=4, max_position_embeddings=128, rms_norm_eps=1e-6,
                         layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                      "sliding_attention"],
                         rope_parameters={"full_attention": {"rope_type": "linear", "factor": 4.0,
                                                             "rope_theta": 1000000.0},
                                          "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
                         tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                         initializer_range=0.2)),
}

MIXTURES = {"qwen3_moe", "mixtral", "olmoe"}


def write(outdir):
    for name, (config_class, model_class, keywords) in CASES.items():
        torch.manual_seed(0)
        model = model_class(config_class(**keywords)).eval()
        with torch.no_grad():
            # Norm weights away from 1 (Gemma's, stored as offsets, from 0),
            # so a norm in the wrong place shows.
            for parameter_name, parameter in model.named_parameters():
                if "norm" in parameter_name:
                    parameter.uniform_(-0.5, 0.5) if name.startswith("gemma") else parameter.uniform_(0.5, 1.5)
        folder = os.path.join(outdir, name)
        model.save_pretrained(folder)
        input_ids = torch.randint(3, keywords["vocab_size"], (2, 13))
        extra = {}
        with torch.no_grad():
            if name in MIXTURES:
                outputs = model(input_ids=input_ids, output_router_logits=True)
                extra["aux_loss"] = outputs.aux_loss.float().reshape(1).contiguous()
            else:
                outputs = model(input_ids=input_ids)
            logits = outputs.logits.float()
            prompt = input_ids[:, :6]
            greedy = model.generate(prompt, do_sample=False, max_new_tokens=10, min_new_tokens=10,
                                    pad_token_id=0)[:, prompt.size(1):]
        save_file({"input_ids": input_ids, "logits": logits.contiguous(), "prompt": prompt.contiguous(),
                   "greedy": greedy.contiguous(), **extra}, os.path.join(folder, "expected.safetensors"))
        print(f"{name}: written")


def check(model_dir, expected_path):
    expected = load_file(expected_path)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=expected["input_ids"]).logits.float()
    difference = (logits - expected["logits"]).abs().max().item()
    print(f"{model_dir}: {type(model).__name__}, logits within {difference:.2e}")
    return 0 if difference <= 1e-5 else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        write(sys.argv[2])
        sys.exit(0)
    if len(sys.argv) == 4 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3]))
    sys.exit(__doc__)
