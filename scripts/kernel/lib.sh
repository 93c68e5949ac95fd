# Helpers for the kernel test guest (sourced by scripts/kernel/guest and by every scenario).
# Environment: OCB_REPO (the repository, on the host's root shared read-only), OCB_CACHE (scripts/kernel/prepare's
# output), OCB_OUT (the results share), OCB_SCENARIO (the scenario's name), OCB_RC_PORT (rootcanal's port for the
# vhci bridges), OCB_STATE_DIR (our stack's state, one per scenario).
# (scripts/kernel/run gives the guest `ble` linked with the Swift runtime static, ocb_ble; .build/debug/ble otherwise.)
OCB_BLE=${ocb_ble:-$OCB_REPO/.build/debug/ble}
OCB_RUN=/run/ocb
# Captures (btsnoop) and the chatty logs (rootcanal writes a line per ACL packet, bluetoothd -d many per event) are
# written here, in the guest's memory, and copied to the results when the guest ends (a scenario's own captures,
# $OCB_CAP/$OCB_SCENARIO.*, after it): written straight to the 9p results share, captures stopped growing after a
# few seconds, and rootcanal, blocked on each log line, forwarded one LE ACL packet per ~40 ms (20 K-frames a
# second between our host and l2test).
OCB_CAP=/tmp/ocb-cap
# The commands run most often, as bash builtins (Debian's bash-builtins, which scripts/kernel/prepare installs; the
# programs when it is missing): in the guest each program started costs 0.2 to 0.5 s (read from the host over 9p,
# linked and run under emulation), and one guest's restores between scenarios alone started rm 38 times (19 s).
for _b in rm mkdir mkfifo sleep; do [ ! -f "/usr/lib/bash/$_b" ] || enable -f "/usr/lib/bash/$_b" "$_b" 2>/dev/null; done
mkdir -p "$OCB_RUN" "$OCB_CAP"

