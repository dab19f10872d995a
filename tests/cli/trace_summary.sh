#!/bin/sh
# bench/trace-summary.py on a made-up timeline of two layers and the LM head (one block per
# kernel, times chosen so that every column has a known value), and its errors.
set -eu
R=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python3}
"$PY" - "$T/trace.csv" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    f.write("grid,kind,units,sm,block,t0,t1,t2,m0,m1,m2,m3\n")
    for k in range(11):                       # q/k/v, attention, o, gate/up, down; x2; lm_head
        t0 = max(0, 10000 * k - 2000)           # 2 us before the previous kernel's end
        t1 = 10000 * k + 1000                   # its wait returns 1 us after that end
        t2 = 10000 * (k + 1)
        marks = [t1 + 1000 * (i + 1) for i in range(4)] if k == 1 else [0] * 4
        if k == 6:                              # the second layer's attention: a single block
            marks = [t1 + 2000, t1 + 5000, 0, 0]
        kind = 3 if k % 5 == 1 and k < 10 else 2
        f.write(f"{1000 + k},{kind},64,{k},0,{t0},{t1},{t2}," + ",".join(map(str, marks)) + "\n")
PY
"$PY" "$R/bench/trace-summary.py" "$T/trace.csv" > "$T/out"
grep -q "kernels traced: 11 (2 layers); token (first start to last end): 110.0 us" "$T/out"
grep -Eq "^q/k/v +2 +2\.00 +1\.00 +10\.00 +9\.00 " "$T/out"
grep -Eq "^attention +2 +2\.00 +1\.00 +10\.00 +9\.00 " "$T/out"
grep -Eq "^lm_head +1 +2\.00 +1\.00 +10\.00 +9\.00 " "$T/out"
grep -Eq "^sum +110\.0$" "$T/out"
grep -q "mean over 1 blocks (us): K/V and q in 1.00, scores + softmax + V sum 1.00, cluster barrier 1.00, combine 1.00, to the end 5.00" "$T/out"
grep -q "single blocks, mean over 1 (us): K/V and q in 2.00, scores + softmax + V sum 3.00, to the end 4.00" "$T/out"
# the persistent kernel's records (kind 4: one per block and phase; units is the phase): 11
# phases of 3 blocks, each phase 10 us; its wait returns 1 us in, x staged 0.5 us later (not in
# attention phases), blocks end 2, 1 and 0 us before the phase's end; 3.2 us of ring waits over
# 8 warps and 6 pieces a block
"$PY" - "$T/stream.csv" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    f.write("grid,kind,units,sm,block,t0,t1,t2,m0,m1,m2,m3\n")
    for k in range(11):
        t0, t1 = 10000 * k, 10000 * k + 1000
        m0 = 0 if k % 5 == 1 and k < 10 else t1 + 500
        for b in range(3):
            t2 = 10000 * (k + 1) - 1000 * (2 - b)
            f.write(f"9,4,{k},{b},{b},{t0},{t1},{t2},{m0},{t0 + 3200},{t0 + 6},0\n")
PY
"$PY" "$R/bench/trace-summary.py" "$T/stream.csv" > "$T/out"
grep -q "persistent kernel: 11 phases (2 layers); first start to last end 110.0 us" "$T/out"
grep -Eq "^q/k/v +2 +0\.50 +0\.50 +7\.50 +1\.00 +0\.40 +6\.0 +10\.00 +20\.0$" "$T/out"
grep -Eq "^attention +2 +1\.00 +0\.00 +8\.00 +1\.00 +0\.40 +6\.0 +10\.00 +20\.0$" "$T/out"
grep -Eq "^lm_head +1 +1\.00 +0\.50 +7\.50 +1\.00 +0\.40 +6\.0 +10\.00 +10\.0$" "$T/out"
grep -Eq "^sum +110\.0$" "$T/out"
# the MLP kernel (kind 5): two layers of q/k/v, attention, o, mlp and the LM head; each MLP launch
# has 19 blocks that start 3 us before its first wait and one that starts 2 us after it and ends
# last (block 19 of 20)
"$PY" - "$T/mlp.csv" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    f.write("grid,kind,units,sm,block,t0,t1,t2,m0,m1,m2,m3\n")
    for k in range(9):
        base = 100000 * k
        if k % 4 != 3 or k == 8:
            f.write(f"{k},2,64,0,0,{base},{base + 1000},{base + 90000},0,0,0,0\n")
            continue
        for b in range(20):
            t0, t1, gu, add = (base + 3000, base + 3500, 12000, 2000) if b == 19 else (base - 2000, base + 1000, 10000, 1000)
            m0 = t1 + gu
            m1, m2 = m0 + 500, m0 + 5500
            m3 = m2 + 500
            f.write(f"{k},5,64,{b},{b},{t0},{t1},{m3 + add},{m0},{m1},{m2},{m3}\n")
