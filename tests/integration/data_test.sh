#!/usr/bin/env bash
# data_test.sh MESHRUN: `meshrun data RECIPE` on the real binary, with a
# tokenizer folder of its own (byte-level BPE, a token a byte, ChatML's
# special tokens) whose chat template uses a variable as Qwen3's does:
# [data] chat_template_kwargs = { enable_thinking = false } puts the empty
# think block before each reply, and without the table there is none; a
# chat_template.jinja beside tokenizer_config.json is the template that
# renders (as in transformers >= 4.47); the JSON form's loss segments are
# exactly the replies. Starts no worker: each call is the one process.
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/common.sh
source "$here/lib/common.sh"

mr_meshrun_argument "$0" "$@"
export MR_TIMEOUT=60

mr_init data

# make_tokenizer DIR: tokenizer.json and tokenizer_config.json (eos
# <|im_end|>) with a ChatML template that writes Qwen3's empty think block
# when enable_thinking is false, replies inside {% generation %} blocks.
make_tokenizer() {
  "$MR_PYTHON" - "$1" <<'EOF' || fail "could not write the tokenizer in $1"
import json, os, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
chars, extra = {}, 0
for b in range(256):
    if b in printable:
        chars[b] = chr(b)
    else:
        chars[b] = chr(256 + extra)
        extra += 1
specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}
tokenizer = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": 256 + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True} for i, t in enumerate(specials)],
    "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
    "model": {"type": "BPE", "vocab": {chars[b]: b for b in range(256)}, "merges": []},
}
template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}"
            "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
            "{% generation %}{{ m.content }}<|im_end|>{% endgeneration %}{{ '\\n' }}"
            "{% else %}{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
config = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": template}
with open(os.path.join(out, "tokenizer.json"), "w") as f:
    json.dump(tokenizer, f)
with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
    json.dump(config, f)
EOF
}

# write_recipe FILE DATA TOKENIZER [LINE...]: an SFT recipe of the tiny
# built-in model on DATA with data.tokenizer TOKENIZER and LINEs added to
# its [data] table.
write_recipe() {
  local file=$1 data=$2 tokenizer=$3
  shift 3
  {
    printf 'name = "data-view"\nalgorithm = "sft"\n\n[launch]\ntype = "local"\nnodes = 1\nprocs_per_node = 1\n'
    printf 'device = "cpu"\nbackend = "gloo"\n\n[batch]\nmicro_train = 1\ntrain = 1\n\n[roles.actor]\n'
    printf 'model = "builtin:tiny"\ndtype = "fp32"\n\n[data]\npath = "%s"\ntokenizer = "%s"\nmax_len = 256\n' \
      "$data" "$tokenizer"
    local line
    for line in "$@"; do printf '%s\n' "$line"; done
  } >"$file"
}

write_chats() {
  cat >"$1" <<'EOF'
{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}
{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
EOF
}

case_thinking_off() {
  local dir=$MR_TMP/thinking
  mkdir -p "$dir"
  make_tokenizer "$dir/tok"
  write_chats "$dir/chat.jsonl"
  write_recipe "$dir/off.toml" "$dir/chat.jsonl" "$dir/tok" 'chat_template_kwargs = { enable_thinking = false }'
  write_recipe "$dir/plain.toml" "$dir/chat.jsonl" "$dir/tok"

  assert_exit 0 "$MESHRUN" data "$dir/off.toml" --samples 2
  assert_contains "$MR_OUT" 'chat_template_kwargs {"enable_thinking":false}' "the header"
  # The think block is context before the reply, which alone is trained.
  assert_contains "$MR_OUT" $'  context | <|im_start|>assistant\\n\n  context | <think>\\n\n  context | \\n\n  context | </think>\\n\n  context | \\n\n  loss    | Hello!<|im_end|>\n' \
    "sample 1 with thinking off"
  assert_contains "$MR_OUT" $'=== sample 2/2 ('"$dir/chat.jsonl"':2): ' "sample 2's header"
  assert_contains "$MR_OUT" $'  loss    | 4<|im_end|>\n' "sample 2's reply"
  local thinking_off=$MR_OUT

  assert_exit 0 "$MESHRUN" data "$dir/plain.toml" --samples 2
  assert_not_contains "$MR_OUT" "<think>" "the samples without chat_template_kwargs"
  assert_contains "$MR_OUT" $'  context | <|im_start|>assistant\\n\n  loss    | Hello!<|im_end|>\n' "sample 1"
  [[ $MR_OUT != "$thinking_off" ]] || fail "the two views are the same"

  # --set turns it off too, as it would for the run.
  assert_exit 0 "$MESHRUN" data "$dir/plain.toml" --samples 1 --set 'data.chat_template_kwargs={enable_thinking=false}'
  assert_contains "$MR_OUT" '  context | <think>\n' "the view with --set"
}

case_chat_template_jinja() {
  local dir=$MR_TMP/jinja
  mkdir -p "$dir"
  make_tokenizer "$dir/tok"
  write_chats "$dir/chat.jsonl"
  write_recipe "$dir/sft.toml" "$dir/chat.jsonl" "$dir/tok"
  assert_exit 0 "$MESHRUN" data "$dir/sft.toml" --samples 1
  assert_contains "$MR_OUT" '  context | <|im_start|>user\n' "with tokenizer_config.json's template"

  # A different template in chat_template.jinja: it wins.
  printf '%s' "{% for m in messages %}{% if m.role == 'assistant' %}### reply: {% generation %}{{ m.content }}<|im_end|>{% endgeneration %}{% else %}### {{ m.role }}: {{ m.content }}{{ '\\n' }}{% endif %}{% endfor %}" \
    >"$dir/tok/chat_template.jinja"
  assert_exit 0 "$MESHRUN" data "$dir/sft.toml" --samples 1
  assert_not_contains "$MR_OUT" "<|im_start|>" "the samples rendered with chat_template.jinja"
  assert_contains "$MR_OUT" $'  context | ### user: Hi\\n\n  context | ### reply: \n  loss    | Hello!<|im_end|>\n' \
    "the samples rendered with chat_template.jinja"

  # The JSON form: the loss segments are the reply, the ids a token a byte.
  assert_exit 0 "$MESHRUN" data "$dir/sft.toml" --samples 2 --format json
  printf '%s' "$MR_OUT" >"$dir/view.json"
  "$MR_PYTHON" - "$dir/view.json" <<'EOF' || fail "the JSON view does not check out: $MR_OUT"
import json, sys
view = json.load(open(sys.argv[1]))
assert view["algorithm"] == "sft" and view["read"]["whole_file"], view["read"]
samples = view["samples"]
assert [s["line"] for s in samples] == [1, 2], samples
for sample, reply in zip(samples, ["Hello!", "4"]):
    assert len(sample["ids"]) == len(sample["loss_mask"]) == sample["tokens"], sample
    assert sum(sample["loss_mask"]) == sample["loss_tokens"] == len(reply) + 1, sample
    assert [s["text"] for s in sample["segments"] if s["loss"]] == [reply + "<|im_end|>"], sample["segments"]
    assert sample["ids"][-1] == 258, sample["ids"]  # <|im_end|>, trained
EOF
}

run_case "chat_template_kwargs: enable_thinking = false shows the empty think block" case_thinking_off
run_case "chat_template.jinja beside tokenizer_config.json renders the samples" case_chat_template_jinja

mr_finish
