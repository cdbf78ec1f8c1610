#!/usr/bin/env bash
# Everything the GPU machine runs in one call (the device tool gives a bare machine each time):
#   offline install from the carried wheelhouse, bubblewrap from its .deb, a sandbox
#   self-check, the problem-set benchmark, the red-team corpus and the GPU tests.
# Usage (from the repo root on the GPU host): benchmarks/run_device.sh WHEELHOUSE OUTDIR [STEPS...]
# STEPS: fresh prebuild eval elementwise baselines redteam streams redteam-load throughput tests security repeat
# repeat-wait fidelity soak soak-wait placement siblings omp sync bundle (a name that is none of these only installs)
# (default: eval redteam tests).
# fresh: kill servers and spawners a cut call left on a warm machine, and empty the throughput data dir (do it
# before `throughput` with rl, never before rl-again). bundle: every log and JSON line file of OUTDIR into
# OUTDIR/logs.tgz (the device tool brings back at most 8 files), leaving the markdown tables beside it.
# The servers' logs (with thread stacks on a stall: benchmarks/throughput.py sends SIGUSR1) go to
# OUTDIR/server.log.
# baselines: eager and torch.compile baselines of the whole problem library (benchmarks/baselines.py).
# streams: the live kernel-trace stream tests and the red-team's stream cases (KJ-R03), with their evidence.
# KJ_PROBLEMS="softmax reduction" limits the eval step to those problems; KJ_REPEATS, KJ_TRIALS and
# KJ_TIMING_BUDGET set its repeats, trials and timing budget.
# throughput: benchmarks/throughput.py, workloads KJ_WORKLOAD (rl, rl-again, distinct, triton-warm, space-separated;
# default rl), extra flags KJ_TP_FLAGS (e.g. --no-serial),
# corpus KJ_CORPUS (default .carry/corpus), data dir KJ_TP_DATA (default data/throughput: an ignored path,
# kept between calls while the machine stays warm, so rl-again finds rl's store), budget KJ_BUDGET (420 s),
# KJ_COUNT for --count (distinct, triton-warm).
# security: the GPU tests of timing integrity, containment, the start-up check and the candidate log, then the
# red-team's clock-forgery and containment cases (KJ_SECURITY_CASES, default c3_clock* c4_*) on the GPU.
# repeat: benchmarks/repeat.py (every honest library candidate KJ_REPEATS times through the service under a
# CUDA build load of the corpus, and triton.testing.do_bench); KJ_REPEAT_BUDGET sets every job's timing budget
# per model (default: the service's 3 s), to weigh the spread against how long each job holds its GPU alone;
# KJ_PROBLEMS limits it to those library problems. It runs detached, as the soak does (below): five repeats at
# the default budget outlast one call, and `repeat-wait` in the next call waits for the rest.
# fidelity: benchmarks/fidelity.py over the corpus; its rows go to data/fidelity.jsonl (kept while the machine
# stays warm, so a second call resumes; KJ_FIDELITY_RESUME carries an earlier call's rows to a new machine, plain
# or gzipped, e.g. the committed benchmarks/results/logs/fidelity_*.jsonl.gz), the
# table to OUTDIR; KJ_EVAL_BUDGET stops starting pairs after that long; KJ_EVAL_JOBS pairs at once (default 6);
# KJ_FIDELITY_IDS="S035 S141" evaluates those pairs only.
# siblings: benchmarks/core_interference.py on each lane's reserved timing cores (worker/engine/cpu_plan.py, auto,
# one lane a GPU): which other cores slow them alone (SMT siblings a VM's sysfs does not show) and all at once.
# placement: benchmarks/buffer_placement.py (does a kernel's time move with where its buffers lie: fresh
# processes and byte offsets; KJ_PROBLEMS, default softmax layernorm). omp: benchmarks/omp_wait.py (what OpenMP's
# spinning threads cost between host steps, 4 threads). sync: benchmarks/cuda_sync_wait.py (what CUDA's spinning
# waits for the device cost the host, against blocking sync: 4 processes on one GPU, then one alone).
# soak: benchmarks/soak.py (rl rounds back to back against one server for KJ_SOAK_S, default 1200 s, on every
# visible GPU), started detached (setsid) on the warm machine's disk under data/soak-out, then waited for up to
# KJ_WAIT_S (default 540 s); soak-wait: wait for it again in the next call (call again within the machine's idle
# limit, and never with `fresh`, which kills its server). Each copies the report and logs so far into OUTDIR.
set -uo pipefail
wheels=$1
out=$2
shift 2
steps=${*:-eval redteam tests}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pip install --quiet --no-index --find-links "$wheels" pydantic httpx pytest fastapi uvicorn \
    sqlalchemy alembic pydantic-settings prometheus-client ninja libclang-ng 2>&1 | tail -3