# grep and cat as shell functions for their commonest forms in the scenarios (a check of a log: `grep -q PATTERN FILE`,
# `-qE`, `-qi`, `-qF`, or a pipe into `grep -q PATTERN`; `cat FILE…`): no program started. In the guest each program
# started costs 0.2 to 1 s under load (read over 9p, linked and run under emulation), and the scenarios checked their
# logs with about 110 greps and printed them with about 90 cats. Same answers as the programs (tested against GNU
# grep on every check of a whole run's logs): the basic regular expression is rewritten as the extended one bash
# matches with, line by line. Any other form, a file that is not a regular file, or one longer than 500 lines goes
# to the programs.
_bre_to_ere() {   # BRE → ERE, in _ere
    local p=$1 c i=0 n=${#1} j
    _ere=""
    while ((i < n)); do
        c=${p:i:1}
        case $c in
            \\)
                c=${p:i+1:1}; i=$((i + 2))
                case $c in
                    '(' | ')' | '{' | '}' | '|' | '+' | '?') _ere+=$c ;;
                    '') _ere+='\\' ;;
                    *) _ere+="\\$c" ;;
                esac
                continue ;;
            '[')
                # A bracket expression, copied as it is: a ] first (after [ or [^) is a member; [:class:] inside.
                j=$((i + 1))
                [ "${p:j:1}" != '^' ] || j=$((j + 1))
                [ "${p:j:1}" != ']' ] || j=$((j + 1))
                while ((j < n)) && [ "${p:j:1}" != ']' ]; do
                    if [ "${p:j:2}" = '[:' ] || [ "${p:j:2}" = '[=' ] || [ "${p:j:2}" = '[.' ]; then
                        local close="${p:j+1:1}]" rest=${p:j+2}
                        [[ $rest == *"$close"* ]] || return 1
                        rest=${rest%%"$close"*}
                        j=$((j + 2 + ${#rest} + 2))
                    else
                        j=$((j + 1))
                    fi
                done
                ((j < n)) || return 1
                _ere+=${p:i:j-i+1}; i=$((j + 1))
                continue ;;
            '(' | ')' | '{' | '}' | '|' | '+' | '?') _ere+="\\$c" ;;
            '*') if ((i == 0)) || [[ $_ere == '^' || $_ere == *'(' && $_ere != *'\(' ]]; then _ere+='\*'; else _ere+='*'; fi ;;
            '^') if ((i == 0)) || [[ $_ere == *'(' && $_ere != *'\(' ]]; then _ere+='^'; else _ere+='\^'; fi ;;
            '$') if ((i == n - 1)) || [ "${p:i+1:2}" = '\)' ]; then _ere+='$'; else _ere+='\$'; fi ;;
            *) _ere+=$c ;;
        esac
        i=$((i + 1))
    done
}
grep() {
    local -; set +x
    local opts=$1 pat file="" _ere line mode=bre
    local -a _lines
    if [[ $opts =~ ^-[qEiFa]+$ && $opts == *q* && ( $# -eq 3 || ( $# -eq 2 && ! -t 0 ) ) ]]; then
        pat=$2
        [ $# -eq 2 ] || file=$3
        [[ $opts != *E* ]] || mode=ere
        [[ $opts != *F* ]] || mode=fixed
        [[ $opts != *E*F* && $opts != *F*E* ]] || mode=""
        if [ -n "$mode" ] && [[ $pat != *$'\n'* ]] && { [ -z "$file" ] || [ -f "$file" ]; }; then
            if [ "$mode" = bre ]; then _bre_to_ere "$pat" || mode=""; pat=$_ere; fi
            if [ -n "$mode" ] && [ "$mode" != fixed ]; then [[ x =~ $pat ]]; [ $? -ne 2 ] || mode=""; fi
        fi
        if [ -n "$mode" ]; then
            if [ -n "$file" ]; then mapfile -t -n 501 _lines < "$file"; else mapfile -t -n 501 _lines; fi
            if [ ${#_lines[@]} -le 500 ]; then
                [[ $opts != *i* ]] || shopt -s nocasematch
                local found=1
                if [ "$mode" = fixed ]; then
                    for line in "${_lines[@]}"; do [[ $line == *"$pat"* ]] && { found=0; break; }; done
                else
                    for line in "${_lines[@]}"; do [[ $line =~ $pat ]] && { found=0; break; }; done
                fi
                shopt -u nocasematch
                return $found
            elif [ -z "$file" ]; then
                # (Standard input was read in part: the rest, after what was read, to the program.)
                { printf '%s\n' "${_lines[@]}"; command cat; } | command grep "$@"
                return
            fi
        fi
    fi
    command grep "$@"
}
cat() {
    local -; set +x
    local f
    local -a _lines
    [ $# -gt 0 ] || { command cat; return; }
    for f; do [[ $f != -* && -f $f ]] || { command cat "$@"; return; }; done
    for f; do
        mapfile -t _lines < "$f"
        [ ${#_lines[@]} -eq 0 ] || printf '%s\n' "${_lines[@]}"
    done
}

# nap SECONDS: a sleep that starts no program: a read that times out on a FIFO nobody writes to. In the guest
# every program started is read from the host over 9p and run under emulation, so the polling loops below (five
# times a second, for minutes) used to start two programs per turn (sleep and grep).
[ -p "$OCB_RUN/nap" ] || mkfifo "$OCB_RUN/nap" 2>/dev/null
exec {OCB_NAP_FD}<>"$OCB_RUN/nap"
nap() { read -r -t "$1" -u "$OCB_NAP_FD" _ 2>/dev/null; return 0; }

# now: the guest's uptime in seconds (as the kernel log shows it), without starting a program.
now() { local up _; read -r up _ < /proc/uptime; echo "$up"; }
log() { local up _; read -r up _ < /proc/uptime; echo "[$up] $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

# The waits below read each file once, as it grows (bash's own read and regular expressions: no program started
# per look, each of which took 0.3 to 1.3 s in the guest on a loaded machine), and match line by line as grep -E
# would, the last line too before it ends. They do it untraced (`local -; set +x`, restored on return): the scenario's
# trace (NAME.trace) has the wait's call and the next command, with their times, not a line per line read; traced,
# each line read and matched wrote two or three trace lines, and bash's per-line work took five times as long
# (cb-peripheral-hci spent 38 s in `read` and 14 s in `[[` of its 126 s, at a load of 7 to 16).

# _follow_open FILE: opens FILE (once it exists) for _follow; the descriptor in _ffd.
_follow_open() { _ffd=""; _fpartial=""; [ -e "$1" ] && exec {_ffd}<"$1"; } 2>/dev/null
_follow_close() { [ -z "$_ffd" ] || exec {_ffd}<&-; _ffd=""; }
# _follow: the lines added since the last call: the complete ones in _flines, the unfinished last one in _fpartial.
_follow() {
    local line
    _flines=()
    [ -n "$_ffd" ] || return 0
    while IFS= read -r -u "$_ffd" line 2>/dev/null; do _flines+=("$_fpartial$line"); _fpartial=""; done
    _fpartial+=$line
}

# _clean_pieces LINE: what `clean` makes of one line (readline's \001 and \002 and ANSI colours dropped, carriage
# returns ending lines), in the array _pieces.
_ansi=$'^(.*)\e\\[[0-9;]*[A-Za-z](.*)$'
_clean_pieces() {
    local s=${1//[$'\001\002']/} piece
    _pieces=()
    while :; do
        piece=${s%%$'\r'*}
        while [[ $piece =~ $_ansi ]]; do piece=${BASH_REMATCH[1]}${BASH_REMATCH[2]}; done
        _pieces+=("$piece")
        [[ $s == *$'\r'* ]] || break
        s=${s#*$'\r'}
    done
}

# wait_for FILE REGEX [SECONDS]: until a line of FILE matches the extended regular expression.
# expect_heart_rate_central LOG: the seeds' heart-rate central (`ble demo --role central --notifications 3`) went
# through the whole flow against "Served HR": powered on, discovered by name, connected, subscribed, three
# notifications, a read, a descriptor, a write acknowledged, disconnected by us.
expect_heart_rate_central() {
    local c=$1
    grep -q "state poweredOn" "$c" || fail "the manager never read .poweredOn"
    grep -q "discovered Served HR" "$c" || fail "the peripheral was not discovered with its name"
    grep -q "connected to" "$c" || fail "no didConnect"
    grep -q "notifications for 2A37: on" "$c" || fail "no subscription"
    grep -q "notification 3," "$c" || fail "fewer than 3 notifications"
    grep -q "read body sensor location" "$c" || fail "no read"
    grep -q 'descriptor Characteristic User Description = "Heart Rate Measurement"' "$c" || fail "no descriptor read"
    grep -q "acknowledged" "$c" || fail "the write with response was not acknowledged"
    grep -q "disconnected (by us)" "$c" || fail "no didDisconnect after the cancel"
}

wait_for() {
    local -; set +x
    local file=$1 re=$2 limit=${3:-30} start=$SECONDS line _ffd _fpartial _flines
    _follow_open "$file"
    while :; do
        [ -n "$_ffd" ] || _follow_open "$file"
        _follow
        for line in "${_flines[@]}"; do [[ $line =~ $re ]] && { _follow_close; return 0; }; done
        [ -n "$_fpartial" ] && [[ $_fpartial =~ $re ]] && { _follow_close; return 0; }
        [ $((SECONDS - start)) -lt "$limit" ] || { _follow_close; log "timed out after ${limit}s waiting for /$re/ in ${file##*/}"; return 1; }
        nap 0.2
    done
}

# new_lines FILE: from now on, the lines FILE gets are copied into a file of their own, NEW_LINES_FILE (the copier's
# pid in NEW_LINES_PID), for a wait that must not read a big log from its start: bluetoothd's, written since the boot,
# took a wait_for_count with a 10 s limit 132 s to read in privacy, eleven scenarios into a guest (bash reads and
# matches line by line, and looks at the clock only once it has caught up).
new_lines() {
    NEW_LINES_FILE="$OCB_RUN/new-lines.$BASHPID.$RANDOM"
    : > "$NEW_LINES_FILE"
    tail -c 0 -F "$1" >> "$NEW_LINES_FILE" 2> /dev/null &
    NEW_LINES_PID=$!
}

# wait_for_count FILE REGEX N [SECONDS]: until N lines of FILE, `clean`ed, match.
wait_for_count() {
    local -; set +x
    local file=$1 re=$2 n=$3 limit=${4:-30} start=$SECONDS line piece count=0 extra _ffd _fpartial _flines _pieces
    _follow_open "$file"
    while :; do
        [ -n "$_ffd" ] || _follow_open "$file"
        _follow
        for line in "${_flines[@]}"; do
            _clean_pieces "$line"
            for piece in "${_pieces[@]}"; do [[ $piece =~ $re ]] && count=$((count + 1)); done
        done
        extra=0
        if [ -n "$_fpartial" ]; then
            _clean_pieces "$_fpartial"
            for piece in "${_pieces[@]}"; do [[ $piece =~ $re ]] && extra=$((extra + 1)); done
        fi
        [ $((count + extra)) -lt "$n" ] || { _follow_close; return 0; }
        [ $((SECONDS - start)) -lt "$limit" ] || { _follow_close; log "timed out after ${limit}s waiting for $n lines /$re/ in ${file##*/}"; return 1; }
        nap 0.2
    done
}

# wait_exit PID [SECONDS]: waits for a background job of this shell; its exit status, or 124 on timeout (then killed).
wait_exit() {
    local pid=$1 limit=${2:-30} start=$SECONDS
    while kill -0 "$pid" 2>/dev/null; do
        if [ $((SECONDS - start)) -ge "$limit" ]; then kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; return 124; fi
        nap 0.2
    done
    wait "$pid"
}

# Where the controllers' far end is: rootcanal on the host (OCB_AIR=host: scripts/kernel/air, reached through QEMU's
# user-mode network) or in this guest.
if [ "${OCB_AIR:-guest}" = host ]; then OCB_RC_HOST=10.0.2.100; else OCB_RC_HOST=127.0.0.1; fi

# air_request VERB NAME: asks the host to start, restart or stop its rootcanal NAME (rootcanal, rootcanal-fast):
# scripts/kernel/air serve answers "ok" once done.
air_request() {
    local fd reply=""
    exec {fd}<>/dev/tcp/10.0.2.100/6599 || { log "the host's air does not answer"; return 1; }
    echo "$*" >&"$fd"
    read -r -t 40 reply <&"$fd"
    exec {fd}<&-
    [ "$reply" = ok ] || { log "the host's air answered '$reply' to '$*'"; return 1; }
}

# start_rootcanal [NAME PORT BASE]: rootcanal (NAME "rootcanal" on $OCB_RC_PORT unless given), its other ports
# from BASE (6401: test, +1 HCI, +2 link, +3 LE link), its log in $OCB_CAP/NAME.log. With the air on the host,
# the host (re)starts its NAME (marked $OCB_RUN/NAME.host; its ports are the host's).
start_rootcanal() {
    local bin name=${1:-rootcanal} port=${2:-$OCB_RC_PORT} base=${3:-6401}
    if [ "${OCB_AIR:-guest}" = host ]; then
        air_request restart "$name" || return 1
        : > "$OCB_RUN/$name.host"
        return 0
    fi
    bin=$(ls "$OCB_REPO"/.venv/lib/*/site-packages/rootcanal/bin/linux-x86_64/rootcanal 2>/dev/null | head -1)
    [ -x "$bin" ] || { log "rootcanal not found in $OCB_REPO/.venv (scripts/setup-venv.sh installs it)"; return 1; }
    "$bin" --test_port=$base --hci_port=$((base + 1)) --link_port=$((base + 2)) --link_ble_port=$((base + 3)) \
        "-configuration=tcp_server { tcp_port: $port configuration { strict: false } }" \
        > "$OCB_CAP/$name.log" 2>&1 &
    echo $! > "$OCB_RUN/$name.pid"
    disown $!   # (killed when the air is made anew: no job report in the log)
}

# add_controller: one more vhci controller on rootcanal; prints its index once the kernel has set it up.
# On a loaded machine the emulated kernel can time out a command during the set-up (it then gives up on the
# adapter): the attempt is then made again with a new bridge, up to three times.
add_controller() {
    local attempt
    for attempt in 1 2 3; do
        try_add_controller && return 0
        log "adding a controller failed (attempt $attempt)"
    done
    return 1
}

# plug_controller: one more vhci controller, its index printed as soon as the kernel registers it, as a dongle
# plugged in: a program waiting for it (our host retrying hci-socket:N every second) may bind it during the
# kernel's set-up, which then never ends DOWN (add_controller would wait for that in vain).
plug_controller() { try_add_controller nowait; }

try_add_controller() {
    local out idx pid start=$SECONDS nowait=${1:-}
    local line=""
    out="$OCB_RUN/bridge.$BASHPID.$RANDOM"
    local plugged _
    read -r plugged _ < /proc/uptime
    "$OCB_CACHE/vhci-bridge" ${OCB_LE_BUFFER:+-l "$OCB_LE_BUFFER"} "$OCB_RC_HOST" "$OCB_RC_PORT" > "$out" 2>> "$OCB_OUT/bridges.log" &
    pid=$!
    until [[ $line == hci[0-9]* ]]; do
        kill -0 "$pid" 2>/dev/null || { log "vhci-bridge ended"; rm -f "$out"; return 1; }
        [ $((SECONDS - start)) -lt 30 ] || { log "no adapter from vhci-bridge"; kill "$pid"; rm -f "$out"; return 1; }
        nap 0.1
        { read -r line < "$out"; } 2>/dev/null
    done
    idx=${line#hci}
    rm -f "$out"
    # A controller with other buffers is made ordinary again after the scenario (restore_controllers).
    if [ -n "${OCB_LE_BUFFER:-}" ]; then : > "$OCB_RUN/hci$idx.renew"; elif [ -e "$OCB_RUN/hci$idx.renew" ]; then rm -f "$OCB_RUN/hci$idx.renew"; fi
    if [ -n "$nowait" ]; then echo "$pid" > "$OCB_RUN/hci$idx.pid"; echo "$idx"; return 0; fi
    # The kernel initialises the controller (HCI_SETUP), keeps it up for two seconds (HCI_AUTO_OFF) in case
    # someone powers it on, then closes it: every scenario starts from that quiet, closed adapter. Once the set-up
    # has begun (the adapter is UP) it is closed at once (HCIDEVDOWN waits for the set-up to end and cancels the
    # grace), two seconds sooner than the kernel would; closed before the set-up began, the set-up would never run.
    # (Closed DOWN with its address read and not initialising twice in a row: the kernel had closed it already.)
    local state seen_up="" quiet=0
    while :; do
        if ! kill -0 "$pid" 2>/dev/null || [ $((SECONDS - start)) -ge "${OCB_SETUP_LIMIT:-25}" ]; then
            log "hci$idx never finished its set-up"
            kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
            return 1
        fi
        state=$(hciconfig "hci$idx" 2>/dev/null)
        if [[ $state =~ [[:space:]]UP[[:space:]] ]]; then
            hciconfig "hci$idx" down 2>/dev/null && seen_up=1
            quiet=0
            continue
        elif [[ $state =~ [[:space:]]DOWN[[:space:]] ]]; then
            [ -z "$seen_up" ] || break
            if [[ ! $state =~ [[:space:]]INIT[[:space:]] && $state != *"BD Address: 00:00:00:00:00:00"* ]]; then
                quiet=$((quiet + 1))
                [ $quiet -lt 2 ] || break
            fi
        fi
        nap 0.1
    done
    if setup_failed "$idx" "$plugged"; then
        kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
        # (Gone before the next bridge, which would otherwise get the next index.)
        while [ -e "/sys/class/bluetooth/hci$idx" ] && [ $((SECONDS - start)) -lt 60 ]; do nap 0.1; done
        return 1
    fi
    echo "$pid" > "$OCB_RUN/hci$idx.pid"
    echo "$idx"
}

# setup_failed N SINCE: hciN, down after its set-up, is in fact half set up (and says why): a command the kernel timed
# out during the set-up (at a load of 15-19, "hci1: Opcode 0x200f failed: -110"; or 0x1002) leaves the adapter down
# with its address read but still in HCI_SETUP for good: never announced over mgmt, and the user channel's bind
# fails with EBUSY ("in use by the kernel") for the rest of the boot (gk-bluez found hci1 "in use" for 150 s). Two
# signs, either enough: the kernel logged a failed command for hciN since SINCE (its uptime when the bridge started),
# or hciN has no debugfs entries (hci_version…), which the kernel makes only once the set-up's last stage has passed.
setup_failed() {
    local why=""
    [ -d /sys/kernel/debug/bluetooth ] || mount -t debugfs none /sys/kernel/debug 2>/dev/null
    if [ -d /sys/kernel/debug/bluetooth ] && [ ! -e "/sys/kernel/debug/bluetooth/hci$1/hci_version" ]; then
        why="no debugfs entries: its set-up's last stage never ran"
    fi
    local failed
    failed=$(dmesg 2>/dev/null | awk -v since="$2" -v h="hci$1: " '
        { t = substr($0, 2, index($0, "]") - 2) + 0 }
        t >= since && index($0, h) && /failed|timeout/ { line = $0 } END { print line }')
    [ -z "$failed" ] || why="${why:+$why; }the kernel logged: $failed"
    [ -n "$why" ] || return 1
    log "hci$1's set-up failed part-way ($why; see dmesg.log)"
}

# remove_controller N: closes hciN's /dev/vhci, as unplugging a dongle removes it.
remove_controller() {
    local pid
    { read -r pid < "$OCB_RUN/hci$1.pid"; } 2>/dev/null || return 1
    kill "$pid" 2>/dev/null
    rm -f "$OCB_RUN/hci$1.pid"
    local start=$SECONDS
    while [ -e "/sys/class/bluetooth/hci$1" ]; do
        [ $((SECONDS - start)) -lt 40 ] || { log "hci$1 is still there 40 s after its bridge ended"; return 1; }
        nap 0.1
    done
}

# fast_controllers: hci0 (BlueZ's, powered again through bluetoothd) and hci1 made anew with 1021-octet LE ACL
# buffers (vhci-bridge -l: rootcanal forwards ACL packets of any length whole), for bulk data, on a rootcanal of
# their own (port 6501): rootcanal 1.10 spun for good on "remote disconnected" once these two were unplugged, and
# answered no controller after. restore_controllers ends it and makes both ordinary again afterwards.
fast_controllers() {
    local i
    start_rootcanal rootcanal-fast 6501 6411 || return 1
    for i in 1 0; do remove_controller "$i" || return 1; done
    for i in 0 1; do
        [ "$(OCB_RC_PORT=6501 OCB_LE_BUFFER=1021 add_controller)" = "$i" ] || { log "the fast controller is not hci$i"; return 1; }
    done
    # Until restore_controllers, the first rootcanal (now without a controller) and the guest's btmon are stopped:
    # idle, rootcanal still wakes every 5 ms (about a tenth of an emulated CPU), and btmon copies every packet (a
    # tenth more while a megabyte crosses); the data on the fast air lacked that CPU. btmon's capture has a gap there
    # (the kernel drops what its full socket cannot take); the scenario's own captures do not.
    { read -r i < "$OCB_RUN/rootcanal.pid" && kill -STOP "$i"; } 2>/dev/null
    if { read -r i < "$OCB_RUN/btmon.pid" && kill -STOP "$i"; } 2>/dev/null; then log "btmon paused until the scenario ends"; fi
    bluez_up 0 40
}

# hold_index N: a process keeps a raw HCI socket bound to hciN (as a program that still has an adapter open when
# it is unplugged: hcidump, a stuck process). The kernel then keeps hciN's index until that socket closes, so the
# next controller plugged in gets a new index, as a re-plugged dongle often does. release_holds ends them. The
# holder closes every inherited descriptor (see vhci-bridge.c: a Swift test waits for those to close).
hold_index() {
    local out="$OCB_RUN/hold$1.out" start=$SECONDS
    python3 -c '
import os, socket, sys, time
os.closerange(3, 65536)
s = socket.socket(socket.AF_BLUETOOTH, socket.SOCK_RAW, socket.BTPROTO_HCI)
s.bind((int(sys.argv[1]),))
print("held", flush=True)
time.sleep(100000)' "$1" > "$out" 2>&1 < /dev/null &
    echo $! > "$OCB_RUN/hold$1.pid"
    until grep -q '^held' "$out"; do
        kill -0 "$(cat "$OCB_RUN/hold$1.pid")" 2>/dev/null || { log "cannot hold hci$1: $(cat "$out")"; return 1; }
        [ $((SECONDS - start)) -lt 20 ] || { log "cannot hold hci$1: no answer"; return 1; }
        nap 0.1
    done
}
release_holds() {
    local f
    for f in "$OCB_RUN"/hold*.pid; do
        [ -f "$f" ] || continue
        kill -KILL "$(cat "$f")" 2>/dev/null
        rm -f "$f"
    done
}

# restore_controllers: between scenarios, hci1 … hci(N-1) (ours) are made anew, so that nothing a scenario
# left on them (a link, a channel, a half-finished pairing, an rfkill block) reaches the next; hci0 (BlueZ's)
# is made again only if a scenario removed it.
restore_controllers() {
    local i f
    release_holds
    for ((i = 1; i < ${ocb_controllers:-2}; i++)); do remove_controller "$i" 2>/dev/null; done
    # hci0 too when a scenario changed it for good (fast_controllers, or privacy: the kernel keeps an adapter's
    # privacy after bluetoothd ends) and marked it with $OCB_RUN/hci0.renew; and the fast controllers' rootcanal.
    # bluetoothd is started anew when hci0 is (reset_bluez): after hci0 was made anew under a running bluetoothd
    # (fast_controllers, or rootcanal made anew) a central on bluez found no advertisement in the next scenario,
    # cb-central-bluez, twice (not explained; BlueZ's side).
    if [ -f "$OCB_RUN/hci0.renew" ]; then stop_bluez; remove_controller 0 2>/dev/null; fi
    if [ -e "$OCB_RUN/rootcanal-fast.pid" ]; then
        read -r f < "$OCB_RUN/rootcanal-fast.pid"; kill -KILL "$f" 2>/dev/null; rm -f "$OCB_RUN/rootcanal-fast.pid"
    fi
    if [ -e "$OCB_RUN/rootcanal-fast.host" ]; then air_request stop rootcanal-fast; rm -f "$OCB_RUN/rootcanal-fast.host"; fi
    { read -r f < "$OCB_RUN/rootcanal.pid" && kill -CONT "$f"; } 2>/dev/null
    { read -r f < "$OCB_RUN/btmon.pid" && kill -CONT "$f"; } 2>/dev/null
    # Controllers a scenario plugged in beyond those (a dongle back at a new index) go too.
    for f in "$OCB_RUN"/hci*.pid; do
        [ -f "$f" ] || continue
        i=${f##*/hci}; i=${i%.pid}
        [ "$i" -ge "${ocb_controllers:-2}" ] && remove_controller "$i" 2>/dev/null
    done
    for f in /sys/class/rfkill/rfkill*/soft; do
        { read -r i < "$f"; } 2>/dev/null; [ "$i" != 1 ] || { rfkill unblock bluetooth 2>/dev/null; break; }
    done
    # (Two tries on the same air first: on a loaded machine the kernel itself times out a command of a controller's
    # set-up now and then, "hci1: Opcode 0x1004 failed: -110" at a load of 20, with rootcanal answering; remaking the
    # air for that cost 36 s where a restore takes 7 to 10.)
    add_missing_controllers 2 15 && return 0
    # A controller that does not finish its set-up: rootcanal answers no new controller. rootcanal 1.10 has been seen
    # to loop for good on "remote disconnected!" once a controller that had just carried a flood of writes was
    # removed (after cb-peripheral-hci), its new controllers' packets dropped ("Closed socket"). The air is then
    # made anew: rootcanal and every controller.
    log "remaking rootcanal and every controller"
    stop_bluez
    for f in "$OCB_RUN"/hci*.pid; do
        [ -f "$f" ] || continue
        i=${f##*/hci}; i=${i%.pid}
        remove_controller "$i" 2>/dev/null
    done
    kill -KILL "$(cat "$OCB_RUN/rootcanal.pid" 2>/dev/null)" 2>/dev/null
    mv "$OCB_CAP/rootcanal.log" "$OCB_CAP/rootcanal.until-$SECONDS.log" 2>/dev/null
    start_rootcanal || return 1
    add_missing_controllers 3
}

# add_missing_controllers ATTEMPTS [LIMIT]: hci0 … hci(N-1), each that has no bridge made anew (up to ATTEMPTS tries,
# each given LIMIT seconds, 25 unless given);
# fails if one cannot be made or comes at another index (the old one still in the kernel's list: controllers_ready).
add_missing_controllers() {
    local i idx attempt ok=0
    for ((i = 0; i < ${ocb_controllers:-2}; i++)); do
        bridge_alive "$i" && continue
        idx=""
        for ((attempt = 1; attempt <= $1; attempt++)); do
            # (Before the air is made anew the tries give up sooner, LIMIT 15: a set-up takes 2 to 6 s even on a loaded
            # machine, and when rootcanal answers nothing the air is made anew.)
            idx=$(OCB_SETUP_LIMIT=${2:-${OCB_SETUP_LIMIT:-25}} try_add_controller) && break
            log "adding a controller failed (attempt $attempt)"
            idx=""
        done
        [ -n "$idx" ] || { log "no controller for hci$i"; ok=1; continue; }
        if [ "$idx" != "$i" ]; then
            log "the new controller is hci$idx, not hci$i"
            remove_controller "$idx"
            ok=1
        fi
    done
    return $ok
}

# controllers_ready: the state every scenario starts from: exactly hci0 … hci(N-1) in /sys/class/bluetooth, each
# with its bridge running, hci0 up (bluetoothd's) and the others down. An adapter unplugged after our host had
# taken it again (re-plugged, bound during the kernel's set-up) has stayed in the list for good on Linux 6.1, its
# bridge gone and its index never given again: the guest cannot give that state any more.
controllers_ready() {
    local i want="" have="" d
    hci_states
    for ((i = 0; i < ${ocb_controllers:-2}; i++)); do
        want+="hci$i "
        bridge_alive "$i" || { log "hci$i has no bridge"; return 1; }
        if [ "$i" -eq 0 ]; then [ "${HCI_UP[0]}" = 1 ] || { log "hci0 is not up"; return 1; }
        else [ "${HCI_UP[$i]}" = 0 ] || { log "hci$i is not down"; return 1; }; fi
    done
    for d in /sys/class/bluetooth/hci*; do [[ ${d##*/} =~ ^hci[0-9]+$ ]] && have+="${d##*/} "; done
    [ "$have" = "$want" ] || { log "adapters: $have(expected $want)"; return 1; }
}

# bridge_alive N: hciN's vhci bridge runs.
bridge_alive() { local pid; { read -r pid < "$OCB_RUN/hci$1.pid"; } 2>/dev/null && kill -0 "$pid" 2>/dev/null; }

# hci_states: every adapter's address (HCI_ADDR[N]) and whether it is up (HCI_UP[N]: 1 or 0), from one hciconfig.
hci_states() {
    local line idx=""
    HCI_ADDR=() HCI_UP=()
    while IFS= read -r line; do
        if [[ $line =~ ^hci([0-9]+): ]]; then idx=${BASH_REMATCH[1]}
        elif [ -n "$idx" ] && [[ $line =~ BD\ Address:\ ([0-9A-F:]+) ]]; then HCI_ADDR[$idx]=${BASH_REMATCH[1]}
        elif [ -n "$idx" ] && [[ $line =~ ^[[:space:]]+(UP|DOWN)[[:space:]] ]]; then [ "${BASH_REMATCH[1]}" = UP ] && HCI_UP[$idx]=1 || HCI_UP[$idx]=0
        fi
    done < <(hciconfig 2>/dev/null)
}

# bluez_conf [LINES…]: a main.conf for bluetoothd (printed path) with AutoEnable off, plus LINES (e.g. a
# "[General]" section). bluetoothd's default (AutoEnable=true) powers every adapter that appears, so it takes an
# adapter back each time a `ble` process lets it go (the user channel closes and the kernel adds the index
# again): the guest's bluetoothd powers only hci0, so that hci1 stays ours between commands with no race.
# rule-busy.sh shows the default's behaviour and what AutoEnable=false changes.
bluez_conf() {
    local f
    f=$(mktemp "$OCB_RUN/main.XXXXXX.conf")
    { printf '[Policy]\nAutoEnable=false\n'; printf '%s\n' "$@"; } > "$f"
    echo "$f"
}

# start_bluez [MAIN.CONF]: the system bus and bluetoothd, unless they run already (the guest starts them once for
# every scenario); hci0 is powered through bluetoothd and waited for. Without MAIN.CONF, `bluez_conf`'s.
start_bluez() {
    local start=$SECONDS conf=${1:-}
    mkdir -p /run/dbus
    if ! kill -0 "$(cat "$OCB_RUN/dbus.pid" 2>/dev/null)" 2>/dev/null; then
        rm -f /run/dbus/system_bus_socket
        dbus-daemon --system --nofork --nopidfile >> "$OCB_OUT/dbus.log" 2>&1 &
        echo $! > "$OCB_RUN/dbus.pid"
        until [ -S /run/dbus/system_bus_socket ]; do
            [ $((SECONDS - start)) -lt 20 ] || { log "dbus-daemon did not start"; return 1; }
            nap 0.1
        done
    fi
    if ! kill -0 "$(cat "$OCB_RUN/bluetoothd.pid" 2>/dev/null)" 2>/dev/null; then
        [ -n "$conf" ] || conf=$(bluez_conf)
        bluetoothd -n -d -f "$conf" >> "$OCB_CAP/bluetoothd.log" 2>&1 &
        echo $! > "$OCB_RUN/bluetoothd.pid"
    fi
    # bluetoothd has registered hci0 once its adapter object is on the bus.
    until bluez_has_adapter 0; do
        [ $((SECONDS - start)) -lt 40 ] || { log "bluetoothd shows no hci0"; return 1; }
        nap 0.2
    done
    bluez_up 0 $((40 - (SECONDS - start)))
}

# bluez_has_adapter N: bluetoothd has an adapter object for hciN.
bluez_has_adapter() {
    dbus-send --system --print-reply --dest=org.bluez "/org/bluez/hci$1" org.freedesktop.DBus.Properties.Get \
        string:org.bluez.Adapter1 string:Address > /dev/null 2>&1
}

# bluez_up N [SECONDS]: hciN powered on through bluetoothd and up (retried while bluetoothd is still busy with it).
bluez_up() {
    local start=$SECONDS limit=${2:-30}
    until hciconfig "hci$1" 2>/dev/null | grep -q "UP RUNNING"; do
        [ $((SECONDS - start)) -lt "$limit" ] || { log "bluetoothd did not power hci$1"; return 1; }
        bluez_power "$1" true 2>/dev/null
        nap 0.2
    done
}

# stop_bluez: ends bluetoothd (the system bus stays).
stop_bluez() {
    local pid
    pid=$(cat "$OCB_RUN/bluetoothd.pid" 2>/dev/null) || return 0
    kill "$pid" 2>/dev/null
    while kill -0 "$pid" 2>/dev/null; do nap 0.1; done
    rm -f "$OCB_RUN/bluetoothd.pid"
}

# reset_bluez: between scenarios, BlueZ forgets every device it stored (bonds) and hci0 is powered again; a
# bluetoothd a scenario stopped is started again (with the guest's configuration).
reset_bluez() {
    local pid dir adapter dev i
    { read -r pid < "$OCB_RUN/bluetoothd.pid"; } 2>/dev/null; kill -0 "$pid" 2>/dev/null || start_bluez || return 1
    hci_states
    for dir in /var/lib/bluetooth/*/*:*; do
        [ -d "$dir" ] || continue
        adapter=${dir%/*}; adapter=${adapter##*/}; dev=${dir##*/}
        for i in "${!HCI_ADDR[@]}"; do
            [ "${HCI_ADDR[$i]}" = "$adapter" ] || continue
            dbus-send --system --print-reply --dest=org.bluez "/org/bluez/hci$i" org.bluez.Adapter1.RemoveDevice \
                "objpath:/org/bluez/hci$i/dev_${dev//:/_}" > /dev/null 2>&1
        done
    done
    # ... and every device it knows, found by an earlier scenario's scan: a new discovery of bluetoothd's starts by
    # dropping the devices it has not heard again, and that "[DEL] Device A" line matched a wait for "Device A"
    # (gatt-bluez-client connected to a device bluetoothd had just forgotten: "not available").
    local path
    for path in $(dbus-send --system --print-reply --dest=org.bluez / org.freedesktop.DBus.ObjectManager.GetManagedObjects 2>/dev/null \
        | sed -n 's|.*object path "\(/org/bluez/hci[0-9]*/dev_[0-9A-F_]*\)".*|\1|p'); do
        dbus-send --system --print-reply --dest=org.bluez "${path%/dev_*}" org.bluez.Adapter1.RemoveDevice "objpath:$path" > /dev/null 2>&1
    done
    [ "${HCI_UP[0]}" = 1 ] || bluez_up 0
}

# bluez_power N true|false: hciN powered on or off through bluetoothd (org.bluez.Adapter1.Powered).
bluez_power() {
    dbus-send --system --print-reply --dest=org.bluez "/org/bluez/hci$1" org.freedesktop.DBus.Properties.Set \
        string:org.bluez.Adapter1 string:Powered "variant:boolean:$2" > /dev/null
}

# keep_down N: in the background (its pid in KEEPER), keeps hciN down and asks bluetoothd to leave it off
# (Adapter1.Powered false, so that it stops wanting it on) every 0.4 s until a program binds it with the HCI user
# channel: the kernel then refuses to take it down (EBUSY) and the keeper ends. bluetoothd powers an adapter our host
# released again a few seconds later, and our host would then retry "in use" for good. (A keeper that went on for the
# whole test started two or three programs every 0.3 s, each costing 0.05 to 0.3 s of the emulated CPUs: in
# cb-flows-bluez it took more than half the guest while 1 MB crossed the channel.)
keep_down() {
    (
        while bluez_power "$1" false 2>/dev/null; hciconfig "hci$1" down 2>/dev/null || [ ! -e "/sys/class/bluetooth/hci$1" ]; do
            nap 0.4
        done
    ) &
    KEEPER=$!
}

# release N: takes hciN away from bluetoothd (powered off), so that the HCI user channel can bind it. With the
# guest's AutoEnable=false, an adapter that no one powered is already down and stays so.
release() { hciconfig "hci$1" down; }

# btctl_start: a long-lived bluetoothctl fed through a FIFO (btctl COMMAND…); its output in $BTCTL_LOG.
btctl_start() {
    BTCTL_LOG="$OCB_OUT/$OCB_SCENARIO.bluetoothctl.log"
    rm -f "$OCB_RUN/btctl.in"
    mkfifo "$OCB_RUN/btctl.in"
    bluetoothctl < "$OCB_RUN/btctl.in" > "$BTCTL_LOG" 2>&1 &
    BTCTL_PID=$!
    exec 7> "$OCB_RUN/btctl.in"
    # bluetoothctl registers an agent of its own once it reaches bluetoothd: wait for it, or an "agent off"
    # sent earlier is answered "No agent is registered" and the next "agent X" with "already registered".
    wait_for "$BTCTL_LOG" "Agent registered" 30
}
btctl() { log "bluetoothctl> $*"; echo "$*" >&7; }

# btctl_agent CAPABILITY: bluetoothctl's agent with that I/O capability (NoInputNoOutput, DisplayOnly,
# DisplayYesNo, KeyboardOnly, KeyboardDisplay) as the default agent.
btctl_agent() {
    local before gone pairable
    before=$(clean "$BTCTL_LOG" | grep -c "Agent registered")
    pairable=$(clean "$BTCTL_LOG" | grep -c "Controller $(address 0) Pairable: yes")
    gone=$(clean "$BTCTL_LOG" | grep -c "Agent unregistered")
    btctl "agent off"
    wait_for_count "$BTCTL_LOG" "Agent unregistered" $((gone + 1)) 30 || return 1
    btctl "agent $1"
    wait_for_count "$BTCTL_LOG" "Agent registered" $((before + 1)) 30 || return 1
    btctl "default-agent"
    wait_for "$BTCTL_LOG" "Default agent request successful" 30 || return 1
    # With no agent bluetoothd makes the adapters not bondable (the kernel then answers a Pairing Request that
    # asks for bonding with Pairing Not Supported); they are bondable again once it says so.
    wait_for_count "$BTCTL_LOG" "Controller $(address 0) Pairable: yes" $((pairable + 1)) 30
}

# btctl_answer_yes: in the background, answers "yes" to each of the agent's (yes/no) questions.
btctl_answer_yes() {
    (
        set +x   # (a look five times a second for the whole scenario: untraced, as the waits are)
        answered=0 asked=0
        _follow_open "$BTCTL_LOG"
        while kill -0 "$BTCTL_PID" 2>/dev/null; do
            [ -n "$_ffd" ] || _follow_open "$BTCTL_LOG"
            _follow
            for line in "${_flines[@]}"; do [[ $line == *"(yes/no)"* ]] && asked=$((asked + 1)); done
            # (the question's line ends only once it is answered)
            n=$asked; [[ $_fpartial == *"(yes/no)"* ]] && n=$((n + 1))
            if [ "$n" -gt "$answered" ]; then echo yes >&7; answered=$((answered + 1)); log "bluetoothctl agent: answered yes"; fi
            nap 0.2
        done
    ) &
}

# peer_of_ours: the address `ble serve` prints ("advertising "NAME" as ADDRESS/P on …") in FILE.
served_address() { sed -n 's/^advertising "[^"]*" as \([0-9A-F:]*\).*/\1/p' "$1" | head -1; }

# clean FILE: FILE without ANSI colours and readline's invisible-text markers (\001, \002), prompts' carriage
# returns as new lines. (One sed: it was sed, tr and tr, three programs started for each look at a log.)
clean() { sed 's/\x1b\[[0-9;]*[A-Za-z]//g; s/[\x01\x02]//g; s/\r/\n/g' "$1"; }

# ble ARGS…: our tool on the HCI user channel of hci$OUR_HCI (1 unless set).
ble() { BLE_TRANSPORT="hci-socket:${OUR_HCI:-1}" "$OCB_BLE" "$@"; }

# guest_test FILTER [ENV=VALUE…]: runs the Swift tests FILTER names (e.g. "KernelGuestTests/managerFollowsTheAdapter")
# from this package's built test bundle with OCB_KERNEL_GUEST=1 and the ENV given, their output in
# $OCB_OUT/$OCB_SCENARIO.test.log and on standard error; fails unless a test ran and every test passed.
guest_test() {
    local filter=$1 bundle="$OCB_REPO/.build/debug/OpenCoreBluetoothPackageTests.xctest" rc=0 tlog="$OCB_OUT/$OCB_SCENARIO.test.log"
    shift
    [ -x "$bundle" ] || { log "no test bundle $bundle (swift build --build-tests)"; return 1; }
    env OCB_KERNEL_GUEST=1 "$@" "$bundle" --testing-library swift-testing --filter "$filter" > "$tlog" 2>&1 || rc=$?
    cat "$tlog" >&2
    [ $rc -eq 0 ] || { log "the tests $filter exited $rc"; return 1; }
    grep -Eq "Test run with [1-9][0-9]* tests?.* passed" "$tlog" || { log "no test of $filter ran"; return 1; }
}

# cpu_seconds PID: the CPU time (user and system) a process has used, in seconds.
cpu_seconds() {
    local stat
    { read -r stat < "/proc/$1/stat"; } 2>/dev/null || { echo "?"; return; }
    stat=${stat##*) }
    local -a f=($stat)
    echo $(( (f[11] + f[12]) / 100 ))
}

# address N: hciN's public address.
address() {
    local line
    while IFS= read -r line; do
        [[ $line =~ BD\ Address:\ ([0-9A-F:]+) ]] && { echo "${BASH_REMATCH[1]}"; break; }
    done < <(hciconfig "hci$1")
    return 0
}

# run_bench NAME PERIPHERAL_TRANSPORT PERIPHERAL_SCENARIO CENTRAL_TRANSPORT CENTRAL_SCENARIO PEER [ARGS…]: one
# `ble bench peer --l2cap` pair (the bench scenarios), the peripheral in the background; each side's log in
# $OCB_OUT/$OCB_SCENARIO.NAME.{peripheral,central}.log, its last lines on the scenario's log. The caller keeps `pids`
# (killed on exit) and `failed` (the names of the pairs that failed).
run_bench() {
    local name=$1 p_env=$2 p_sc=$3 c_env=$4 c_sc=$5 peer=$6 p c rc_p=0 rc_c=0 start=$SECONDS
    shift 6
    p="$OCB_OUT/$OCB_SCENARIO.$name.peripheral.log"
    c="$OCB_OUT/$OCB_SCENARIO.$name.central.log"
    env BLE_TRANSPORT="$p_env" "$OCB_BLE" bench peer peripheral --l2cap --scenario "$p_sc" --timeout 200 "$@" > "$p" 2>&1 &
    local per=$!
    pids="$pids $per"
    wait_for "$p" "^advertising" 40 || { cat "$p"; fail "$name: the peripheral did not advertise"; }
    env BLE_TRANSPORT="$c_env" "$OCB_BLE" bench peer central --l2cap --scenario "$c_sc" --peer "$peer" --timeout 200 "$@" > "$c" 2>&1 &
    local cen=$!
    pids="$pids $cen"
    wait_exit $cen 220 || rc_c=$?
    wait_exit $per 30 || rc_p=$?
    log "$name: done in $((SECONDS - start)) s"
    grep -av '^{' "$c" | tail -4 >&2
    grep -av '^{' "$p" | tail -4 >&2
    # A failed run is noted and the next one still runs (each figure is worth having); the scenario fails at the end.
    [ $rc_c -eq 0 ] || { log "FAILED: $name: the central exited $rc_c"; failed="$failed $name"; }
    [ $rc_p -eq 0 ] || { log "FAILED: $name: the peripheral exited $rc_p"; failed="$failed $name"; }
}
