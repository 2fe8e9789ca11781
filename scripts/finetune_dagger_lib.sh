# Shared by scripts/finetune_dagger0.sh and scripts/finetune_dagger.sh (sourced from the repository
# root). Each step is idempotent, so a rerun resumes.
M=.venv/bin/metacog
R=runs/finetune
mkdir -p "$R/logs"

# The walkthrough actor that shipped as finetuned:alfworld until session 10 (adapter sha256
# ef713440...): round 0's actor and the adapter every round starts from, out of the repository's history.
W=$R/adapter_rr1200
restore_walkthrough_actor() {
  [ -f $W/model.json ] && return 0
  mkdir -p $W
  for f in adapter.gguf model.json; do
    git show 262b4baab9:metacog_fast/llm/finetuned/alfworld/$f > $W/$f.tmp && mv $W/$f.tmp $W/$f
  done
}

# The played games committed under results/finetune/records (the expert's 900 train games and the
# DAgger collections), unpacked where runs/finetune lacks them: the builders then only index them.
restore_records() {
  local rec
  for rec in handcoded_train_games:games_train dagger0:dagger0_a dagger1:dagger1_a dagger2:dagger2_a; do
    [ -d $R/${rec#*:} ] || [ ! -f results/finetune/records/${rec%:*}.tar.gz ] || \
      tar -xzf results/finetune/records/${rec%:*}.tar.gz -C $R
  done
}

# The round-independent part: the walkthrough actor, the records, data_hc900 and the DAgger datasets
# indexed from them (an unpacked collection has its games and config.json, not its dataset.jsonl).
prepare() {
  local d
  restore_walkthrough_actor
  restore_records
  for d in $R/dagger*_[ab]; do
    [ ! -f $d/config.json ] || [ -f $d/dataset.jsonl ] || $M finetune dagger --out $d --resume >> $R/logs/$(basename $d).log 2>&1
  done
  $M finetune data --out $R/data_hc900 --expert handcoded --max-games 900 --games-dir $R/games_train \
    --workers 2 >> $R/logs/data_hc900.log 2>&1
}

# dagger_collect NAME ACTOR SKIP: two collections NAME_a, NAME_b of 100 games each (SKIP, SKIP + 100),
# one core each; a collection with its dataset (unpacked and indexed by prepare) is not replayed.
dagger_collect() {
  local half skip=$3
  for half in a b; do
    [ -f $R/$1_$half/dataset.jsonl ] || $M finetune dagger --out $R/$1_$half --actor "$2" --skip-games $skip \
      --max-games 100 >> $R/logs/$1_$half.log 2>&1 &
    skip=$((skip + 100))
  done
  wait
}

# train_adapter S DATA...: LoRA from the walkthrough actor on DATA (one epoch, transcripts up to 2,048
# tokens), exported as a GGUF adapter in $R/model_S_adapter.
train_adapter() {
  local S=$1; shift
  $M finetune sft --data-dir "$@" --out $R/sft_$S --init-adapter $W \
    --epochs 1 --learning-rate 5e-4 --max-length 2048 >> $R/logs/sft_$S.log 2>&1
  [ -f $R/model_${S}_adapter/model.json ] || \
    $M finetune export --checkpoint $R/sft_$S --out $R/model_${S}_adapter --format adapter >> $R/logs/export_${S}_adapter.log 2>&1
}

# train_export_eval S DATA...: train_adapter, also exported merged Q8_0 as finetuned:alfworld-S and
# evaluated in that form on the 60 valid_train games.
train_export_eval() {
  local S=$1
  train_adapter "$@"
  $M finetune export --checkpoint $R/sft_$S --out $R/model_$S --name alfworld-$S >> $R/logs/export_$S.log 2>&1
  $M finetune eval --llm finetuned:alfworld-$S --out $R/eval_${S}_60 --tasks 60 --workers 2 >> $R/logs/eval_$S.log 2>&1
}
