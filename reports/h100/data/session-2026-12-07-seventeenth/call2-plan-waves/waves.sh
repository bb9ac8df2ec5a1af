#!/usr/bin/env bash
# waves.sh — the backward's plan choice across grid sizes: one channel a thread (cpt1) against
# the tile plan (cpt4), bf16 (hw exp) and f32 (acc exp), T 2048, d_state 16, twice.
R=$OUT/res/waves; mkdir -p $R
for rep in 1 2; do
  for s in 8:1536 16:1536 12:1536 32:1536 8:2048 8:2560 8:3072 16:2048 8:4096; do
    b=${s%%:*}; di=${s##*:}
    timeout 60 $B/bench/bench_scan --batch=$b --d_inner=$di --cases=2048:16 --benchmark_filter=scan_bwd \
      --benchmark_min_time=0.05 --dtypes=bf16,f32 \
      --routes=checkpointed-hw:cpt1,checkpointed-hw:cpt4,checkpointed-acc:cpt1,checkpointed-acc:cpt4 \
      --json=$R/w_${b}_${di}_$rep.json > $R/w_${b}_${di}_$rep.txt 2>&1
    echo "$s rep $rep at $SECONDS s" >> $R/progress.txt
  done
done
