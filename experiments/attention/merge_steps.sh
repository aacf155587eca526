#!/bin/sh
# The figures of the MERGE round (experiments/attention/README.md, top section): steps.py on
# materialized and flash attention (MERGE on / off), per trial, into merge/. Sequential, nice.
set -e
cd "$(dirname "$0")/../.."
out=experiments/attention/merge
mkdir -p $out
FP8="model.fp8_activations=true model.fp8_scales=bound"
run() {  # name, overrides...
  name=$1; shift
  [ -s $out/$name.txt ] && return 0
  nice -n 10 python experiments/comm/steps.py -v "$@" > $out/$name.txt.tmp 2>&1 && mv $out/$name.txt.tmp $out/$name.txt
}
run flash-4L-f16 model.attention=flash / policy.flash_merge=true / policy.flash_merge=false
run mat-4L-f16 model.layers=4
run flash-27L-f16 model.layers=27 model.attention=flash / policy.flash_merge=true / policy.flash_merge=false
run mat-27L-f16 model.layers=27
run flash-4L-fp8 $FP8 model.attention=flash / policy.flash_merge=true / policy.flash_merge=false
run mat-4L-fp8 $FP8
run flash-27L-fp8 model.layers=27 $FP8 model.attention=flash / policy.flash_merge=true / policy.flash_merge=false
run mat-27L-fp8 model.layers=27 $FP8
run flash-4L-f16-b2 model.batch=2 "model.input=" model.attention=flash / policy.flash_merge=true / policy.flash_merge=false
run mat-4L-f16-b2 model.batch=2 "model.input="
