#!/usr/bin/env python3
"""README.md's table of RAILOVER_* variables, made from the settings
enumeration (rov_config_var(): what `railover info` prints and the Open MPI
component's parameters are made of), and checked against it.

    readme_settings.py DUMP README.md           check (CTest readme_settings)
    readme_settings.py DUMP README.md --write   rewrite the table

DUMP is tests/settings_dump.c built (rov_settings_dump).  Each variable is
one row: its name, its default (sizes in KiB/MiB/GiB when they divide;
"empty" for an empty one) and its help text.  The check fails when a
variable is missing, extra, out of the enumeration's order or different in
any column, and prints the rows as they should be.  A row of a rail this
build does not have (RAILOVER_VERBS_* without the verbs rail) is left
alone: it is checked by a build that has the rail.
"""
import difflib
import subprocess
import sys

HEADER = "| variable | default | meaning |"
RULE = "| --- | --- | --- |"
# Rails a build may lack (CMake finds their libraries or not): their
# variables start with RAILOVER_<KIND>_.
OPTIONAL_RAILS = ("verbs", "ucx")


def human_size(text):
    n = int(text)
    for unit, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n and n % mult == 0:
            return "%d%s" % (n // mult, unit)
    return text


def enumeration(dump):
    out = subprocess.run([dump], check=True, capture_output=True, text=True).stdout
    lines = out.splitlines()
    if not lines or not lines[0].startswith("kinds\t"):
        sys.exit("readme_settings: %s printed no 'kinds' line" % dump)
    kinds = lines[0].split("\t", 1)[1].split(",")
    rows = []
    for line in lines[1:]:
        name, vtype, default, help_text = line.split("\t", 3)
        if vtype == "size":
            default = human_size(default)
        default = "`%s`" % default if default else "empty"
        rows.append((name, "| `%s` | %s | %s |" % (name, default, help_text.replace("|", "\\|"))))
    return kinds, rows


def readme_table(path):
    """The README's lines, and the index range of the table's rows."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    try:
        head = lines.index(HEADER)
    except ValueError:
        sys.exit("readme_settings: no line '%s' in %s" % (HEADER, path))
    if lines[head + 1] != RULE:
        sys.exit("readme_settings: %s: the line after the table's header is not '%s'"
                 % (path, RULE))
    end = head + 2
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return lines, head + 2, end


def row_name(row):
    cell = row.split("|")[1].strip()
    return cell.strip("`")


def not_built(name, kinds):
    return any(name.startswith("RAILOVER_%s_" % k.upper()) and k not in kinds
               for k in OPTIONAL_RAILS)


def main():
    args = sys.argv[1:]
    write = "--write" in args
    args = [a for a in args if a != "--write"]
    if len(args) != 2:
        sys.exit("usage: readme_settings.py DUMP README.md [--write]")
    dump, readme = args
    kinds, expected = enumeration(dump)
    lines, first, end = readme_table(readme)
    actual = lines[first:end]
    skipped = [r for r in actual if not_built(row_name(r), kinds)]
    if write:
        if skipped:
            sys.exit("readme_settings: this build lacks the rails of %s: rewrite the table "
                     "from a build with every rail" % ", ".join(row_name(r) for r in skipped))
        lines[first:end] = [row for _, row in expected]
        with open(readme, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        print("readme_settings: wrote %d rows into %s" % (len(expected), readme))
        return 0
    compared = [r for r in actual if r not in skipped]
    wanted = [row for _, row in expected]
    if compared == wanted:
        print("readme_settings: %s lists the %d variables of this build as the enumeration "
              "does%s" % (readme, len(wanted), "; not built here, not checked: " +
                          ", ".join(row_name(r) for r in skipped) if skipped else ""))
        return 0
    print("readme_settings: %s's table of variables differs from the settings enumeration "
          "(rewrite it: tests/readme_settings.py BUILD/tests/rov_settings_dump README.md "
          "--write):" % readme)
    have = {row_name(r) for r in compared}
    want = [name for name, _ in expected]
    for name in want:
        if name not in have:
            print("  missing: %s" % name)
    for name in sorted(have - set(want)):
        print("  not a variable of this build: %s" % name)
    sys.stdout.writelines(difflib.unified_diff([r + "\n" for r in compared],
                                               [r + "\n" for r in wanted],
                                               "README.md", "enumeration"))
    return 1


if __name__ == "__main__":
    sys.exit(main())
