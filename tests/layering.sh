#!/usr/bin/env bash
# The dependency rules of docs/architecture.md ("Layers"), checked on the
# source tree (CTest `layering`, label unit):
#   - transport/ includes nothing from a rail, failover/ or ccp/;
#   - a rail (sockets/, verbs/, ucx/, loop/) includes nothing from another
#     rail, a policy, or the transport's internals (core.h, policy.h);
#   - a policy (failover/, ccp/) includes nothing from a rail, and of the
#     transport only the policy contract and what it leans on (policy.h,
#     states.h, config.h, log.h, control.h, auth.h, compiler.h), never
#     core.h or rail.h;
#   - tools/ and mpi-btl/ include only include/railover/ (and their own);
#   - a rail reads no configuration but its own settings block and the
#     rail environment (struct rov_rail_env): no struct rov_config in a rail;
#     a policy likewise (its settings block, struct rov_policy_env);
#   - every state field is assigned in its setter only (states.h): a
#     connection's state in conn_set_state(), a channel's in
#     chan_set_state(), a failover rail's in fo_set_state(), a context's
#     checkpoint stage in stage_set(), a rank's checkpoint in ckpt_set().
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
        "\"($others|$polpat)/|\"transport/(core|policy)\.h\"" "$r"
done
deny "a policy includes a rail or the transport's internals" \
    "\"($railpat)/|\"transport/(core|rail|conn|retain|wire)\.h\"" $policies
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

# A policy's likewise: its own block and the policy environment.  (ccp/'s
# client reads a rov_config_t of its own through the public API, as a tool.)
hits=$(for p in $policies; do [ -d "$p" ] && grep -Hn 'struct rov_config\b\|rov_policy_config' -r --include='*.c' --include='*.h' "$p"; done)
if [ -n "$hits" ]; then
    echo "layering: a policy reads the configuration (struct rov_config) instead of its settings block and struct rov_policy_env:"
    echo "$hits" | sed 's/^/  /'
    bad=1
fi

# setter FIELD_PATTERN SETTER FILE... : assignments outside the setter
setter() {
    local pat=$1 fn=$2 hits
    shift 2
    hits=$(awk -v pat="$pat" -v fn="$fn" '
        FNR == 1 { infn = 0 }
        /^[a-z].*\(/ { infn = index($0, " " fn "(") > 0 }
        $0 ~ pat && !infn { printf "%s:%d: %s\n", FILENAME, FNR, $0 }' "$@" 2>/dev/null)
    if [ -n "$hits" ]; then
        echo "layering: a state assigned outside its setter $fn():"
        echo "$hits" | sed 's/^/  /'
        bad=1
    fi
}
setter '(conn|c)->state[[:space:]]*=[^=]' conn_set_state transport/*.c
setter '(chan|base)[.>-]+state[[:space:]]*=[^=]' chan_set_state transport/*.c sockets/*.c verbs/*.c ucx/*.c
setter 'r->state[[:space:]]*=[^=]' fo_set_state failover/*.c
setter 'ctx->stage[[:space:]]*=[^=]' stage_set transport/*.c
setter 'c->ckpt[[:space:]]*=[^=]' ckpt_set ccp/*.c

[ $bad = 0 ] && echo "layering: ok"
exit $bad
