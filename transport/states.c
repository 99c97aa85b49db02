/* What every state machine's setter shares (states.h). */
#include "transport/states.h"

#include "transport/log.h"

bool rov_state_change(const struct rov_state_info *table, int from, int to, const char *subsys,
                      const char *what, const char *why, uint64_t *illegal)
{
    if (!rov_state_allowed(table, from, to)) {
        (*illegal)++;
        rov_error(subsys, "%s: illegal transition %s -> %s (%s) refused", what, table[from].name,
                  table[to].name, why);
        return false;
    }
    if (from != to)
        rov_debug(subsys, "%s: %s -> %s (%s)", what, table[from].name, table[to].name, why);
    return true;
}
