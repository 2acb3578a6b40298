#!/usr/bin/env bash
# report_test.sh MESHRUN: `meshrun report RUN_DIR` on real runs (the PPO
# quickstart with checkpoints; sft-tiny), opened in headless Chromium
# (Debian's `chromium`): the screenshot is not blank, the DOM has every
# section and the expected chart titles, and the page references nothing
# outside itself. Then the bad inputs: a missing folder, a file, a folder
# that is not a run, a malformed metrics line: exit 1 naming the thing.
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/common.sh
source "$here/lib/common.sh"

mr_meshrun_argument "$0" "$@"
RECIPES=$(realpath "$here/../../recipes")
export MR_TIMEOUT=240

mr_init report

# open_in_chromium HTML NAME: MR_TMP/NAME.png (a screenshot) and
# MR_TMP/NAME.dom (the DOM after loading), with a profile of its own.
open_in_chromium() {
  command -v chromium >/dev/null || fail "chromium is missing: run scripts/setup.sh --test"
  local html=$1 name=$2 flags=(--headless --no-sandbox --disable-gpu --user-data-dir="$MR_TMP/chromium-$2"
                                --no-first-run --disable-extensions --window-size=1400,2000)
  timeout 90 chromium "${flags[@]}" --screenshot="$MR_TMP/$name.png" "file://$html" >"$MR_TMP/$name.log" 2>&1 ||
    fail "chromium could not take a screenshot of $html: $(tail -5 "$MR_TMP/$name.log")"
  timeout 90 chromium "${flags[@]}" --dump-dom "file://$html" >"$MR_TMP/$name.dom" 2>>"$MR_TMP/$name.log" ||
    fail "chromium could not dump the DOM of $html: $(tail -5 "$MR_TMP/$name.log")"
}

