#!/usr/bin/env bash
# The dependency rules of docs/architecture.md ("Layers"), checked on the
# source tree (CTest `layering`, label unit):
#   - transport/ includes nothing from a rail, failover/ or ccp/;
#   - a rail (sockets/, verbs/, ucx/, loop/) includes nothing from another
#     rail, a policy, or the transport's internals (core.h, conn_int.h, policy.h);
#   - a policy (failover/, ccp/) includes nothing from a rail, and of the
#     transport only the policy contract and what it leans on (policy.h,
#     states.h, config.h, log.h, control.h, auth.h, compiler.h), never
#     core.h, conn_int.h or rail.h;
#   - tools/ and mpi-btl/ include only include/railover/ (and their own);
#   - a rail reads no configuration but its own settings block and the
#     rail environment (struct rov_rail_env): no struct rov_config in a rail;
#     a policy likewise (its settings block, struct rov_policy_env);
#   - a rail names no field of the transport's part of struct rov_chan
#     (transport/rail.h; the field list is read from there): not through
#     anything it declares as a struct rov_chan (its embedded `base`, an
#     op's `chan`, whatever the name), and it assigns none of those fields
#     whatever the variable, unless a structure of the rail's own has a
#     field of that name; it reads them through rail.h's accessors;
#   - every state field is assigned in its setter only (states.h), matched
#     by the field, whatever the variable: in transport/ a connection's or
#     a channel's state in conn_set_state() or chan_set_state() (and
#     rov_policy_chan(), which copies one into a policy's view), a context's
#     checkpoint stage in stage_set(); a failover rail's state in
#     fo_set_state(); a rank's checkpoint in ckpt_set(), its cue in
#     cue_set(); in a rail, any state (the UCX probe endpoint's) in
#     probe_set_state() and the verbs setup's in vb_oob_set_state().
# Prints each violation with file and line; exit 1 if any.
set -u
cd "$(dirname "$0")/.."
rails="sockets verbs ucx loop"
policies="failover ccp"
bad=0

# includes DIR... : every quoted #include in the C files under DIRs
includes() {
    local d
    for d in "$@"; do
        [ -d "$d" ] || continue
        grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' --include='*.c' --include='*.h' -r "$d"
    done
}

# deny WHAT PATTERN DIR... : any include of DIRs matching PATTERN is a violation
deny() {
    local what=$1 pat=$2 hits
    shift 2
    hits=$(includes "$@" | grep -E "$pat")
    if [ -n "$hits" ]; then
        echo "layering: $what:"
        echo "$hits" | sed 's/^/  /'
        bad=1
    fi
}

railpat=$(echo $rails | sed 's/ /|/g')
polpat=$(echo $policies | sed 's/ /|/g')
deny "transport/ includes a rail or a policy" "\"($railpat|$polpat)/" transport
for r in $rails; do
    others=$(echo $rails | tr ' ' '\n' | grep -vx "$r" | paste -sd'|')
    deny "rail $r/ includes another rail, a policy or the transport's internals" \
        "\"($others|$polpat)/|\"transport/(core|conn_int|policy)\.h\"" "$r"
done
deny "a policy includes a rail or the transport's internals" \
    "\"($railpat)/|\"transport/(core|conn_int|rail|conn|retain|wire)\.h\"" $policies
deny "tools/ or mpi-btl/ includes something other than include/railover/" \
    "\"(transport|$railpat|$polpat)/" tools mpi-btl

# A rail's settings are its own (transport/settings.h): it never sees the
# configuration of the transport or of another layer.
hits=$(for r in $rails; do [ -d "$r" ] && grep -Hn 'struct rov_config\b\|rov_config_t\b' -r --include='*.c' --include='*.h' "$r"; done)
if [ -n "$hits" ]; then
    echo "layering: a rail reads the configuration (struct rov_config) instead of its settings block:"
    echo "$hits" | sed 's/^/  /'
    bad=1
fi

# The transport's part of struct rov_chan: its field names, from rail.h.
chan_fields=$(awk '
    /^struct rov_chan \{/ { in_chan = 1; next }
    in_chan && /^\};/ { exit }
    in_chan && /The transport.s part/ { mine = 1; next }
    mine {
        sub(/\/\*.*/, "")
        if ($0 ~ /^[[:space:]]*\*/) next
        if (match($0, /[A-Za-z_][A-Za-z0-9_]*[[:space:]]*(\[[^]]*\])?[[:space:]]*(:[[:space:]]*[0-9]+)?[[:space:]]*;/)) {
            f = substr($0, RSTART, RLENGTH)
            sub(/[^A-Za-z0-9_].*/, "", f)
            print f
        }
    }' transport/rail.h | paste -sd'|')