# KJ_EXTRA_WHEELS: more folders of wheels, each installed whole without dependencies. Numba's (llvmlite alone is
# 57 MiB) do not fit one call's 64 MiB carry beside the rest, so they come in calls of their own, one after the
# other on the warm machine, which keeps what was installed: e.g. KJ_EXTRA_WHEELS=.carry/llvmlite, then
# KJ_EXTRA_WHEELS=.carry/numba. That folder holds numpy 2.3.5 too: pyproject.toml pins numpy<2.4, and numba-cuda
# 0.30 calls np.row_stack, which the device image's numpy 2.4 no longer has (every numba test failed there).
for extra in ${KJ_EXTRA_WHEELS:-}; do
    python3 -m pip install --quiet --no-index --no-deps "$extra"/*.whl 2>&1 | tail -3
done
if ! command -v bwrap >/dev/null; then
    dpkg -x "$(ls "$wheels"/bubblewrap_*.deb | head -n1)" /opt/kj-bwrap
    export KERNELJUDGE_BWRAP=/opt/kj-bwrap/usr/bin/bwrap
    export PATH=/opt/kj-bwrap/usr/bin:$PATH  # the engine tests look for bwrap on PATH
fi
export PYTHONPATH=${KJ_EXTRA_PYTHONPATH:+$KJ_EXTRA_PYTHONPATH:}$PWD
# The fast build's host compiler: the device image has no clang, so each build's host half took g++'s 8-15 s where
# the service's Docker image (clang-22) takes ~3 s. KJ_CLANG_DEBS: clang's .debs (scripts/download_wheels.sh's
# clang/, about 60 MB: carry them in a call of their own) unpacked into /opt/kj-clang, which a warm machine keeps
# for the next calls. KJ_NO_CLANG=1: build with g++ anyway (the comparison).
if [ -n "${KJ_CLANG_DEBS:-}" ] && [ ! -x /opt/kj-clang/clang++ ]; then
    scripts/unpack_clang.sh "$KJ_CLANG_DEBS" /opt/kj-clang
fi
if [ -x /opt/kj-clang/clang++ ] && [ -z "${KJ_NO_CLANG:-}" ]; then
    export KERNELJUDGE_FAST_CXX=/opt/kj-clang/clang++
fi
echo "fast build host compiler: ${KERNELJUDGE_FAST_CXX:-clang++ on PATH, else g++}"
export KERNELJUDGE_DATA_DIR=${KERNELJUDGE_DATA_DIR:-/tmp/kj-data}
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv | tee "$out/gpu.txt"
# The cores' topology: the lanes reserve whole physical cores where the host shows SMT (worker/engine/cpu_plan.py).
{ lscpu 2>/dev/null | grep -E "^(Model name|Socket|Core|Thread|CPU\(s\))"
  echo "thread siblings: $(cat /sys/devices/system/cpu/cpu*/topology/thread_siblings_list 2>/dev/null | sort -un | tr '\n' ' ')"
} | tee -a "$out/gpu.txt"
stamp=$(date -u +%Y-%m-%d)
# A long step started detached (setsid) on the warm machine's disk under data/NAME-out, so that it outlives the
# call's 600 s: the next call (within the machine's idle limit, never with `fresh`, which kills its server) waits
# for it again. Each wait copies what it wrote so far into OUTDIR.
detached_start() {  # NAME, then the command; its output goes to data/NAME-out/NAME.log
    local dir=$PWD/data/$1-out name=$1
    shift
    # An earlier run of this step, with its server: setsid made its process the leader of a group of its own.
    [ -f "$dir/pid" ] && kill -9 -- "-$(cat "$dir/pid")" 2>/dev/null
    rm -rf "$dir" && mkdir -p "$dir"
    KJ_BENCH_SERVER_LOG=$dir/server.log setsid nohup "$@" >"$dir/$name.log" 2>&1 </dev/null &
    echo $! >"$dir/pid"
}
detached_wait() {  # NAME: until its process ends or KJ_WAIT_S passes; then its files so far, into OUTDIR
    local dir=$PWD/data/$1-out until=$((SECONDS + ${KJ_WAIT_S:-540}))
    while kill -0 "$(cat "$dir/pid" 2>/dev/null || echo 0)" 2>/dev/null && [ $SECONDS -lt $until ]; do
        sleep 5  # polling a process of an earlier call: nothing to wait on but its pid
    done
    kill -0 "$(cat "$dir/pid" 2>/dev/null || echo 0)" 2>/dev/null && echo "$1: still running" || echo "$1: finished"
    find "$dir" -maxdepth 1 -type f ! -name pid -exec cp {} "$out/" \;
    tail -25 "$dir"/*.md 2>/dev/null
}
resume_rows() {  # an earlier call's JSON lines (plain, or gzipped as committed under benchmarks/results/logs/)
    case $1 in *.gz) gzip -dc "$1" >"$2" ;; *) cp "$1" "$2" ;; esac
}
export KJ_BENCH_SERVER_LOG=${KJ_BENCH_SERVER_LOG:-$out/server.log}
for step in $steps; do
    case $step in
    fresh)
        pkill -9 -f 'kerneljudge.cli serve' 2>/dev/null
        pkill -9 -f 'spawn_server.py' 2>/dev/null
        rm -rf "${KJ_TP_DATA:-data/throughput}" ;;
    bundle)
        (cd "$out" && tar czf logs.tgz --warning=no-file-changed --exclude='*.md' --exclude=logs.tgz . ;
            find . -type f ! -name '*.md' ! -name logs.tgz -delete) ;;
    eval)
        python3 -m benchmarks.gpu_eval --device cuda --repeats ${KJ_REPEATS:-5} --timing-budget ${KJ_TIMING_BUDGET:-1.0} --trials ${KJ_TRIALS:-5} \
            ${KJ_PROBLEMS:+--problems $KJ_PROBLEMS} --out "$out/gpu_eval_$stamp.md" --jsonl "$out/gpu_eval.jsonl" 2>&1 | tee "$out/gpu_eval.log" ;;
    prebuild)
        python3 -m benchmarks.prebuild 'benchmarks/redteam/cases/*/candidate.py' \
            'benchmarks/problems/elementwise/cuda_*.py' --threads 12 2>&1 | tee "$out/prebuild.log" ;;
    baselines)
        python3 -m benchmarks.baselines --device cuda --timing-budget ${KJ_TIMING_BUDGET:-1.0} --trials ${KJ_TRIALS:-3} \
            ${KJ_PROBLEMS:+--problems $KJ_PROBLEMS} --out "$out/baselines_$stamp.md" 2>&1 | tee "$out/baselines.log" ;;
    redteam)
        # Each case's outcome goes to OUTDIR/redteam.jsonl as it finishes, so a call cut by its limit still brings
        # back what ran. KJ_REDTEAM_RESUME=PATH: a redteam.jsonl of an earlier call (carried), whose cases are
        # not run again; the table then covers them all. Run `prebuild` first: it builds the CUDA cases 12 at once.
        # KJ_REDTEAM_CASES='glob glob …': only those cases, each glob in its turn and every time it is named (a
        # glob named three times runs three times: a verdict that must repeat), a table per turn.
        if [ -n "${KJ_REDTEAM_CASES:-}" ]; then
            set -f
            turn=0
            for cases in $KJ_REDTEAM_CASES; do
                turn=$((turn + 1))
                python3 -m benchmarks.redteam --device cuda --gpu-only --cases "$cases" --jsonl "$out/redteam.jsonl" \
                    --markdown "$out/redteam_gpu_${turn}_${cases//[*]/}_$stamp.md" 2>&1 | tee -a "$out/redteam.log"
            done
            set +f
        else
            [ -n "${KJ_REDTEAM_RESUME:-}" ] && resume_rows "$KJ_REDTEAM_RESUME" "$out/redteam.jsonl"
            python3 -m benchmarks.redteam --device cuda --gpu-only --jsonl "$out/redteam.jsonl" --resume \
                --markdown "$out/redteam_gpu_$stamp.md" 2>&1 | tee "$out/redteam.log"
        fi ;;
    streams)
        # KJ-R03's evidence on this GPU, in a minute or two: the live stream traces (a failed case prints its
        # timeline), then the red-team's stream cases, each row with the trace's stream evidence (`streams`).
        python3 -m pytest -v -rA -m gpu -p no:cacheprovider tests/engine/test_attribution.py 2>&1 \
            | tee "$out/pytest_streams.log"
        set -f
        for cases in 'c3_side_stream*' 'c3_two_streams*' 'c3_stream_left*' 'honest_*multistream*' \
            'honest_triton_two_streams'; do
            python3 -m benchmarks.redteam --device cuda --cases "$cases" --jsonl "$out/redteam_streams.jsonl" \
                --markdown "$out/redteam_streams_${cases//[*]/}_$stamp.md" 2>&1 | tee -a "$out/redteam_streams.log"
        done
        set +f ;;
    redteam-load)
        # The red-team's cases KJ_REDTEAM_CASES (globs, default the honest ones) KJ_ROUNDS times (default 2) while
        # the corpus's CUDA candidates build in the background on the build cores (12 threads, a cache of their
        # own): a batch's host load, under which honest candidates once got KJ-R20 (their evidence is printed).
        KERNELJUDGE_DATA_DIR=$PWD/data/load-builds python3 -m benchmarks.prebuild "${KJ_CORPUS:-.carry/corpus}/cands/*.py" \
            --threads 12 >"$out/load_builds.log" 2>&1 &
        load_pid=$!
        set -f
        for round in $(seq "${KJ_ROUNDS:-2}"); do
            for cases in ${KJ_REDTEAM_CASES:-'honest_*'}; do
                echo "round $round, load $(kill -0 $load_pid 2>/dev/null && echo running || echo done): $cases"
                python3 -m benchmarks.redteam --device cuda --cases "$cases" 2>&1 | grep -v '^|'
            done
        done 2>&1 | tee "$out/redteam_load.log"
        set +f
        kill $load_pid 2>/dev/null ;;
    elementwise)
        python3 -m benchmarks.gpu_eval --device cuda --problems elementwise --kinds triton_ok cuda_ok \
            --repeats 3 --timing-budget 0.5 --trials 3 --out "$out/gpu_eval_elementwise_$stamp.md" 2>&1 \
            | tee "$out/gpu_eval_elementwise.log" ;;
    throughput)
        for workload in ${KJ_WORKLOAD:-rl}; do
            python3 -m benchmarks.throughput --workload "$workload" --device cuda --corpus "${KJ_CORPUS:-.carry/corpus}" \
                --data-dir "${KJ_TP_DATA:-data/throughput}" --budget-s "${KJ_BUDGET:-420}" ${KJ_COUNT:+--count $KJ_COUNT} \
                ${KJ_TP_FLAGS:-} --out "$out/throughput_${workload}_$stamp.md" --jsonl "$out/throughput_$workload.jsonl" \
                2>&1 | tee "$out/throughput_$workload.log"
        done ;;
    tests)
        # The files that hold GPU tests, named: the device has no Celery, browser or trainer libraries, so
        # collecting all of tests/ stops at the modules that import them. KJ_GPU_TESTS names others.
        # KJ_TEST_PARALLEL=1: one pytest per file, all at once (their time is mostly CUDA builds on the host's
        # cores, and one call's 600 s does not hold them one after the other); each file's log apart.
        gpu_test_files=${KJ_GPU_TESTS:-$(grep -rlE 'pytest\.mark\.gpu|pytestmark = pytest\.mark\.gpu' tests --include='test_*.py' | sort)}
        if [ "${KJ_TEST_PARALLEL:-0}" = 1 ]; then
            for file in $gpu_test_files; do
                python3 -m pytest -v -rA -m gpu -p no:cacheprovider "$file" >"$out/pytest_gpu_${file//\//_}.log" 2>&1 &
            done
            wait
            tail -n 3 "$out"/pytest_gpu_*.log
        else
            python3 -m pytest -v -rA -m gpu -p no:cacheprovider $gpu_test_files 2>&1 | tee "$out/pytest_gpu.log"
        fi ;;
    security)
        python3 -m pytest -q -m gpu -p no:cacheprovider tests/engine/test_timing_integrity.py \
            tests/engine/test_sandbox_containment.py tests/engine/test_startup_check.py tests/engine/test_candidate_log.py \
            2>&1 | tee "$out/pytest_security_gpu.log"
        set -f  # the case globs are the red-team's, not the shell's
        for cases in ${KJ_SECURITY_CASES:-'c3_clock*' 'c4_*'}; do
            python3 -m benchmarks.redteam --device cuda --cases "$cases" \
                --markdown "$out/redteam_security_gpu_${cases%%_*}_$stamp.md" 2>&1 | tee -a "$out/redteam_security.log"
        done
        set +f ;;
    placement)
        python3 -m benchmarks.buffer_placement ${KJ_PROBLEMS:+--problems $KJ_PROBLEMS} \
            --out "$out/buffer_placement_$stamp.md" 2>&1 | tail -30 | tee "$out/buffer_placement.log" ;;
    siblings)
        lanes=$(nvidia-smi -L | wc -l)
        probes=$(python3 -c "import sys; from worker.engine.cpu_plan import plan_cpus; n = int(sys.argv[1]); \
print(' '.join(f'--probe-cpu {cpu}' for lane in range(n) for cpu in plan_cpus('auto', lane=lane, lanes=n).lane_cpus))" \
            "$lanes")
        python3 -m benchmarks.core_interference ${probes:---probe-cpu 0} --out "$out/core_interference_$stamp.md" \
            2>"$out/core_interference.json" | tail -60 ;;
    omp)
        python3 -m benchmarks.omp_wait --threads 4 --out "$out/omp_wait_$stamp.md" ;;
    sync)
        python3 -m benchmarks.cuda_sync_wait --processes 4 --seconds 6 --out "$out/cuda_sync_wait_$stamp.md" ;;
    repeat)
        detached_start repeat python3 -m benchmarks.repeat --device cuda --repeats ${KJ_REPEATS:-5} \
            --corpus "${KJ_CORPUS:-.carry/corpus}" --build-threads ${KJ_BUILD_THREADS:-12} \
            ${KJ_REPEAT_BUDGET:+--timing-budget-s $KJ_REPEAT_BUDGET} ${KJ_PROBLEMS:+--problems $KJ_PROBLEMS} \
            --out "$PWD/data/repeat-out/repeat${KJ_REPEAT_BUDGET:+_budget$KJ_REPEAT_BUDGET}_$stamp.md"
        detached_wait repeat ;;
    repeat-wait)
        detached_wait repeat ;;
    fidelity)
        # KJ_FIDELITY_RESUME=PATH: the fidelity.jsonl an earlier call brought back (carried), for a machine that
        # is no longer warm; its pairs are not evaluated again.
        mkdir -p data
        [ -n "${KJ_FIDELITY_RESUME:-}" ] && resume_rows "$KJ_FIDELITY_RESUME" data/fidelity.jsonl
        python3 -m benchmarks.fidelity --corpus "${KJ_CORPUS:-.carry/corpus}" --phases build,eval,report \
            ${KJ_FIDELITY_IDS:+--ids $KJ_FIDELITY_IDS} --eval-budget-s ${KJ_EVAL_BUDGET:-0} --eval-jobs ${KJ_EVAL_JOBS:-6} --jsonl data/fidelity.jsonl --out "$out/fidelity_$stamp.md" 2>&1 \
            | tee "$out/fidelity.log"
        cp data/fidelity.jsonl "$out/" ;;
    soak)
        pkill -9 -f 'm benchmarks[.]soak' 2>/dev/null  # [.]: never this script's own command line
        pkill -9 -f 'kerneljudge.cli serve' 2>/dev/null
        rm -rf data/soak
        detached_start soak python3 -m benchmarks.soak --device cuda --corpus "${KJ_CORPUS:-.carry/corpus}" \
            --duration-s "${KJ_SOAK_S:-1200}" --data-dir data/soak --out "$PWD/data/soak-out/soak_$stamp.md" \
            --jsonl "$PWD/data/soak-out/soak.jsonl"
        detached_wait soak ;;
    soak-wait)
        detached_wait soak ;;
    esac
done