PY
"$PY" "$R/bench/trace-summary.py" "$T/mlp.csv" > "$T/out"
grep -q "kernels traced: 9 (2 layers)" "$T/out"
grep -q "mlp phases, mean over 40 blocks (us): gate/up (block's first warp) 10.10, to h complete 0.50, down (first thread) 5.00, wait for every block's staging 0.50, residual add 1.05" "$T/out"
grep -Eq "^  first half +-3\.00 +0\.00 +10\.00 +0\.50 +5\.00 +0\.50 +1\.00 +17\.00 +0\.45$" "$T/out"
grep -Eq "^  last 5 % +2\.00 +2\.50 +12\.00 +0\.50 +5\.00 +0\.50 +2\.00 +22\.50 +0\.95$" "$T/out"
# where they ran: each block on its own SM; tenth 0 (blocks 0, 1) and tenth 9 (blocks 18, 19),
# from the o step's end 10 us before each launch's base
grep -Eq "^ +1 +40 " "$T/out"
grep -Eq "^ +0 +4 +8\.00 +11\.00 +28\.00$" "$T/out"
grep -Eq "^ +9 +4 +10\.50 +12\.25 +30\.75$" "$T/out"
# the SMs handed over: in mlp.csv every kernel but the MLP runs on SM 0 alone
grep -Eq "^  q/k/v +1 +82\.00 +82\.00 +82\.00 +0%$" "$T/out"
grep -Eq "^  mlp +2 +8\.00 +8\.00 +8\.00 +0%$" "$T/out"
# a kernel whose block on SM 0 starts 1 us before the previous one's ends there, and on SM 1 2 us
# after it; its warps mark their prologue's end (m0) and the norm weights asked (m1)
printf 'grid,kind,units,sm,block,t0,t1,t2,m0,m1,m2,m3\n1,2,64,0,0,0,0,10000,0,0,0,0\n1,2,64,1,1,0,0,10000,0,0,0,0\n2,2,64,0,0,9000,10500,20000,9500,10200,0,0\n2,2,64,1,1,12000,14000,20000,12500,14000,0,0\n' > "$T/hand.csv"
"$PY" "$R/bench/trace-summary.py" "$T/hand.csv" > "$T/out"
grep -Eq "^  lm_head +2 +-1\.00 +2\.00 +2\.00 +50%$" "$T/out"
grep -Eq "^  lm_head early +1 +50% +-1\.00 +-0\.50 +0\.20 +0\.50 +10\.00$" "$T/out"
grep -Eq "^  lm_head late +1 +50% +2\.00 +2\.50 +4\.00 +4\.00 +10\.00$" "$T/out"
# errors: no records, no file, no argument
echo "grid,kind,units,sm,block,t0,t1,t2" > "$T/empty.csv"
if "$PY" "$R/bench/trace-summary.py" "$T/empty.csv" 2> "$T/err"; then exit 1; fi
grep -q "no records" "$T/err"
if "$PY" "$R/bench/trace-summary.py" "$T/missing.csv" 2> "$T/err"; then exit 1; fi
grep -q "missing.csv: No such file" "$T/err"
printf "a,b\n1,2\n" > "$T/bad.csv"
if "$PY" "$R/bench/trace-summary.py" "$T/bad.csv" 2> "$T/err"; then exit 1; fi
grep -q "bad.csv: line 2: not a thin-run timeline" "$T/err"
printf "grid,kind,units,sm,block,t0,t1,t2,m0,m1,m2,m3\n9,4,0,0,0,1,2,x,0,0,0,0\n" > "$T/badstream.csv"
if "$PY" "$R/bench/trace-summary.py" "$T/badstream.csv" 2> "$T/err"; then exit 1; fi
grep -q "badstream.csv: line 2: bad stream record" "$T/err"
if "$PY" "$R/bench/trace-summary.py" 2> "$T/err"; then exit 1; fi
grep -q "usage" "$T/err"
exit 0