if [ -z "$chan_fields" ] || ! echo "|$chan_fields|" | grep -q '|state|'; then
    echo "layering: cannot read the transport's fields of struct rov_chan from transport/rail.h"
    bad=1
fi

# rail_src DIR: the rail's sources and headers
rail_src() {
    ls "$1"/*.c "$1"/*.h 2>/dev/null
}
for r in $rails; do
    [ -d "$r" ] || continue
    mapfile -t files < <(rail_src "$r")
    # Whatever the rail declares as a struct rov_chan (or a pointer to one).
    names=$(grep -ho 'struct rov_chan[[:space:]*]*[A-Za-z_][A-Za-z0-9_]*[[:space:]]*[;,)=]' "${files[@]}" |
        sed 's/^struct rov_chan[[:space:]*]*//; s/[[:space:]]*[;,)=]$//' | sort -u | paste -sd'|')
    hits=
    [ -n "$names" ] &&
        hits=$(grep -HnE "(^|[^A-Za-z0-9_])($names)[[:space:]]*(\.|->)[[:space:]]*($chan_fields)([^A-Za-z0-9_]|\$)" "${files[@]}")
    # Fields the rail's own structures have too (a list's `next`, a probe's
    # `state`): their assignments are the rail's, the rule above covers
    # the transport's.
    own=$(grep -hoE "^[[:space:]]+[A-Za-z_][A-Za-z0-9_ ]*[[:space:]*]+($chan_fields)[[:space:]]*(\[[^]]*\])?[[:space:]]*(:[[:space:]]*[0-9]+)?[[:space:]]*;" "${files[@]}" |
        sed -E 's/[[:space:]]*(\[[^]]*\])?[[:space:]]*(:[[:space:]]*[0-9]+)?[[:space:]]*;$//; s/.*[^A-Za-z0-9_]//' | sort -u | paste -sd'|')
    written=$(echo "$chan_fields" | tr '|' '\n' | grep -vxE "${own:-^$}" | paste -sd'|')
    [ -n "$written" ] &&
        hits=$(printf '%s\n%s' "$hits" "$(grep -HnE "(\.|->)[[:space:]]*($written)[[:space:]]*(=[^=]|\+\+|--|[-+*/|&^]=)" "${files[@]}")")
    hits=$(echo "$hits" | sed '/^$/d' | sort -u)
    if [ -n "$hits" ]; then
        echo "layering: rail $r/ touches the transport's part of struct rov_chan (rail.h: use its accessors):"
        echo "$hits" | sed 's/^/  /'
        bad=1
    fi
done

# A policy's likewise: its own block and the policy environment.  (ccp/'s
# client reads a rov_config_t of its own through the public API, as a tool.)
hits=$(for p in $policies; do [ -d "$p" ] && grep -Hn 'struct rov_config\b\|rov_policy_config' -r --include='*.c' --include='*.h' "$p"; done)
if [ -n "$hits" ]; then
    echo "layering: a policy reads the configuration (struct rov_config) instead of its settings block and struct rov_policy_env:"
    echo "$hits" | sed 's/^/  /'
    bad=1
fi

# setter FIELD SETTERS FILE... : assignments to FIELD (any variable: x->F,
# x.F) outside the functions named in SETTERS (space-separated)
setter() {
    local field=$1 fns=$2 hits
    shift 2
    hits=$(awk -v field="$field" -v fns="$fns" '
        BEGIN { n = split(fns, fn, " "); pat = "(\\.|->)[[:space:]]*" field "[[:space:]]*(=[^=]|\\+\\+|--|[-+|&^]=)" }
        FNR == 1 { infn = 0 }
        /^[a-z].*\(/ { infn = 0; for (i = 1; i <= n; i++) if (index($0, " " fn[i] "(") > 0) infn = 1 }
        $0 ~ pat && !infn { printf "%s:%d: %s\n", FILENAME, FNR, $0 }' "$@" 2>/dev/null)
    if [ -n "$hits" ]; then
        echo "layering: a state field (.$field) assigned outside its setter ($fns):"
        echo "$hits" | sed 's/^/  /'
        bad=1
    fi
}
setter state "conn_set_state chan_set_state rov_policy_chan" transport/*.c transport/*.h
setter stage stage_set transport/*.c transport/*.h
setter state fo_set_state failover/*.c failover/*.h
setter ckpt ckpt_set ccp/*.c ccp/*.h
setter state cue_set ccp/*.c ccp/*.h
for r in $rails; do
    mapfile -t files < <(rail_src "$r")
    [ ${#files[@]} -gt 0 ] && setter state probe_set_state "${files[@]}"
done
mapfile -t files < <(rail_src verbs)
setter oob vb_oob_set_state "${files[@]}"

[ $bad = 0 ] && echo "layering: ok"
exit $bad
