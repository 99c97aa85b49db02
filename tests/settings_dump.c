/*
 * Prints the settings enumeration (rov_config_var(), the same one
 * `railover info` and the Open MPI component's parameters come from) for
 * tests/readme_settings.py: a line "kinds<TAB>tcp,..." with the rail kinds
 * built in, then one line per variable, in order:
 * name<TAB>type<TAB>default<TAB>help.  Public API only.
 */
#include <stdio.h>
#include <string.h>

#include "railover/railover.h"

static const char *type_name(rov_config_type_t type)
{
    switch (type) {
    case ROV_CONFIG_STRING:
        return "string";
    case ROV_CONFIG_BOOL:
        return "bool";
    case ROV_CONFIG_COUNT:
        return "count";
    case ROV_CONFIG_SIZE:
        return "size";
    case ROV_CONFIG_DURATION:
        return "duration";
    case ROV_CONFIG_CHOICE:
        return "choice";
    }
    return "unknown";
}

int main(void)
{
    char kinds[256];

    rov_rail_kinds(kinds, sizeof(kinds));
    printf("kinds\t%s\n", kinds);
    for (int i = 0; i < rov_config_var_count(); i++) {
        const rov_config_var_t *v = rov_config_var(i);

        /* The fields are one line each; a tab or newline would break the
         * format (and the README's table). */
        if (strpbrk(v->name, "\t\n") || strpbrk(v->default_value, "\t\n") ||
            strpbrk(v->help, "\t\n")) {
            fprintf(stderr, "settings_dump: %s has a tab or a newline in its name, default "
                    "or help\n", v->name);
            return 1;
        }
        printf("%s\t%s\t%s\t%s\n", v->name, type_name(v->type), v->default_value, v->help);
    }
    return 0;
}