# check_page NAME TITLE...: the screenshot shows a drawn page (many colours,
# a good share of non-white pixels; decoded here with zlib) and the DOM holds
# each TITLE as a heading or a chart caption.
check_page() {
  local name=$1
  shift
  "$MR_PYTHON" - "$MR_TMP/$name.png" "$MR_TMP/$name.dom" "$@" <<'PY' || fail "the report page $name does not check out"
import re, struct, sys, zlib
png, dom_path, titles = sys.argv[1], sys.argv[2], sys.argv[3:]
data = open(png, "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, chunks, header = 8, [], None
while pos < len(data):
    length, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + length]
    if kind == b"IHDR":
        header = struct.unpack(">IIBBBBB", body)
    elif kind == b"IDAT":
        chunks.append(body)
    pos += 12 + length
width, height, depth, colour, _, _, interlace = header
assert depth == 8 and colour in (2, 6) and interlace == 0, header
channels = 3 if colour == 2 else 4
raw = zlib.decompress(b"".join(chunks))
stride = width * channels
rows, previous = [], bytearray(stride)
for y in range(height):
    kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        left = line[i - channels] if i >= channels else 0
        up = previous[i]
        corner = previous[i - channels] if i >= channels else 0
        if kind == 1: line[i] = (line[i] + left) & 255
        elif kind == 2: line[i] = (line[i] + up) & 255
        elif kind == 3: line[i] = (line[i] + (left + up) // 2) & 255
        elif kind == 4:
            p = left + up - corner
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
            line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
    rows.append(bytes(line))
    previous = line
colours, drawn, total = set(), 0, 0
for row in rows[::4]:
    for x in range(0, stride, channels * 4):
        pixel = row[x:x + 3]
        colours.add(pixel)
        drawn += pixel != b"\xff\xff\xff"
        total += 1
assert len(colours) > 50, "the screenshot has %d colours: blank?" % len(colours)
assert drawn > total * 0.05, "only %d of %d sampled pixels are not white" % (drawn, total)
dom = open(dom_path, encoding="utf-8").read()
found = set(re.findall(r"<(?:h2|figcaption)[^>]*>([^<]*)</", dom))
missing = [t for t in titles if t not in found]
assert not missing, ("missing titles", missing, sorted(found))
assert "<svg" in dom and "<polyline" in dom, "no chart drawn"
PY
}

# self_contained HTML: no script, no stylesheet or image from elsewhere.
self_contained() {
  ! grep -qiE '<script|<link|src=|@import|url\(|https?://' "$1" || fail "$1 refers to something outside the page"
}

case_ppo_report() {
  local run=$MR_TMP/ppo
  isolate "$run"
  assert_exit 0 "$MESHRUN" "$RECIPES/quickstart.toml" "${MR_ISOLATED[@]}" --set checkpoint.save_steps=16
  assert_exit 0 "$MESHRUN" report "$run"
  [[ $MR_OUT == "$run/report.html"* ]] || fail "report did not print where it wrote: $MR_OUT"
  self_contained "$run/report.html"
  open_in_chromium "$run/report.html" ppo
  check_page ppo "Summary" "Curves" "Loss" "Reward" "KL" "Entropy" "Throughput (tokens/s)" "Phase time per step" \
    "Rollout slots busy" "Rollout KV blocks at the peak" "Checkpoints" "Plan" "Resolved recipe"
  grep -q "global_step_16" "$MR_TMP/ppo.dom" || fail "the checkpoint of step 16 is not listed"
  grep -q "global_step_32" "$MR_TMP/ppo.dom" || fail "the checkpoint of step 32 is not listed"
  grep -q "Fingerprint" "$MR_TMP/ppo.dom" || fail "the resolved recipe is not shown"
  grep -q "Run: " "$MR_TMP/ppo.dom" || fail "the plan is not shown"
}

case_sft_report() {
  local run=$MR_TMP/sft
  isolate "$run"
  assert_exit 0 "$MESHRUN" "$RECIPES/sft-tiny.toml" "${MR_ISOLATED[@]}" --set train.max_steps=6
  assert_exit 0 "$MESHRUN" report "$run" --out "$MR_TMP/sft-report.html"
  [[ ! -e $run/report.html ]] || fail "--out was not honoured"
  open_in_chromium "$MR_TMP/sft-report.html" sft
  check_page sft "Loss" "Learning rate" "Gradient norm" "Throughput (tokens/s)" "Checkpoints"
}

case_bad_input() {
  assert_exit 1 "$MESHRUN" report "$MR_TMP/nowhere"
  assert_contains "$MR_ERR" "meshrun report: $MR_TMP/nowhere: no such folder"
  printf 'x' >"$MR_TMP/a-file"
  assert_exit 1 "$MESHRUN" report "$MR_TMP/a-file"
  assert_contains "$MR_ERR" "$MR_TMP/a-file: not a folder"
  mkdir -p "$MR_TMP/empty"
  assert_exit 1 "$MESHRUN" report "$MR_TMP/empty"
  assert_contains "$MR_ERR" "$MR_TMP/empty: no metrics.jsonl"
  mkdir -p "$MR_TMP/bad"
  printf '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": \n[1, 2]\n{"loss": 1}\n' >"$MR_TMP/bad/metrics.jsonl"
  assert_exit 1 "$MESHRUN" report "$MR_TMP/bad"
  assert_contains "$MR_ERR" "$MR_TMP/bad/metrics.jsonl:2"
  assert_contains "$MR_ERR" "$MR_TMP/bad/metrics.jsonl:4"
  [[ ! -e $MR_TMP/bad/report.html ]] || fail "a report was written for unreadable metrics"
  mkdir -p "$MR_TMP/dirmetrics/metrics.jsonl"
  assert_exit 1 "$MESHRUN" report "$MR_TMP/dirmetrics"
  assert_contains "$MR_ERR" "metrics.jsonl: not a regular file"
  # A new metric name every row (a hook that invents them): the first 1024
  # are charted, the rest left out with a warning, in bounded time and size.
  mkdir -p "$MR_TMP/names"
  "$MR_PYTHON" -c 'import json
for step in range(1, 20001): print(json.dumps({"step": step, "loss": 1.0 / step, "name_%d" % step: step}))' \
    >"$MR_TMP/names/metrics.jsonl"
  local started=$SECONDS
  assert_exit 0 "$MESHRUN" report "$MR_TMP/names"
  (( SECONDS - started < 30 )) || fail "the report of 20000 names took $((SECONDS - started)) s"
  assert_contains "$MR_ERR" "more than 1024 metric names; the report charts the first 1024 and leaves out at least 1024"
  (( $(stat -c %s "$MR_TMP/names/report.html") < 64 << 20 )) || fail "the report of 20000 names is over 64 MiB"
}

run_case "PPO quickstart: report.html in headless Chromium, every section, checkpoints, plan, recipe" case_ppo_report
run_case "sft-tiny: report with --out: loss, lr, grad norm" case_sft_report
run_case "bad run folders: exit 1 naming what is wrong" case_bad_input
mr_finish
