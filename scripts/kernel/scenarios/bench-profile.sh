# timeout: 400
# Not a row of the matrix: where the guest's CPU time goes (issue 27), for `scripts/kernel/run --out DIR
# bench-profile`: the whole guest sampled (perf, cpu-clock, 250 Hz) while cb-tool-bluez runs, then the samples by
# program and shared object, and the kernel's and the busiest programs' top symbols.
grep -o 'la57\|pcid' /proc/cpuinfo | sort | uniq -c >&2
perf record -a -e cpu-clock -F 250 -o /tmp/perf.data -- bash -c 'source "$OCB_REPO/scripts/kernel/lib.sh"; OCB_SCENARIO=cb-tool-bluez; source "$OCB_REPO/scripts/kernel/scenarios/cb-tool-bluez.sh"' > "$OCB_OUT/$OCB_SCENARIO.workload.log" 2>&1
log "workload exited $?"
perf report -i /tmp/perf.data --no-children --sort comm --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -25 >&2
perf report -i /tmp/perf.data --no-children --sort dso --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -25 >&2
perf report -i /tmp/perf.data --no-children --sort comm,sym --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -70 >&2
log "ok"
